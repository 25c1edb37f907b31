"""Parsing of sizes, size ranges, shapes and integer lists given on the command line.

Sizes use binary units, as nccl-tests and most GPU tooling do: ``1KB == 1KiB == 1024`` bytes,
``1MB == 2**20``, ``1GB == 2**30``. A bare number is bytes.
"""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "B": 1,
    "K": 1024,
    "KB": 1024,
    "KIB": 1024,
    "M": 1024**2,
    "MB": 1024**2,
    "MIB": 1024**2,
    "G": 1024**3,
    "GB": 1024**3,
    "GIB": 1024**3,
    "T": 1024**4,
    "TB": 1024**4,
    "TIB": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


class ArgumentValueError(ValueError):
    """A command-line value could not be parsed; the message says what was expected."""


def parse_size(text: str) -> int:
    """``"2GB"`` -> 2147483648. Raises :class:`ArgumentValueError` on anything else."""
    match = _SIZE_RE.match(text)
    if not match:
        raise ArgumentValueError(
            f"bad size {text!r}: expected a number with an optional unit, e.g. 64KB, 2GB"
        )
    number, unit = match.groups()
    factor = _UNITS.get(unit.upper())
    if factor is None:
        raise ArgumentValueError(f"bad size unit in {text!r}: use B, KB, MB, GB or TB")
    value = int(float(number) * factor)
    if value <= 0:
        raise ArgumentValueError(f"size must be positive, got {text!r}")
    return value


def parse_size_range(text: str) -> tuple[int, int]:
    """``"1KB..256MB"`` -> (1024, 268435456); a single size means a one-point range."""
    parts = text.split("..")
    if len(parts) == 1:
        size = parse_size(parts[0])
        return size, size
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        raise ArgumentValueError(f"bad size range {text!r}: expected MIN..MAX, e.g. 1KB..256MB")
    try:
        low, high = parse_size(parts[0]), parse_size(parts[1])
    except ArgumentValueError as exc:
        raise ArgumentValueError(f"bad size range {text!r}: {exc}") from None
    if low > high:
        raise ArgumentValueError(f"bad size range {text!r}: MIN is larger than MAX")
    return low, high


def geometric_sizes(low: int, high: int, factor: int = 2) -> list[int]:
    """Sizes ``low, low*factor, ...`` up to ``high``; ``high`` is always the last one."""
    if factor < 2:
        raise ArgumentValueError("size factor must be at least 2")
    sizes: list[int] = []
    size = low
    while size < high:
        sizes.append(size)
        size *= factor
    sizes.append(high)
    return sizes


def parse_shape(text: str) -> tuple[int, ...]:
    """``"3,224,224"`` -> (3, 224, 224): the per-sample input shape, without the batch dim."""
    try:
        dims = tuple(int(part) for part in text.replace("x", ",").split(","))
    except ValueError:
        raise ArgumentValueError(
            f"bad input shape {text!r}: expected comma-separated integers, e.g. 3,224,224"
        ) from None
    if not dims or any(dim <= 0 for dim in dims):
        raise ArgumentValueError(f"bad input shape {text!r}: every dimension must be a positive integer")
    return dims


def parse_int_list(text: str, what: str = "batch sizes") -> list[int]:
    """``"8,16,32"`` -> [8, 16, 32], sorted and de-duplicated; every value positive."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ArgumentValueError(f"bad {what} {text!r}: expected comma-separated positive integers") from None
    if not values or any(value <= 0 for value in values):
        raise ArgumentValueError(f"bad {what} {text!r}: expected comma-separated positive integers")
    return sorted(set(values))


def format_size(size: int) -> str:
    """1536 -> '1.5KB' (binary units), for log lines."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:g}{unit}" if unit != "B" else f"{int(value)}B"
        value /= 1024
    return f"{value:g}TB"
