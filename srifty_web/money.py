"""Money in the API: US dollars as decimal strings, never JSON numbers.

A JSON number is read as a binary float by most clients (JavaScript, ``json.loads``), so
``0.1 + 0.2`` of them is not ``0.3`` and a price such as ``4.5501`` may come back as
``4.550099999...``. A decimal string (``"4.550100"``) is exact and keeps its scale, and Python's
``Decimal(s)`` or JavaScript's decimal libraries read it without loss. Every money field of the
catalog, launcher and profiler serializers uses :class:`MoneyField` (or :func:`money` for a value
inside a JSON object a method field builds), so the API says one thing everywhere and the
OpenAPI schema documents it (``type: string, format: decimal`` with :data:`MONEY_NOTE`).

Rounding: half-even to ``decimal_places`` (DRF's DecimalField context), i.e. the value is
``round(x, places)`` of the exact decimal of ``x``; a float input is first written with ``repr``
(``Decimal(str(x))``), the shortest string that reads back as the same float.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from rest_framework import serializers

MONEY_NOTE = 'US dollars as a decimal string (e.g. "12.345600"), not a JSON number'


def money_help(text: str = "") -> str:
    """``text`` followed by the money note, for a field's schema description."""
    return f"{text.rstrip('.')}. {MONEY_NOTE}" if text else MONEY_NOTE


def money(value: Decimal | float | int | str | None, places: int = 4) -> str | None:
    """``value`` as a decimal string with ``places`` decimals (half-even); None stays None."""
    if value is None:
        return None
    exact = value if isinstance(value, Decimal) else Decimal(str(value))
    return str(exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN))


class MoneyField(serializers.DecimalField):
    """A read or write money field: a decimal string out, a string or number in.

    ``max_digits`` is unbounded by default (an output field must not fail on a large value;
    input fields that need a bound pass ``max_value``)."""

    def __init__(self, *, decimal_places: int = 6, max_digits: int | None = None, **kwargs: Any) -> None:
        kwargs["help_text"] = money_help(kwargs.get("help_text", ""))
        kwargs["coerce_to_string"] = True
        super().__init__(max_digits=max_digits, decimal_places=decimal_places, **kwargs)
