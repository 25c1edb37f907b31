import threading

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from rest_framework import serializers

from srifty_web.serializers import ModelSerializer

pytestmark = pytest.mark.django_db


class GroupSerializer(ModelSerializer):
    class Meta:
        model = Group
        fields = ["id", "name"]


class UserSerializer(ModelSerializer):
    tags = serializers.ListField(child=serializers.CharField(max_length=5), required=False)
    groups = serializers.SlugRelatedField(slug_field="name", many=True, queryset=Group.objects.all())
    best_group = GroupSerializer(read_only=True, required=False)

    class Meta:
        model = User
        fields = ["id", "username", "email", "groups", "tags", "best_group"]


def test_it_introspects_the_model_once_per_class(monkeypatch):
    calls = []
    real = serializers.ModelSerializer.get_fields
    monkeypatch.setattr(serializers.ModelSerializer, "get_fields", lambda self: calls.append(1) or real(self))

    class Fresh(ModelSerializer):
        class Meta:
            model = Group
            fields = ["id", "name"]

    for _ in range(5):
        assert set(Fresh().fields) == {"id", "name"}
    assert len(calls) == 1


def test_each_serializer_binds_its_own_fields_and_the_prototype_stays_unbound():
    a, b = UserSerializer(), UserSerializer()
    for name in ("username", "email", "tags", "groups", "best_group"):
        assert a.fields[name] is not b.fields[name]
        assert a.fields[name].parent is a and b.fields[name].parent is b
    # Children of containers are bound to their own parents, not shared.
    assert a.fields["tags"].child is not b.fields["tags"].child
    assert a.fields["tags"].child.parent is a.fields["tags"]
    assert a.fields["groups"].child_relation.parent is a.fields["groups"]
    assert a.fields["best_group"].fields["name"] is not b.fields["best_group"].fields["name"]
    proto = UserSerializer.__dict__["_srifty_fields_prototype"]
    assert all(getattr(f, "parent", None) is None for f in proto.values())


def test_copies_validate_independently_and_keep_the_models_rules():
    Group.objects.create(name="vision")
    User.objects.create_user("taken", password="x-pass-1234")
    bad = UserSerializer(
        data={"username": "taken", "email": "nope", "groups": ["ghost"], "tags": ["toolongtag"]}
    )
    good = UserSerializer(data={"username": "fresh", "email": "a@b.co", "groups": ["vision"], "tags": ["ok"]})
    assert not bad.is_valid()
    assert set(bad.errors) == {"username", "email", "groups", "tags"}  # unique, email, slug, child max_length
    assert good.is_valid(), good.errors
    assert good.validated_data["groups"][0].name == "vision"


def test_threads_building_and_using_serializers_at_once_agree():
    out, errors = [], []

    def work():
        try:
            for _ in range(50):
                s = UserSerializer(data={"username": "u", "email": "x", "groups": []})
                s.is_valid()
                out.append(tuple(sorted(s.errors)))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()  # this thread's own connection (PostgreSQL would keep it open)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and set(out) == {("email",)}
