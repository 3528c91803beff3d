"""The OpenAPI schema is snapshotted: any change to the API's contract shows up in review.

Regenerate after an intended change with

    MAS_UPDATE_SNAPSHOT=1 python -m pytest tests/mas_project/test_openapi_snapshot.py

Paths tagged ``health`` (and the schemas only they use) are left out: the
health report grows with the stack and is not part of the definitions API.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

from django.test import Client

SNAPSHOT = Path(__file__).with_name("openapi_snapshot.json")
EXCLUDED_TAGS = {"health"}


def _refs(value: Any) -> set[str]:
    found: set[str] = set()
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                found.add(ref.rsplit("/", 1)[1])
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return found


def comparable_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema without excluded paths, and without components nothing else refers to."""
    paths = {}
    for path, operations in schema["paths"].items():
        kept = {m: op for m, op in operations.items() if not EXCLUDED_TAGS & set(op.get("tags", []))}
        if kept:
            paths[path] = kept
    components = schema.get("components", {}).get("schemas", {})
    used: set[str] = set()
    todo = _refs(paths)
    while todo:
        name = todo.pop()
        if name not in used and name in components:
            used.add(name)
            todo |= _refs(components[name])
    return {
        **schema,
        "paths": paths,
        "components": {**schema.get("components", {}), "schemas": {k: components[k] for k in sorted(used)}},
    }


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_openapi_schema_matches_the_snapshot():
    response = Client().get("/api/openapi.json")
    assert response.status_code == 200
    current = render(comparable_schema(response.json()))

    if os.environ.get("MAS_UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.write_text(current, encoding="utf-8")
        return
    assert SNAPSHOT.exists(), f"no snapshot yet: run with MAS_UPDATE_SNAPSHOT=1 to create {SNAPSHOT.name}"
    expected = SNAPSHOT.read_text(encoding="utf-8")
    if current != expected:
        diff = "".join(
            list(difflib.unified_diff(expected.splitlines(True), current.splitlines(True), "snapshot", "current"))[:80]
        )
        raise AssertionError(
            "The OpenAPI schema changed. If the change is intended, regenerate the snapshot with\n"
            "  MAS_UPDATE_SNAPSHOT=1 python -m pytest tests/mas_project/test_openapi_snapshot.py\n"
            f"and review the diff:\n{diff}"
        )


def test_the_snapshot_covers_every_definition_kind():
    schema = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    for plural in ("agents", "skills", "providers", "guardrails", "tools", "mcp-servers", "workflows"):
        assert set(schema["paths"][f"/api/{plural}/{{slug}}"]) == {"get", "put", "patch", "delete"}
        assert set(schema["paths"][f"/api/{plural}/{{slug}}/markdown"]) == {"get", "put"}
    assert "/api/health" not in schema["paths"]
    assert "HealthReport" not in schema["components"]["schemas"]
    mcp_out = schema["components"]["schemas"]["MCPServerOut"]["properties"]
    assert {"secret_env_keys", "secret_header_keys", "env", "headers"} <= set(mcp_out)
