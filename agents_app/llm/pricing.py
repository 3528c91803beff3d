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


def usage_cost(usage: Usage, prices: Prices) -> Decimal:
    """USD for ``usage`` at ``prices``, rounded half-up to 1e-8."""
    cost = (Decimal(usage.prompt_tokens) * prices.input + Decimal(usage.completion_tokens) * prices.output) / MILLION
    return cost.quantize(QUANTUM, rounding=ROUND_HALF_UP)
