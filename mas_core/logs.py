"""Log lines with their structured fields: ``msg key=value …``."""

import logging

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
        if fields:
            line += " " + " ".join(f"{key}={value!r}" for key, value in fields.items())
        return line


# -- JSON lines, with the run and session a line belongs to ------------------------------------------------

import contextvars  # noqa: E402
import json  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

# Set by the worker around each session (agents_app.execution.session): every line logged while it runs,
# in its coroutines and in the database threads they use, carries these ids.
log_context: contextvars.ContextVar[dict | None] = contextvars.ContextVar("mas_log_context", default=None)


def bind(**fields) -> contextvars.Token:
    """Attach ``fields`` (run, session, agent, ...) to the log lines of the current task from now on."""
    return log_context.set({**(log_context.get() or {}), **fields})


class ContextFilter(logging.Filter):
    """Copies the bound fields onto each record (without overwriting what the call passed in ``extra``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (log_context.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, run/session ids and every ``extra`` field."""

    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:  # already rendered (and redacted: mas_core.secrets.RedactFilter)
            data["exception"] = record.exc_text
        return json.dumps(data, default=str, ensure_ascii=False)
