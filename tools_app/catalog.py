"""Names of the built-in tools (SPEC §3.1), known before their plugins exist.

Definitions are validated against this list; the registry of later issues
registers one plugin per name.
"""

import re

TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

BUILTIN_TOOLS: tuple[str, ...] = (
    "vfs_read",
    "vfs_write",
    "vfs_edit",
    "vfs_list",
    "vfs_delete",
    "vfs_search",
    "spawn_agent",
    "signal_parent",
    "delegate",
    "web_fetch",
    "web_search",
    "knowledge_query",
    "knowledge_contribute",
    "memory_store",
    "memory_recall",
    "publish",
    "subscribe",
    "blackboard_write",
    "blackboard_read",
    "set_output",
    "code_exec",
    "tool_search",
    "skill_load",
    "ask_human",
)

# Tools an agent gets when its definition names none: nothing that reaches
# outside the run or executes code. (tool_search joins a session by itself when
# the agent has more tools than the discovery threshold, skill_load when it has skills.)
SAFE_DEFAULT_TOOLS: tuple[str, ...] = tuple(
    name for name in BUILTIN_TOOLS
    if name not in {"web_fetch", "web_search", "code_exec", "tool_search", "skill_load", "ask_human"}
)
