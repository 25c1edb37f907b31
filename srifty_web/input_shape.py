"""One sample's input shape, as both apps take it from a request: the profiler (a compute run's
``input_shape``) and the planner (a plan's model). Here, not in either app, so that neither
imports the other for it."""

from __future__ import annotations

import re

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

# \Z, not $: "$" also matches before a trailing newline, so "3,224,224\n" would pass.
SHAPE_RE = re.compile(r"^\d{1,5}(,\d{1,5}){0,4}\Z")
MAX_SAMPLE_ELEMENTS = 2**26  # one input sample: 3x224x224 is 150k, 3x16x224x224 video 2.4M


def shape_of(text: str) -> tuple[int, ...] | None:
    """``input_shape`` as integers, or ``None`` when it is not well formed (its own error)."""
    return tuple(int(d) for d in text.split(",")) if SHAPE_RE.match(text or "") else None


@extend_schema_field(
    {
        "type": "string",
        "maxLength": 64,
        "example": "3,224,224",
        "description": "one sample's shape, comma-separated: 3,224,224 (C,H,W image) or 512 (tokens)",
    }
)
class InputShapeField(serializers.CharField):
    """A sample's input shape (checked against ``SHAPE_RE`` by the serializer that uses it)."""
