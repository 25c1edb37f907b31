"""The plan service returns a typed result (``planner.plan_result.PlanResult``); the worker
stores its JSON, and reading that back gives the same JSON (the pages' scripts and the stored
rows keep their format)."""

from __future__ import annotations

import json

import pytest

from planner.app import service, solving
from planner.app.serializers import BAND_FIELDS, PlanRequestSerializer, PlanSerializer
from planner.option import PlanOption
from planner.plan_result import BAND_KEYS, PlanResult
from tests.support.plans import plan_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def solved(catalog, user, monkeypatch):
    """(the stored plan, the PlanResult the service returned for it)."""
    returned = []
    real = service.solve_request

    def keep(*args, **kwargs):
        returned.append(real(*args, **kwargs))
        return returned[-1]

    monkeypatch.setattr(service, "solve_request", keep)
    checked = PlanRequestSerializer(data=plan_body(baseline_gpu="A100"))
    assert checked.is_valid(), checked.errors
    record = solving.create_plan(user, dict(checked.validated_data))
    assert record.status == "solved", record.error
    return record, returned[0]


def test_the_stored_result_is_the_services_result_as_json(solved):
    record, result = solved
    assert isinstance(result, PlanResult) and result.plans
    assert json.loads(json.dumps(result.to_json())) == record.result
    assert record.solve_time_s == result.solve_time_s


def test_a_stored_result_read_and_written_again_is_unchanged(solved):
    record, _ = solved
    typed = PlanResult.from_json(record.result)
    assert typed.to_json() == record.result
    assert [p.option for p in typed.plans] == [PlanOption.from_json(p) for p in record.result["plans"]]
    assert [b.name for b in typed.baselines] == [b["name"] for b in record.result["baselines"]]
    assert typed.model.spec == "torchvision:squeezenet1_1" and typed.total_samples == 1_000_000


def test_the_apis_bands_are_each_rows_band_fields(solved):
    record, result = solved
    assert set(BAND_FIELDS) == {"rank", "label", "model_error", *BAND_KEYS}
    bands = PlanSerializer(record).data["bands"]
    assert [(b["rank"], b["label"]) for b in bands] == [(p.rank, p.label) for p in result.plans]
    assert all(set(b) == set(BAND_FIELDS) for b in bands)
