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
    """A dollar amount with precision that suits its size; an em dash when unknown."""
    v = _number(value)
    if v is None:
        return "—" if value is None or value == "" else str(value)
    return f"${v:,.4f}" if v < 1 else f"${v:,.2f}"


@register.filter
def make_list_words(value: str) -> list[str]:
    """``"a b c"|make_list_words`` → ``["a", "b", "c"]`` (for small fixed option lists)."""
    return value.split()


@register.filter
def hours(value) -> str:
    """Hours as ``3.2 h`` or ``45 min``."""
    v = _number(value)
    if v is None:
        return "—" if value is None or value == "" else str(value)
    return f"{v * 60:.0f} min" if v < 1 else f"{v:.1f} h"


@register.filter
def pct(value) -> str:
    v = _number(value)
    return ("—" if value is None else str(value)) if v is None else f"{v:+.0f}%"
