"""Which tool calls need a person's approval: patterns from the agent, the workflow step, the run and the team.

An entry is a tool name or an ``fnmatch`` pattern (``code_exec``,
``mcp__github__*``), or a mapping ``{tool, deadline_s, default, reason}`` that
overrides the team's deadline and default outcome for what it matches. The
keyword ``mcp_unmarked`` matches every MCP tool its server does not mark
read-only. A workflow step may add entries (its ``approval``) for the calls
made inside it — by its agent and by the agents that agent delegates to or
spawns —, and a run may add entries (``approvals`` at start); neither removes
any: the rules are the union of the agent's, the step's, the run's and the
team's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

MCP_UNMARKED = "mcp_unmarked"
OUTCOMES = ("reject", "approve", "fail")
PATTERN_RE = re.compile(r"^[A-Za-z0-9_\-*?\[\]!]{1,200}$")
MAX_ENTRIES = 100
MAX_DEADLINE_S = 30 * 86400
# Never gated: asking a person is itself the pause.
UNGATED = frozenset({"ask_human"})


@dataclass(frozen=True)
class Rule:
    pattern: str
    deadline_s: int | None = None
    default: str | None = None
    reason: str = ""
    source: str = ""  # agent | workflow step | run | team

    def matches(self, name: str, *, mcp: bool, read_only: bool) -> bool:
        if self.pattern == MCP_UNMARKED:
            return mcp and not read_only
        return fnmatchcase(name, self.pattern)

    def describe(self, name: str) -> str:
        if self.reason:
            return self.reason
        what = ("every MCP tool not marked read-only" if self.pattern == MCP_UNMARKED
                else name if self.pattern == name else f"tools matching {self.pattern}")
        return f"the {self.source} policy requires approval for {what}"


def entry_problem(entry: Any) -> str | None:
    """Why an entry of an approval list is unusable (None when it is fine)."""
    if isinstance(entry, str):
        return None if PATTERN_RE.match(entry) else (
            f"{entry!r} is not a tool name or pattern (letters, digits, _ - and the wildcards * ? [ ])")
    if not isinstance(entry, dict):
        return f"{entry!r}: an entry is a tool name or pattern, or a mapping with tool, deadline_s, default, reason"
    unknown = set(entry) - {"tool", "deadline_s", "default", "reason"}
    if unknown:
        return f"unknown key(s) {', '.join(sorted(map(str, unknown)))} (known: tool, deadline_s, default, reason)"
    tool = entry.get("tool")
    if not isinstance(tool, str) or not PATTERN_RE.match(tool):
        return f"tool: {tool!r} is not a tool name or pattern"
    deadline = entry.get("deadline_s")
    if deadline is not None and (not isinstance(deadline, int) or isinstance(deadline, bool)
                                 or not 1 <= deadline <= MAX_DEADLINE_S):
        return f"deadline_s: {deadline!r} must be a whole number of seconds from 1 to {MAX_DEADLINE_S}"
    default = entry.get("default")
    if default is not None and default not in OUTCOMES:
        return f"default: {default!r} must be one of {', '.join(OUTCOMES)}"
    reason = entry.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 300:
        return "reason: a text of at most 300 characters"
    return None


def entries_check(entries: Any) -> list[Any]:
    """An approval list, checked (ValueError naming the first bad entry)."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ValueError("a list of tool names, patterns or mappings")
    if len(entries) > MAX_ENTRIES:
        raise ValueError(f"at most {MAX_ENTRIES} entries")
    for index, entry in enumerate(entries):
        problem = entry_problem(entry)
        if problem:
            raise ValueError(f"entry {index + 1}: {problem}")
    return entries


def rules_of(entries: list[Any] | None, *, source: str) -> list[Rule]:
    rules = []
    for entry in entries or []:
        if isinstance(entry, str):
            rules.append(Rule(pattern=entry, source=source))
        elif isinstance(entry, dict):
            rules.append(Rule(pattern=entry["tool"], deadline_s=entry.get("deadline_s"),
                              default=entry.get("default"), reason=entry.get("reason") or "", source=source))
    return rules


def policy_rules(*, agent: list[Any] | None, run: list[Any] | None, team: list[Any] | None,
                 step: list[Any] | None = None) -> list[Rule]:
    """Every rule that applies to a session: the agent's first, then the workflow step's, the run's, the team's."""
    return [*rules_of(agent, source="agent"), *rules_of(step, source="workflow step"), *rules_of(run, source="run"),
            *rules_of(team, source="team")]


def rule_for(rules: list[Rule], name: str, *, mcp: bool = False, read_only: bool = False) -> Rule | None:
    """The first rule that makes a call of ``name`` wait for approval, or None."""
    if name in UNGATED:
        return None
    for rule in rules:
        if rule.matches(name, mcp=mcp, read_only=read_only):
            return rule
    return None
