from django import template

register = template.Library()


def _number(value) -> float | None:
    """``value`` as a float, or None when it is missing or not a number (a stored plan field
    may hold anything: filters must not raise, the autoescaped text is shown instead)."""
    try:
        return None if value is None or value == "" else float(value)
    except (TypeError, ValueError):
        return None


@register.filter
def usd(value) -> str:
    """Dollars with two decimals and thousands separators (``$0.01``, ``$1,234.50``); a positive
    amount under half a cent is ``<$0.01`` (not ``$0.00``); an em dash when unknown."""
    v = _number(value)
    if v is None:
        return "—" if value is None or value == "" else str(value)
    if 0 < abs(v) < 0.005:
        return "<$0.01" if v > 0 else "-<$0.01"
    return f"-${-v:,.2f}" if v < 0 else f"${v:,.2f}"


@register.filter
def make_list_words(value: str) -> list[str]:
    """``"a b c"|make_list_words`` → ``["a", "b", "c"]`` (for small fixed option lists)."""
    return value.split()


HOURS_PER_YEAR = 24 * 365
# Beyond ~10 years an hour count reads as noise (13893794518.2 h): years say the size instead.
YEARS_FROM_H = 10 * HOURS_PER_YEAR


@register.filter
def hours(value) -> str:
    """Hours as ``45 min``, ``3.2 h``, ``1,234 h`` or, past ten years, ``1,585,000 years``."""
    v = _number(value)
    if v is None:
        return "—" if value is None or value == "" else str(value)
    if v < 1:
        return f"{v * 60:.0f} min"
    if v < 1000:
        return f"{v:.1f} h"
    if v < YEARS_FROM_H:
        return f"{v:,.0f} h"
    return f"{v / HOURS_PER_YEAR:,.0f} years"


@register.filter
def count(value) -> str:
    """A whole number with thousands separators (``12,345``); an em dash when unknown."""
    v = _number(value)
    if v is None:
        return "—" if value is None or value == "" else str(value)
    return f"{v:,.0f}"


@register.filter
def best_plan(record) -> str:
    """The plans list's "Best" cell for a ``PlanRecord`` (frontend.wording.best_words)."""
    from frontend.wording import best_words

    return best_words(str(record.status), record.result, str(record.binding_constraint or ""))


@register.filter
def pct(value) -> str:
    v = _number(value)
    return ("—" if value is None else str(value)) if v is None else f"{v:+.0f}%"


@register.inclusion_tag("frontend/_price_age.html")
def price_age() -> dict:
    """``prices as of <date> (<n> days old)``, with the refresh hint when stale (catalog.freshness)."""
    from catalog.freshness import REFRESH_COMMAND
    from catalog.freshness import price_age as age

    return {"age": age(), "refresh_command": REFRESH_COMMAND}


@register.filter
def zone_kind_label(zone_id) -> str:
    """``"Local Zone"`` / ``"Wavelength Zone"`` for such a zone ID, else ``""`` (catalog.zones)."""
    from catalog.zones import zone_label

    return zone_label(str(zone_id)) if zone_id else ""
