"""A workflow edited as a form — name, inputs, trigger, its steps and loops as rows — beside its step graph.

Built like the agent form (:mod:`mas_core.admin_fields_editor`): the markdown
is composed from the fields, keys without a field (a step's output schemas,
unknown keys, the body) are kept, and it is saved through the markdown
editor's path. An error about one step lands on that step's cell: an unknown
agent under its agent, a cycle under the dependencies of the cycle's first
step. ``mas_admin/workflow_form.js`` draws the step graph beside the rows with
the monitor's drawing code (``monitor/dag.js``) and redraws it as they change.
"""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from mas_core.admin_base import teams_with
from mas_core.admin_fields_editor import Column, FieldsEditorForm, Row, RowsField, rows_from_spec, spec_set
from mas_core.definitions.markdown import DefinitionError
from agents_app.execution.agents import agent_slugs
from workflows_app.templates import workflow_template, workflow_templates

MAX_AGENT_SUGGESTIONS = 500

STEP_COLUMNS = (
    Column("id", "Id", help="Letters, digits, - and _; other steps name it in their dependencies."),
    Column("agent", "Agent", help="An agent of the team (its slug)."),
    Column("prompt", "Prompt", kind="textarea",
           help="{input} names a workflow input, {step.output} an output of a step this one depends on."),
    Column("depends_on", "Depends on", kind="list", help="Step ids, comma separated."),
    Column("outputs", "Outputs", kind="list", help="Names, comma separated."),
    Column("gate", "Approval gate", kind="checks",
           choices=(("start", "a person approves before it starts"), ("outputs", "and its outputs"))),
    Column("on_failure", "On failure", kind="choice",
           choices=(("", "as the workflow"), ("stop", "stop the workflow"), ("continue", "continue"))),
    Column("max_retries", "Retries", kind="int", attrs=(("min", "0"), ("max", "10"))),
)
LOOP_COLUMNS = (
    Column("steps", "Steps", kind="list", help="The steps that repeat together, comma separated."),
    Column("until", "Until", help='Ends the loop: <step>.<output> == "text" (or !=, or contains).'),
    Column("max_rounds", "Rounds at most", kind="int", attrs=(("min", "1"), ("max", "20"))),
)
# Form field → the top-level key it edits. Fields named like a column of the row are prefixed.
SPEC_FIELDS = {"workflow_name": "name", "workflow_description": "description", "inputs": "inputs",
               "workflow_trigger": "trigger", "schedule": "schedule", "channel": "channel",
               "on_failure": "on_failure"}
FIELD_OF_KEY = {key: field for field, key in SPEC_FIELDS.items()}
ROWS = {"steps": STEP_COLUMNS, "loops": LOOP_COLUMNS}
ROW_ERROR = re.compile(r"^(?P<rows>steps|loops)(?:\.(?P<dot>\d+)|\[(?P<bracket>\d+)\])(?:\.(?P<key>\w+))?")
CYCLE = re.compile(r"^cycle: (?P<first>[^ ]+) → ")
JOINED = re.compile(r"; (?=(?:steps|loops)(?:\[\d+\]\.\w+)?: )")  # the graph checks join their errors so


class WorkflowForm(FieldsEditorForm):
    """Fields for a workflow's frontmatter, its steps and loops as rows; the whole markdown as the alternative.

    A new workflow may start from a template: ``?template=<slug>`` fills in both views.
    """

    workflow_name = forms.CharField(max_length=200, required=False, label="Name")
    workflow_description = forms.CharField(required=False, label="Description", strip=False,
                                           widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))
    inputs = forms.CharField(required=False, help_text="What a run asks for, comma separated: {name} in prompts.")
    workflow_trigger = forms.ChoiceField(required=False, label="Trigger", choices=[
        ("manual", "manual"), ("schedule", "schedule"), ("channel", "channel")])
    schedule = forms.CharField(required=False, max_length=100, help_text="Cron, when the trigger is schedule.")
    channel = forms.CharField(required=False, max_length=200, help_text="When the trigger is channel.")
    on_failure = forms.ChoiceField(required=False, label="When a step fails", choices=[
        ("stop", "stop the workflow"), ("continue", "continue with the steps that do not need it")])
    steps = RowsField(columns=STEP_COLUMNS, noun="step", help_text=(
        "The graph beside the steps follows them as they are edited: a level per round of steps that run together, "
        "an edge per dependency."))
    loops = RowsField(columns=LOOP_COLUMNS, noun="loop", help_text="Groups of steps that repeat, each bounded.")
    composed_fields = (*SPEC_FIELDS, "steps", "loops")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rows_posted: dict[str, list[int]] = {"steps": [], "loops": []}  # the spec's items → their row numbers
        self.step_ids: list[str] = []  # as composed (add_error takes the field out of cleaned_data)
        if not self.instance.pk:
            field = self.fields["markdown"]
            links = format_html_join(" · ", '<a href="?template={}">{}</a>',
                                     ((t.slug, t.name) for t in workflow_templates()))
            field.help_text = format_html("{} Start from a template: {}.", field.help_text, links)
            self.fields["editor"].help_text = format_html("{} Start from a template: {}.",
                                                          self.fields["editor"].help_text, links)
        spec = self.current["spec"]
        for field, key in SPEC_FIELDS.items():
            value = spec.get(key)
            if field == "inputs":
                value = ", ".join(str(name) for name in value) if isinstance(value, list) else ""
            self.fields[field].initial = value
        self.fields["workflow_trigger"].initial = spec.get("trigger") or "manual"
        self.fields["on_failure"].initial = spec.get("on_failure") or "stop"
        self.fields["steps"].initial = rows_from_spec(STEP_COLUMNS, spec.get("steps"),
                                                      was=lambda _, step: str(step.get("id", "")))
        self.fields["loops"].initial = rows_from_spec(LOOP_COLUMNS, spec.get("loops"),
                                                      was=lambda position, _: str(position))
        teams = [self.instance.team] if self.instance.pk else list(
            teams_with(self.request, self.model_admin.edit_capability)[:20])
        agents = sorted(agent_slugs(team_ids=[team.pk for team in teams]))[:MAX_AGENT_SUGGESTIONS]
        self.fields["steps"].widget.datalists = {"agent": agents}
        self.fields["steps"].widget.aside = mark_safe(
            '<figure class="mas-step-graph"><figcaption>The steps as they run: top to bottom</figcaption>'
            '<svg id="mas-step-graph" class="graph" role="img" aria-label="the workflow\'s steps"></svg>'
            '<p class="mas-graph-note help" id="mas-step-graph-note" hidden></p></figure>')

    def new_markdown(self) -> str | None:
        template = workflow_template(self.request.GET.get("template", ""))
        return template.markdown if template is not None else None

    # -- composing the markdown -------------------------------------------------------------------

    def compose_spec(self, cleaned: dict) -> dict[str, Any]:
        spec = dict(self.current["spec"])
        for field, key in SPEC_FIELDS.items():
            value = cleaned.get(field)
            if field == "workflow_name":
                value = value or ""
            elif field == "inputs":
                value = [name.strip() for name in (value or "").split(",") if name.strip()] or None
            elif field == "workflow_description":
                value = (value or "").replace("\r\n", "\n") or None  # a browser sends a textarea's lines as CRLF
            elif (field, value) in {("workflow_trigger", "manual"), ("on_failure", "stop")}:
                value = None  # the default, left out as the canonical form leaves it out
            else:
                value = value or None
            spec_set(spec, key, value)
        kept_steps = {str(step.get("id")): step for step in self.current["spec"].get("steps") or []
                      if isinstance(step, dict)}
        kept_loops = dict(enumerate(loop for loop in self.current["spec"].get("loops") or []))
        spec["steps"] = self._items(cleaned.get("steps") or [], STEP_COLUMNS, lambda row: kept_steps.get(row.was),
                                    "steps")
        loops = self._items(cleaned.get("loops") or [], LOOP_COLUMNS,
                            lambda row: kept_loops.get(int(row.was)) if row.was.isdigit() else None, "loops")
        spec_set(spec, "loops", loops or None)
        return spec

    def _items(self, rows: list[Row], columns, kept, name: str) -> list[dict[str, Any]]:
        """One spec item a row: the one it was (keys without a cell kept), its cells' values set over it."""
        items = []
        for row in rows:
            before = kept(row)
            item = dict(before) if isinstance(before, dict) else {}
            for column in columns:
                value = row.values.get(column.key)
                had = item.get(column.key)
                if column.kind == "checks" and isinstance(had, list) and sorted(had) == sorted(value or []):
                    value = had  # the same boxes ticked: the order the file had stays
                empty = value in (None, "", []) and column.key not in ("id", "agent")
                spec_set(item, column.key, None if empty else value)
            items.append(item)
        self.rows_posted[name] = [row.index for row in rows]
        if name == "steps":
            self.step_ids = [str(item.get("id") or "") for item in items]
        return items

    # -- errors on their field --------------------------------------------------------------------

    def report_on_field(self, error: DefinitionError) -> bool:
        key = error.field or ""
        head = key.split(".")[0].split("[")[0]
        if head in FIELD_OF_KEY:
            self.add_error(FIELD_OF_KEY[head], error.message)
            return True
        if head not in ROWS:
            return False
        for part_key, message in self._parts(key, error.message):
            self._row_error(part_key, message)
        return True

    @staticmethod
    def _parts(key: str, message: str) -> list[tuple[str, str]]:
        """The graph checks report several errors as one ('a: …; steps[1].agent: …'): split them again."""
        first, *rest = JOINED.split(message)
        parts = [(key, first)]
        for text in rest:
            where, _, what = text.partition(": ")
            parts.append((where, what))
        return parts

    def _row_error(self, key: str, message: str) -> None:
        match = ROW_ERROR.match(key)
        if match is None:
            rows, position, column_key = key.split(".")[0], None, None
            cycle = CYCLE.match(message)
            if rows == "steps" and cycle:
                # A cycle is about dependencies: shown under those of its first step.
                if cycle["first"] in self.step_ids:
                    position, column_key = self.step_ids.index(cycle["first"]), "depends_on"
        else:
            rows = match["rows"]
            position = int(match["dot"] or match["bracket"])
            column_key = match["key"]
        field = rows if rows in ROWS else "steps"
        noun = self.fields[field].noun
        posted = self.rows_posted.get(field, [])
        if position is None or position >= len(posted):
            self.add_error(field, message)
            return
        columns = {column.key: column for column in ROWS[field]}
        column = columns.get(column_key or "")
        where = f"{noun.capitalize()} {position + 1}"
        if field == "steps":
            step_id = self.step_ids[position]
            where += f" ({step_id})" if step_id else ""
        if column is None:
            self.add_error(field, f"{where}, {column_key or 'the ' + noun}: {message} — edit it in the markdown.")
            return
        self.fields[field].widget.cell_errors.setdefault((posted[position], column.key), []).append(message)
        self.add_error(field, f"{where}, {column.label.lower()}: {message}")
