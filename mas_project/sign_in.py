"""Password sign-ins (``/admin/login/`` and ``/accounts/login/``), throttled per account and per address.

Failed sign-ins are counted in Redis, like ``ratelimit``'s counters, twice: for
the account (its username, whatever address tries it: ``MAS_LOGIN_FAILURES_PER_ACCOUNT``,
10) and for the client address (whatever accounts it tries: ``MAS_LOGIN_FAILURES_PER_ADDRESS``,
30). A counter lives ``MAS_LOGIN_WINDOW_S`` (900 s) from its first failure; once
either is at its limit, every sign-in of that account, or from that address, is
refused until it expires — the right password too, without being checked
("too many failed sign-ins, try again in N s"), so a locked account answers
nothing a guesser could learn from.

An attempt is counted *before* the password is checked, in one Redis script
that also checks the limits, so parallel guesses cannot all slip in under them;
a successful sign-in then takes back its own count, and only that. It resets
nothing else: the failures others made on the account, from other addresses or
from the same one, stay until they expire. An attacker who owns an account of
his own cannot clear his address's failures by signing in to it, and the victim
signing in does not hand the attacker a fresh set of guesses.

When Redis cannot be reached sign-ins are not throttled (logged), as in ``ratelimit``.
"""

from __future__ import annotations

import hashlib
import logging
import math

import redis
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from mas_core import ratelimit
from mas_core.redis_client import broker_redis

logger = logging.getLogger(__name__)

# KEYS: the counters; ARGV[1]: the window (ms); ARGV[i + 1]: the limit of KEYS[i].
# Returns the ms left of the first counter at its limit (nothing counted), or 0 once every counter took the attempt.
_BEGIN = """
for i, key in ipairs(KEYS) do
  if tonumber(redis.call('GET', key) or '0') >= tonumber(ARGV[i + 1]) then
    local left = redis.call('PTTL', key)
    if left < 0 then
      redis.call('PEXPIRE', key, ARGV[1])
      left = tonumber(ARGV[1])
    end
    return left
  end
end
for _, key in ipairs(KEYS) do
  if redis.call('INCR', key) == 1 then
    redis.call('PEXPIRE', key, ARGV[1])
  end
end
return 0
"""
# Takes back one attempt of each counter still there (an expired one is not brought back below zero).
_REFUND = """
for _, key in ipairs(KEYS) do
  if tonumber(redis.call('GET', key) or '0') > 0 then
    redis.call('DECR', key)
  end
end
return 0
"""
_scripts: dict = {}  # source -> the registered script (EVALSHA, loaded again if Redis forgot it)


def _script(source: str):
    if source not in _scripts:
        _scripts[source] = broker_redis().register_script(source)
    return _scripts[source]


def _keys(*, username: str, address: str) -> list[str]:
    # Per database, as in ratelimit; usernames hashed (any length, any characters, nothing personal in Redis)
    # and case-folded, so "Admin" and "admin" share one count.
    database = settings.DATABASES["default"]["NAME"]
    account = hashlib.sha256(username.strip().casefold().encode()).hexdigest()[:32]
    return [f"mas:signin:{database}:account:{account}", f"mas:signin:{database}:address:{address}"]


def sign_in_begin(*, username: str, address: str) -> int:
    """Count a sign-in attempt; if the account or the address is locked, the seconds left instead (not counted)."""
    limits = [settings.MAS_LOGIN_FAILURES_PER_ACCOUNT, settings.MAS_LOGIN_FAILURES_PER_ADDRESS]
    window_ms = max(1, int(settings.MAS_LOGIN_WINDOW_S * 1000))
    try:
        left_ms = int(_script(_BEGIN)(keys=_keys(username=username, address=address), args=[window_ms, *limits]))
    except redis.RedisError:
        logger.warning("sign-in throttle store unreachable", exc_info=True)
        return 0
    if left_ms:
        logger.warning("sign-in refused: too many failures", extra={"address": address, "wait_s": left_ms / 1000})
    return math.ceil(left_ms / 1000)


def sign_in_succeeded(*, username: str, address: str) -> None:
    """Take back the count of this successful attempt (and nothing more)."""
    try:
        _script(_REFUND)(keys=_keys(username=username, address=address))
    except redis.RedisError:
        logger.warning("sign-in throttle store unreachable", exc_info=True)


class ThrottledSignIn:
    """Django's login form, counting its attempts (see the module's docstring)."""

    def clean(self):
        username, password = self.cleaned_data.get("username"), self.cleaned_data.get("password")
        if not username or not password:  # Django's form checks nothing then; neither is an attempt
            return super().clean()
        address = ratelimit.client_address(self.request) if self.request is not None else "unknown"
        wait = sign_in_begin(username=username, address=address)
        if wait:
            raise ValidationError("too many failed sign-ins, try again in %(wait)s s", code="throttled",
                                  params={"wait": wait})
        cleaned = super().clean()  # a wrong password raises here: the attempt stays counted
        sign_in_succeeded(username=username, address=address)
        return cleaned


class SignInForm(ThrottledSignIn, AuthenticationForm):
    """The site's ``/accounts/login/``."""


class AdminSignInForm(ThrottledSignIn, AdminAuthenticationForm):
    """The admin's ``/admin/login/`` (staff only, as Django's)."""
