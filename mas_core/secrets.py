"""Which of the server's environment variables a team may use, and keeping their values out of logs.

A definition never holds a secret: a provider names the variable holding its
key (``api_key_env``), an MCP server refers to variables as ``${NAME}`` in its
``env`` and ``headers``. Those values then go to a URL or a program the team's
editor chooses, so a team may name only what the operator declared for teams
in ``MAS_TEAM_SECRETS`` — by declaration, never by a deny-list of what looks
like a server setting::

    MAS_TEAM_SECRETS="OPENAI_API_KEY, ANTHROPIC_API_KEY, GITHUB_*=demo|alpha"

Comma-separated entries; each is a variable name or a prefix ending in ``*``
(``GITHUB_*`` covers ``GITHUB_TOKEN``, ``GITHUB_APP_KEY``, …), optionally
followed by ``=`` and the slugs of the teams that may use it, separated by
``|``. An entry without teams is for every team. Names are case-sensitive, as
the environment is. Empty: no team may reference any variable.

Values of declared variables (and of whatever secrets a caller adds for the
task at hand, see :func:`redacting`) are replaced by ``[redacted]`` in every
log line that passes :class:`RedactFilter`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import re
import traceback
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache

SETTING = "MAS_TEAM_SECRETS"
REDACTED = "[redacted]"
# Shorter values are not redacted: replacing every "1" or "on" of a log line would hide the line, not a secret.
MIN_SECRET_LENGTH = 4
# Nor declared values shorter than this: a declared PREFIX_* may cover flags too (GITHUB_ACTIONS=true), and
# keys and tokens are longer. A connection's own values (its env, its headers) go by MIN_SECRET_LENGTH.
MIN_DECLARED_LENGTH = 8
MAX_ENTRIES = 200

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TEAM_RE = re.compile(r"^[A-Za-z0-9_-]+$")
# ${NAME} in a definition's value: a reference to a variable of the server's environment.
ENV_REFERENCE_RE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


@dataclass(frozen=True)
class Declaration:
    """One entry of MAS_TEAM_SECRETS: a name or a ``PREFIX_*``, for some teams or all."""

    pattern: str
    teams: frozenset[str] | None = None  # None: every team

    def matches(self, name: str) -> bool:
        if self.pattern.endswith("*"):
            return name.startswith(self.pattern[:-1])
        return name == self.pattern

    def allows(self, team: str) -> bool:
        return self.teams is None or team in self.teams


class DeclarationError(ValueError):
    """MAS_TEAM_SECRETS cannot be read; the message names the entry."""


@lru_cache(maxsize=16)
def parse_declarations(text: str) -> tuple[Declaration, ...]:
    """The entries of a MAS_TEAM_SECRETS value (DeclarationError naming the bad entry)."""
    entries = [entry.strip() for entry in (text or "").split(",") if entry.strip()]
    if len(entries) > MAX_ENTRIES:
        raise DeclarationError(f"{SETTING}: {len(entries)} entries, at most {MAX_ENTRIES}")
    found = []
    for entry in entries:
        pattern, sep, teams_text = (part.strip() for part in entry.partition("="))
        name = pattern[:-1] if pattern.endswith("*") else pattern
        if not NAME_RE.match(name):
            # A bare "*" would declare the whole environment, the server's own settings included.
            raise DeclarationError(f"{SETTING}: {entry!r} is not a variable name or a PREFIX_* "
                                   "(letters, digits and _, not starting with a digit; * only at the end)")
        teams = None
        if sep:
            slugs = [slug.strip() for slug in teams_text.split("|") if slug.strip()]
            bad = [slug for slug in slugs if not TEAM_RE.match(slug)]
            if not slugs or bad:
                raise DeclarationError(f"{SETTING}: {entry!r}: after = come team slugs separated by | "
                                       f"(e.g. {pattern}=demo|alpha)")
            teams = frozenset(slugs)
        found.append(Declaration(pattern, teams))
    return tuple(found)


def declarations() -> tuple[Declaration, ...]:
    from django.conf import settings

    return parse_declarations(getattr(settings, SETTING, "") or "")


def env_refusal(name: str, *, team: str) -> str | None:
    """Why team ``team`` (a slug) may not use the server's environment variable ``name``; None when it may."""
    matching = [declaration for declaration in declarations() if declaration.matches(name)]
    if not matching:
        return (f"{name} is not declared for teams on this server: the operator lists the environment "
                f"variables teams may use in {SETTING}")
    if not any(declaration.allows(team) for declaration in matching):
        # Which teams may use it is the operator's business, not this team's.
        return f"{name} is declared in {SETTING} for other teams, not for team {team or '(none)'}"
    return None


def references(value: str) -> list[str]:
    """The variable names a value refers to as ``${NAME}``."""
    return [match[2:-1] for match in ENV_REFERENCE_RE.findall(value)]


class SecretUnavailable(ValueError):
    """A ``${NAME}`` a definition refers to may not be used by its team now, or is not set on the server."""


def references_expanded(values: Mapping[str, str], *, what: str, team: str) -> dict[str, str]:
    """``values`` with each ``${NAME}`` taken from the server's environment (SecretUnavailable naming the first
    that may not: not declared for team ``team`` — a slug — in MAS_TEAM_SECRETS as the operator's list stands
    now, or not set). ``what`` names the values in the message (``header``, ``env``)."""
    expanded = {}
    for key, value in values.items():
        names = references(value)
        for name in names:
            refusal = env_refusal(name, team=team)
            if refusal:
                raise SecretUnavailable(f"{what} {key} refers to ${{{name}}}: {refusal}")
        missing = [name for name in names if name not in os.environ]
        if missing:
            raise SecretUnavailable(f"{what} {key} refers to {', '.join(missing)}, which is not set on the server")
        expanded[key] = ENV_REFERENCE_RE.sub(lambda match: os.environ[match[0][2:-1]], value)
    return expanded


def declared_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values (of MIN_DECLARED_LENGTH or more) of every variable of the environment that some team may
    use, whichever team."""
    found = declarations()
    if not found:
        return []
    environ = os.environ if environ is None else environ
    return [value for name, value in list(environ.items())
            if len(value) >= MIN_DECLARED_LENGTH and any(d.matches(name) for d in found)]


def team_values(team: str, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The values (of MIN_DECLARED_LENGTH or more) of the environment's variables declared for team ``team``
    (a slug): what a ``secrets`` guardrail looks for as the team's own."""
    found = [declaration for declaration in declarations() if declaration.allows(team)]
    if not found:
        return ()
    environ = os.environ if environ is None else environ
    return tuple(value for name, value in list(environ.items())
                 if len(value) >= MIN_DECLARED_LENGTH and any(d.matches(name) for d in found))


# -- keeping values out of text --------------------------------------------------------------------------

# Secrets of the task at hand (an MCP server's resolved env, say), seen by every log call made in the task
# and in the tasks it starts: the SDK logs what a server printed from a task of its own.
_in_context: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("mas_secret_values", default=())


@contextlib.contextmanager
def redacting(values: Iterable[str]) -> Iterator[None]:
    """Log lines written in this context (and in tasks started from it) have ``values`` redacted."""
    token = _in_context.set(tuple(dict.fromkeys((*_in_context.get(), *values))))
    try:
        yield
    finally:
        _in_context.reset(token)


class Redactor:
    """Replaces each of a set of secret values in a text (longest first, so no part of one is left)."""

    def __init__(self, values: Iterable[str]) -> None:
        unique = {value for value in values if isinstance(value, str) and len(value) >= MIN_SECRET_LENGTH}
        self.values = tuple(sorted(unique, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self.values)

    def __call__(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text


def current_redactor(extra: Iterable[str] = ()) -> Redactor:
    """Declared team secrets, the current context's secrets and ``extra``."""
    return Redactor((*declared_values(), *_in_context.get(), *extra))


def exception_text(error: BaseException) -> str:
    """``str(error)`` in full: pydantic's own text cuts long inputs to their two ends, which a redactor
    looking for whole values would miss (a stray output line quoted in a validation error)."""
    errors = getattr(error, "errors", None)
    if callable(errors) and type(error).__name__ == "ValidationError":
        try:
            items = errors(include_url=False)
        except Exception:  # noqa: BLE001 - not pydantic's after all
            return str(error)
        parts = [f"{item.get('msg')} [type={item.get('type')}, input_value={item.get('input')!r}]" for item in items]
        return f"{getattr(error, 'title', type(error).__name__)}: " + "; ".join(parts)
    return str(error)


def exception_lines(exc_info) -> str:
    """A traceback as logging prints it, its exception messages written in full (see exception_text)."""
    kind, error, tb = exc_info
    lines = traceback.format_tb(tb) if tb is not None else []
    text = "Traceback (most recent call last):\n" + "".join(lines) if lines else ""
    return text + f"{getattr(kind, '__name__', kind)}: {exception_text(error)}"


# Credentials a log line must never carry, whatever logged them (a library echoing a header, an error
# quoting a request): the value of an ``Authorization`` header, of any scheme; a credential after an
# authentication scheme's name; our own API tokens wherever they appear. Only the scheme's name is kept.
_AUTH_HEADER = re.compile(
    r"(?i)(\bauthorization[\"']?\s*[:=]\s*[\"']?)(?:([A-Za-z][\w-]*)\s+(?=[^\s\"']))?[^\"'\r\n,}]+")
_SCHEME_CREDENTIAL = re.compile(
    r"(?i)\b(bearer|token|basic|digest|negotiate|ntlm|hoba|mutual|scram-sha-\d+|aws4-hmac-sha256|apikey|api-key)"
    r"(\s+)(?:(?=[\w-]+=\S)[^'\r\n]+|[A-Za-z0-9+/=._~:-]*[0-9+/=._~:-][A-Za-z0-9+/=._~:-]*|[A-Za-z0-9+/=._~-]{20,})")
_MAS_TOKEN = re.compile(r"\bmas_[A-Za-z0-9_-]{8,}")


def credentials_scrub(text: str) -> str:
    """``text`` without credentials: header values and scheme credentials become ``[redacted]``, the scheme
    stays (``Basic [redacted]``), an API token becomes ``mas_[redacted]``."""
    if not text:
        return text
    text = _AUTH_HEADER.sub(lambda m: m.group(1) + (m.group(2) + " " if m.group(2) else "") + REDACTED, text)
    text = _SCHEME_CREDENTIAL.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    return _MAS_TOKEN.sub("mas_" + REDACTED, text)


class RedactFilter(logging.Filter):
    """Redacts credentials (:func:`credentials_scrub`), declared team secrets and the current context's
    secrets from a record, in place.

    On every handler of ``LOGGING`` (every line the web and the workers write) and on the
    loggers of the MCP SDK, which print what a server wrote (their records reach
    every handler already redacted).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            secrets = current_redactor()
        except Exception:  # noqa: BLE001 - settings not configured yet: nothing is declared
            secrets = None

        def redact(text: str) -> str:
            text = credentials_scrub(text)
            return secrets(text) if secrets else text

        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string is logging's own error to report
            return True
        if redact(message) != message:
            record.msg, record.args = redact(message), ()
        if record.exc_info and record.exc_info[0] is not None:
            full = exception_lines(record.exc_info)
            if redact(full) != full:
                record.exc_text, record.exc_info = redact(full), None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        for key, value in list(vars(record).items()):
            if isinstance(value, str) and key not in _RECORD_TEXT:
                setattr(record, key, redact(value))
        return True


# Fields of every record that are not what was logged (names of the code, or handled above).
_RECORD_TEXT = {"msg", "exc_text", "stack_info", "name", "levelname", "pathname", "filename", "module", "funcName",
                "processName", "threadName", "taskName"}


def redact_loggers(prefix: str) -> None:
    """Put a :class:`RedactFilter` on every logger named ``prefix`` or ``prefix.*`` (existing ones; call after
    importing the library). A logger's filters see only its own records, hence one on each."""
    names = [name for name in list(logging.root.manager.loggerDict)
             if name == prefix or name.startswith(prefix + ".")]
    for name in [prefix, *names]:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RedactFilter) for existing in logger.filters):
            logger.addFilter(RedactFilter())


def redact_handlers() -> None:
    """Put a :class:`RedactFilter` on every handler that lacks one, on every logger. For libraries that
    bring handlers of their own when imported (torch, transformers, huggingface_hub write to stderr):
    call it after importing them, so that no line the process writes escapes the filter."""
    loggers = [logging.root] + [lg for lg in list(logging.root.manager.loggerDict.values())
                                if isinstance(lg, logging.Logger)]
    for logger in loggers:
        for handler in logger.handlers:
            if not isinstance(handler, logging.NullHandler) and not any(
                    isinstance(existing, RedactFilter) for existing in handler.filters):
                handler.addFilter(RedactFilter())
