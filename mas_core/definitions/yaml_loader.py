"""The one YAML loader of MAS: safe types only, and bounded.

Every frontmatter the server reads (agents, tools, MCP servers, workflows,
skills, providers; from the API, the admin, ``sync_markdown`` and a run's own
agent files) is loaded here. PyYAML's safe loader limits the types it builds,
not the amount: an alias repeats a whole subtree, so nine lines of nine
aliases stand for 9**9 values (the "billion laughs"), and every bracket nests
Python calls. This loader counts while it composes, before anything is built:

- nodes: every mapping, list, key and value, an alias counting all that it
  repeats, so an expansion is refused before it is walked;
- depth: lists and mappings inside each other (brackets counted as they are
  scanned too: the scanner reads up to 1,024 characters ahead of the composer
  to find where a key ends, and a line of ``[[[[…`` cost it a quarter of a
  second of CPU before the composer saw the 33rd);
- characters: of the whole text, of one key, of one value.

A refusal is a :class:`YamlLimitError`, a ``MarkedYAMLError`` whose mark is
where the limit was crossed and whose message names the limit's setting.
:func:`data_limit_problem` applies the same limits to data that arrives as
JSON, which is stored as YAML too and must load again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from django.conf import settings
from yaml.constructor import ConstructorError


@dataclass(frozen=True)
class YamlLimits:
    max_chars: int = 256 * 1024
    max_depth: int = 32
    max_nodes: int = 10_000
    max_key_chars: int = 256
    max_scalar_chars: int = 128 * 1024

    @classmethod
    def from_settings(cls) -> YamlLimits:
        return cls(
            max_chars=settings.MAS_MAX_DEFINITION_BYTES,
            max_depth=settings.MAS_YAML_MAX_DEPTH,
            max_nodes=settings.MAS_YAML_MAX_NODES,
            max_key_chars=settings.MAS_YAML_MAX_KEY_CHARS,
            max_scalar_chars=settings.MAS_YAML_MAX_SCALAR_CHARS,
        )

    def too_deep(self) -> str:
        return f"lists and mappings are nested more than {self.max_depth} deep (limit MAS_YAML_MAX_DEPTH)"

    def too_many(self, what: str = "") -> str:
        return f"{what}more than {self.max_nodes} keys and values (limit MAS_YAML_MAX_NODES)"

    def key_too_long(self, length: int) -> str:
        return f"a key of {length} characters; keys are limited to {self.max_key_chars} (limit MAS_YAML_MAX_KEY_CHARS)"

    def value_too_long(self, length: int) -> str:
        return (
            f"a value of {length} characters; values are limited to {self.max_scalar_chars} "
            "(limit MAS_YAML_MAX_SCALAR_CHARS)"
        )


class YamlLimitError(yaml.MarkedYAMLError):
    """YAML refused for its size or shape, not its syntax."""

    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class _BoundedLoader(yaml.SafeLoader):
    def __init__(self, text: str, limits: YamlLimits) -> None:
        super().__init__(text)
        self.limits = limits
        self.nodes = 0
        self.depth = 0
        self.sizes: dict[str, int] = {}  # anchor → nodes it stands for, once composed

    def _count(self, nodes: int, mark: yaml.Mark, problem: str = "") -> None:
        self.nodes += nodes
        if self.nodes > self.limits.max_nodes:
            raise YamlLimitError(problem or self.limits.too_many(), mark)

    def fetch_flow_collection_start(self, TokenClass) -> None:
        if self.flow_level >= self.limits.max_depth:
            raise YamlLimitError(self.limits.too_deep(), self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self.anchors and event.anchor not in self.sizes:
                raise YamlLimitError(f"the alias *{event.anchor} is inside the value it refers to", event.start_mark)
            size = self.sizes.get(event.anchor, 0)
            self._count(size, event.start_mark, self.limits.too_many(
                f"the alias *{event.anchor} repeats {size} keys and values, making in all "))
            return super().compose_node(parent, index)
        if isinstance(event, yaml.ScalarEvent):
            is_key = isinstance(parent, yaml.MappingNode) and index is None
            limit = self.limits.max_key_chars if is_key else self.limits.max_scalar_chars
            if len(event.value) > limit:
                length = len(event.value)
                problem = self.limits.key_too_long(length) if is_key else self.limits.value_too_long(length)
                raise YamlLimitError(problem, event.start_mark)
        collection = isinstance(event, yaml.CollectionStartEvent)
        if collection:
            self.depth += 1
            if self.depth > self.limits.max_depth:
                raise YamlLimitError(self.limits.too_deep(), event.start_mark)
        before = self.nodes
        self._count(1, event.start_mark)
        node = super().compose_node(parent, index)
        if collection:
            self.depth -= 1
        if event.anchor is not None:
            self.sizes[event.anchor] = self.nodes - before
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as error:
            # A tagged or implicit scalar Python cannot read: a date with month 13,
            # an integer of 5,000 digits, "0x" with no digits.
            kind = node.tag.rsplit(":", 1)[-1]
            reason = str(error).split(";", 1)[0]  # Python's advice on sys.set_int_max_str_digits is not for users
            raise ConstructorError(None, None, f"cannot read this {kind}: {reason}", node.start_mark) from None


def yaml_load(text: str, *, limits: YamlLimits | None = None) -> tuple[Any, yaml.Node | None]:
    """``text`` as Python data (safe types) and its node tree (for line numbers).

    Raises ``yaml.YAMLError``: a :class:`YamlLimitError` for a limit, PyYAML's
    own errors for bad syntax.
    """
    limits = limits or YamlLimits.from_settings()
    if len(text) > limits.max_chars:
        raise YamlLimitError(
            f"the YAML is {len(text)} characters; YAML is limited to {limits.max_chars} "
            "(limit MAS_MAX_DEFINITION_BYTES)",
            None,
        )
    loader = _BoundedLoader(text, limits)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return data, node


def data_limit_problem(data: Any, *, limits: YamlLimits | None = None) -> tuple[tuple[Any, ...], str] | None:
    """Where ``data`` (frontmatter that came as JSON) breaks a limit of :func:`yaml_load`, and which.

    Iterative and stopped at the node limit, so it is safe on anything ``json.loads`` returns.
    """
    limits = limits or YamlLimits.from_settings()
    todo: list[tuple[Any, tuple[Any, ...], int]] = [(data, (), 1)]
    nodes = 1
    while todo:
        value, loc, depth = todo.pop()
        if isinstance(value, str):
            if len(value) > limits.max_scalar_chars:
                return loc, limits.value_too_long(len(value))
        elif isinstance(value, (dict, list)):
            if depth > limits.max_depth:
                return loc, limits.too_deep()
            mapping = isinstance(value, dict)
            children = []
            # Counted as they are met, so a list of a million items stops at the limit.
            for key, item in value.items() if mapping else enumerate(value):
                nodes += 2 if mapping else 1
                if nodes > limits.max_nodes:
                    return loc, limits.too_many()
                if mapping and isinstance(key, str) and len(key) > limits.max_key_chars:
                    return loc, limits.key_too_long(len(key))
                children.append((item, (*loc, key), depth + 1))
            todo.extend(reversed(children))
    return None
