"""Built-in tool plugins, one module each (SPEC §3.1), by catalog name."""

from __future__ import annotations

from tools_app.builtin.ask_human import AskHuman
from tools_app.builtin.blackboard_read import BlackboardRead
from tools_app.builtin.blackboard_write import BlackboardWrite
from tools_app.builtin.code_exec import CodeExec
from tools_app.builtin.delegate import Delegate
from tools_app.builtin.knowledge_contribute import KnowledgeContribute
from tools_app.builtin.knowledge_query import KnowledgeQuery
from tools_app.builtin.memory_recall import MemoryRecall
from tools_app.builtin.memory_store import MemoryStore
from tools_app.builtin.publish import Publish
from tools_app.builtin.set_output import SetOutput
from tools_app.builtin.signal_parent import SignalParent
from tools_app.builtin.skill_load import SkillLoad
from tools_app.builtin.spawn_agent import SpawnAgent
from tools_app.builtin.subscribe import Subscribe
from tools_app.builtin.tool_search import ToolSearch
from tools_app.builtin.vfs_delete import VfsDelete
from tools_app.builtin.vfs_edit import VfsEdit
from tools_app.builtin.vfs_list import VfsList
from tools_app.builtin.vfs_read import VfsRead
from tools_app.builtin.vfs_search import VfsSearch
from tools_app.builtin.vfs_write import VfsWrite
from tools_app.builtin.web_fetch import WebFetch
from tools_app.builtin.web_search import WebSearch
from tools_app.catalog import BUILTIN_TOOLS
from tools_app.plugin import Tool

BUILTIN_TOOL_CLASSES: dict[str, type[Tool]] = {
    tool.name: tool
    for tool in (
        VfsRead, VfsWrite, VfsEdit, VfsList, VfsDelete, VfsSearch,
        SpawnAgent, SignalParent, Delegate, SetOutput,
        MemoryStore, MemoryRecall, KnowledgeQuery, KnowledgeContribute,
        Publish, Subscribe, BlackboardWrite, BlackboardRead,
        WebFetch, WebSearch, CodeExec, ToolSearch, SkillLoad, AskHuman,
    )
}

_uncatalogued = set(BUILTIN_TOOL_CLASSES) - set(BUILTIN_TOOLS)
assert not _uncatalogued, f"built-in tools missing from tools_app.catalog: {_uncatalogued}"
