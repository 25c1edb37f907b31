"""Serializer fields every API shares.

DRF's ``FloatField`` takes a JSON ``true`` as 1.0 (it calls ``float()`` on what it gets), so
``"max_hours": true`` launched a one-hour job and ``"min_gpus": false`` searched for zero GPUs.
Its ``IntegerField`` already refuses booleans (it parses ``str(value)``); this one does the same.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class FloatField(serializers.FloatField):
    """A number (or a numeric string, as DRF's), never a boolean."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)
