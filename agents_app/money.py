"""Costs as text: one normalised decimal string for machines, one format for people.

Costs are :class:`~decimal.Decimal` USD kept to 1e-8 (``llm.pricing``).
``str()`` of such a value can read ``0E-8`` or ``1E-8``; everything that
writes a cost into JSON (events, checkpoints, step usage) goes through
:func:`money_str`, everything that shows one to a person (admin, CLI, error
messages) through :func:`money_display`. Plain Python: the kernel uses it.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

# People see at least cents and at most the 1e-8 the prices are kept to.
MIN_PLACES = 2
MAX_PLACES = 8


def money_decimal(value: object) -> Decimal:
    """``value`` (Decimal, int, float, numeric string, None) as a Decimal; None and "" are 0.

    Raises ``ValueError`` for anything else, never returns NaN or infinity.
    """
    if value is None or value == "":
        return Decimal(0)
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f"not an amount: {value!r}") from None
    if not number.is_finite():
        raise ValueError(f"not an amount: {value!r}")
    return number


def money_str(value: object) -> str:
    """The canonical text of an amount: fixed point, no exponent, no trailing zeros.

    ``Decimal("0E-8")`` → ``"0"``, ``Decimal("1E-8")`` → ``"0.00000001"``, ``Decimal("1.50")`` → ``"1.5"``.
    """
    number = money_decimal(value)
    if number == 0:
        return "0"  # also "-0" and "0E-8"
    text = format(number.normalize(), "f")
    return text


def money_display(value: object) -> str:
    """An amount for people: ``$`` and thousands separators, cents always, sub-cent digits when there are any.

    ``0`` → ``"$0.00"``, ``1.5`` → ``"$1.50"``, ``0.00000001`` → ``"$0.00000001"``,
    ``1234.5678`` → ``"$1,234.5678"``; rounded half-even to 1e-8.
    """
    number = money_decimal(value).quantize(Decimal(1).scaleb(-MAX_PLACES))
    places = max(MIN_PLACES, -number.normalize().as_tuple().exponent if number else MIN_PLACES)
    places = min(places, MAX_PLACES)
    sign = "-" if number < 0 else ""
    return f"{sign}${abs(number):,.{places}f}"
