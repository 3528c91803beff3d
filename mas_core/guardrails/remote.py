"""The detectors that ask someone else: a model (``llm_judge``) or the team's own service (``webhook``).

Their builders check the settings only: the asking is the session's (``agents_app.execution.guardrail_calls``),
which bills a judge's calls to the run and signs a webhook's requests. :attr:`Detector.remote` holds the
checked settings; :meth:`Detector.find` refuses such a detector (nothing here makes a call).

``llm_judge`` (``criterion``; ``model``, ``max_chars``, ``on_error``)
    A model of the team answers whether the text meets ``criterion`` ("The text gives personalised investment
    advice"); a text it flags is one finding over the whole text, label ``llm_judge``.
``webhook`` (``url``; ``timeout_s``, ``max_chars``, ``on_error``)
    The team's service answers ``allow``, ``deny`` (one finding over the whole text, label ``webhook``) or
    ``redact`` with the spans to redact (:func:`webhook_findings`).

``max_chars``: what is sent, the first characters of the text (the rest is not looked at: pair the guardrail
with a ``length`` one). ``on_error``: when no answer comes (an error, a timeout, an answer that is not one, the
run's guardrail budget spent), ``flag`` takes the text as found (fail closed: a block blocks), ``allow`` lets it
pass; either way the session records an ``error`` event.
"""

from __future__ import annotations

import re
from typing import Any

from mas_core.guardrails.detector import Detector, DetectorError, DetectorSettings
from mas_core.guardrails.findings import MAX_TEXT_CHARS, Context, Span
from mas_core.guardrails.scanning import MAX_FINDINGS

REMOTE_DETECTORS = frozenset({"llm_judge", "webhook"})
MAX_CRITERION_CHARS = 2_000
JUDGE_DEFAULT_CHARS = 8_000
WEBHOOK_DEFAULT_CHARS = 20_000
WEBHOOK_DEFAULT_TIMEOUT_S = 2.0
WEBHOOK_MAX_TIMEOUT_S = 10.0
ON_ERROR = ("flag", "allow")
MODEL_REF = re.compile(r"^(small|medium|large|[-a-zA-Z0-9_]{1,100}:[-a-zA-Z0-9_.:/@]{1,200})$")
LABEL = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class WebhookAnswerError(ValueError):
    """A webhook detector's answer that is not one (its message says why, never the text it was sent)."""


def llm_judge_build(settings: DetectorSettings) -> Detector:
    """The ``llm_judge`` detector (see the module): its settings, checked."""
    criterion = settings.get("criterion")
    if not isinstance(criterion, str) or not criterion.strip():
        raise DetectorError("detector.criterion", "is required: what the judge flags, as a sentence "
                                                  "(\"The text gives personalised investment advice.\")")
    if len(criterion) > MAX_CRITERION_CHARS:
        raise DetectorError("detector.criterion", f"is {len(criterion)} characters long; at most "
                                                  f"{MAX_CRITERION_CHARS} are allowed")
    model = settings.get("model", "small")
    if not isinstance(model, str) or not MODEL_REF.match(model):
        raise DetectorError("detector.model", f"must be a tier (small, medium, large) or provider:model, "
                                              f"not {model!r}")
    remote = {"criterion": criterion.strip(), "model": model,
              "max_chars": _whole(settings, "max_chars", JUDGE_DEFAULT_CHARS, least=100, most=100_000),
              "on_error": _on_error(settings)}
    settings.done()
    return Detector("llm_judge", _asked_elsewhere, remote=remote)


def webhook_build(settings: DetectorSettings) -> Detector:
    """The ``webhook`` detector (see the module): its settings, checked; the URL as the team's webhook's is."""
    from mas_core.netpolicy import web_url_refusal

    url = settings.get("url")
    if not isinstance(url, str) or not url:
        raise DetectorError("detector.url", "is required: the http(s) URL of the team's service")
    if len(url) > 500:
        raise DetectorError("detector.url", "is longer than 500 characters")
    refusal = web_url_refusal(url)
    if refusal:
        raise DetectorError("detector.url", refusal)
    timeout = settings.get("timeout_s", WEBHOOK_DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= WEBHOOK_MAX_TIMEOUT_S:
        raise DetectorError("detector.timeout_s", f"must be a number of seconds above 0, at most "
                                                  f"{WEBHOOK_MAX_TIMEOUT_S:g}, not {timeout!r}")
    remote = {"url": url, "timeout_s": float(timeout),
              "max_chars": _whole(settings, "max_chars", WEBHOOK_DEFAULT_CHARS, least=100, most=MAX_TEXT_CHARS),
              "on_error": _on_error(settings)}
    settings.done()
    return Detector("webhook", _asked_elsewhere, remote=remote)


def webhook_findings(answer: Any, *, sent: int, whole: int) -> list[Span]:
    """The spans a webhook detector's answer (its JSON, parsed) finds in a text of ``whole`` characters, of which
    the first ``sent`` were sent.

    ``{"decision": "allow"}``: none. ``{"decision": "deny"}``: the whole text (what was not sent too). ``{"decision": "redact", "spans":
    [{"start": 4, "end": 20, "label": "account"}, …]}``: those, offsets in characters (code points) of what was
    sent, ``label`` optional (``webhook``; lower-case letters, digits and ``_``, at most 40). Anything else is a
    :class:`WebhookAnswerError`.
    """
    if not isinstance(answer, dict):
        raise WebhookAnswerError("the answer is not a JSON object")
    decision = answer.get("decision")
    if decision == "allow":
        return []
    if decision == "deny":
        return [(0, whole, "webhook")]
    if decision != "redact":
        raise WebhookAnswerError(f"decision must be allow, deny or redact, not {str(decision)[:40]!r}")
    spans = answer.get("spans")
    if not isinstance(spans, list) or not spans:
        raise WebhookAnswerError("a redact decision needs a non-empty list of spans")
    if len(spans) > MAX_FINDINGS:
        raise WebhookAnswerError(f"{len(spans)} spans; at most {MAX_FINDINGS} are taken")
    found: list[Span] = []
    for position, span in enumerate(spans):
        start, end = (span.get("start"), span.get("end")) if isinstance(span, dict) else (None, None)
        label = span.get("label", "webhook") if isinstance(span, dict) else None
        if not (type(start) is int and type(end) is int and 0 <= start < end <= sent):
            raise WebhookAnswerError(f"spans[{position}] needs whole numbers 0 <= start < end <= {sent}")
        if not isinstance(label, str) or not LABEL.match(label):
            raise WebhookAnswerError(f"spans[{position}].label must be lower-case letters, digits and _ "
                                     "(at most 40)")
        found.append((start, end, label))
    return found


def _asked_elsewhere(text: str, context: Context) -> list[Span]:
    raise TypeError("a remote detector (llm_judge, webhook) is asked by the session, not scanned here")


def _whole(settings: DetectorSettings, key: str, default: int, *, least: int, most: int) -> int:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise DetectorError(f"detector.{key}", f"must be a whole number from {least:,} to {most:,}, not {value!r}")
    return value


def _on_error(settings: DetectorSettings) -> str:
    value = settings.get("on_error", "flag")
    if value not in ON_ERROR:
        raise DetectorError("detector.on_error", f"must be flag (take the text as found) or allow, not {value!r}")
    return value
