"""A definition's versions in the admin: the latest few on its page, all of them paged, any two compared, one restored.

Mixed into :class:`mas_core.admin_base.DefinitionAdmin`, so every kind
(agents, tools, MCP servers, skills, providers, workflows) gets the same
pages. Restoring saves the old markdown through ``definition_restore`` — a
new version; nothing is rewritten.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.timezone import localtime

from mas_core.definitions import storage
from mas_core.definitions.markdown import DefinitionError
from mas_core.definitions.services import (
    DefinitionPermissionError,
    definition_restore,
    definition_version_diff,
    definition_versions,
)

RECENT_VERSIONS = 10  # on the definition's page; the rest one click away
VERSIONS_PER_PAGE = 50  # on the page of all versions


def _number(value: str | None) -> int | None:
    try:
        number = int(value or "")
    except ValueError:
        return None
    return number if 0 < number < 2**31 else None


class VersionsAdminMixin:
    """URLs, views and the change page's box for a definition's versions."""

    def _url_name(self, name: str) -> str:
        opts = self.model._meta
        return f"{opts.app_label}_{opts.model_name}_{name}"

    def get_urls(self):
        return [
            # Named <app>_<model>_<view> like Django's own, with the version numbers in the query (diff) or the
            # query and the form (restore), so every admin URL takes just the object's id.
            path("<path:object_id>/versions/diff/", self.admin_site.admin_view(self.version_diff_view),
                 name=self._url_name("diff")),
            path("<path:object_id>/versions/restore/", self.admin_site.admin_view(self.version_restore_view),
                 name=self._url_name("restore")),
            *super().get_urls(),
        ]

    def diff_url(self, obj, old: int, new: int) -> str:
        return reverse(f"admin:{self._url_name('diff')}", args=[obj.pk]) + f"?old={old}&new={new}"

    def restore_url(self, obj, number: int) -> str:
        return reverse(f"admin:{self._url_name('restore')}", args=[obj.pk]) + f"?version={number}"

    def history_url(self, obj) -> str:
        return reverse(f"admin:{self._url_name('history')}", args=[obj.pk])

    # -- on the change page ---------------------------------------------------------------

    @admin.display(description="Versions")
    def version_history(self, obj):
        versions = definition_versions(kind=self.kind, team=obj.team, slug=obj.slug).select_related("author")
        total = versions.count()
        recent = list(versions[:RECENT_VERSIONS])
        editable = getattr(obj, "_mas_can_change", False)
        rows = format_html_join(
            "",
            "<tr><td><a href='{}'>v{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    reverse("admin:agents_app_definitionversion_change", args=[version.pk]),
                    version.number,
                    version.author.get_username() if version.author else "—",
                    version.source,
                    date_format(localtime(version.created_at), "DATETIME_FORMAT"),
                    self._version_actions(obj, version.number, editable),
                )
                for version in recent
            ),
        )
        more = ""
        if total > len(recent):
            more = format_html("<p><a href='{}' class='mas-all-versions'>All {} versions →</a></p>",
                               self.history_url(obj), total)
        return format_html(
            "<div class='mas-versions'><table><thead><tr><th>Version</th><th>Author</th><th>Source</th><th>Date</th>"
            "<th></th></tr></thead><tbody>{}</tbody></table></div>{}{}",
            rows, more, self._compare_form(obj, total),
        )

    def _version_actions(self, obj, number: int, editable: bool) -> str:
        if number == obj.version:
            return "current"
        links = [format_html("<a href='{}'>compare with current</a>", self.diff_url(obj, number, obj.version))]
        if editable:
            links.append(format_html("<a href='{}'>restore…</a>", self.restore_url(obj, number)))
        return format_html_join(" · ", "{}", ((link,) for link in links))

    def _compare_form(self, obj, total: int) -> str:
        if total < 2:
            return ""
        # Numbers, not a list of every version: a definition may have hundreds.
        return format_html(
            "<p class='mas-compare'>Compare v<input type='number' name='old' min='1' max='{}' value='{}' "
            "form='mas-compare-form' style='width:5em'> with v<input type='number' name='new' min='1' max='{}' "
            "value='{}' form='mas-compare-form' style='width:5em'> <button type='submit' form='mas-compare-form'>"
            "Compare</button></p>",
            obj.version, max(1, obj.version - 1), obj.version, obj.version,
        )

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        # The compare inputs belong to a GET form outside the change form (HTML forms do not nest).
        if obj is not None:
            context["mas_compare_action"] = reverse(f"admin:{self._url_name('diff')}", args=[obj.pk])
        return super().render_change_form(request, context, add, change, form_url, obj)

    # -- the page of all versions (the object's history page) -------------------------------------

    def history_view(self, request, object_id, extra_context=None):
        obj = self.get_object(request, unquote(object_id))
        if not self.has_view_or_change_permission(request, obj):
            raise PermissionDenied
        versions = definition_versions(kind=self.kind, team=obj.team, slug=obj.slug).select_related("author")
        page = Paginator(versions, VERSIONS_PER_PAGE).get_page(request.GET.get("vp"))
        page.object_list = list(page.object_list)
        for version in page.object_list:
            version.restore_url = self.restore_url(obj, version.number)
        context = {
            "definition_versions": page,
            "versions_page": page,
            "current_version": obj.version,
            "can_restore": self.has_change_permission(request, obj),
            "diff_base": reverse(f"admin:{self._url_name('diff')}", args=[obj.pk]),
            **(extra_context or {}),
        }
        return super().history_view(request, object_id, extra_context=context)

    # -- diff and restore --------------------------------------------------------------------------------

    def _page_context(self, request, obj, title: str) -> dict:
        return {**self.admin_site.each_context(request), "opts": self.model._meta, "original": obj, "title": title,
                "has_view_permission": True, "history_url": self.history_url(obj)}

    def version_diff_view(self, request, object_id):
        obj = self.get_object(request, unquote(object_id))
        if not self.has_view_or_change_permission(request, obj):
            raise PermissionDenied
        old, new = _number(request.GET.get("old")), _number(request.GET.get("new"))
        if old is None or new is None:
            raise Http404("compare needs two version numbers: ?old=<n>&new=<n>")
        lines = definition_version_diff(kind=self.kind, team=obj.team, slug=obj.slug, old=old, new=new)
        context = {**self._page_context(request, obj, f"{obj.name}: v{old} → v{new}"), "lines": lines,
                   "old": old, "new": new, "current_version": obj.version,
                   "can_restore": self.has_change_permission(request, obj) and old != obj.version,
                   "restore_url": self.restore_url(obj, old),
                   "swap_url": self.diff_url(obj, new, old)}
        return TemplateResponse(request, "admin/mas/version_diff.html", context)

    def version_restore_view(self, request, object_id):
        obj = self.get_object(request, unquote(object_id))
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        number = _number(request.POST.get("version") if request.method == "POST" else request.GET.get("version"))
        if number is None:
            raise Http404("restore needs a version number: ?version=<n>")
        if request.method == "POST":
            try:
                result = definition_restore(kind=self.kind, team=obj.team, slug=obj.slug, number=number,
                                            author=request.user, allow_stdio=self.allow_stdio(request, obj.team))
            except DefinitionError as error:
                self.message_user(request, f"v{number} cannot be restored as it is: {self.describe_error(error)}",
                                  messages.ERROR)
            except (storage.ReadOnlyFolderError, DefinitionPermissionError) as error:
                raise PermissionDenied(str(error)) from error
            else:
                for warning in result.warnings:
                    self.message_user(request, warning, messages.WARNING)
                if result.changed:
                    self.message_user(request, f"Restored v{number} as v{result.row.version}.", messages.SUCCESS)
                else:
                    self.message_user(request, f"v{number} is the same as the current content: nothing changed.",
                                      messages.INFO)
            return HttpResponseRedirect(reverse(f"admin:{self._url_name('change')}", args=[obj.pk]))
        lines = definition_version_diff(kind=self.kind, team=obj.team, slug=obj.slug, old=obj.version, new=number)
        context = {**self._page_context(request, obj, f"Restore v{number} of {obj.name}"), "lines": lines,
                   "number": number, "current_version": obj.version}
        return TemplateResponse(request, "admin/mas/version_restore.html", context)
