from django import template

register = template.Library()


@register.filter
def usd(value) -> str:
    """A dollar amount with precision that suits its size; an em dash when unknown."""
    if value is None or value == "":
        return "—"
    v = float(value)
    return f"${v:,.4f}" if v < 1 else f"${v:,.2f}"
