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
