"""One migrated database the suite's test databases are copied from, instead of each process migrating its own.

Migrating takes ~12 s of CPU; `make test` ran it in each of its parallel processes at once and again for the tests
run alone. The template is made once per set of migrations (its name holds a digest of every installed app's
migration files, so a changed migration makes a new one and the old ones are dropped) and kept between runs: a test
database is then ``CREATE DATABASE … TEMPLATE`` (~0.5 s) and Django's ``migrate`` finds every table there
(``TEST: MIGRATE False``: it makes no table and runs post_migrate, as after migrating).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

PREFIX = "test_mas_tpl_"
ENV = "MAS_TEST_DB_TEMPLATE"  # set by the first pytest process; the processes pytest-xdist starts inherit it


def migrations_digest() -> str:
    """A digest of every installed app's migration files (names and contents)."""
    from django.apps import apps

    digest = hashlib.sha256()
    for config in sorted(apps.get_app_configs(), key=lambda c: c.label):
        folder = Path(config.path) / "migrations"
        for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
            digest.update(f"{config.label}/{path.name}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def template_ensure() -> str:
    """The template's name, made first if this set of migrations has none (one process at a time: a lock)."""
    import psycopg
    from django.conf import settings
    from django.db import connections

    name = PREFIX + migrations_digest()
    params = connections["default"].get_connection_params() | {"dbname": "postgres", "autocommit": True}
    with psycopg.connect(**params) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext('mas-test-template'))")
        names = {row[0] for row in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                                                  (PREFIX.replace("_", r"\_") + "%",))}
        if name not in names:
            building = name + "_building"
            conn.execute(f'DROP DATABASE IF EXISTS "{building}"')
            conn.execute(f'CREATE DATABASE "{building}"')
            subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], check=True,
                           cwd=settings.BASE_DIR, env={**os.environ, "MAS_DATABASE_NAME": building,
                                                       "DJANGO_SETTINGS_MODULE": "mas_project.settings_test"})
            conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        for old in sorted(names - {name}):  # another set of migrations' (a checkout before or after this one)
            try:
                conn.execute(f'DROP DATABASE IF EXISTS "{old}"')
            except psycopg.errors.ObjectInUse:  # being copied by a suite of that checkout: left for a later run
                pass
        conn.execute("SELECT pg_advisory_unlock(hashtext('mas-test-template'))")
    return name


def template_use() -> None:
    """The test database of this process (and of those it starts) is copied from the template, not migrated."""
    from django.conf import settings

    name = os.environ.get(ENV) or template_ensure()
    os.environ[ENV] = name
    settings.DATABASES["default"].setdefault("TEST", {}).update({"TEMPLATE": name, "MIGRATE": False})
