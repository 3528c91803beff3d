"""Admin of custom tools and MCP server configs, edited as markdown.

MCP secrets (literal env values of stdio servers, headers of HTTP servers)
are write-only: typed into their own textarea, never pre-filled, never
rendered back; the page shows only their names.
"""

from __future__ import annotations

import re

from django import forms
from django.contrib import admin, messages
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters

from mas_core.admin_base import DefinitionAdmin, DefinitionForm, SecretTextarea, can_manage_stdio
from mas_core.definitions.markdown import ParsedDefinition
from mas_core.definitions.services import stdio_not_granted
from tools_app.models import CustomTool, MCPServer
from tools_app.specs import ENV_REFERENCE_RE

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
STDIO_REFUSAL = (
    "Field transport: a stdio MCP server runs a command on the server; creating or editing one needs the "
    "team admin role or the permission tools_app.manage_stdio_mcpserver, in a team the operator granted stdio "
    "MCP servers."
)


@admin.register(CustomTool)
class CustomToolAdmin(DefinitionAdmin):
    markdown_template = (
        "---\nname: \ndescription: \nparameters:\n  text:\n    type: string\n    description: \n"
        "prompt: |\n  Work on {{text}}\n---\n"
    )


def parse_secret_lines(text: str, *, column: str) -> dict[str, str]:
    """``KEY=value`` lines → dict. Errors name the line, never the value."""
    secrets: dict[str, str] = {}
    name_re = ENV_NAME_RE if column == "env" else HEADER_NAME_RE
    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not name_re.match(key):
            raise forms.ValidationError(f"Line {number}: expected NAME=value with a valid {column} name.")
        if ENV_REFERENCE_RE.search(value):
            raise forms.ValidationError(
                f"Line {number}: {key} refers to ${{…}}; write references in the markdown, secrets here."
            )
        secrets[key] = value
    return secrets


class MCPServerForm(DefinitionForm):
    secrets = forms.CharField(
        required=False,
        strip=False,
        widget=SecretTextarea(attrs={"rows": 4, "cols": 100, "autocomplete": "off", "spellcheck": "false"}),
        help_text=(
            "Write-only, one NAME=value per line: environment variables of a stdio server, headers of an "
            "HTTP server. Never shown again; leave empty to keep the stored ones, NAME= removes one."
        ),
    )

    def prepare(self, parsed: ParsedDefinition) -> ParsedDefinition:
        text = self.cleaned_data.get("secrets") or ""
        if not text.strip():
            return parsed
        column = "env" if parsed.spec.transport == "stdio" else "headers"
        try:
            secrets = parse_secret_lines(text, column=column)
        except forms.ValidationError as error:
            raise forms.ValidationError({"secrets": error}) from None
        # Literal values in the spec are what definition_save stores as
        # secrets (and strips from the markdown): one path for API and admin.
        parsed.spec = parsed.spec.model_copy(update={column: {**getattr(parsed.spec, column), **secrets}})
        return parsed


@admin.register(MCPServer)
class MCPServerAdmin(DefinitionAdmin):
    form = MCPServerForm
    markdown_template = "---\nname: \ntransport: streamable-http\nurl: https://\ntimeout_s: 30\n---\n"
    extra_form_fields = ("secrets",)
    extra_readonly = ("secret_names",)
    list_display = ("name", "slug", "team", "transport", "enabled", "discovered_at", "version", "updated_at")
    list_filter = ("transport", "enabled")
    actions = ("test_and_discover", "approve_tools")

    def _actionable(self, request, queryset):
        """The selected servers this user may edit (stdio ones need the stdio permission)."""
        return [row for row in queryset if self.has_change_permission(request, row)]

    @admin.action(description="Test and discover tools of the selected servers")
    def test_and_discover(self, request, queryset):
        from tools_app.mcp.services import TooManyTests, mcp_server_test

        for row in self._actionable(request, queryset):
            try:
                report = mcp_server_test(row=row)
            except TooManyTests as error:
                self.message_user(request, f"{row.slug}: not tested: {error}", messages.ERROR)
                continue
            if report["ok"]:
                tools = ", ".join(f"{t['name']}{'' if t['approved'] else ' (not approved)'}" for t in report["tools"])
                timing = report["timings_ms"].get("connect_and_list_ms")
                self.message_user(request, f"{row.slug}: connected and listed in {timing} ms: {tools or 'no tools'}",
                                  messages.SUCCESS)
            else:
                self.message_user(request, f"{row.slug}: {report['error']}", messages.ERROR)

    @admin.action(description="Approve the discovered tools of the selected servers")
    def approve_tools(self, request, queryset):
        from tools_app.mcp.services import mcp_server_approve

        for row in self._actionable(request, queryset):
            names = mcp_server_approve(row=row)
            self.message_user(request, f"{row.slug}: approved {', '.join(names) or 'nothing (test it first)'}",
                              messages.SUCCESS)

    # Error reports (logs, mails) must not carry what was typed as a secret,
    # nor literal env values written into the markdown.
    @method_decorator(sensitive_post_parameters("secrets", "markdown"))
    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        return super().changeform_view(request, object_id, form_url, extra_context)

    def refusal(self, request, team, parsed, instance):
        if parsed.spec.transport == "stdio" and not team.stdio_mcp_allowed:
            return f"Field transport: {stdio_not_granted(team.slug)}."
        if parsed.spec.transport == "stdio" and not can_manage_stdio(request, team):
            return STDIO_REFUSAL
        return None

    def _stdio_allowed(self, request, obj) -> bool:
        return obj is None or obj.transport != "stdio" or can_manage_stdio(request, obj.team)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and self._stdio_allowed(request, obj)

    def has_delete_permission(self, request, obj=None):
        # A stdio server of a team without the operator's grant cannot start: whoever deletes definitions may remove it.
        return super().has_delete_permission(request, obj) and (
            self._stdio_allowed(request, obj) or not obj.team.stdio_mcp_allowed)

    @admin.display(description="Stored secrets")
    def secret_names(self, obj):
        names = [f"env {key}" for key in sorted(obj.secret_env or {})]
        names += [f"header {key}" for key in sorted(obj.secret_headers or {})]
        return ", ".join(names) or "—"
