"""Settings for the test suite: the same real services, kept apart from a running demo."""

import os

os.environ.setdefault("MAS_CELERY_QUEUE", f"mas-test-{os.getpid()}")
# Backoffs short enough for tests; worker processes inherit them.
os.environ.setdefault("MAS_PROVIDER_BACKOFF_S", "0.05")
os.environ.setdefault("MAS_RETRY_BACKOFF_S", "0.2")

from mas_project.settings import *  # noqa: E402,F401,F403
from mas_project.settings import CHANNEL_LAYERS, REDIS_URL  # noqa: E402

# A separate Redis database so a running `make demo` never sees test traffic.
TEST_REDIS_URL = os.environ.get("MAS_TEST_REDIS_URL", REDIS_URL.rsplit("/", 1)[0] + "/9")
CELERY_BROKER_URL = TEST_REDIS_URL
CELERY_RESULT_BACKEND = TEST_REDIS_URL
CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [{**CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0],
                                                 "address": TEST_REDIS_URL}]
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = "mas-test"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# The suite makes many bad-token and run-start calls from one address: tests of the limits set their own.
MAS_AUTH_FAILURES_PER_MIN = 1_000_000
MAS_RUNS_PER_MIN = 1_000_000

# Each pytest process gets its own test database, so parallel runs (and the
# worker processes a test starts, via MAS_DATABASE_NAME) never collide.
from mas_project.settings import DATABASES  # noqa: E402

DATABASES["default"]["TEST"] = {"NAME": os.environ.setdefault("MAS_TEST_DB_NAME", f"test_mas_{os.getpid()}")}
