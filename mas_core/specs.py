"""The vocabulary every definition's frontmatter schema shares: strict models, names, model references,
output schemas. Each app's own specs build on these (agents_app.specs, tools_app.specs, …)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints

from mas_core.outputs import schema_problem
from mas_core.text import visible_text

TIERS = ("small", "medium", "large")
Tier = Literal["small", "medium", "large"]
# A name shows in the admin, the monitor and prompts: no direction controls or invisible characters.
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200),
                 AfterValidator(lambda value: visible_text(value, "the name"))]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


def check_model_ref(value: str | None) -> str | None:
    """A model is ``provider:model`` (``openai:gpt-4.1-mini``) or a tier name."""
    if value is None or value in TIERS:
        return value
    provider, _, model = value.partition(":")
    if not provider.strip() or not model.strip():
        raise ValueError(f"must be provider:model (e.g. openai:gpt-4.1-mini) or a tier ({', '.join(TIERS)})")
    return value


ModelRef = Annotated[str, AfterValidator(check_model_ref)]
MAX_LADDER = 8


def checked_schema(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """An output schema, checked against its draft's meta-schema and the size and depth bounds."""
    problem = schema_problem(value) if value is not None else None
    if problem:
        raise ValueError(problem)
    return value


