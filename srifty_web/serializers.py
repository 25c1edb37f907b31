"""A ``ModelSerializer`` that introspects its model once per class, not once per instance.

DRF's ``ModelSerializer.get_fields()`` rebuilds every field from the model's metadata each time
a serializer is instantiated (field mapping, kwargs, validators): about 2 ms of CPU per API
request here, as much as the queries. What it returns depends only on the class (``Meta`` and
the declared fields), never on the instance, data or context, so we build it once and give each
serializer a deep copy, exactly what DRF itself does with declared fields. The fields are bound
(``field.bind``) on the copy, so the prototype stays unbound and is shared safely by threads.
"""

from __future__ import annotations

import copy

from rest_framework import serializers

_PROTO = "_srifty_fields_prototype"


class ModelSerializer(serializers.ModelSerializer):
    def get_fields(self) -> dict[str, serializers.Field]:
        cls = type(self)
        proto = cls.__dict__.get(_PROTO)  # this class's own: a subclass has other fields
        if proto is None:
            # Two threads may both build it on first use; either result is the same.
            proto = super().get_fields()
            setattr(cls, _PROTO, proto)
        return copy.deepcopy(proto)
