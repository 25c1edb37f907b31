"""One set of plan defaults: the same question asked by form, API and command gets the same plans."""

import json

import pytest
from django.core.management import call_command

from frontend.plans import FORM_DEFAULTS
from planner.app.models import PlanRecord
from planner.app.serializers import PlanRequestSerializer
from planner.defaults import PLAN_DEFAULTS
from planner.solver import PlanRequest
from srifty_web.money import money

pytestmark = pytest.mark.django_db

SPEC = {"spec": "torchvision:squeezenet1_1", "input_shape": "3,32,32", "precision": "amp"}
QUESTION = {
    "samples_per_epoch": 200_000,
    "epochs": 5,
    "objective": "cost",
    "deadline_hours": 12,
    "regions": ["us-east-1"],
}


def _ranked(result: dict) -> list[tuple]:
    return [
        # the API says total_usd as a 4-place decimal string, the record and the command a number
        (p["label"], money(p["total_usd"]), round(p["time_h"], 6), p["global_batch"])
        for p in result["plans"]
    ]


def test_every_entry_point_starts_from_the_same_defaults():
    fields = PlanRequestSerializer().fields
    for key, value in PLAN_DEFAULTS.items():
        assert fields[key].default == value
        assert getattr(PlanRequest("cost", 1.0), key) == value
        if key != "top_k":  # the form has no top-k field
            assert FORM_DEFAULTS[key] == str(value)


def test_the_same_question_by_form_api_and_command_gets_the_same_ranked_plans(
    client, user_api, user, staff, catalog, capsys, run_queued_plans
):
    """API and form queue the plan (solved by the worker's task), the command solves it in the
    foreground: one solve path, one answer."""
    posted = user_api.post("/api/v1/plans/", {"model": SPEC, **QUESTION}, format="json")
    assert posted.status_code == 202, posted.json()

    client.force_login(user)
    form = {
        **FORM_DEFAULTS,
        "spec": SPEC["spec"],
        "input_shape": SPEC["input_shape"],
        "precision": SPEC["precision"],
        **{k: str(v) for k, v in QUESTION.items() if k != "regions"},
        "regions": QUESTION["regions"],
    }
    assert client.post("/plans/", form).status_code == 302
    web = PlanRecord.objects.filter(owner=user).order_by("-pk").first()
    assert web.status == "queued" and len(run_queued_plans()) == 2
    web.refresh_from_db()
    api = user_api.get(posted["Location"])

    call_command(
        "plan",
        "--model",
        SPEC["spec"],
        "--input-shape",
        SPEC["input_shape"],
        "--precision",
        "amp",
        "--samples",
        str(QUESTION["samples_per_epoch"]),
        "--epochs",
        str(QUESTION["epochs"]),
        "--objective",
        "cost",
        "--deadline-hours",
        str(QUESTION["deadline_hours"]),
        "--regions",
        "us-east-1",
        "--json",
    )
    cli = json.loads(capsys.readouterr().out)

    ranked = _ranked(api.json()["result"])
    assert ranked and _ranked(web.result) == ranked and _ranked(cli) == ranked


def _checked(**extra) -> PlanRequestSerializer:
    s = PlanRequestSerializer(data={"model": SPEC, **QUESTION, **extra})
    s.is_valid()
    return s


def test_a_large_cluster_narrows_the_default_batch_range_from_below_to_fit_the_search_bound():
    small = _checked(max_nodes=64)
    assert small.errors == {}
    assert (small.validated_data["global_batch_min"], small.validated_data["global_batch_max"]) == (
        PLAN_DEFAULTS["global_batch_min"],
        PLAN_DEFAULTS["global_batch_max"],
    )
    big = _checked(max_nodes=512)  # 512 x 5 batch sizes of 256..4,096 is over the bound
    assert big.errors == {}
    assert (big.validated_data["global_batch_min"], big.validated_data["global_batch_max"]) == (512, 4096)


def test_a_batch_range_the_user_gave_is_never_narrowed_but_refused_naming_max_nodes():
    given = _checked(max_nodes=512, global_batch_min=256, global_batch_max=4096)
    assert list(given.errors) == ["max_nodes"]
    assert "narrow global_batch_min..global_batch_max" in str(given.errors["max_nodes"][0])
