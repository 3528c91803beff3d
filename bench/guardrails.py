#!/usr/bin/env python3
"""What one guardrail check costs: each content detector of mas_core/guardrails.py on a 2 KB and a 20 KB text.

[1] one check per detector: ``Detector.find`` timed call by call (``--checks``
per detector and size, after 50 unmeasured ones), p50 and p95 in µs, and the
findings it returned. The 2 KB text is English prose with a few PII items (an
e-mail address, a phone number, a card number, an IPv4 address); the 20 KB text
is ten of it. Settings as a team would write them: three patterns, 100
keywords, every PII kind, every secret kind with 20 declared values, the
prompt-leak check against a 2 KB system prompt, the injection signs, a length
bound; json_schema gets a JSON document of the same size instead of prose.
The target is under 300 µs per check on the 2 KB text, json_schema aside; a
row over it is marked. Pure Python: no database, no worker.

The cost of a guarded step against an unguarded one, through a real worker,
is section [2] of this script; it comes with the kernel's guardrails and is
not measured here yet.

    .venv/bin/python bench/guardrails.py [--checks 2000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402

from mas_core.guardrails import Context, detector_build  # noqa: E402

WARM = 50
TARGET_US = 300
PARAGRAPH = (
    "Thanks for your message about the March invoice. Our team reviewed the quarterly report with the finance "
    "group and the figures look right, although two of the shipping lines were booked twice. We will send the "
    "revised plan on Monday, after the meeting with the regional managers, and the refund should reach your "
    "account within five working days. If anything is still unclear, please reply to this thread or call the "
    "support desk; the hours are nine to five on weekdays. "
)
PII_SENTENCE = ("You can reach Jane at jane.roe@example.org or +44 20 7946 0958; the refund goes to the card "
                "4242 4242 4242 4242 and the request came from 10.0.0.12. ")


def text_2k() -> str:
    text = (PARAGRAPH * 5)[:1400] + " " + PII_SENTENCE + PARAGRAPH
    return text[:2048]


def json_2k() -> str:
    rows = [{"id": n, "sku": f"SKU-{n:05d}", "quantity": n % 7 + 1, "note": "boxed, fragile"} for n in range(26)]
    return json.dumps({"order": "A-1042", "lines": rows})


def system_prompt_2k() -> str:
    rules = ("You are the billing assistant of Acme. Answer questions about invoices, refunds and payment plans in "
             "plain words. Never reveal internal discount codes or the names of staff. Escalate disputes above five "
             "hundred euros to a human agent and say that you did. ")
    return (rules * 10)[:2048]


def detectors() -> dict[str, tuple[object, str, str]]:
    """Name → (detector, 2 KB text, 20 KB text)."""
    rng = random.Random(26)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 12))) for _ in range(100)]
    prose, document = text_2k(), json_2k()
    big_document = json.dumps({"order": "A-1042", "lines": json.loads(document)["lines"] * 10})
    settings = {
        "pattern": {"type": "pattern", "patterns": [r"order #\d{6}", r"(?i)confidential", r"\bproject [A-Z]{4}\b"]},
        "keywords": {"type": "keywords", "words": words},
        "pii": {"type": "pii"},
        "secrets": {"type": "secrets"},
        "prompt_leak": {"type": "prompt_leak"},
        "injection": {"type": "injection"},
        "json_schema": {"type": "json_schema", "schema": {
            "type": "object", "required": ["order", "lines"],
            "properties": {"order": {"type": "string"}, "lines": {"type": "array"}}}},
        "length": {"type": "length", "max_chars": 50_000},
    }
    built = {}
    for name, one in settings.items():
        small, large = (document, big_document) if name == "json_schema" else (prose, prose * 10)
        built[name] = (detector_build(one), small, large)
    return built


def timed(detector, text: str, context: Context, checks: int) -> tuple[list[float], int]:
    """Microseconds per check, and the findings of one."""
    for _ in range(WARM):
        detector.find(text, context)
    times = []
    for _ in range(checks):
        started = time.perf_counter_ns()
        detector.find(text, context)
        times.append((time.perf_counter_ns() - started) / 1000)
    return times, len(detector.find(text, context))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", type=int, default=2000)
    args = parser.parse_args()
    c.say(f"guardrails: each detector's find(), {args.checks} checks per detector and text size")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")
    context = Context(secret_values=tuple(f"team-secret-{n:04d}-value" for n in range(20)),
                      system_prompt=system_prompt_2k())
    c.say("")
    c.say("[1] one check per detector")
    c.say(f"{'detector':<13} {'2 KB p50':>10} {'p95':>10} {'found':>6}   {'20 KB p50':>10} {'p95':>10} {'found':>6}")
    for name, (detector, small, large) in detectors().items():
        small_times, small_found = timed(detector, small, context, args.checks)
        large_times, large_found = timed(detector, large, context, args.checks)
        p50 = c.percentile(small_times, 50)
        over = "  over the target" if p50 > TARGET_US and name != "json_schema" else ""
        c.say(f"{name:<13} {p50:>7.1f} µs {c.percentile(small_times, 95):>7.1f} µs {small_found:>6}   "
              f"{c.percentile(large_times, 50):>7.1f} µs {c.percentile(large_times, 95):>7.1f} µs "
              f"{large_found:>6}{over}")
    c.say(f"(2 KB: {len(text_2k())} characters of prose, json_schema {len(json_2k())} of JSON; target: p50 under "
          f"{TARGET_US} µs on 2 KB, json_schema aside)")


if __name__ == "__main__":
    main()
