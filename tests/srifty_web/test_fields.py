import pytest
from rest_framework import serializers

from srifty_web.fields import FloatField


class Hours(serializers.Serializer):
    hours = FloatField(min_value=0.01)


@pytest.mark.parametrize("value", [True, False])
def test_a_json_boolean_is_not_a_number_of_hours(value):
    s = Hours(data={"hours": value})
    assert not s.is_valid()
    assert s.errors["hours"] == ["A valid number is required."]


@pytest.mark.parametrize(("value", "parsed"), [(2, 2.0), (0.5, 0.5), ("1.5", 1.5)])
def test_numbers_and_numeric_strings_still_read_as_drf_reads_them(value, parsed):
    s = Hours(data={"hours": value})
    assert s.is_valid(), s.errors
    assert s.validated_data["hours"] == parsed


def test_drf_own_float_field_takes_a_boolean_which_is_why_this_one_exists():
    class Plain(serializers.Serializer):
        hours = serializers.FloatField()

    s = Plain(data={"hours": True})
    assert s.is_valid() and s.validated_data["hours"] == 1.0
