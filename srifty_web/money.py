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


# --- money inside JSON the API passes through (a plan's result, a job's option) ---------------
# The stored plan result, the planner and the server-rendered pages keep numbers; the API turns
# these keys' values into decimal strings on the way out (``money_tree``). One rule for every
# nested object: a key ending in "_usd" (hourly_usd, total_usd, cost_p10_usd, budget_usd, ...)
# or one of MONEY_KEYS (per-instance-hour prices).
MONEY_SUFFIX = "_usd"
MONEY_KEYS = frozenset({"price_per_hour", "usd_per_hour", "usd_per_gpu_hour"})
MONEY_TREE_PLACES = 4
MONEY_TREE_NOTE = (
    f'money keys (names ending in "{MONEY_SUFFIX}", and {", ".join(sorted(MONEY_KEYS))}) at any '
    f"depth are US dollars as decimal strings with {MONEY_TREE_PLACES} places, not JSON numbers"
)


def is_money_key(key: object) -> bool:
    """Whether a JSON object's ``key`` names a dollar amount (the rule above)."""
    return isinstance(key, str) and (key.endswith(MONEY_SUFFIX) or key in MONEY_KEYS)


def _money_value(value: Any, places: int) -> Any:
    """A number as a decimal string; None, a string, a bool or a non-finite float unchanged
    (a string is already one: an input the request sent as a string)."""
    if isinstance(value, dict | list | tuple):
        return money_tree(value, places)
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return value
    if not Decimal(str(value)).is_finite():
        return value
    return money(value, places)


def money_tree(value: Any, places: int = MONEY_TREE_PLACES) -> Any:
    """A copy of the JSON-like ``value`` whose money keys (:func:`is_money_key`) hold decimal
    strings with ``places`` decimals, at any depth of dicts and lists; ``value`` is not changed."""
    if isinstance(value, dict):
        return {
            k: _money_value(v, places) if is_money_key(k) else money_tree(v, places) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [money_tree(v, places) for v in value]
    return value
