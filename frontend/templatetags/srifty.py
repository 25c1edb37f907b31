from django import template

register = template.Library()


@register.filter
def usd(value) -> str:
    """A dollar amount with precision that suits its size; an em dash when unknown."""
    if value is None or value == "":
        return "—"
    v = float(value)
    return f"${v:,.4f}" if v < 1 else f"${v:,.2f}"


@register.filter
def make_list_words(value: str) -> list[str]:
    """``"a b c"|make_list_words`` → ``["a", "b", "c"]`` (for small fixed option lists)."""
    return value.split()


@register.filter
def hours(value) -> str:
    """Hours as ``3.2 h`` or ``45 min``."""
    if value is None:
        return "—"
    v = float(value)
    return f"{v * 60:.0f} min" if v < 1 else f"{v:.1f} h"


@register.filter
def pct(value) -> str:
    return "—" if value is None else f"{float(value):+.0f}%"
