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
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from agents_app.kernel.loop import GuardrailTripped, Held
from mas_core.guardrails import Context, Detector, Finding, detector_build, excerpt, fence, mask, redact
from mas_core.guardrails.language import language_loaded
from mas_core.llm_types import Message, ToolCall
from mas_core.patterns import off_loop
from mas_core.secrets import team_values

if TYPE_CHECKING:
    from agents_app.approvals.gate import Gate

logger = logging.getLogger(__name__)

# The tools whose arguments are written to memory: memory_write guardrails look at their calls.
MEMORY_TOOLS = frozenset({"memory_store", "knowledge_contribute", "blackboard_write"})
# Texts longer than this are checked on the CPU pool, not on the worker's event loop (so is the first language check
# of a process, which loads its model).
OFF_LOOP_CHARS = 20_000
# Where an ``ask`` guardrail holds the content itself for a person (elsewhere it makes a tool call wait).
HELD_POINTS = frozenset({"tool_result", "model_answer"})
# Of a streamed answer, the last characters are held back until the next chunk (or the end): a match may
# begin in one chunk and end in the next.
STREAM_HOLD_CHARS = 256
# Detectors that judge a whole text: a part of a stream says nothing; they look at the answer once it is whole.
WHOLE_TEXT = frozenset({"length", "json_schema", "language"})
# Strings of one call's arguments that are looked at, and how deep: past these, the arguments are refused.
MAX_ARGUMENT_STRINGS = 1_000
MAX_ARGUMENT_DEPTH = 20
# Texts of a session's requests remembered as checked (see SessionGuard.request).
MAX_SENT = 4_096

# The points a session checks (the outgoing one is the webhook's: outgoing_checked).
SESSION_POINTS = ("run_input", "model_request", "model_answer", "tool_arguments", "tool_result", "memory_write")
SESSION_POINTS_SQL = ", ".join(f"'{point}'" for point in SESSION_POINTS)

WHERE_LABELS = {
    "run_input": "run's input", "model_request": "model request", "model_answer": "model's answer",
    "tool_arguments": "tool call's arguments", "tool_result": "tool's result", "memory_write": "memory write",
    "outgoing": "outgoing notification",
}

Emit = Callable[[str, dict[str, Any]], Awaitable[None]]
# What asks a remote detector (llm_judge, webhook): (rule, text, where, tool) -> findings (guardrail_calls).
Ask = Callable[["Rule", str, str, "str | None"], Awaitable[list[Finding]]]


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
    ``slugs`` parameter (the agent's, the step's, the run's) that check a point of a session — as a JSON array
    of {slug, spec}, defaults first."""
    return f"""(SELECT json_agg(json_build_object('slug', g.slug, 'spec', g.spec) ORDER BY g."default" DESC, g.slug)::text
      FROM agents_app_guardrail g WHERE g.team_id = %({team})s AND (g."default" OR g.slug = ANY(%({slugs})s))
      AND g.spec->'applies_to' ?| array[{SESSION_POINTS_SQL}])"""


def rows_read(value: str | None) -> list[dict[str, Any]]:
    return json.loads(value) if value else []


class SessionGuard:
    """The kernel loop's :class:`~agents_app.kernel.loop.Guard` for one session's rules."""

    def __init__(self, rules: list[Rule], *, context: Context, emit: Emit, ask: Ask | None = None,
                 gate: Gate | None = None, flush: Callable[[], Awaitable[None]] | None = None) -> None:
        self.rules, self.context, self.emit, self.ask = rules, context, emit, ask
        # What holds an answer for a person (the session's approval gate), and what writes the session's
        # events before the request's.
        self.gate, self.flush = gate, flush
        self.holding = [rule for rule in rules if rule.action == "ask" and "model_answer" in rule.where]
        self.streamed = [rule for rule in rules if "model_answer" in rule.where and rule.detector.remote is None
                         and rule.detector.type not in WHOLE_TEXT and rule.action != "warn"]
        # A remote detector judges the whole answer, once (asking a model or a service at each chunk would cost
        # a call per chunk): until it has, nothing of the answer is shown, so nothing streams.
        # So for an answer an ask guardrail may hold for a person.
        self.withheld = any("model_answer" in rule.where and (rule.detector.remote is not None or rule.action == "ask")
                            and rule.action != "warn" for rule in rules)
        self.requested = any("model_request" in rule.where for rule in rules)
        self.sent: dict[str, str] = {}  # model_request: a message's content -> as the provider saw it

    async def check(self, where: str, text: str, *, tool: str | None = None) -> str:
        """``text`` as it may go on after every rule for ``where`` (and ``tool``) looked at it."""
        for rule in self.rules:
            if not text or not rule.applies(where, tool) or (rule.action == "ask" and where in HELD_POINTS):
                continue  # content a person is asked about: asked where it is held (asking_result, held)
            findings = await self._find(rule, text, where, tool)
            if not findings:
                continue
            await self.emit("guardrail_triggered", triggered(rule, where, tool, text, findings))
            text = self._act(rule, where, tool, text, findings)
        return text

    async def _find(self, rule: Rule, text: str, where: str, tool: str | None = None) -> list[Finding]:
        if rule.detector.remote is not None:
            if self.ask is None:
                raise GuardrailTripped(f"guardrail {rule.name!r} ({rule.slug}) asks a {rule.detector.type}, which "
                                       "this session cannot reach")
            return await self.ask(rule, text, where, tool)
        if len(text) > OFF_LOOP_CHARS or (rule.detector.type == "language" and not language_loaded()):
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
        try:
            texts = _strings(call.arguments)
        except TooMuchData:
            raise GuardrailTripped(f"the arguments of {call.name} are too deep or hold too many strings for its "
                                   "guardrails to check") from None
        checked = []
        for text in texts:
            for where in wheres:
                text = await self.check(where, text, tool=call.name)
            checked.append(text)
        if checked == texts:
            return call
        replaced = iter(checked)
        return replace(call, arguments=each_string(call.arguments, lambda _: next(replaced)))

    async def asking(self, call: ToolCall) -> str | None:
        """Why a person must approve ``call`` first (an ``ask`` guardrail finds something in its arguments), or
        None. Asked again when the session resumes with the call waiting, so its answer is the same, and no event:
        the answer's check emitted it."""
        wheres = ["tool_arguments"] + (["memory_write"] if call.name in MEMORY_TOOLS else [])
        for rule in self.rules:
            if rule.action != "ask" or not any(rule.applies(where, call.name) for where in wheres):
                continue
            for text in _strings(call.arguments):
                findings = await self._find(rule, text, "tool_arguments", call.name)
                if findings:  # an approval's reason holds 300 characters
                    return f"guardrail {rule.name!r} ({rule.slug}) asks a person: {excerpt(text, findings)}"[:300]
        return None

    async def result(self, call: ToolCall, content: str) -> str:
        return await self.check("tool_result", content, tool=call.name)

    async def held(self, text: str, key: str) -> Held | None:
        if not self.holding or self.gate is None:
            return None
        verdict = await self.gate.held(key)
        if verdict is None:
            for rule in self.holding:
                findings = await self._find(rule, text, "model_answer")
                if findings:
                    await self.emit("guardrail_triggered", triggered(rule, "model_answer", None, text, findings))
                    if self.flush is not None:
                        await self.flush()  # the guardrail's event before the request's
                    reason = (f"guardrail {rule.name!r} ({rule.slug}) asks a person before the answer leaves: "
                              f"{excerpt(text, findings)}")[:300]
                    await self.gate.hold(key=key, kind="answer", name="answer", content=text, reason=reason)
                    return Held(waiting=True)
            return None
        if verdict.suspend:
            return Held(waiting=True)
        if verdict.refusal is not None:
            return Held(refusal=verdict.refusal)
        return Held(text=verdict.arguments["answer"])

    def asks_results(self, tool: str) -> bool:
        """Whether an ``ask`` guardrail looks at ``tool``'s results (the tool caller then holds them)."""
        return any(rule.action == "ask" and rule.applies("tool_result", tool) for rule in self.rules)

    async def asking_result(self, call: ToolCall, content: str) -> str | None:
        """Why a person must read ``call``'s result (``content``, as the other guardrails left it) before the
        model does, or None; emits the ``guardrail_triggered`` event."""
        for rule in self.rules:
            if rule.action != "ask" or not content or not rule.applies("tool_result", call.name):
                continue
            findings = await self._find(rule, content, "tool_result", call.name)
            if findings:
                await self.emit("guardrail_triggered", triggered(rule, "tool_result", call.name, content, findings))
                return (f"guardrail {rule.name!r} ({rule.slug}) asks a person before the model reads this result: "
                        f"{excerpt(content, findings)}")[:300]
        return None

    def stream(self) -> "StreamGuard | None":
        return StreamGuard(self) if self.streamed or self.withheld else None


class TooMuchData(ValueError):
    """Data too deep, or holding too many strings, for guardrails to check (str() says which)."""


def each_string(value: Any, check: Callable[[str], str], *, counted: Iterator[int] | None = None,
                depth: int = 0) -> Any:
    """``value`` with each string in it (its dicts' values, its lists' items) as ``check`` returns it, in order;
    :class:`TooMuchData` past :data:`MAX_ARGUMENT_DEPTH` levels or :data:`MAX_ARGUMENT_STRINGS` strings."""
    counted = itertools.count() if counted is None else counted
    if depth > MAX_ARGUMENT_DEPTH:
        raise TooMuchData("is too deep")
    if isinstance(value, str):
        if next(counted) >= MAX_ARGUMENT_STRINGS:
            raise TooMuchData("holds too many strings")
        return check(value)
    if isinstance(value, (list, tuple)):
        return [each_string(item, check, counted=counted, depth=depth + 1) for item in value]
    if isinstance(value, dict):
        return {key: each_string(item, check, counted=counted, depth=depth + 1) for key, item in value.items()}
    return value


def _strings(value: Any) -> list[str]:
    """The strings of ``value`` in order (:func:`each_string`'s limits)."""
    found: list[str] = []
    each_string(value, lambda text: found.append(text) or text)
    return found


class StreamGuard:
    """One model call's streamed text: each chunk checked with what came before it that was held back.

    Shown at once but for the last :data:`STREAM_HOLD_CHARS` characters (or from the start of a match that
    reaches into them), which wait for the next chunk. Redactions and masks apply as the answer will have
    them; a block stops the answer (its event is emitted here). The other events are the whole answer's
    (:meth:`SessionGuard.answer`), so a firing is counted once. With a remote detector on the answer
    (:attr:`SessionGuard.withheld`), nothing streams: the answer shows whole, once judged.
    """

    def __init__(self, guard: SessionGuard) -> None:
        self.guard, self.held = guard, ""

    async def feed(self, text: str) -> str:
        if self.guard.withheld:
            return ""
        self.held += text
        cut = len(self.held) - STREAM_HOLD_CHARS
        if cut <= 0:
            return ""
        for rule in self.guard.streamed:
            for finding in await self.guard._find(rule, self.held, "model_answer"):
                if finding.start < cut < finding.end:
                    cut = finding.start
        shown, self.held = self.held[:cut], self.held[cut:]
        return await self._checked(shown)

    async def end(self) -> str:
        if self.guard.withheld:
            return ""
        rest, self.held = self.held, ""
        return await self._checked(rest)

    async def _checked(self, text: str) -> str:
        if not text:
            return text
        for rule in self.guard.streamed:
            findings = await self.guard._find(rule, text, "model_answer")
            if findings:
                if rule.action == "block":
                    await self.guard.emit("guardrail_triggered", triggered(rule, "model_answer", None, text, findings))
                text = SessionGuard._act(rule, "model_answer", None, text, findings)
        return text


def input_checker(*, team, named: list[str]) -> Callable[[str], tuple[str, list[dict[str, Any]]]]:
    """What checks a run's input, its guardrails read once (for an input and the texts kept with it: a door's
    conversation, ``Run.door_turns``): a text as its ``run_input`` guardrails let it be kept (the team's defaults
    and those ``named``: the root agent's and the run's), with the ``guardrail_triggered`` events' data;
    :class:`InputBlocked` for a block.

    Checked before the run is saved, so a redacted or masked input is never stored, in the run nor its events.
    """
    from django.db.models import Q

    from agents_app.models import Guardrail

    rows = [{"slug": slug, "spec": spec} for slug, spec in Guardrail.objects.filter(team=team).filter(
        Q(default=True) | Q(slug__in=named)).order_by("-default", "slug").values_list("slug", "spec")
        if "run_input" in spec.get("applies_to", ())]
    rules = rules_from(rows)
    context = context_for(rules, team=team.slug) if rules else Context()
    return lambda text: _input_checked(rules, context, text)


def _input_checked(rules: list[Rule], context: Context, text: str) -> tuple[str, list[dict[str, Any]]]:
    from agents_app.execution.errors import InputBlocked

    fired = []
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


def session_guard(*, rows: list[dict[str, Any]], team: str, system_prompt: str, emit: Emit,
                  ask: Callable[[], Ask] | None = None, gate: Gate | None = None,
                  flush: Callable[[], Awaitable[None]] | None = None) -> SessionGuard | None:
    """The guard of a session of team ``team`` (a slug) whose guardrail rows are ``rows``; None when there are
    none. ``ask`` makes the asker of remote detectors, called only when a rule has one; ``gate`` and ``flush``:
    see :class:`SessionGuard`."""
    rules = rules_from(rows)
    if not rules:
        return None
    remote = ask is not None and any(rule.detector.remote is not None for rule in rules)
    return SessionGuard(rules, context=context_for(rules, team=team, system_prompt=system_prompt), emit=emit,
                        ask=ask() if remote else None, gate=gate, flush=flush)


def outgoing_checked(*, team_id: int, team: str, run_id, event: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """``data`` of a notification to the team's webhook (``event``, of run ``run_id``) as its ``outgoing`` guardrails
    let it leave — the team's defaults and those the run names (``Run.guardrails``) — or None: it is not sent.

    Every string of ``data`` is checked, as a tool call's arguments are: at most :data:`MAX_ARGUMENT_STRINGS`
    strings, :data:`MAX_ARGUMENT_DEPTH` deep (data past them is not sent). Each firing is a
    ``guardrail_triggered`` event of the run (where ``outgoing``, with the notification's ``event``), appended in
    the caller's transaction; ``team`` is the team's slug (its declared secrets, for a ``secrets`` detector).
    """
    from mas_core.eventlog import entry, events_append

    rules = _outgoing_rules(team_id=team_id, run_id=run_id)
    if not rules:
        return data
    context, fired = context_for(rules, team=team), []

    def check(text: str) -> str:
        for rule in rules:
            try:
                findings = rule.detector.find(text, context) if text else []
            except Exception as error:  # one that cannot judge here (a remote one is asked by sessions): not sent
                raise _NotSent(f"its guardrail could not check it ({type(error).__name__})",
                               guardrail=rule.slug) from error
            if not findings:
                continue
            fired.append(entry("guardrail_triggered", data={**triggered(rule, "outgoing", None, text, findings),
                                                            "event": event}))
            if rule.action == "block":
                raise _NotSent("blocked by a guardrail", guardrail=rule.slug)
            text = SessionGuard._act(rule, "outgoing", None, text, findings)
        return text

    try:
        return each_string(data, check)
    except TooMuchData as refused:
        logger.warning("webhook notification not sent: its data %s for its guardrails to check", refused,
                       extra={"guardrail": "", "event": event, "run": str(run_id)})
        return None
    except _NotSent as refused:
        logger.warning("webhook notification not sent: %s", refused.why, extra={
            "guardrail": refused.guardrail, "event": event, "run": str(run_id)})
        return None
    finally:
        if fired and run_id:
            events_append(run_id=run_id, entries=fired)


class _NotSent(Exception):
    def __init__(self, why: str, *, guardrail: str = "") -> None:
        super().__init__(why)
        self.why, self.guardrail = why, guardrail


def _outgoing_rules(*, team_id: int, run_id) -> list[Rule]:
    """The rules of the team's ``outgoing`` guardrails a notification of run ``run_id`` passes: the team's defaults
    and those the run names, defaults first — one query on the team's guardrails (none for most teams)."""
    from django.db.models import CharField, F, Func, Q

    from agents_app.models import Guardrail, Run

    named = Run.objects.filter(pk=run_id, team_id=team_id).annotate(slug=Func(
        F("guardrails"), function="jsonb_array_elements_text", output_field=CharField())).values("slug")
    rows = Guardrail.objects.filter(team_id=team_id, spec__applies_to__contains=["outgoing"]).filter(
        Q(default=True) | Q(slug__in=named)).order_by("-default", "slug").values("slug", "spec")
    return rules_from(list(rows))
