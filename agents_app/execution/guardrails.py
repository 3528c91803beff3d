"""A session's guardrails: the team's defaults, the agent's, the workflow step's and the run's, checked where
content enters or leaves the model (SPEC §11).

The detectors are :mod:`mas_core.guardrails`; this module picks the definitions that apply to a session
(:func:`guardrails_sql` reads them with the session's other rows) and gives the kernel loop the
:class:`~agents_app.kernel.loop.Guard` it calls: the model's request, its answer (as it streams, then whole,
with its tool calls' arguments) and each tool's result. What fires is a ``guardrail_triggered`` event naming
the guardrail, where, the action and a redacted excerpt; a ``block`` fails the session as ``guardrail``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any

from agents_app.kernel.loop import GuardrailTripped
from mas_core.guardrails import Context, Detector, Finding, detector_build, excerpt, fence, mask, redact
from mas_core.llm_types import Message, ToolCall
from mas_core.patterns import off_loop
from mas_core.secrets import team_values

# The tools whose arguments are written to memory: memory_write guardrails look at their calls.
MEMORY_TOOLS = frozenset({"memory_store", "knowledge_contribute", "blackboard_write"})
# Texts longer than this are checked on the CPU pool, not on the worker's event loop.
OFF_LOOP_CHARS = 20_000
# Of a streamed answer, the last characters are held back until the next chunk (or the end): a match may
# begin in one chunk and end in the next.
STREAM_HOLD_CHARS = 256
# Detectors that judge a whole text: a part of a stream says nothing; they look at the answer once it is whole.
WHOLE_TEXT = frozenset({"length", "json_schema"})
# Strings of one call's arguments that are looked at, and how deep: past these, the arguments are refused.
MAX_ARGUMENT_STRINGS = 1_000
MAX_ARGUMENT_DEPTH = 20
# Texts of a session's requests remembered as checked (see SessionGuard.request).
MAX_SENT = 4_096

WHERE_LABELS = {
    "run_input": "run's input", "model_request": "model request", "model_answer": "model's answer",
    "tool_arguments": "tool call's arguments", "tool_result": "tool's result", "memory_write": "memory write",
}

Emit = Callable[[str, dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Rule:
    """One guardrail definition as a session applies it."""

    slug: str
    name: str
    where: frozenset[str]
    tools: tuple[str, ...]
    detector: Detector
    action: str

    def applies(self, where: str, tool: str | None) -> bool:
        return where in self.where and (tool is None or any(fnmatchcase(tool, pattern) for pattern in self.tools))


def triggered(rule: Rule, where: str, tool: str | None, text: str, findings: list[Finding]) -> dict[str, Any]:
    """The data of a ``guardrail_triggered`` event: the guardrail, where, the action and a redacted excerpt."""
    return {"guardrail": rule.slug, "where": where, "action": rule.action, **({"tool": tool} if tool else {}),
            "excerpt": excerpt(text, findings)}


def context_for(rules: list[Rule], *, team: str, system_prompt: str = "") -> Context:
    """What the rules' detectors compare texts with; the team's declared secret values only when a ``secrets``
    detector looks for them (reading them parses MAS_TEAM_SECRETS and walks the environment)."""
    secrets = any(rule.detector.type == "secrets" for rule in rules)
    return Context(secret_values=team_values(team) if secrets else (), system_prompt=system_prompt)


def rules_from(rows: list[dict[str, Any]]) -> list[Rule]:
    """Rules from the guardrail rows a session read (slug and spec), in the order given, each slug once."""
    rules: dict[str, Rule] = {}
    for row in rows:
        spec = row["spec"]
        if row["slug"] in rules:
            continue
        rules[row["slug"]] = Rule(slug=row["slug"], name=spec.get("name", row["slug"]),
                                  where=frozenset(spec["applies_to"]), tools=tuple(spec.get("tools", ["*"])),
                                  detector=_detector(json.dumps(spec["detector"], sort_keys=True)),
                                  action=spec["action"])
    return list(rules.values())


@functools.lru_cache(maxsize=256)
def _detector(settings: str) -> Detector:
    """A detector built once per process for each settings (compiled patterns, word lists): every session of a
    team starts with the same guardrails. Detectors are immutable."""
    return detector_build(json.loads(settings))


def guardrails_sql(*, team: str, slugs: str) -> str:
    """A subquery: the team's guardrails a session applies — the team's defaults and those named in the
    ``slugs`` parameter (the agent's, the step's, the run's) — as a JSON array of {slug, spec}, defaults first."""
    return f"""(SELECT json_agg(json_build_object('slug', g.slug, 'spec', g.spec) ORDER BY g."default" DESC, g.slug)::text
      FROM agents_app_guardrail g WHERE g.team_id = %({team})s AND (g."default" OR g.slug = ANY(%({slugs})s)))"""


def rows_read(value: str | None) -> list[dict[str, Any]]:
    return json.loads(value) if value else []


class SessionGuard:
    """The kernel loop's :class:`~agents_app.kernel.loop.Guard` for one session's rules."""

    def __init__(self, rules: list[Rule], *, context: Context, emit: Emit) -> None:
        self.rules, self.context, self.emit = rules, context, emit
        self.streamed = [rule for rule in rules if "model_answer" in rule.where
                         and rule.detector.type not in WHOLE_TEXT and rule.action != "warn"]
        self.requested = any("model_request" in rule.where for rule in rules)
        self.sent: dict[str, str] = {}  # model_request: a message's content -> as the provider saw it

    async def check(self, where: str, text: str, *, tool: str | None = None) -> str:
        """``text`` as it may go on after every rule for ``where`` (and ``tool``) looked at it."""
        for rule in self.rules:
            if not text or not rule.applies(where, tool):
                continue
            findings = await self._find(rule, text)
            if not findings:
                continue
            await self.emit("guardrail_triggered", triggered(rule, where, tool, text, findings))
            text = self._act(rule, where, tool, text, findings)
        return text

    async def _find(self, rule: Rule, text: str) -> list[Finding]:
        if len(text) > OFF_LOOP_CHARS:
            return await off_loop(rule.detector.find, text, self.context)
        return rule.detector.find(text, self.context)

    @staticmethod
    def _act(rule: Rule, where: str, tool: str | None, text: str, findings: list[Finding]) -> str:
        if rule.action == "block":
            of = f" of {tool}" if tool else ""
            raise GuardrailTripped(f"guardrail {rule.name!r} ({rule.slug}) blocked the {WHERE_LABELS[where]}{of}")
        if rule.action == "redact":
            return redact(text, findings)
        if rule.action == "mask":
            return mask(text, findings)
        if rule.action == "fence":
            return fence(text, source=tool or where)
        return text  # warn: the event only; ask: the tool call waits for a person (asking)

    # -- the Guard protocol -------------------------------------------------------------------------

    async def request(self, messages: list[Message]) -> list[Message]:
        if not self.requested:
            return messages
        checked = []
        if len(self.sent) > MAX_SENT:  # a long session's old turns (compacted away) are not kept for ever
            self.sent.clear()
        for message in messages:
            content = message.content
            if content and content not in self.sent:  # each text once per session: the history grows by a turn
                self.sent[content] = await self.check("model_request", content)
            seen = self.sent.get(content, content) if content else content
            checked.append(message if seen == content else replace(message, content=seen))
        return checked

    async def answer(self, text: str, calls: list[ToolCall]) -> tuple[str, list[ToolCall]]:
        text = await self.check("model_answer", text) if text else text
        return text, [await self._call(call) for call in calls]

    async def _call(self, call: ToolCall) -> ToolCall:
        wheres = ["tool_arguments"] + (["memory_write"] if call.name in MEMORY_TOOLS else [])
        if not any(rule.applies(where, call.name) for rule in self.rules for where in wheres):
            return call
        counted = [0]

        async def walk(value: Any, depth: int) -> Any:
            if depth > MAX_ARGUMENT_DEPTH or counted[0] > MAX_ARGUMENT_STRINGS:
                raise GuardrailTripped(f"the arguments of {call.name} are too deep or hold too many strings "
                                       "for its guardrails to check")
            if isinstance(value, str):
                counted[0] += 1
                for where in wheres:
                    value = await self.check(where, value, tool=call.name)
                return value
            if isinstance(value, list):
                return [await walk(item, depth + 1) for item in value]
            if isinstance(value, dict):
                return {key: await walk(item, depth + 1) for key, item in value.items()}
            return value

        arguments = await walk(call.arguments, 0)
        return call if arguments == call.arguments else replace(call, arguments=arguments)

    async def asking(self, call: ToolCall) -> str | None:
        """Why a person must approve ``call`` first (an ``ask`` guardrail finds something in its arguments), or
        None. Asked again when the session resumes with the call waiting, so its answer is the same, and no event:
        the answer's check emitted it."""
        wheres = ["tool_arguments"] + (["memory_write"] if call.name in MEMORY_TOOLS else [])
        for rule in self.rules:
            if rule.action != "ask" or not any(rule.applies(where, call.name) for where in wheres):
                continue
            for text in _strings(call.arguments):
                findings = await self._find(rule, text)
                if findings:  # an approval's reason holds 300 characters
                    return f"guardrail {rule.name!r} ({rule.slug}) asks a person: {excerpt(text, findings)}"[:300]
        return None

    async def result(self, call: ToolCall, content: str) -> str:
        return await self.check("tool_result", content, tool=call.name)

    def stream(self) -> "StreamGuard | None":
        return StreamGuard(self) if self.streamed else None


def _strings(value: Any, depth: int = 0) -> list[str]:
    """The strings of a call's arguments (as many and as deep as :meth:`SessionGuard.answer` let through)."""
    if isinstance(value, str):
        return [value]
    if depth > MAX_ARGUMENT_DEPTH:
        return []
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return [text for item in items for text in _strings(item, depth + 1)][:MAX_ARGUMENT_STRINGS]


class StreamGuard:
    """One model call's streamed text: each chunk checked with what came before it that was held back.

    Shown at once but for the last :data:`STREAM_HOLD_CHARS` characters (or from the start of a match that
    reaches into them), which wait for the next chunk. Redactions and masks apply as the answer will have
    them; a block stops the answer (its event is emitted here). The other events are the whole answer's
    (:meth:`SessionGuard.answer`), so a firing is counted once.
    """

    def __init__(self, guard: SessionGuard) -> None:
        self.guard, self.held = guard, ""

    async def feed(self, text: str) -> str:
        self.held += text
        cut = len(self.held) - STREAM_HOLD_CHARS
        if cut <= 0:
            return ""
        for rule in self.guard.streamed:
            for finding in await self.guard._find(rule, self.held):
                if finding.start < cut < finding.end:
                    cut = finding.start
        shown, self.held = self.held[:cut], self.held[cut:]
        return await self._checked(shown)

    async def end(self) -> str:
        rest, self.held = self.held, ""
        return await self._checked(rest)

    async def _checked(self, text: str) -> str:
        if not text:
            return text
        for rule in self.guard.streamed:
            findings = await self.guard._find(rule, text)
            if findings:
                if rule.action == "block":
                    await self.guard.emit("guardrail_triggered", triggered(rule, "model_answer", None, text, findings))
                text = SessionGuard._act(rule, "model_answer", None, text, findings)
        return text


def input_checked(*, team, named: list[str], text: str) -> tuple[str, list[dict[str, Any]]]:
    """A run's input as its ``run_input`` guardrails let it be kept (the team's defaults and those ``named``: the
    root agent's and the run's), with the ``guardrail_triggered`` events' data; :class:`InputBlocked` for a block.

    Checked before the run is saved, so a redacted or masked input is never stored, in the run nor its events.
    """
    from django.db.models import Q

    from agents_app.execution.errors import InputBlocked
    from agents_app.models import Guardrail

    rows = [{"slug": slug, "spec": spec} for slug, spec in Guardrail.objects.filter(team=team).filter(
        Q(default=True) | Q(slug__in=named)).order_by("-default", "slug").values_list("slug", "spec")
        if "run_input" in spec.get("applies_to", ())]
    if not rows:
        return text, []
    rules, fired = rules_from(rows), []
    context = context_for(rules, team=team.slug)
    for rule in rules:
        findings = rule.detector.find(text, context)
        if not findings:
            continue
        fired.append(triggered(rule, "run_input", None, text, findings))
        try:
            text = SessionGuard._act(rule, "run_input", None, text, findings)
        except GuardrailTripped as tripped:
            raise InputBlocked(str(tripped)) from None
    return text, fired


def session_guard(*, rows: list[dict[str, Any]], team: str, system_prompt: str, emit: Emit) -> SessionGuard | None:
    """The guard of a session of team ``team`` (a slug) whose guardrail rows are ``rows``; None when there are
    none."""
    rules = rules_from(rows)
    if not rules:
        return None
    return SessionGuard(rules, context=context_for(rules, team=team, system_prompt=system_prompt), emit=emit)
