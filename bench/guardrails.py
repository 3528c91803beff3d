#!/usr/bin/env python3
"""What one guardrail check costs: each content detector (mas_core.guardrails) on 2 KB and 20 KB, and a step with them.

[1] one check per detector: ``Detector.find`` timed call by call (``--checks``
per detector and size, after 50 unmeasured ones), p50 and p95 in µs, and the
findings it returned. The 2 KB text is English prose with a few PII items (an
e-mail address, a phone number, a card number, an IPv4 address); the 20 KB text
is ten of it. Settings as a team would write them: three patterns, 100
keywords, every PII kind, every secret kind with 20 declared values, the
prompt-leak check against a 2 KB system prompt, the injection signs, a length
bound, English as the one language allowed (its model loaded by the first,
unmeasured check); json_schema gets a JSON document of the same size instead
of prose.
The target is under 300 µs per check on the 2 KB text, json_schema aside; a
row over it is marked. Pure Python: no database, no worker.

[2] a step with the team's defaults on, beside the same step without them:
one real worker, two teams on the bench database, the same agent and scripted
run as bench/kernel_overhead.py (``--steps`` vfs_write tool steps, then an
answer; zero model latency), one run at a time, the two teams alternated in
``--rounds`` blocks so a change in the machine's speed falls on both. The
guarded team has three default guardrails a careful team would switch on:
PII redacted in every model request, answer, tool call and tool result;
secrets (API-key shapes, private keys, its declared values) blocking an
answer or a tool call; injections in tool results fenced. Per step: wall
time p50/p95 (llm_request to llm_request, from the events) and the worker's
CPU; guarded / plain.

    .venv/bin/python bench/guardrails.py [--checks 2000] [--sessions 20] [--steps 10] [--rounds 4]
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
        "language": {"type": "language", "allowed": ["en"]},
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


GUARDED = {  # section [2]: the guarded team's defaults
    "no-pii": "applies_to: [model_request, model_answer, tool_arguments, tool_result]\ndetector:\n  type: pii\n"
              "action: redact\n",
    "keep-secrets": "applies_to: [model_answer, tool_arguments]\ndetector:\n  type: secrets\naction: block\n",
    "fence-injections": "applies_to: [tool_result]\ndetector:\n  type: injection\naction: fence\n",
}


def guarded_team(agent: str, frontmatter: str):
    from agents_app.kinds import GUARDRAIL
    from mas_core.definitions.services import definition_parse, definition_save

    team = c.team_with_agent(slug="bench-guarded", agent=agent, frontmatter=frontmatter)
    for slug, settings in GUARDED.items():
        text = f"---\nname: {slug}\n{settings}default: true\n---\n"
        definition_save(kind=GUARDRAIL, team=team, parsed=definition_parse(kind=GUARDRAIL, team=team, text=text))
    return team


def steps(sessions: int, steps: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Section [2]: per-step wall times and worker CPU per step, plain and guarded, alternated in ``rounds``."""
    import kernel_overhead as ko
    from agents_app.models import Event

    c.say(f"\ndatabase {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    c.redis_flush()
    worker = None
    figures: dict[str, dict[str, list[float]]] = {"plain": {"steps": [], "cpu": []},
                                                 "guarded": {"steps": [], "cpu": []}}
    try:
        frontmatter = f"limits:\n  max_steps: {steps + 5}\n"
        teams = {"plain": c.team_with_agent(slug="bench-plain", agent=ko.AGENT, frontmatter=frontmatter),
                 "guarded": guarded_team(ko.AGENT, frontmatter)}
        worker = c.Worker(concurrency=8).start()
        for team in teams.values():
            ko.worker_runs(team, 2, steps, together=False)  # warm-up: connections, imports, compiled detectors
        per_round = max(1, sessions // rounds)
        for _ in range(rounds):
            for name, team in teams.items():
                cpu = worker.cpu_seconds()
                ids, _ = ko.worker_runs(team, per_round, steps, together=False)
                figures[name]["cpu"].append((worker.cpu_seconds() - cpu) / (per_round * steps))
                figures[name]["steps"] += ko.worker_figures(ids)["steps"]
        fired = Event.objects.filter(type="guardrail_triggered").count()
    finally:
        if worker:
            worker.stop()
        c.database_drop()
        c.redis_flush()
    c.say(f"guardrail_triggered events: {fired} (the bench's texts hold no PII, secret or injection: "
          "the checks run and find nothing, as on most steps)")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=20, help="section [2]: runs per team")
    parser.add_argument("--steps", type=int, default=10, help="section [2]: tool steps per run")
    parser.add_argument("--rounds", type=int, default=4, help="section [2]: blocks alternating the two teams")
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

    c.django_setup()
    figures = steps(args.sessions, args.steps, args.rounds)
    c.say(f"\n[2] one run at a time through a real worker, {args.sessions} runs x {args.steps} tool steps per team, "
          f"{args.rounds} alternated blocks")
    for name in ("plain", "guarded"):
        cpu = figures[name]["cpu"]
        c.say(f"  {name:8s} per step {c.summary_ms(figures[name]['steps'])}; worker CPU per step "
              f"{sum(cpu) / len(cpu) * 1000:.3f} ms (blocks: {', '.join(f'{x * 1000:.2f}' for x in cpu)})")
    ratio = c.percentile(figures["guarded"]["steps"], 50) / c.percentile(figures["plain"]["steps"], 50)
    cpu_ratio = sum(figures["guarded"]["cpu"]) / sum(figures["plain"]["cpu"])
    c.say(f"  guarded / plain: per-step p50 {ratio:.2f}, worker CPU per step {cpu_ratio:.2f}")


if __name__ == "__main__":
    main()
