"""An agent edited as a form — name, model, tools, approvals, limits, prompt — with its markdown one click away.

The form composes the markdown from its fields (keys it has no field for —
custom tools, examples, output schema, unknown keys — are kept as they were)
and saves it through the same path as the markdown editor (see
:mod:`mas_core.admin_fields_editor`, shared with the workflow form). The
prompt has a markdown preview beside it (``mas_admin/markdown_preview.js``).
The approval rules are rows (``approval`` in the markdown: a tool name or
pattern, or a mapping with its own deadline, default outcome and reason),
checked by the same code as the markdown's (``approvals.policy``).
"""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.utils.html import format_html

from agents_app.approvals.policy import MAX_DEADLINE_S, MCP_UNMARKED, OUTCOMES
from mas_core.admin_fields_editor import Column, FieldsEditorForm, Row, RowsField, rows_from_spec, spec_get, spec_set
from mas_core.admin_base import teams_with
from mas_core.definitions.markdown import DefinitionError
from agents_app.models import ProviderModel, Skill, Team
from tools_app.builtin import BUILTIN_TOOL_CLASSES
from tools_app.catalog import BUILTIN_TOOLS, SAFE_DEFAULT_TOOLS
from tools_app.models import CustomTool, MCPServer

TIERS = ("small", "medium", "large")
MAX_CHOICES = 500  # tools, servers, skills or models offered in one list

# Form field → the spec key (dotted for nested keys) it edits; the order of the form. Fields named like a
# column of the row are prefixed: the admin's ModelForm would copy them onto the row otherwise.
SPEC_FIELDS: dict[str, str] = {
    "agent_name": "name",
    "agent_description": "description",
    "agent_model": "model",
    "agent_tier": "tier",
    "escalation": "escalation",
    "temperature": "temperature",
    "max_tokens": "max_tokens",
    "tools": "tools",
    "mcp_servers": "mcp_servers",
    "skills": "skills",
    "max_steps": "limits.max_steps",
    "max_tool_calls": "limits.max_tool_calls",
    "timeout_s": "limits.timeout_s",
    "memory_enabled": "memory.enabled",
    "memory_k": "memory.k",
    "expose": "expose",
}
FIELD_OF_KEY = {key: field for field, key in SPEC_FIELDS.items()}
FIELD_OF_KEY["approval"] = "approval"

# An approval rule as a row: the keys of a mapping entry (agents_app.approvals.policy.entry_problem).
APPROVAL_COLUMNS = (
    Column("tool", "Tool", help=f"A tool name or a pattern (mcp__github__*); {MCP_UNMARKED}: every MCP tool "
                                "not marked read-only."),
    Column("deadline_s", "Deadline (s)", kind="int", attrs=(("min", "1"), ("max", str(MAX_DEADLINE_S))),
           help="Blank: the team's."),
    Column("default", "At the deadline", kind="choice",
           choices=(("", "the team's default"), *((outcome, outcome) for outcome in OUTCOMES))),
    Column("reason", "Reason", help="Shown to the person who decides."),
)
APPROVAL_KEYS = tuple(column.key for column in APPROVAL_COLUMNS)
# "entry 2: deadline_s: 0 must be …" (approvals.policy.entries_check): the row and the cell it is about.
APPROVAL_ERROR = re.compile(rf"^entry (?P<number>\d+): (?:(?P<key>{'|'.join(APPROVAL_KEYS)}): )?(?P<message>.+)$",
                            re.DOTALL)


def approval_values(entry: Any) -> dict[str, Any]:
    """An entry of ``approval`` as its row's typed values."""
    entry = {"tool": entry} if isinstance(entry, str) else entry if isinstance(entry, dict) else {}
    return {"tool": entry.get("tool") or "", "deadline_s": entry.get("deadline_s"), "default": entry.get("default"),
            "reason": entry.get("reason") or ""}


def approval_entry(values: dict[str, Any]) -> str | dict[str, Any]:
    """A row as an entry: the tool name alone when nothing else is set, as the markdown says it most often."""
    entry = {key: values[key] for key in APPROVAL_KEYS if values.get(key) not in (None, "")}
    return entry["tool"] if set(entry) == {"tool"} else entry


class ToolCheckboxes(forms.CheckboxSelectMultiple):
    """Each tool with its description under its name, all shown up front."""

    def __init__(self, *args, descriptions: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.descriptions = descriptions or {}
        self.attrs.setdefault("class", "mas-tools")

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        option["attrs"].pop("class", None)  # the list's class, not each box's
        description = self.descriptions.get(str(value), "")
        if description:
            option["label"] = format_html("{} <span class='mas-tool-description'>{}</span>", label, description)
        return option


def _first_line(text: str, limit: int = 160) -> str:
    line = (text or "").strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _builtin_descriptions() -> dict[str, str]:
    return {name: _first_line(getattr(cls, "description", "")) for name, cls in BUILTIN_TOOL_CLASSES.items()}


class AgentForm(FieldsEditorForm):
    """Fields for an agent's frontmatter and prompt; the whole markdown as the alternative."""

    agent_name = forms.CharField(max_length=200, required=False, label="Name")
    agent_description = forms.CharField(required=False, label="Description",
                                        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))
    agent_model = forms.ChoiceField(required=False, label="Model",
                                    help_text="A model of the team's providers, or none to choose by tier.")
    agent_tier = forms.ChoiceField(required=False, label="Tier", choices=[("", "—"), *((tier, tier) for tier in TIERS)])
    escalation = forms.CharField(
        required=False, help_text="Rungs tried in order after failed attempts: tiers or provider:model, comma separated.")
    temperature = forms.FloatField(required=False, min_value=0, max_value=2)
    max_tokens = forms.IntegerField(required=False, min_value=1, max_value=1_000_000)
    tools = forms.MultipleChoiceField(required=False, help_text=(
        "The tools the agent may call. Leaving the safe default set ticked keeps the definition's default."))
    mcp_servers = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple, label="MCP servers")
    skills = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    max_steps = forms.IntegerField(required=False, min_value=1, max_value=1000, help_text="Default 20.")
    max_tool_calls = forms.IntegerField(required=False, min_value=0, max_value=10000, help_text="Default 50.")
    timeout_s = forms.IntegerField(required=False, min_value=1, max_value=86400, label="Timeout (s)",
                                   help_text="Default 600.")
    approval = RowsField(columns=APPROVAL_COLUMNS, noun="rule", label="Approvals", help_text=(
        "Tool calls that wait for a person's approval (the team's rules apply as well). A deadline and a default "
        "outcome here override the team's for what the rule matches."))
    memory_enabled = forms.BooleanField(required=False, label="Long-term memory")
    expose = forms.BooleanField(required=False, label="Reachable through the doors", help_text=(
        "The team's tokens may call it through the OpenAI-compatible endpoint (/v1/chat/completions, "
        "/v1/responses)."))
    memory_k = forms.IntegerField(required=False, min_value=1, max_value=100, label="Memories recalled (k)",
                                  help_text="Default 5.")
    prompt = forms.CharField(
        required=False, strip=False, label="System prompt",
        widget=forms.Textarea(attrs={"rows": 16, "cols": 100, "class": "mas-body", "spellcheck": "true"}),
        help_text="Markdown: the agent's instructions. Preview shows it rendered; Side by side, both.",
    )
    composed_fields = (*SPEC_FIELDS, "approval", "prompt")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.approval_rows: list[int] = []  # the rows posted, in the order of the entries they composed
        teams = self._teams()
        self._choices(teams)
        spec = self.current["spec"]
        for field, key in SPEC_FIELDS.items():
            value = spec_get(spec, key)
            if field == "escalation":
                value = ", ".join(value or [])
            elif field == "tools":
                value = list(SAFE_DEFAULT_TOOLS) if value is None else value
            elif field == "mcp_servers":
                value = [entry if isinstance(entry, str) else entry.get("name") for entry in value or []
                         if isinstance(entry, (str, dict))]
            elif field == "skills":
                value = self._skill_slugs(teams, value or [])
            self.fields[field].initial = value
        entries = spec.get("approval") if isinstance(spec.get("approval"), list) else []
        self.fields["approval"].initial = rows_from_spec(
            APPROVAL_COLUMNS, [{key: value for key, value in approval_values(entry).items() if value is not None}
                               for entry in entries], was=lambda position, _: str(position))
        self.fields["prompt"].initial = self.current["body"]

    # -- what the form starts from ---------------------------------------------------------------

    def _teams(self) -> list[Team]:
        if self.instance.pk:
            return [self.instance.team]
        return list(teams_with(self.request, self.model_admin.edit_capability)[:20])

    def _choices(self, teams: list[Team]) -> None:
        several = len(teams) > 1

        def label(team: Team, text: str) -> str:
            return f"{text} ({team.slug})" if several else text

        models = (ProviderModel.objects.filter(provider__team__in=teams).select_related("provider", "provider__team")
                  .order_by("provider__slug", "name")[:MAX_CHOICES])
        model_choices = [("", "— by tier —")] + [
            (f"{m.provider.slug}:{m.name}", label(m.provider.team, f"{m.provider.name}: {m.name}"
                                                  + (f" ({m.tier})" if m.tier else "")))
            for m in models]
        current_model = self.current["spec"].get("model")
        if current_model and current_model not in {value for value, _ in model_choices}:
            model_choices.append((current_model, f"{current_model} (not a model of the team's providers)"))
        self.fields["agent_model"].choices = model_choices

        custom = list(CustomTool.objects.filter(team__in=teams).select_related("team").order_by("name")[:MAX_CHOICES])
        descriptions = {**_builtin_descriptions(), **{t.name: _first_line(t.description) for t in custom}}
        tool_choices = [(name, name) for name in BUILTIN_TOOLS]
        tool_choices += [(t.name, label(t.team, f"{t.name} (custom)")) for t in custom if t.name not in BUILTIN_TOOLS]
        self.fields["tools"].choices = tool_choices
        self.fields["tools"].widget = ToolCheckboxes(descriptions=descriptions, choices=tool_choices)

        servers = MCPServer.objects.filter(team__in=teams).select_related("team").order_by("slug")[:MAX_CHOICES]
        server_choices = [(s.slug, label(s.team, f"{s.name} ({s.transport})")) for s in servers]
        for entry in self.current["spec"].get("mcp_servers") or []:
            name = entry if isinstance(entry, str) else entry.get("name") if isinstance(entry, dict) else None
            if isinstance(name, str) and name not in {value for value, _ in server_choices}:
                server_choices.append((name, f"{name} (missing)"))
        self.fields["mcp_servers"].choices = server_choices

        skills = Skill.objects.filter(team__in=teams).select_related("team").order_by("slug")[:MAX_CHOICES]
        skill_choices = [(s.slug, label(s.team, f"{s.name}: {_first_line(s.description, 80)}")) for s in skills]
        # A skill the markdown names that the team has not (yet) stays chosen, as a missing MCP server does:
        # leaving it out of the choices dropped it from the agent at the form's next save.
        known = {s.slug for s in skills} | {s.name for s in skills}
        for name in self.current["spec"].get("skills") or []:
            if isinstance(name, str) and name not in known:
                skill_choices.append((name, f"{name} (missing)"))
                known.add(name)
        self.fields["skills"].choices = skill_choices
        self.fields["skills"].widget = ToolCheckboxes(choices=self.fields["skills"].choices)
        self.fields["mcp_servers"].widget = ToolCheckboxes(choices=server_choices)
        # An empty list says why it is empty rather than showing a bare label.
        if not server_choices:
            self.fields["mcp_servers"].help_text = "The team has no MCP servers yet."
        if not self.fields["skills"].choices:
            self.fields["skills"].help_text = "The team has no skills yet."
        # What an approval rule's tool may name: every tool, every tool of a server, and the MCP keyword.
        self.fields["approval"].widget.datalists = {"tool": [
            *(name for name, _ in tool_choices), MCP_UNMARKED, *(f"mcp__{slug}__*" for slug, _ in server_choices)]}

    def _skill_slugs(self, teams: list[Team], names: list[str]) -> list[str]:
        rows = Skill.objects.filter(team__in=teams).values_list("slug", "name")
        by_name = {name: slug for slug, name in rows}
        return [by_name.get(name, name) for name in names]

    # -- composing the markdown -------------------------------------------------------------------

    def compose_spec(self, cleaned: dict) -> dict[str, Any]:
        return self._spec_from(cleaned)

    def compose_body(self, cleaned: dict) -> str:
        return cleaned.get("prompt") or ""

    def _spec_from(self, cleaned: dict) -> dict[str, Any]:
        spec = dict(self.current["spec"])
        for key in ("limits", "memory"):
            if isinstance(spec.get(key), dict):
                spec[key] = dict(spec[key])
        for field, key in SPEC_FIELDS.items():
            value = cleaned.get(field)
            if field == "escalation":
                value = [rung.strip() for rung in (value or "").split(",") if rung.strip()] or None
            elif field == "tools":
                chosen = list(value or [])
                # The default set, unchanged, stays "the default" rather than becoming a list.
                if self.current["spec"].get("tools") is None and set(chosen) == set(SAFE_DEFAULT_TOOLS):
                    value = None
                else:
                    value = chosen
            elif field == "mcp_servers":
                kept = {(e.get("name") if isinstance(e, dict) else e): e
                        for e in self.current["spec"].get("mcp_servers") or [] if isinstance(e, (str, dict))}
                value = [kept.get(slug, slug) for slug in value or []] or None  # narrowed entries stay as they were
            elif field == "skills":
                value = list(value or []) or None
            elif field in ("agent_name", "agent_description"):
                value = value or ("" if field == "agent_name" else None)
            elif field in ("memory_enabled", "expose"):
                value = True if value else None
            elif value == "":
                value = None
            spec_set(spec, key, value)
        for key in ("limits", "memory"):
            if spec.get(key) == {}:
                spec.pop(key)
        spec_set(spec, "approval", self._approval_from(cleaned.get("approval") or []) or None)
        return spec

    def _approval_from(self, rows: list[Row]) -> list[str | dict[str, Any]]:
        """The entries the rows say; a row unchanged keeps its entry as the markdown wrote it."""
        before = self.current["spec"].get("approval")
        before = before if isinstance(before, list) else []
        entries = []
        for row in rows:
            was = int(row.was) if row.was.isdigit() and int(row.was) < len(before) else None
            if was is not None and approval_values(before[was]) == approval_values(row.values):
                entries.append(before[was])
            else:
                entries.append(approval_entry(row.values))
        self.approval_rows = [row.index for row in rows]
        return entries

    def report_on_field(self, error: DefinitionError) -> bool:
        key = error.field or ""
        if key.split(".")[0].split("[")[0] == "approval":
            self._approval_error(error.message)
            return True
        field = FIELD_OF_KEY.get(key) or FIELD_OF_KEY.get(key.split("[", 1)[0]) or FIELD_OF_KEY.get(key.split(".")[0])
        if key and field is None and key.split(".")[0] in {"limits", "memory"}:
            field = FIELD_OF_KEY.get(".".join(key.split(".")[:2]))
        if field is None:
            return False
        self.add_error(field, error.message)
        return True

    def _approval_error(self, message: str) -> None:
        """An error of ``approval``: under the cell it is about when it names one, and in the field's list."""
        match = APPROVAL_ERROR.match(message)
        number = int(match["number"]) if match else 0
        if not match or not 1 <= number <= len(self.approval_rows):
            self.add_error("approval", message)
            return
        key = match["key"] or "tool"
        column = next(column for column in APPROVAL_COLUMNS if column.key == key)
        self.fields["approval"].widget.cell_errors.setdefault((self.approval_rows[number - 1], key), []).append(
            match["message"])
        self.add_error("approval", f"Rule {number}, {column.label.lower()}: {match['message']}")
