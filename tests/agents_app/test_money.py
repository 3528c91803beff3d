"""Costs as text: one normalised string for machines, one format for people."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents_app.llm.pricing import Prices, usage_cost
from mas_core.llm_types import Usage
from agents_app.money import money_display, money_str


@pytest.mark.parametrize(("value", "text", "shown"), [
    (Decimal("0E-8"), "0", "$0.00"),
    (Decimal("-0"), "0", "$0.00"),
    (Decimal("1E-8"), "0.00000001", "$0.00000001"),
    (Decimal("0.000001"), "0.000001", "$0.000001"),
    (Decimal("1.50000000"), "1.5", "$1.50"),
    (Decimal("100"), "100", "$100.00"),
    (Decimal("1E+2"), "100", "$100.00"),
    (Decimal("1234.5678"), "1234.5678", "$1,234.5678"),
    (Decimal("-0.5"), "-0.5", "-$0.50"),
    ("0.000000", "0", "$0.00"),
    (None, "0", "$0.00"),
    ("", "0", "$0.00"),
    (3, "3", "$3.00"),
    (Decimal("0.123456789"), "0.123456789", "$0.12345679"),
])
def test_amounts(value, text, shown):
    assert money_str(value) == text
    assert money_display(value) == shown


@pytest.mark.parametrize("value", ["abc", "NaN", "Infinity", object()])
def test_not_amounts(value):
    with pytest.raises(ValueError, match="not an amount"):
        money_str(value)


def test_a_free_call_is_zero_not_an_exponent():
    cost = usage_cost(Usage(10, 5), Prices())
    assert str(cost) == "0E-8"  # what the events used to carry
    assert money_str(cost) == "0"


def test_the_kernels_events_and_totals_carry_normalised_costs():
    from tests.agents_app.kernel.test_loop import Model, calls, run, start, text

    class Free(Model):
        def cost(self, response):
            return usage_cost(response.usage, Prices())  # Decimal("0E-8")

    class Tiny(Model):
        def cost(self, response):
            return usage_cost(response.usage, Prices.of("0.001", 0))  # 10 tokens → Decimal("1E-8")

    outcome, store, _ = run(start(), Free([text("Done.")]))
    assert [data["cost_usd"] for type, data in store.events if type == "llm_response"] == ["0"]
    assert outcome.meta.cost_usd == "0"
    outcome, store, _ = run(start(), Tiny([calls(("vfs_read", {"path": "a"})), text("Done.")]))
    assert [data["cost_usd"] for type, data in store.events if type == "llm_response"] == ["0.00000001"] * 2
    assert outcome.meta.cost_usd == "0.00000002"
