"""The ``secrets`` detector: credentials (``kinds``, default all of :data:`SECRET_KINDS`). The module is not named
after the detector so as not to read as :mod:`mas_core.secrets`, where the team's declared values come from.

``api_key``: the shapes of well-known keys (OpenAI ``sk-``/``sk-proj-``
and Anthropic ``sk-ant-`` with at least one digit, AWS ``AKIA``/``ASIA``
access key ids, GitHub ``ghp_ gho_ ghu_ ghs_ ghr_ github_pat_``, Slack
``xox[abprs]-``, Google ``AIza``, Stripe ``sk_live_``/``rk_live_``, JWTs);
``private_key``: a PEM ``-----BEGIN … PRIVATE KEY-----`` block to its END
line (to the end of the text when it has none); ``declared``: each of
:attr:`Context.secret_values` (8 characters or more, as in
:mod:`mas_core.secrets`) where it occurs.
"""

from __future__ import annotations

import functools
from typing import Iterator

from mas_core.guardrails.detector import Detector, DetectorSettings
from mas_core.guardrails.findings import Context, Span
from mas_core.guardrails.scanning import ScannedText, capped, re2_compiled
from mas_core.secrets import MIN_DECLARED_LENGTH

SECRET_KINDS = ("api_key", "private_key", "declared")

_API_KEY = (r"\b(?:"
            r"sk-(?:proj-|svcacct-|admin-|ant-(?:api|admin)[0-9]{2}-)?[A-Za-z0-9_\-]{20,}"
            r"|A(?:KIA|SIA)[0-9A-Z]{16}"
            r"|gh[pousr]_[A-Za-z0-9]{36,}"
            r"|github_pat_[A-Za-z0-9_]{22,}"
            r"|xox[abprs]-[A-Za-z0-9\-]{10,}"
            r"|AIza[0-9A-Za-z_\-]{35}"
            r"|[sr]k_live_[0-9A-Za-z]{16,}"
            r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"
            r")")
_PRIVATE_KEY = (r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?s:.*?)"
                r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\z)")


@functools.cache
def _secret_regex(name: str):
    return re2_compiled({"api_key": _API_KEY, "private_key": _PRIVATE_KEY}[name])


def _api_keys(scanned: ScannedText) -> Iterator[Span]:
    for match in _secret_regex("api_key").finditer(scanned.data):
        key = match.group()
        # sk-learn-compatible-estimators has the shape of an OpenAI key; a key has digits.
        if key.startswith(b"sk-") and not any(byte in b"0123456789" for byte in key[3:]):
            continue
        yield scanned.span(*match.span(), "api_key")


def _private_keys(scanned: ScannedText) -> Iterator[Span]:
    for match in _secret_regex("private_key").finditer(scanned.data):
        yield scanned.span(*match.span(), "private_key")


def _declared(text: str, value: str) -> Iterator[Span]:
    """Where ``value`` occurs; overlapping occurrences make one span, so that no part of the value is left."""
    at = text.find(value)
    if at == -1:
        return
    span_start, span_end = at, at + len(value)
    while (at := text.find(value, at + 1)) != -1:
        if at > span_end:
            yield span_start, span_end, "declared"
            span_start = at
        span_end = at + len(value)
    yield span_start, span_end, "declared"


def secrets_build(settings: DetectorSettings) -> Detector:
    """The ``secrets`` detector (see the module)."""
    kinds = settings.kinds(SECRET_KINDS)
    settings.done()
    shapes = [scan for kind, scan in (("api_key", _api_keys), ("private_key", _private_keys)) if kind in kinds]
    for kind in kinds:
        if kind != "declared":
            _secret_regex(kind)
    declared = "declared" in kinds

    def scan(text: str, context: Context) -> list[Span]:
        scanned = ScannedText(text)
        spans = [span for one in shapes for span in capped(one(scanned), len(text))]
        if declared:
            values = {value for value in context.secret_values
                      if isinstance(value, str) and len(value) >= MIN_DECLARED_LENGTH}
            spans += [span for value in values for span in capped(_declared(text, value), len(text))]
        return spans

    return Detector("secrets", scan)
