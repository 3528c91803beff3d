import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mas_project.settings")

app = Celery("mas")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _recover_on_start(**_kwargs) -> None:
    # A worker that replaces a dead one picks up its sessions right away,
    # without waiting for the next beat.
    from agents_app.tasks import reap_sessions

    reap_sessions.delay()
