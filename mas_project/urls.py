from django.contrib import admin
from django.urls import path
from django.views.generic import TemplateView

from mas_project.api import api

urlpatterns = [
    path("", TemplateView.as_view(template_name="home.html"), name="home"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
]
