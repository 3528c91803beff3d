"""A definition edited as a form, its markdown one click away: what the agent and workflow forms share.

A :class:`FieldsEditorForm` composes the markdown from its fields — keys it has
no field for are kept as they were, and so is the body unless the form edits
it — and saves it through the same path as the markdown editor, so
validation, versions and files are the same. A validation error lands on the
field it is about. Posting ``editor=markdown`` (or no ``editor``) saves the
textarea instead. :class:`FieldsEditorAdmin` lays the page out: the editor
choice, the form's fieldsets, then the markdown, shown one at a time by
``mas_admin/definition_form.js``.

Switching from one view to the other carries what was typed and not saved:
the page posts the form to the admin's ``switch-editor/`` view, which
composes the markdown from the fields (as a save would, without validating
the definition) or reads the markdown into the fields' values (validated as
a save would: an error keeps the markdown view). Nothing is saved there. A
form posted from the fields starts from the page's markdown, so keys without
a field that were edited in the markdown are kept too.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, JsonResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from mas_core.admin_base import DefinitionForm, describe_error
from mas_core.definitions.kinds import Kind
from mas_core.definitions.markdown import DefinitionError, load_frontmatter, render_definition, split_frontmatter
from mas_core.definitions.services import definition_parse, definition_validate
from mas_core.models import Team

# -- spec keys ------------------------------------------------------------------------------------------


def spec_get(data: dict[str, Any], key: str) -> Any:
    """The value at a dotted ``key`` (``limits.max_steps``), or None."""
    for part in key.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def spec_set(data: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted ``key``; None removes it (the definition's default applies)."""
    *parents, last = key.split(".")
    for part in parents:
        if not isinstance(data.get(part), dict):
            data[part] = {}
        data = data[part]
    if value is None:
        data.pop(last, None)
    else:
        data[last] = value


# -- reading a definition's markdown into a form ---------------------------------------------------------

PLACEHOLDER_NAME = "unnamed"  # stands in, while validating, for the name a new definition has not got yet


def definition_read(*, kind: Kind, team: Team, text: str) -> dict[str, Any]:
    """The spec, unknown keys and body of ``text``, validated for ``team`` as a save validates them.

    One thing is let through: a blank name (a new definition's, not typed yet), read as ``""`` — the save
    asks for it. Raises :class:`DefinitionError` otherwise.
    """
    try:
        parsed = definition_parse(kind=kind, team=team, text=text)
    except DefinitionError as error:
        if error.field != "name":
            raise
        yaml_text, body = split_frontmatter(text, path="")
        data, _, _ = load_frontmatter(yaml_text, path="")
        name = data.get("name")
        if not (name is None or (isinstance(name, str) and not name.strip())):
            raise
        parsed = definition_validate(kind=kind, team=team, data={**data, "name": PLACEHOLDER_NAME}, body=body)
        spec = parsed.spec_data()
        spec["name"] = ""
        return {"spec": spec, "extra": dict(parsed.extra), "body": parsed.body}
    return {"spec": parsed.spec_data(), "extra": dict(parsed.extra), "body": parsed.body}


def _jsonable(value: Any) -> Any:
    """A field's value as the page's script sets it (rows as ``{was, values}``)."""
    if isinstance(value, Row):
        return {"was": value.was, "values": value.values}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


# -- the form -------------------------------------------------------------------------------------------


class FieldsEditorForm(DefinitionForm):
    """A definition's fields, with its whole markdown as the alternative editor.

    Subclasses set ``composed_fields`` (the fields the markdown is composed
    from), implement :meth:`compose_spec`, and map a validation error's key to
    a field in :meth:`report_on_field`.
    """

    editor = forms.ChoiceField(
        choices=[("fields", "the form"), ("markdown", "the markdown")], required=False,
        widget=forms.RadioSelect(attrs={"class": "mas-editor-choice"}), label="Edit with",
        help_text="The form and the markdown are two views of one file; the one chosen here is saved.",
    )
    composed_fields: tuple[str, ...] = ()

    def __init__(self, *args, current: dict[str, Any] | None = None, **kwargs):
        """``current``: the definition the fields show and compose over (spec, extra, body); by default the
        saved one, or the markdown posted with the fields."""
        super().__init__(*args, **kwargs)
        self.fields["markdown"].required = False
        self.fields["editor"].initial = "fields"
        if not self.instance.pk:
            start = self.new_markdown()
            if start is not None:
                self.fields["markdown"].initial = start
        self.fields["editor"].widget.attrs["data-switch-url"] = self.model_admin.switch_url(self.instance)
        self.current = current if current is not None else self._current_data()

    def new_markdown(self) -> str | None:
        """Hook: the markdown a new definition starts from (None: the admin's template)."""
        return None

    def _current_data(self) -> dict[str, Any]:
        posted = self._posted_markdown_data()
        if posted is not None:
            return posted
        if self.instance.pk:
            return {"spec": dict(self.instance.spec or {}), "extra": dict(self.instance.extra or {}),
                    "body": self.instance.body}
        # The template of a new definition is not valid yet (no name): read it without validating it.
        return self._template_data(self.fields["markdown"].initial or "")

    def _posted_markdown_data(self) -> dict[str, Any] | None:
        """The markdown posted beside the fields, read: what the page showed last in its markdown view (keys
        without a field may have been edited there). None when there is none, or it does not read."""
        if not (self.is_bound and self.editing_fields):
            return None
        text = self.data.get(self.add_prefix("markdown"))
        team = self.posted_team()
        if not isinstance(text, str) or not text.strip() or team is None:
            return None
        if len(text.encode("utf-8")) > settings.MAS_MAX_DEFINITION_BYTES:
            return None
        try:
            return definition_read(kind=self.model_admin.kind, team=team, text=text)
        except DefinitionError:
            # The page never leaves the markdown view with a markdown that does not read; the template of a
            # new definition (blank fields) does not validate and is read as the template is.
            return None if self.instance.pk else self._template_data(text)

    @staticmethod
    def _template_data(text: str) -> dict[str, Any]:
        try:
            yaml_text, body = split_frontmatter(text, path="")
            data, _, _ = load_frontmatter(yaml_text, path="")
        except DefinitionError:
            return {"spec": {}, "extra": {}, "body": ""}
        return {"spec": {key: value for key, value in data.items() if value not in (None, "")}, "extra": {},
                "body": body.strip()}

    def posted_team(self) -> Team | None:
        """The definition's team: its own, or the one chosen on the add page (among those offered)."""
        if self.instance.pk:
            return self.instance.team
        field = self.fields.get("team")
        if field is None or not self.is_bound:
            return None
        try:
            return field.clean(field.widget.value_from_datadict(self.data, self.files, self.add_prefix("team")))
        except forms.ValidationError:
            return None

    def clean(self):
        if not self.editing_fields:
            # The form's fields stay in the page, hidden, while the markdown is edited: they are not saved.
            for name in self.composed_fields:
                self._errors.pop(name, None)
        return super().clean()

    @property
    def editing_fields(self) -> bool:
        return self.data.get(self.add_prefix("editor")) == "fields"

    def submitted_markdown(self, cleaned: dict) -> str | None:
        if not self.editing_fields:
            text = cleaned.get("markdown")
            if not text:
                self.add_error("markdown", "This field is required.")
                return None
            return text
        if any(field in self.errors for field in self.composed_fields):
            return None
        text = self.compose_markdown(cleaned)
        cleaned["markdown"] = text
        return text

    def compose_markdown(self, cleaned: dict) -> str:
        """The file the fields' ``cleaned`` values make, over the current definition."""
        return render_definition(spec=self.compose_spec(cleaned), extra=self.current["extra"],
                                 body=self.compose_body(cleaned))

    # -- switching views without saving ------------------------------------------------------------

    def markdown_of_fields(self) -> tuple[str | None, list[str]]:
        """The markdown the posted fields compose, or the errors that keep them from composing one.

        Only the fields are checked, not the definition: an error of the definition (an unknown agent, a
        cycle) may be easier to fix in the markdown, and the save reports it. A valid definition is shown as
        a save writes it.
        """
        cleaned, errors = {}, []
        for name in self.composed_fields:
            field = self.fields[name]
            try:
                cleaned[name] = field.clean(self[name].data)
            except forms.ValidationError as error:
                errors += [f"{self[name].label}: {message}" for message in error.messages]
        if errors:
            return None, errors
        text = self.compose_markdown(cleaned)
        team = self.posted_team()
        try:
            # As a save would write it (keys in their order, defaults left out) when it is valid already.
            read = definition_read(kind=self.model_admin.kind, team=team, text=text) if team is not None else None
        except DefinitionError:
            read = None
        if read is not None:
            text = render_definition(spec=read["spec"], extra=read["extra"], body=read["body"])
        return text, []

    def fields_of_markdown(self) -> tuple[dict[str, Any] | None, list[str]]:
        """What each field shows for the posted markdown (``values``, and the ``choices`` of the fields
        that have some, which may name what only this markdown names), or the errors that keep it from
        being read."""
        text = self.data.get(self.add_prefix("markdown")) or ""
        try:
            self.fields["markdown"].clean(text)
        except forms.ValidationError as error:
            return None, [f"Markdown: {message}" for message in error.messages]
        team = self.posted_team()
        if team is None:
            return None, ["Choose the team first: the markdown is read against its definitions."]
        try:
            current = definition_read(kind=self.model_admin.kind, team=team, text=text)
        except DefinitionError as error:
            return None, [f"{describe_error(error)} — fix it in the markdown first."]
        shown = type(self)(instance=self.instance, current=current, initial={"team": team.pk})
        values, choices = {}, {}
        for name in self.composed_fields:
            values[name] = _jsonable(shown[name].value())
            if getattr(shown.fields[name], "choices", None) is not None and not isinstance(
                    shown.fields[name], RowsField):
                choices[name] = [[str(value), str(label)] for value, label in shown.fields[name].choices]
        return {"values": values, "choices": choices}, []

    def compose_spec(self, cleaned: dict) -> dict[str, Any]:
        """The spec the fields say (the agent's and the workflow's forms each compose their own)."""
        raise NotImplementedError(f"{type(self).__name__} must say how its fields compose a spec")

    def compose_body(self, cleaned: dict) -> str:
        """The body saved: the one the definition had, unless a subclass edits it."""
        return self.current["body"]

    def report_on_field(self, error: DefinitionError) -> bool:
        """Hook: put ``error`` on the field it is about; False when the form has none for it."""
        return False

    def report(self, error: DefinitionError) -> None:
        if not self.editing_fields:
            return super().report(error)
        if not self.report_on_field(error):
            # About a key the form has no field for: fix it in the markdown.
            self.add_error(None, f"{describe_error(error)} — edit it in the markdown.")


class FieldsEditorAdmin:
    """Mixed into a DefinitionAdmin whose form is a :class:`FieldsEditorForm`.

    ``fields_fieldsets`` are the form's fieldsets, shown when "the form" is
    the editor chosen; a user who may only view gets the markdown as text.
    """

    fields_fieldsets: list[tuple[str | None, dict]] = []

    def _switch_url_name(self, *, add: bool) -> str:
        # <app>_<model>_switch (an object's page) and _addswitch (the add page), like Django's own names.
        return "%s_%s_%s" % (self.opts.app_label, self.opts.model_name, "addswitch" if add else "switch")

    def switch_url(self, obj) -> str:
        """Where the page posts itself to switch views (``editor_switch_view``)."""
        if obj is not None and obj.pk:
            return reverse(f"{self.admin_site.name}:{self._switch_url_name(add=False)}", args=[obj.pk])
        return reverse(f"{self.admin_site.name}:{self._switch_url_name(add=True)}")

    def get_urls(self):
        view = self.admin_site.admin_view(self.editor_switch_view)
        return [
            path("add/switch-editor/", view, name=self._switch_url_name(add=True)),
            path("<path:object_id>/switch-editor/", view, name=self._switch_url_name(add=False)),
            *super().get_urls(),
        ]

    def editor_switch_view(self, request, object_id=None):
        """The page's form, posted with ``to=markdown`` or ``to=fields``: the other view's content as JSON
        (``markdown``, or ``values`` and ``choices``), or ``errors`` (400). Nothing is saved."""
        obj = self.get_object(request, unquote(object_id)) if object_id is not None else None
        allowed = self.has_change_permission(request, obj) if obj is not None else self.has_add_permission(request)
        if not allowed:
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        form = self.get_form(request, obj, change=obj is not None)(request.POST, instance=obj)
        to = request.POST.get("to")
        if to == "markdown":
            text, errors = form.markdown_of_fields()
            answer = {"markdown": text}
        elif to == "fields":
            answer, errors = form.fields_of_markdown()
        else:
            answer, errors = None, ["to: markdown or fields"]
        if errors:
            return JsonResponse({"errors": errors}, status=400)
        return JsonResponse(answer)

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if obj is not None and not self.has_change_permission(request, obj):
            return fieldsets
        _, first = fieldsets[0]
        rest = [name for name in first["fields"] if name not in ("team", "markdown")]
        return [
            (None, {"fields": ["team", "editor"]}),
            *((title, {**options, "classes": ["mas-fields-editor", *options.get("classes", ())]})
              for title, options in self.fields_fieldsets),
            ("Markdown", {"classes": ["mas-markdown-editor"], "fields": ["markdown", *rest]}),
            *fieldsets[1:],
        ]


# -- a list of rows edited in the form (a workflow's steps, its loops) ------------------------------------

MAX_ROWS = 200  # rows read from one post; more are refused
ROW_KEY = re.compile(r"^(?P<name>[a-z_]+)-(?P<index>\d{1,4})-(?P<column>[a-z_]+)$")
KINDS = ("text", "textarea", "list", "int", "choice", "checks")


@dataclass(frozen=True)
class Column:
    """One key of a row: shown as an input of ``kind``, saved under ``key``.

    ``list`` is a comma separated list, ``checks`` a set of checkboxes (``choices``).
    """

    key: str
    label: str
    kind: str = "text"
    choices: tuple[tuple[str, str], ...] = ()
    help: str = ""
    attrs: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"column {self.key}: unknown kind {self.kind!r}")

    def raw(self, value: Any) -> Any:
        """A spec value as the form shows it."""
        if self.kind == "checks":
            return [str(item) for item in value] if isinstance(value, list) else []
        if self.kind == "list":
            return ", ".join(str(item) for item in value) if isinstance(value, list) else ""
        return "" if value is None else str(value)


@dataclass
class Row:
    index: int  # the row's number in the post (rows may be removed in the page: gaps are normal)
    was: str  # what identified the row when the page was drawn, to keep the keys the form has no field for
    values: dict[str, Any]


class RowsWidget(forms.Widget):
    """Rows of inputs named ``<name>-<index>-<key>``, one fieldset a row, added and removed by ``rows.js``.

    Errors about one cell are set in ``cell_errors`` by the form and shown under that cell.
    """

    def __init__(self, columns: tuple[Column, ...], *, noun: str, attrs=None):
        super().__init__(attrs)
        self.columns, self.noun = columns, noun
        self.cell_errors: dict[tuple[int, str], list[str]] = {}
        self.datalists: dict[str, list[str]] = {}  # column key -> suggestions
        self.aside = ""  # HTML drawn beside the rows (the workflow's step graph)

    def __deepcopy__(self, memo):
        widget = super().__deepcopy__(memo)
        widget.cell_errors = {}
        widget.datalists = copy.deepcopy(self.datalists, memo)
        return widget

    def value_from_datadict(self, data, files, name) -> list[Row] | None:
        indexes = set()
        for key in data:
            match = ROW_KEY.match(key)
            if match and match["name"] == name:
                indexes.add(int(match["index"]))
        if not indexes and f"{name}-present" not in data:
            return None
        rows = []
        for index in sorted(indexes):
            prefix = f"{name}-{index}-"
            values = {column.key: (data.getlist(prefix + column.key) if column.kind == "checks" and hasattr(data, "getlist")
                                   else data.get(prefix + column.key, [] if column.kind == "checks" else ""))
                      for column in self.columns}
            rows.append(Row(index=index, was=str(data.get(prefix + "was", "")), values=values))
        return rows

    def value_omitted_from_data(self, data, files, name):
        return False

    def _cell(self, name: str, index: int | str, column: Column, value: Any) -> str:
        field_name = f"{name}-{index}-{column.key}"
        html_id = f"id_{field_name}"
        attrs = dict(column.attrs)
        errors = self.cell_errors.get((index, column.key), []) if isinstance(index, int) else []
        invalid = mark_safe(' aria-invalid="true"') if errors else ""
        extra = format_html_join("", ' {}="{}"', attrs.items())
        if column.key in self.datalists:
            extra = format_html('{} list="{}-{}-options"', extra, name, column.key)
        if column.kind == "textarea":
            control = format_html('<textarea name="{}" id="{}" rows="3"{}{}>\n{}</textarea>', field_name, html_id,
                                  extra, invalid, value)
        elif column.kind == "choice":
            options = format_html_join("", '<option value="{}"{}>{}</option>',
                                       ((choice, mark_safe(" selected") if choice == value else "", label)
                                        for choice, label in column.choices))
            control = format_html('<select name="{}" id="{}"{}{}>{}</select>', field_name, html_id, extra, invalid,
                                  options)
        elif column.kind == "checks":
            control = format_html_join(" ", '<label class="mas-check"><input type="checkbox" name="{}" value="{}"{}> {}'
                                            '</label>',
                                       ((field_name, choice, mark_safe(" checked") if choice in value else "", label)
                                        for choice, label in column.choices))
        else:
            kind = "number" if column.kind == "int" else "text"
            control = format_html('<input type="{}" name="{}" id="{}" value="{}"{}{}>', kind, field_name, html_id,
                                  value, extra, invalid)
        label = (format_html('<span class="mas-cell-label">{}</span>', column.label) if column.kind == "checks"
                 else format_html('<label for="{}">{}</label>', html_id, column.label))
        help_text = format_html('<span class="help">{}</span>', column.help) if column.help else ""
        error_list = (format_html('<ul class="errorlist">{}</ul>', format_html_join("", "<li>{}</li>",
                                                                                   ((e,) for e in errors)))
                      if errors else "")
        return format_html('<div class="mas-cell mas-cell-{}">{}{}{}{}</div>', column.key, label, control, error_list,
                           help_text)

    def _row(self, name: str, index: int | str, was: str, values: dict[str, Any], number: str) -> str:
        cells = format_html_join("", "{}", ((self._cell(name, index, column, values.get(column.key, column.raw(None))),)
                                            for column in self.columns))
        return format_html(
            '<fieldset class="mas-row" data-index="{}"><legend>{} <span class="mas-row-number">{}</span>'
            ' <button type="button" class="mas-row-remove" title="Remove this {}">Remove</button></legend>'
            '<input type="hidden" name="{}-{}-was" value="{}">{}</fieldset>',
            index, self.noun.capitalize(), number, self.noun, name, index, was, cells)

    def render(self, name, value, attrs=None, renderer=None):
        rows = [row for row in value or [] if isinstance(row, Row)]
        body = format_html_join("", "{}", ((self._row(name, row.index, row.was, row.values, str(number)),)
                                           for number, row in enumerate(rows, start=1)))
        template = self._row(name, "__index__", "", {}, "")
        datalists = format_html_join(
            "", '<datalist id="{}-{}-options">{}</datalist>',
            ((name, key, format_html_join("", '<option value="{}">', ((option,) for option in options)))
             for key, options in self.datalists.items()))
        next_index = max((row.index for row in rows), default=-1) + 1
        editor = format_html(
            '<div class="mas-rows" data-name="{}" data-next="{}" data-max="{}">'
            '<input type="hidden" name="{}-present" value="1">'
            '<div class="mas-row-list">{}</div><template class="mas-row-template">{}</template>{}'
            '<button type="button" class="mas-row-add">Add a {}</button></div>',
            name, next_index, MAX_ROWS, name, body, template, datalists, self.noun)
        if not self.aside:
            return editor
        return format_html('<div class="mas-rows-beside">{}<div class="mas-aside">{}</div></div>', editor, self.aside)


class RowsField(forms.Field):
    """A list of rows; cleans each cell by its column's kind. Blank rows are dropped."""

    widget = RowsWidget

    def __init__(self, *, columns: tuple[Column, ...], noun: str, **kwargs):
        self.columns, self.noun = columns, noun
        kwargs.setdefault("required", False)
        super().__init__(widget=RowsWidget(columns, noun=noun), **kwargs)

    def to_python(self, value) -> list[Row]:
        if not value:
            return []
        if len(value) > MAX_ROWS:
            raise forms.ValidationError(f"At most {MAX_ROWS} {self.noun}s.")
        rows, problems = [], []
        for number, row in enumerate(value, start=1):
            if all(not row.values.get(column.key) for column in self.columns):
                continue
            typed = {}
            for column in self.columns:
                try:
                    typed[column.key] = self._typed(column, row.values.get(column.key))
                except ValueError as error:
                    self.widget.cell_errors.setdefault((row.index, column.key), []).append(str(error))
                    problems.append(f"{self.noun.capitalize()} {number}, {column.label.lower()}: {error}")
            rows.append(Row(index=row.index, was=row.was, values=typed))
        if problems:
            raise forms.ValidationError(problems)
        return rows

    @staticmethod
    def _typed(column: Column, value: Any) -> Any:
        if column.kind == "checks":
            allowed = {choice for choice, _ in column.choices}
            chosen = [item for item in (value or []) if item]
            unknown = [item for item in chosen if item not in allowed]
            if unknown:
                raise ValueError(f"{unknown[0]} is not one of {', '.join(sorted(allowed))}")
            return [choice for choice, _ in column.choices if choice in chosen]  # in the schema's order
        text = str(value or "").replace("\r\n", "\n")
        if column.kind == "list":
            return [item.strip() for item in text.split(",") if item.strip()]
        if column.kind == "int":
            if not text.strip():
                return None
            try:
                return int(text.strip())
            except ValueError:
                raise ValueError("enter a whole number") from None
        if column.kind == "choice":
            if text and text not in {choice for choice, _ in column.choices}:
                raise ValueError(f"{text} is not one of the choices")
            return text or None
        return text if column.kind == "textarea" else text.strip()


def rows_from_spec(columns: tuple[Column, ...], items: list[Any], *, was) -> list[Row]:
    """The rows the form shows for the spec's ``items``; ``was(position, item)`` names each for later."""
    rows = []
    for position, item in enumerate(items if isinstance(items, list) else []):
        item = item if isinstance(item, dict) else {}
        rows.append(Row(index=position, was=was(position, item),
                        values={column.key: column.raw(item.get(column.key)) for column in columns}))
    return rows
