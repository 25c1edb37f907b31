"""Checks every stored JSON document passes: finite numbers, integers a database column can hold,
no NUL characters (PostgreSQL refuses them in text and JSON), bounded nesting and size.

Agents and CSV files are outside our control; a value our database cannot store must be a
clear 400 naming its place, never a 500 half-way through a write.

Every JSON body the API takes is read by :func:`loads_bounded` (through :class:`SafeJSONParser`):
the values are counted in the text before anything is built (a 10 MB body of ``[[],[],...]`` is
3.5 million lists, some 250 MB), nesting that the stdlib's scanner refuses (RecursionError) is a
400, and so is nesting deeper than ``MAX_DEPTH``. YAML is read by ``launcher.taskfile.load_bounded``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding  # type: ignore[attr-defined]  # not in the stubs

MAX_INT = 2**53  # exact in JSON/JavaScript doubles and in every database integer column we use
MAX_DEPTH = 32
# Values (numbers, strings, literals, arrays, objects) in one JSON body: an agent's largest
# document, a profile, holds some 10^5; a million empty lists cost ~60 MB to build.
MAX_VALUES = 1_000_000
_STRING_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included


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


def count_values(text: str) -> int:
    """At least as many as the values in the JSON ``text``, counted without parsing it: every
    value after the first of an array or object follows a comma, and every array or object opens
    with a bracket (strings are dropped first, so the commas and brackets inside them do not
    count). Linear in the text, one copy of it at most."""
    bare = _STRING_RE.sub("", text)
    return bare.count(",") + bare.count("[") + bare.count("{") + 1


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")  # NaN, Infinity, -Infinity (DRF's strict mode)


def loads_bounded(text: str) -> Any:
    """``json.loads`` of a user's JSON under bounds: :class:`PayloadError` when it holds more
    than ``MAX_VALUES`` values (counted before parsing), nests too deeply for the stdlib's scanner
    (its RecursionError), or is refused by :func:`check_json_values` (deeper than ``MAX_DEPTH``,
    numbers and text a database cannot store). ``ValueError`` (``json.JSONDecodeError``) for text
    that is not JSON."""
    values = count_values(text)
    if values > MAX_VALUES:
        raise PayloadError(f"<root>: more than {MAX_VALUES} values (about {values})")
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError as exc:
        raise PayloadError(f"<root>: nested deeper than {MAX_DEPTH} levels") from exc
    check_json_values(data)
    return data


class SafeJSONParser(JSONParser):
    """DRF's JSON parser, reading through :func:`loads_bounded`: a body larger than
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``, with too many values, nested too deeply (the stdlib raises
    RecursionError, which DRF does not catch) or holding a value :func:`check_json_values`
    refuses is a 400 naming the limit, before the values are built where it can be."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if stream is None:
            raw = b""
        else:  # one byte past the limit tells a body over it
            raw = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(raw) > limit:
            raise ParseError(
                f"JSON parse error - the body is larger than {limit} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)"
            )
        try:
            text = raw.decode(get_encoding(parser_context or {}))  # DRF's: text codecs only
            return loads_bounded(text)
        except PayloadError as exc:
            raise ParseError(f"JSON value cannot be stored: {exc}") from exc
        except ValueError as exc:  # not JSON, or not in its charset
            raise ParseError(f"JSON parse error - {exc}") from exc
