"""The kernel's plain-Python core: no ORM, no Celery — storage and model are arguments."""
