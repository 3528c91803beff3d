"""Cost of a model call in USD from its usage and per-million-token prices."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from mas_core.llm_types import Usage

MILLION = Decimal(1_000_000)
# Costs are kept to a millionth of a cent: small calls stay visible in totals.
QUANTUM = Decimal("0.00000001")


@dataclass(frozen=True)
class Prices:
    """USD per million tokens, as in a ProviderModel row."""

    input: Decimal = Decimal(0)
    output: Decimal = Decimal(0)

    @classmethod
    def of(cls, input_price: object = 0, output_price: object = 0) -> Prices:
        return cls(input=Decimal(str(input_price or 0)), output=Decimal(str(output_price or 0)))


FREE = Prices()


# The answer a call's worst case counts when neither the request nor the model's row limits it.
UNKNOWN_OUTPUT_TOKENS = 4_096


def usage_cost(usage: Usage, prices: Prices) -> Decimal:
    """USD for ``usage`` at ``prices``, rounded half-up to 1e-8."""
    cost = (Decimal(usage.prompt_tokens) * prices.input + Decimal(usage.completion_tokens) * prices.output) / MILLION
    return cost.quantize(QUANTUM, rounding=ROUND_HALF_UP)


def cost_at_most(prices: Prices, *, prompt_tokens: int, max_tokens: int | None, output_limit: int | None) -> Decimal:
    """The most a call can cost: ``prompt_tokens`` in, and an answer of ``max_tokens`` (else the model's
    ``output_limit``, else :data:`UNKNOWN_OUTPUT_TOKENS`)."""
    return usage_cost(Usage(prompt_tokens=prompt_tokens,
                            completion_tokens=max_tokens or output_limit or UNKNOWN_OUTPUT_TOKENS), prices)
