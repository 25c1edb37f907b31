"""The plan form's error messages name its fields as the form labels them (frontend.wording)."""

from __future__ import annotations

import re
from pathlib import Path

from frontend import wording
from planner.app.serializers import PlanProfileModelSerializer, PlanRequestSerializer, PlanSpecModelSerializer

PLANS_HTML = Path(wording.__file__).parent / "templates" / "frontend" / "plans.html"


def _api_fields() -> set[str]:
    fields = set(PlanRequestSerializer().fields)
    return fields | set(PlanSpecModelSerializer().fields) | set(PlanProfileModelSerializer().fields)


def test_it_has_a_label_for_every_plan_form_input_that_is_an_api_field():
    inputs = set(re.findall(r'name="([a-z_]+)"', PLANS_HTML.read_text()))
    missing = sorted((inputs & _api_fields()) - set(wording.FIELD_LABELS))
    assert missing == []


def test_it_says_min_batch_per_gpu_as_the_form_labels_it():
    assert wording.humanize("min_batch_per_gpu must not exceed global_batch_max") == (
        "min batch per GPU must not exceed global batch max"
    )


def test_it_leaves_on_demand_inside_quotas_on_demand_to_the_longer_name():
    assert wording.humanize("spot or on_demand; quotas_on_demand") == "spot or on-demand; on-demand quota"
