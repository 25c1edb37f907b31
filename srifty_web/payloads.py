"""Checks every stored JSON document passes: finite numbers, integers a database column can hold,
no NUL characters (PostgreSQL refuses them in text and JSON), bounded nesting.

Agents and CSV files are outside our control; a value our database cannot store must be a
clear 400 naming its place, never a 500 half-way through a write.
"""

from __future__ import annotations

import math
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_INT = 2**53  # exact in JSON/JavaScript doubles and in every database integer column we use
MAX_DEPTH = 32


class PayloadError(ValueError):
    """``path: message`` for the first value that cannot be stored."""


def check_json_values(value: Any, path: str = "", depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise PayloadError(f"{path or '<root>'}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        if abs(value) >= MAX_INT:
            raise PayloadError(f"{path or '<root>'}: integer {value} is out of range")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"{path or '<root>'}: {value} is not a finite number")
    elif isinstance(value, str):
        if "\x00" in value:
            raise PayloadError(f"{path or '<root>'}: contains a NUL character")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or "\x00" in key:
                raise PayloadError(f"{path or '<root>'}: bad key {key!r}")
            check_json_values(item, f"{path}.{key}" if path else key, depth + 1)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_json_values(item, f"{path}[{i}]", depth + 1)
    else:
        raise PayloadError(f"{path or '<root>'}: {type(value).__name__} is not a JSON value")


class SafeJSONParser(JSONParser):
    """DRF's JSON parser, plus: absurd nesting is a 400 (the stdlib raises RecursionError,
    which DRF does not catch), and so is any value :func:`check_json_values` refuses."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - nested too deeply") from exc
        try:
            check_json_values(data)
        except PayloadError as exc:
            raise ParseError(f"JSON value cannot be stored: {exc}") from exc
        return data
