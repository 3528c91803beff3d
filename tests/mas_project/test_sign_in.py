"""Password sign-ins at /accounts/login/ and /admin/login/, throttled per account and per address in Redis."""

from __future__ import annotations

import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.test import Client

from mas_core.teams import user_create
from mas_core import redis_client
from mas_project import sign_in

pytestmark = pytest.mark.django_db

PASSWORD = "pw-for-tests-1"
LOGINS = ["/accounts/login/", "/admin/login/"]  # the site's and the admin's
WRONG = {"/accounts/login/": "Your username and password did not match.",
         "/admin/login/": "Please enter the correct username and password for a staff account."}


@pytest.fixture(autouse=True)
def limits(settings):
    settings.MAS_LOGIN_FAILURES_PER_ACCOUNT = 10
    settings.MAS_LOGIN_FAILURES_PER_ADDRESS = 30
    settings.MAS_LOGIN_WINDOW_S = 900
    return settings


def address() -> str:
    """A client address of this test alone (the counters outlive the test in Redis)."""
    return f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"


def staff() -> str:
    """A new staff user (the admin lets only staff in); returns the username."""
    username = f"staff-{uuid.uuid4().hex[:10]}"
    user = user_create(username=username, password=PASSWORD)
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    return username


def attempt(path: str, username: str, password: str, where: str) -> str:
    """'in' (signed in), 'wrong' (refused for the password), or 'wait N' (refused, throttled)."""
    client = Client()
    response = client.post(path, {"username": username, "password": password}, REMOTE_ADDR=where)
    if response.status_code == 302:
        assert "_auth_user_id" in client.session
        return "in"
    assert response.status_code == 200
    assert "_auth_user_id" not in client.session and "sessionid" not in response.cookies  # no session made
    page = response.content.decode()
    throttled = re.search(r"too many failed sign-ins, try again in (\d+) s", page)
    if throttled:
        assert WRONG[path] not in page
        return f"wait {throttled.group(1)}"
    assert WRONG[path] in page
    return "wrong"


def waits(outcomes: list[str]) -> list[str]:
    """The outcomes with the seconds left replaced by 'wait' (they depend on the clock), checked to be sane."""
    for outcome in outcomes:
        if outcome.startswith("wait "):
            assert 1 <= int(outcome.split()[1]) <= 900, outcome
    return ["wait" if outcome.startswith("wait ") else outcome for outcome in outcomes]


def test_twelve_wrong_passwords_then_the_right_one_is_refused(limits):
    for path in LOGINS:
        victim, where, elsewhere = staff(), address(), address()
        # Any spelling of the name counts for the account.
        outcomes = [attempt(path, victim.upper() if i % 2 else victim, "guess", where) for i in range(12)]
        assert waits(outcomes) == ["wrong"] * 10 + ["wait"] * 2, path
        assert waits([attempt(path, victim, PASSWORD, where)]) == ["wait"], path
        # The account is locked from everywhere; the address may still sign in another account.
        assert waits([attempt(path, victim, PASSWORD, elsewhere)]) == ["wait"], path
        assert attempt(path, staff(), PASSWORD, where) == "in", path


def test_after_the_window_the_right_password_works(limits):
    limits.MAS_LOGIN_FAILURES_PER_ACCOUNT, limits.MAS_LOGIN_WINDOW_S = 3, 3
    tries = {path: (staff(), address()) for path in LOGINS}
    for path, (victim, where) in tries.items():
        assert [attempt(path, victim, "guess", where) for _ in range(3)] == ["wrong"] * 3
        assert attempt(path, victim, PASSWORD, where) in {"wait 1", "wait 2", "wait 3"}, path
    time.sleep(3.2)  # a window after the first failures
    for path, (victim, where) in tries.items():
        assert attempt(path, victim, PASSWORD, where) == "in", path


def test_an_address_failing_on_many_accounts_is_locked_for_all_of_them(limits):
    limits.MAS_LOGIN_FAILURES_PER_ADDRESS = 5
    sprayer, elsewhere = address(), address()
    assert [attempt("/accounts/login/", staff(), "password1", sprayer) for _ in range(5)] == ["wrong"] * 5
    someone = staff()
    assert waits([attempt(path, someone, PASSWORD, sprayer) for path in LOGINS]) == ["wait", "wait"]
    assert attempt("/admin/login/", someone, PASSWORD, elsewhere) == "in"


def test_a_success_takes_back_its_own_attempt_and_nothing_more(limits):
    # The victim signing in does not give the guesser a fresh set of guesses.
    limits.MAS_LOGIN_FAILURES_PER_ACCOUNT = 5
    victim, guesser, home = staff(), address(), address()
    assert [attempt("/accounts/login/", victim, "guess", guesser) for _ in range(4)] == ["wrong"] * 4
    assert attempt("/accounts/login/", victim, PASSWORD, home) == "in"
    assert attempt("/accounts/login/", victim, "guess", guesser) == "wrong"
    assert waits([attempt("/accounts/login/", victim, "guess", guesser),
                  attempt("/accounts/login/", victim, PASSWORD, home)]) == ["wait", "wait"]

    # A guesser signing in to an account of his own does not clear his address's failures.
    limits.MAS_LOGIN_FAILURES_PER_ACCOUNT, limits.MAS_LOGIN_FAILURES_PER_ADDRESS = 10, 5
    own, guesser = staff(), address()
    assert [attempt("/accounts/login/", staff(), "guess", guesser) for _ in range(4)] == ["wrong"] * 4
    assert attempt("/accounts/login/", own, PASSWORD, guesser) == "in"
    assert attempt("/accounts/login/", staff(), "guess", guesser) == "wrong"
    assert waits([attempt("/accounts/login/", own, PASSWORD, guesser)]) == ["wait"]

    # Successes alone never lock anyone out.
    limits.MAS_LOGIN_FAILURES_PER_ACCOUNT = limits.MAS_LOGIN_FAILURES_PER_ADDRESS = 3
    regular, desk = staff(), address()
    assert [attempt(path, regular, PASSWORD, desk) for path in LOGINS * 5] == ["in"] * 10


@pytest.mark.django_db(transaction=True)
def test_parallel_guesses_get_no_more_tries_than_the_limit(limits):
    limits.MAS_LOGIN_FAILURES_PER_ACCOUNT = 5
    victim, where = staff(), address()

    def guess(i: int) -> str:
        try:
            return attempt("/accounts/login/", victim, f"guess-{i}", where)
        finally:
            connection.close()  # the thread's own; the test database is dropped at the end

    with ThreadPoolExecutor(max_workers=10) as pool:
        outcomes = list(pool.map(guess, range(20)))
    assert sorted(waits(outcomes)) == ["wait"] * 15 + ["wrong"] * 5


def test_without_redis_sign_ins_are_not_throttled(limits, monkeypatch):
    # The limits guard, they do not gate: Redis away (a closed port here) must not lock everyone out.
    limits.MAS_LOGIN_FAILURES_PER_ACCOUNT = 1
    limits.CELERY_BROKER_URL = "redis://127.0.0.1:1/9"
    monkeypatch.setattr(redis_client, "_client", None)  # made again from the setting, as at start-up
    monkeypatch.setattr(sign_in, "_scripts", {})
    victim, where = staff(), address()
    assert [attempt("/accounts/login/", victim, "guess", where) for _ in range(3)] == ["wrong"] * 3
    assert attempt("/accounts/login/", victim, PASSWORD, where) == "in"
