import os
import sys

from celery import Celery
from celery.signals import setup_logging, worker_init, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mas_project.settings")

app = Celery("mas")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def _django_logging(**_kwargs) -> None:
    # Workers log as the web process does (settings.LOGGING: JSON lines with run and session ids when
    # MAS_LOG_FORMAT is json), not in Celery's own format.
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)


@worker_ready.connect
def _startup_objects_frozen(**_kwargs) -> None:
    # Full garbage collections scan only what the worker made since it started (mas_project/startup_gc.py).
    # First of the worker_ready receivers (Celery calls them in order): frozen before the sweeps and the
    # scheduler start sessions, whose objects must stay collectable and which the collection would stall.
    from mas_project.startup_gc import startup_objects_frozen

    startup_objects_frozen()


@worker_ready.connect
def _recover_on_start(**_kwargs) -> None:
    # Every worker sweeps for the work of dead workers when it starts and then
    # every MAS_REAP_INTERVAL_S, one sweep at a time across workers: crash
    # recovery needs no beat process (agents_app/execution/recovery.py).
    from agents_app.execution.recovery import sweeper_start

    sweeper_start()


@worker_ready.connect
def _scheduler_start(sender=None, **_kwargs) -> None:
    # Sessions are not Celery tasks: this process's scheduler loop claims them from Postgres when it has a
    # free slot, fairly across teams (agents_app/scheduler), from the pool of its first queue (-Q).
    from django.conf import settings

    from agents_app.execution.session import WORKER
    from agents_app.scheduler import worker_start

    try:
        queue = sender.task_consumer.queues[0].name
    except (AttributeError, IndexError):
        queue = settings.CELERY_TASK_DEFAULT_QUEUE
    worker_start(name=WORKER, queue=queue)


@worker_shutdown.connect
def _scheduler_stop(**_kwargs) -> None:
    from agents_app.scheduler import worker_stop

    worker_stop()


@worker_init.connect
def _short_gil_turns(**_kwargs) -> None:
    # A worker's threads (the broker consumer, the session loop, the database
    # threads) mostly hand the GIL over around short I/O waits. With Python's
    # default 5 ms switch interval each hand-over can wait a full interval
    # behind a busy thread, which capped task intake near 75 per second.
    sys.setswitchinterval(float(os.environ.get("MAS_GIL_SWITCH_INTERVAL_S", "0.0005")))


_heartbeat = None


@worker_ready.connect
def _heartbeat_start(sender=None, **_kwargs) -> None:
    # /api/health reads this key rather than pinging workers (mas_project/heartbeat.py).
    from django.conf import settings

    from mas_project.heartbeat import Heartbeat

    global _heartbeat
    try:
        queues = sorted(queue.name for queue in sender.task_consumer.queues)
    except AttributeError:
        queues = [settings.CELERY_TASK_DEFAULT_QUEUE]
    _heartbeat = Heartbeat(queues=queues, name=sender.hostname).start()


@worker_shutdown.connect
def _heartbeat_stop(**_kwargs) -> None:
    if _heartbeat is not None:
        _heartbeat.stop()
