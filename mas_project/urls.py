from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import path

from agents_app import views as monitor
from agents_app.views_forks import run_fork_view
from agents_app.views_start import start_example, start_page
from mas_project.api import api
from mas_project.metrics import metrics_view
from mas_project.invitations import invitation_view
from mas_project.passwords import SetPasswordView
from mas_project.sign_in import AdminSignInForm, SignInForm

admin.site.login_form = AdminSignInForm  # throttled per account and address, as the site's login


def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers and tools ask for /favicon.ico whatever a page links: MAS's icon (the SVG the pages link)."""
    return HttpResponseRedirect(static("mas/favicon.svg"))


urlpatterns = [
    path("", monitor.home_page, name="home"),
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("metrics", metrics_view, name="metrics"),
    path("accounts/login/", auth_views.LoginView.as_view(authentication_form=SignInForm), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page="/accounts/login/"), name="logout"),
    # The one-time set-password link a new account gets (services.password_link_create); no "forgot my
    # password" form: this server sends no mail, a team admin hands the link over.
    path("accounts/reset/<uidb64>/<token>/", SetPasswordView.as_view(), name="password_reset_confirm"),
    # A team admin's single-use invitation (mas_core.teams.invitation_create): join, signed in or as a new account.
    path("accounts/invitations/<str:token>/", invitation_view, name="invitation"),
    path("accounts/reset/done/", auth_views.PasswordResetCompleteView.as_view(), name="password_reset_complete"),
    path("runs/", monitor.runs_page, name="monitor-runs"),
    path("runs/start/", start_page, name="monitor-start"),
    path("runs/start/example/", start_example, name="monitor-start-example"),
    path("runs/<str:run_id>/", monitor.run_page, name="monitor-run"),
    path("runs/<str:run_id>/cancel", monitor.run_cancel_view, name="monitor-run-cancel"),
    path("runs/<str:run_id>/archive", monitor.run_archive_view, name="monitor-run-archive"),
    path("runs/<str:run_id>/delete", monitor.run_delete_view, name="monitor-run-delete"),
    path("runs/<str:run_id>/fork", run_fork_view, name="monitor-run-fork"),
    path("runs/<str:run_id>/files/<path:path>", monitor.run_file_view, name="monitor-run-file"),
]
