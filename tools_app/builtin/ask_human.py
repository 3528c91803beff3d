"""ask_human: ask a person of the team a question and wait for the answer."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from tools_app.plugin import Params, Tool, ToolContext
from tools_app.registry import require_service


class AskHuman(Tool):
    name = "ask_human"
    description = (
        "Ask a person of your team a question and wait for the answer, which this call returns as text. The run "
        "pauses until someone answers (in the team's approvals inbox); if no one answers before the deadline, "
        "the call returns a message saying so. With choices, the answer is exactly one of them. Ask only what "
        "you cannot find out yourself."
    )

    class Parameters(Params):
        question: str = Field(min_length=1, max_length=4000, description="The question, complete on its own")
        choices: list[str] | None = Field(default=None, min_length=2, max_length=20,
                                          description="The answers the person picks from (optional)")

        @field_validator("choices")
        @classmethod
        def _distinct(cls, value: list[str] | None) -> list[str] | None:
            if value is not None:
                if any(not choice.strip() or len(choice) > 200 for choice in value):
                    raise ValueError("each choice is a non-empty text of at most 200 characters")
                if len(set(value)) != len(value):
                    raise ValueError("the choices must differ from each other")
            return value

    async def run(self, args: Parameters, ctx: ToolContext) -> Any:
        ask = require_service(ctx, "ask_human", self.name)
        return await ask(question=args.question, choices=args.choices or [])
