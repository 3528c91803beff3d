"""Memories in the admin: team-scoped, searched by meaning, with the team's shared knowledge one filter away."""

from __future__ import annotations

from django.contrib import admin
from pgvector.django import CosineDistance

from mas_core.admin_base import TeamScopedAdmin
from mas_core.admin_base import RunChildAdmin
from mas_core.embeddings import embed
from memory_app.models import BlackboardEntry, CachedResponse, Channel, ChannelMessage, Memory


@admin.register(Memory)
class MemoryAdmin(TeamScopedAdmin):
    """Memories come from agents and the API; here people search, correct, share or delete them."""

    list_display = ["summary", "type", "agent", "shared", "tags", "access_count", "source_agent", "created_at"]
    list_filter = [("shared", admin.BooleanFieldListFilter), "type"]
    search_fields = ["content"]  # the box searches by meaning (see get_search_results)
    search_help_text = "Search by meaning: the closest memories first."
    fields = ["team", "agent", "type", "content", "tags", "shared", "source_agent", "run", "session",
              "access_count", "last_accessed_at", "superseded_by", "created_at", "updated_at"]
    readonly_fields = ["team", "agent", "source_agent", "run", "session", "access_count", "last_accessed_at",
                       "superseded_by", "created_at", "updated_at"]
    list_per_page = 50

    @admin.display(description="memory")
    def summary(self, obj: Memory) -> str:
        return obj.content if len(obj.content) <= 100 else obj.content[:99] + "…"

    def has_add_permission(self, request):
        return False

    def get_queryset(self, request):
        # ModelAdmin orders the base queryset before the distance exists: plain ordering there.
        request._memory_base_queryset = True
        try:
            queryset = super().get_queryset(request)
        finally:
            del request._memory_base_queryset
        term = request.GET.get("q", "").strip()
        if term:
            if getattr(request, "_memory_query", (None,))[0] != term:
                request._memory_query = (term, embed([term])[0])
            queryset = queryset.annotate(distance=CosineDistance("embedding", request._memory_query[1]))
        return queryset

    def get_search_results(self, request, queryset, search_term):
        if not search_term.strip():
            return queryset, False
        nearest = list(queryset.order_by("distance").values_list("pk", flat=True)[:50])
        return queryset.filter(pk__in=nearest), False

    def get_ordering(self, request):
        searching = request.GET.get("q", "").strip() and not getattr(request, "_memory_base_queryset", False)
        return ["distance", "-id"] if searching else ["-created_at", "-id"]

    def save_model(self, request, obj, form, change):
        if "content" in form.changed_data:
            obj.embedding = embed([obj.content])[0]
        super().save_model(request, obj, form, change)


# -- a run's channels and blackboard (read-only: agents write them) ------------------------------


class ChannelMessageInline(admin.TabularInline):
    model = ChannelMessage
    extra = 0
    can_delete = False
    fields = readonly_fields = ["seq", "sender", "content", "created_at"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Channel)
class ChannelAdmin(RunChildAdmin):
    list_display = ["name", "run_link", "next_seq", "subscribers", "created_at"]
    list_select_related = ["run"]
    fields = readonly_fields = ["run_link", "name", "next_seq", "subscribers", "created_at"]
    inlines = [ChannelMessageInline]

    @admin.display(description="subscribers (last acked)")
    def subscribers(self, obj: Channel) -> str:
        return ", ".join(f"{s.agent}: {s.last_acked}" for s in obj.subscriptions.order_by("agent")) or "—"


@admin.register(BlackboardEntry)
class BlackboardEntryAdmin(RunChildAdmin):
    list_display = ["key", "run_link", "version", "author", "updated_at"]
    list_select_related = ["run"]
    search_fields = ["key", "value"]
    fields = readonly_fields = ["run_link", "key", "value", "version", "author", "updated_at"]


@admin.register(CachedResponse)
class CachedResponseAdmin(TeamScopedAdmin):
    """The semantic cache: what each entry answered and how often it was reused; editors may clear entries."""

    list_display = ["summary", "agent", "model", "hits", "last_hit_at", "created_at"]
    list_filter = ["model", "agent"]
    search_fields = ["prompt"]
    fields = readonly_fields = ["team", "agent", "model", "prompt", "response", "hits", "last_hit_at", "run",
                                "context_digest", "created_at"]

    @admin.display(description="request (last message)")
    def summary(self, obj: CachedResponse) -> str:
        return obj.prompt if len(obj.prompt) <= 100 else obj.prompt[:99] + "…"

    def has_add_permission(self, request):
        return False
