"""docker-compose.yml and the Dockerfile describe the stack SPEC §8 deploys.

Docker does not run on the machines the tests run on, so these tests read the
files: the services and their roles, healthchecks, start-up order, the
environment production mode needs, and the order the Dockerfile installs in.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*):\?[^}]+\}")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def command(service: dict) -> str:
    value = service["command"]
    return value if isinstance(value, str) else shlex.join(value)


def healthcheck(service: dict) -> str:
    test = service["healthcheck"]["test"]
    assert test[0] in {"CMD", "CMD-SHELL"}
    return " ".join(test[1:])


def test_the_stack_has_every_service(services):
    assert set(services) == {"postgres", "redis", "migrate", "web", "worker", "beat"}
    assert services["postgres"]["image"] == "pgvector/pgvector:pg17"
    assert services["redis"]["image"] == "redis:7-alpine"
    images = {services[name]["image"] for name in ("migrate", "web", "worker", "beat")}
    assert len(images) == 1, "every MAS role runs the one image the Dockerfile builds"
    for name in ("migrate", "web", "worker", "beat"):
        assert services[name]["build"]["context"] == "."


def test_roles_run_the_right_commands(services):
    assert command(services["migrate"]) == "python manage.py migrate --noinput"
    assert command(services["web"]) == "daphne -b 0.0.0.0 -p 8000 mas_project.asgi:application"
    # One Celery worker process per core (tests/ops/test_workers_script.py: each runs
    # `celery -A mas_project worker -l info -Q mas --pool threads …`, mas being MAS_CELERY_QUEUE's default).
    assert command(services["worker"]) == "python scripts/workers.py run"
    assert "MAS_CELERY_QUEUE" not in services["worker"]["environment"]
    assert command(services["beat"]).startswith("celery -A mas_project beat ")
    assert services["migrate"]["restart"] == "no"
    for name in ("postgres", "redis", "web", "worker", "beat"):
        assert services[name]["restart"] == "unless-stopped", name


def test_every_long_running_service_but_beat_has_a_healthcheck(services):
    assert healthcheck(services["postgres"]) == "pg_isready -U mas -d mas"
    assert healthcheck(services["redis"]) == "redis-cli ping"
    assert "http://127.0.0.1:8000/api/health" in healthcheck(services["web"])
    assert "'Host': 'localhost'" in healthcheck(services["web"])
    # Every worker process of the container answers a ping, by its node name mas-worker-<i>@<hostname>.
    assert services["worker"]["healthcheck"]["test"] == ["CMD", "python", "scripts/workers.py", "ping"]
    assert "healthcheck" not in services["beat"]
    assert "healthcheck" not in services["migrate"]


def test_services_start_in_order(services):
    conditions = {
        name: {dep: spec["condition"] for dep, spec in service.get("depends_on", {}).items()}
        for name, service in services.items()
    }
    assert conditions == {
        "postgres": {},
        "redis": {},
        "migrate": {"postgres": "service_healthy"},
        "web": {
            "postgres": "service_healthy",
            "redis": "service_healthy",
            "migrate": "service_completed_successfully",
        },
        "worker": {"redis": "service_healthy", "migrate": "service_completed_successfully"},
        "beat": {"redis": "service_healthy", "migrate": "service_completed_successfully"},
    }


def test_mas_roles_get_the_production_environment(services):
    for name in ("migrate", "web", "worker", "beat"):
        env = services[name]["environment"]
        assert env["MAS_ENV"] == "production", name
        assert env["DJANGO_DEBUG"] == "false", name
        assert REQUIRED.fullmatch(env["DJANGO_SECRET_KEY"])["name"] == "DJANGO_SECRET_KEY", name
        assert env["DATABASE_URL"].startswith("postgresql://mas:${POSTGRES_PASSWORD:?"), name
        assert env["DATABASE_URL"].endswith("@postgres:5432/mas"), name
        assert env["REDIS_URL"] == "redis://redis:6379/0", name
        assert env["DJANGO_ALLOWED_HOSTS"].split(",")[0] == "localhost", "the web healthcheck's Host"
        assert env["MAS_DEFS_ROOT"] == "/data/defs", name
        assert "defs:/data/defs" in services[name]["volumes"], name
        assert services[name]["env_file"] == [{"path": ".env", "required": False}], name
    assert services["web"]["environment"]["MAS_WARM_EMBEDDINGS"] == "1"
    assert services["worker"]["environment"]["MAS_WARM_EMBEDDINGS"] == "1"
    postgres = services["postgres"]["environment"]
    assert (postgres["POSTGRES_USER"], postgres["POSTGRES_DB"]) == ("mas", "mas")
    assert REQUIRED.fullmatch(postgres["POSTGRES_PASSWORD"])["name"] == "POSTGRES_PASSWORD"


def test_data_lives_in_named_volumes(compose, services):
    assert set(compose["volumes"]) == {"pgdata", "redisdata", "defs"}
    assert services["postgres"]["volumes"] == ["pgdata:/var/lib/postgresql/data"]
    assert services["redis"]["volumes"] == ["redisdata:/data"]
    assert services["web"]["ports"] == ["${MAS_BIND_ADDRESS:-127.0.0.1}:${MAS_PORT:-8000}:8000"]


# -- Dockerfile ------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical, current = [], ""
    for line in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        current += stripped[:-1] + " " if stripped.endswith("\\") else stripped
        if not stripped.endswith("\\"):
            logical.append(current)
            current = ""
    pairs = []
    for text in logical:
        instruction, _, arguments = text.partition(" ")
        pairs.append((instruction.upper(), arguments.strip()))
    return pairs


def expand_args(instructions: list[tuple[str, str]], text: str) -> str:
    defaults = dict(arg.split("=", 1) for instruction, arg in instructions if instruction == "ARG" and "=" in arg)
    return re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m[1], m[0]), text)


def test_dockerfile_installs_cpu_torch_before_the_project():
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim-bookworm")
    runs = [expand_args(instructions, arguments) for instruction, arguments in instructions if instruction == "RUN"]
    torch = next(i for i, run in enumerate(runs) if 'pip install "torch==2.13.0"' in run)
    assert '--index-url "https://download.pytorch.org/whl/cpu"' in runs[torch]
    project = next(i for i, run in enumerate(runs) if re.search(r"pip install \.(\s|$)", run))
    assert torch < project
    assert "manage.py collectstatic --noinput" in runs[project]


def test_dockerfile_runs_daphne_as_a_non_root_user():
    instructions = dockerfile_instructions()
    names = [instruction for instruction, _ in instructions]
    users = [arguments for instruction, arguments in instructions if instruction == "USER"]
    assert users == ["10001:10001"], "numeric, so runAsNonRoot checks can verify it"
    assert names.index("USER") > max(i for i, name in enumerate(names) if name == "RUN")
    assert instructions[-1] == ("CMD", '["daphne", "-b", "0.0.0.0", "-p", "8000", "mas_project.asgi:application"]')
    env = " ".join(arguments for instruction, arguments in instructions if instruction == "ENV")
    assert "PYTHONPATH=/app" in env and "MAS_DEFS_ROOT=/data/defs" in env


def test_the_image_has_the_workers_script():
    # The worker service's command and healthcheck run it from /app, where `COPY . .` puts the code.
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert (ROOT / "scripts" / "workers.py").is_file()
    assert not any(entry.strip("/") in {"scripts", "scripts/workers.py"} for entry in ignored)
    assert ("WORKDIR", "/app") in dockerfile_instructions() and ("COPY", ". .") in dockerfile_instructions()


def test_dockerignore_keeps_local_state_and_secrets_out():
    ignored = {
        line.strip() for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv/", "var/", ".git/", ".env", "**/__pycache__/"} <= ignored
    assert "defs/" not in ignored and "templates/" not in ignored
