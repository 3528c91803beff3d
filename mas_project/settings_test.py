"""Settings for the test suite: the same real services, kept apart from a running demo."""

import os

# pytest-xdist (`make test` runs the suite in several processes) starts its processes gw0, gw1, … from the
# controlling pytest process, which read these settings first and set the variables below: each process takes names
# of its own (the workers and servers it starts inherit them, with this marker).
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _XDIST_WORKER and os.environ.get("MAS_TEST_XDIST_WORKER") != _XDIST_WORKER:
    os.environ["MAS_TEST_XDIST_WORKER"] = _XDIST_WORKER
    for _name in ("MAS_CELERY_QUEUE", "MAS_TEST_CHANNELS_PREFIX", "MAS_TEST_REDIS_URL", "MAS_TEST_DB_NAME"):
        os.environ.pop(_name, None)

os.environ.setdefault("MAS_CELERY_QUEUE", f"mas-test-{os.getpid()}")
# Backoffs short enough for tests; worker processes inherit them.
os.environ.setdefault("MAS_PROVIDER_BACKOFF_S", "0.05")
os.environ.setdefault("MAS_RETRY_BACKOFF_S", "0.2")
# Set, not defaulted, so a shell that ran the demo changes nothing; worker processes inherit both.
# MCP and provider URLs (mas_core/netpolicy.py): the suite's fake model servers and MCP servers listen on
# 127.0.0.1. The tests of the policy set their own lists, empty first.
os.environ["MAS_PRIVATE_URL_ALLOW"] = "127.0.0.1"
# The variables the suite's definitions name, declared for teams as an operator would (mas_core/secrets.py).
# Tests of the declaration set their own (the settings fixture, or a worker's env); names the probe of
# issue 13 used (HOME, OPENAI_API_KEY, GITHUB_TOKEN, SECRET_KEY, …) are not among these.
os.environ["MAS_TEAM_SECRETS"] = ("OPENAI_KEY,ANTHROPIC_KEY,GEMINI_KEY,ANTHROPIC_API_KEY,LOCAL_*,SECURITY_SWEEP_*,"
                                  "ALPHA_*,BRAVO_*,ORG_ID,SEARCH_*,MCP_*,GREETING_SOURCE,NOT_SET_ANYWHERE")

# The suite's stdio MCP servers (tests/tools_app/mcp_servers) run with this interpreter and its packages:
# the sandbox shows them, and nothing else of the repository; worker processes inherit it.
import sys  # noqa: E402

os.environ["MAS_MCP_STDIO_READ_ONLY"] = ",".join(
    [sys.prefix, sys.base_prefix, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                               "tests", "tools_app", "mcp_servers")])

from mas_project.settings import *  # noqa: E402,F401,F403
from mas_project.settings import CHANNEL_LAYERS, REDIS_URL  # noqa: E402

# A separate Redis database so a running `make demo` never sees test traffic; and one per pytest-xdist process
# (gw0 → 10, gw1 → 11, …): the rate limits, sign-in lockouts and fair-share counters are keyed by team ids and
# addresses that repeat across the processes' test databases. Redis has 16 databases (0-15): six processes at most.
_TEST_REDIS_DB = 9 if not _XDIST_WORKER else 10 + int(_XDIST_WORKER.removeprefix("gw"))
if _TEST_REDIS_DB > 15:
    raise RuntimeError(f"{_XDIST_WORKER}: the suite runs in six processes at most (Redis databases 10-15)")
TEST_REDIS_URL = os.environ.setdefault("MAS_TEST_REDIS_URL", REDIS_URL.rsplit("/", 1)[0] + f"/{_TEST_REDIS_DB}")
CELERY_BROKER_URL = TEST_REDIS_URL
CELERY_RESULT_BACKEND = TEST_REDIS_URL
CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [{**CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0],
                                                 "address": TEST_REDIS_URL}]
# Per pytest process (its workers inherit it): pub/sub channels are global to the Redis server, and team ids
# repeat across the test databases of processes running side by side.
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = os.environ.setdefault("MAS_TEST_CHANNELS_PREFIX",
                                                                      f"mas-test-{os.getpid()}")
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# The suite makes many bad-token and run-start calls from one address: tests of the limits set their own
# (a test starting its own server passes MAS_TEST_AUTH_FAILURES_PER_MIN).
MAS_AUTH_FAILURES_PER_MIN = int(os.environ.get("MAS_TEST_AUTH_FAILURES_PER_MIN", 1_000_000))
MAS_RUNS_PER_MIN = 1_000_000

# Each pytest process gets its own test database, so parallel runs (and the
# worker processes a test starts, via MAS_DATABASE_NAME) never collide.
from mas_project.settings import DATABASES  # noqa: E402

DATABASES["default"]["TEST"] = {"NAME": os.environ.setdefault("MAS_TEST_DB_NAME", f"test_mas_{os.getpid()}")}
