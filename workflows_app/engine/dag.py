"""Workflow graphs as plain Python: structure, references, cycles, order.

No ORM here: the caller passes the agents that exist, and gets either the
execution order or a list of errors that name the step and field at fault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence

PLACEHOLDER_RE = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_-]*)(?:\.([A-Za-z_][A-Za-z0-9_-]*))?\}(?!\})")


class StepLike(Protocol):
    id: str
    agent: str
    prompt: str
    depends_on: list[str]
    outputs: list[str]


@dataclass(frozen=True)
class GraphError:
    loc: str
    message: str

    def __str__(self) -> str:
        return f"{self.loc}: {self.message}"


def find_cycle(edges: dict[str, list[str]]) -> list[str] | None:
    """Return one cycle as a closed path ``[a, b, …, a]``, or None.

    ``edges`` maps a step to the steps it depends on; the cycle is reported in
    dependency order, starting from the first step (in definition order) on it.
    """
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in edges.get(node, []):
            if dep not in edges:
                continue
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if state.get(dep) is None:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in edges:
        if state.get(node) is None:
            found = visit(node)
            if found:
                return found
    return None


def topological_levels(edges: dict[str, list[str]]) -> list[list[str]]:
    """Group steps into levels: every step's dependencies lie in earlier levels.

    Steps of one level can run at the same time. Assumes no cycle.
    """
    remaining = dict(edges)
    done: set[str] = set()
    levels: list[list[str]] = []
    while remaining:
        ready = [step for step, deps in remaining.items() if all(dep in done for dep in deps)]
        if not ready:
            raise ValueError("cycle")
        levels.append(ready)
        done.update(ready)
        for step in ready:
            del remaining[step]
    return levels


def ancestors(edges: dict[str, list[str]], step: str) -> set[str]:
    seen: set[str] = set()
    todo = list(edges.get(step, []))
    while todo:
        dep = todo.pop()
        if dep not in seen and dep in edges:
            seen.add(dep)
            todo.extend(edges[dep])
    return seen


def validate_graph(
    steps: Sequence[StepLike], *, inputs: Iterable[str], known_agents: set[str] | None = None,
    loops: Sequence = (),
) -> list[GraphError]:
    """Check ids, agents, dependencies, cycles, loops and template references.

    In a loop, a step's prompt may also name the outputs of the loop's other
    steps (and its own): the latest round's, so feedback reaches the next round.
    """
    errors: list[GraphError] = []
    inputs = set(inputs)
    ids = [step.id for step in steps]
    for index, step_id in enumerate(ids):
        if step_id in ids[:index]:
            errors.append(GraphError(f"steps[{index}].id", f"duplicate step id {step_id!r}"))
    edges: dict[str, list[str]] = {}
    by_id = {}
    for index, step in enumerate(steps):
        by_id.setdefault(step.id, step)
        edges.setdefault(step.id, list(step.depends_on))
        if known_agents is not None and step.agent not in known_agents:
            errors.append(GraphError(f"steps[{index}].agent", f"agent {step.agent!r} does not exist in this team"))
        for dep in step.depends_on:
            if dep == step.id:
                errors.append(GraphError(f"steps[{index}].depends_on", f"step {step.id!r} depends on itself"))
            elif dep not in ids:
                errors.append(GraphError(f"steps[{index}].depends_on", f"unknown step {dep!r}"))
    cycle = find_cycle(edges)
    if cycle and len(cycle) > 2:
        errors.append(GraphError("steps", "cycle: " + " → ".join(cycle)))
    if errors:
        return errors
    if loops:
        from workflows_app.engine.loops import validate_loops  # loops.py builds on this module

        errors = validate_loops(steps, loops)
        if errors:
            return errors
    loop_of = {sid: index for index, loop in enumerate(loops) for sid in loop.steps}
    for index, step in enumerate(steps):
        upstream = ancestors(edges, step.id)
        if step.id in loop_of:
            upstream |= {sid for sid, loop in loop_of.items() if loop == loop_of[step.id]}
        for name, output in PLACEHOLDER_RE.findall(step.prompt):
            loc = f"steps[{index}].prompt"
            if not output:
                if name not in inputs:
                    errors.append(GraphError(loc, f"{{{name}}} is not a workflow input (inputs: {sorted(inputs)})"))
                continue
            if name == "input" and output in inputs:
                continue
            if name not in by_id:
                errors.append(GraphError(loc, f"{{{name}.{output}}} refers to unknown step {name!r}"))
            elif name not in upstream:
                errors.append(GraphError(loc, f"{{{name}.{output}}}: step {step.id!r} does not depend on {name!r}"))
            elif output not in by_id[name].outputs:
                errors.append(GraphError(loc, f"{{{name}.{output}}}: step {name!r} declares no output {output!r}"))
    return errors
