"""A ``ModelSerializer`` that introspects its model once per class, not once per instance.

DRF's ``ModelSerializer.get_fields()`` rebuilds every field from the model's metadata each time
a serializer is instantiated (field mapping, kwargs, validators): about 2 ms of CPU per API
request here, as much as the queries. What it returns depends only on the class (``Meta`` and
the declared fields), never on the instance, data or context, so we build it once and give each
serializer a copy. The fields are bound (``field.bind``) on the copy, so the prototype stays
unbound and is shared safely by threads.

The copy is shallow for leaf fields: DRF's ``Field.__deepcopy__`` re-runs ``__init__`` with
deep copies of its arguments, another ~0.7 ms per request here, to protect state a leaf field
never changes after construction (its kwargs, choices, validator list: read-only once built;
``bind`` only sets attributes on the copy). Fields that own other fields (nested serializers,
``ListField``/``DictField`` children, ``many=True`` relations) are deep-copied as DRF does,
since binding them binds their children too.
"""

from __future__ import annotations

import copy

from rest_framework import serializers
from rest_framework.relations import ManyRelatedField

_PROTO = "_srifty_fields_prototype"


class ModelSerializer(serializers.ModelSerializer):
    def get_fields(self) -> dict[str, serializers.Field]:
        cls = type(self)
        proto = cls.__dict__.get(_PROTO)  # this class's own: a subclass has other fields
        if proto is None:
            # Two threads may both build it on first use; either result is the same.
            proto = super().get_fields()
            setattr(cls, _PROTO, proto)
        return {name: _copy_field(field) for name, field in proto.items()}


def _copy_field(field: serializers.Field) -> serializers.Field:
    if isinstance(field, _CONTAINERS) or hasattr(field, "child") or hasattr(field, "child_relation"):
        return copy.deepcopy(field)
    return copy.copy(field)


_CONTAINERS = (serializers.BaseSerializer, serializers.ListField, serializers.DictField, ManyRelatedField)
