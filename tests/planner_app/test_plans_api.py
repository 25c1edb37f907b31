"""Plans over the real catalog snapshot, through the API and the command."""

import json
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from planner.app.models import PlanRecord, PlanStatus
from srifty_web.money import is_money_key, money

pytestmark = pytest.mark.django_db

TINY = {"spec": "torchvision:squeezenet1_1", "input_shape": "3,32,32", "precision": "amp"}


@pytest.fixture
def solve(user_api, run_queued_plans):
    """POST a plan (202 and its URL), let the worker's task solve it, GET it (as a client that
    waits for it would)."""

    def post_and_solve(body: dict):
        resp = user_api.post("/api/v1/plans/", body, format="json")
        assert resp.status_code == 202, resp.json()
        assert resp["Location"] == resp.json()["url"] and resp.json()["status"] == "queued"
        assert run_queued_plans() == [resp.json()["id"]]
        return user_api.get(resp["Location"])

    return post_and_solve


def _request(**over):
    body = {
        "model": TINY,
        "samples_per_epoch": 1_281_167,
        "epochs": 10,
        "objective": "cost",
        "deadline_hours": 24,
        "spot": True,
        "max_nodes": 8,
        "max_types": 1,
        "regions": ["us-east-1", "us-west-2"],
        "global_batch_min": 256,
        "global_batch_max": 1024,
        "baseline_gpu": "A100",
    }
    body.update(over)
    return body


def _money_at(value, path=""):
    """(path, value) of every money key (srifty_web.money.is_money_key) at any depth; list
    indices are written as []."""
    if isinstance(value, dict):
        for k, v in value.items():
            if is_money_key(k) and not isinstance(v, dict | list):
                yield f"{path}.{k}", v
            else:
                yield from _money_at(v, f"{path}.{k}")
    elif isinstance(value, list):
        for v in value:
            yield from _money_at(v, f"{path}[]")


def test_the_api_says_every_amount_of_a_plan_as_a_decimal_string_and_stores_numbers(user_api, catalog, solve):
    plan = solve(_request()).json()
    shown = list(_money_at(plan["result"])) + list(_money_at(plan["bands"], ".bands"))
    paths = {p for p, _ in shown}
    assert {
        ".plans[].hourly_usd",
        ".plans[].total_usd",
        ".plans[].cost_p90_usd",
        ".plans[].groups[].price_per_hour",
        ".alternatives.spot.plan.total_usd",
        ".alternatives.on-demand.plan.groups[].price_per_hour",
        ".baselines[].plan.hourly_usd",
        ".pareto[].total_usd",
        ".points[].hourly_usd",
        ".bands[].cost_p50_usd",
    } <= paths, sorted(paths)
    assert all(isinstance(v, str) and Decimal(v).as_tuple().exponent == -4 for _, v in shown if v is not None)
    stored = list(_money_at(PlanRecord.objects.get(pk=plan["id"]).result))
    assert [p for p, _ in stored] == [p for p, _ in shown if not p.startswith(".bands")]
    assert all(isinstance(v, float | int) for _, v in stored if v is not None)  # the record keeps numbers
    assert [money(v) for _, v in stored] == [v for p, v in shown if not p.startswith(".bands")]


def test_a_plan_is_solved_stored_and_reopened(user_api, catalog, solve):
    resp = solve(_request())
    assert resp.status_code == 200, resp.json()
    plan = resp.json()
    best = plan["result"]["plans"][0]
    assert plan["status"] == "solved" and best["rank"] == 1
    assert best["region"] in ("us-east-1", "us-west-2") and best["time_h"] <= 24
    assert best["verified"]["iter_time_s"] > 0  # re-simulated with Monte-Carlo
    assert plan["result"]["pareto"] and plan["result"]["points"]
    alts = plan["result"]["alternatives"]
    assert alts["spot"]["plan"]["uses_spot"] and not alts["on-demand"]["plan"]["uses_spot"]
    assert (
        alts["spot"]["plan"]["expected_interruptions"]
        > 0
        == alts["on-demand"]["plan"]["expected_interruptions"]
    )
    names = {b["name"] for b in plan["result"]["baselines"]}
    assert {"cheapest-gpu-hour", "fastest-type", "skypilot"} <= names
    # ranked: cheapest first for a cost objective
    costs = [Decimal(p["total_usd"]) for p in plan["result"]["plans"]]
    assert costs == sorted(costs)
    again = user_api.get(f"/api/v1/plans/{plan['id']}/").json()
    assert again["request"]["deadline_hours"] == 24 and again["result"]["plans"][0] == best


def test_time_under_a_budget_and_throughput_under_an_hourly_cap(user_api, catalog, solve):
    fast = solve(_request(objective="time", deadline_hours=None, budget_usd=50)).json()
    assert all(Decimal(p["total_usd"]) <= 50 for p in fast["result"]["plans"])
    assert fast["request"]["budget_usd"] == "50.0000"  # the input echoed as a decimal string
    cap = solve(_request(objective="throughput", deadline_hours=None, max_hourly_usd="3")).json()
    assert all(Decimal(p["hourly_usd"]) <= 3 for p in cap["result"]["plans"])
    assert cap["request"]["max_hourly_usd"] == "3.0000"  # a string input works as a number does


def test_an_infeasible_plan_is_stored_naming_the_binding_constraint(catalog, solve):
    plan = solve(_request(deadline_hours=0.2, max_nodes=1, spot=False, epochs=10000)).json()
    assert plan["status"] == PlanStatus.INFEASIBLE and plan["result"] is None
    assert plan["binding_constraint"] == "deadline_hours" and "deadline" in plan["error"]
    assert plan["finished_at"] and PlanRecord.objects.get(pk=plan["id"]).finished


@pytest.mark.parametrize(
    "over, field",
    [
        ({"objective": "cost", "deadline_hours": None}, "deadline_hours"),
        ({"global_batch_min": 2048, "global_batch_max": 256}, "global_batch_min"),
        ({"regions": ["atlantis-1"]}, "regions"),
        ({"model": {"spec": "import os", "input_shape": "3,32,32"}}, "model"),
        ({"samples_per_epoch": None, "epochs": None}, "samples_per_epoch"),
        ({"spot": False, "on_demand": False}, "spot"),
        ({"quotas_on_demand": {"P": -1}}, "quotas_on_demand"),
    ],
)
def test_contradictory_requests_are_a_400_naming_the_field(user_api, catalog, over, field):
    body = {k: v for k, v in _request(**over).items() if v is not None}
    resp = user_api.post("/api/v1/plans/", body, format="json")
    assert resp.status_code == 400 and field in resp.json(), resp.json()
    assert not PlanRecord.objects.exists()


def test_quotas_bound_the_plan(user_api, catalog, solve):
    plan = solve(_request(spot=False, quotas_on_demand={"P": 0, "G": 8})).json()
    for p in plan["result"]["plans"]:
        assert all(not g["instance_type"].startswith("p") for g in p["groups"])


def test_plans_are_private_to_the_team(user_api, catalog, django_user_model, solve):
    from rest_framework.test import APIClient

    plan_id = solve(_request()).json()["id"]
    other = APIClient()
    other.force_authenticate(django_user_model.objects.create_user("zed", password="z-pass-12345"))
    assert other.get(f"/api/v1/plans/{plan_id}/").status_code == 404


def traced(profile: dict) -> dict:
    """The profile with the workload trace that the agent adds (as the agent builds it)."""
    from workload.cost import trace_workload
    from workload.specs import load_model

    spec, shape = profile["model"]["spec"], tuple(profile["model"]["input_shape"])
    build = lambda: load_model(spec, 10, shape, allow_code=True)  # noqa: E731
    return {**profile, "workload": trace_workload(build, shape, model_spec=spec, num_classes=10)}


def test_a_plan_from_a_stored_cpu_profile(user_api, catalog, make_run, compute_profile, solve):
    from profiler import actions

    run = make_run()
    actions.complete_run(run, traced(compute_profile))
    resp = solve(_request(model={"profile_run": run.pk}))
    assert resp.status_code == 200, resp.json()
    model = resp.json()["result"]["model"]
    assert model["profile_run"] == run.pk and model["source"] == "analytical"  # a CPU profile cannot transfer


def test_a_profile_of_model_code_without_a_workload_trace_is_refused_not_imported(
    user_api, catalog, make_run, compute_profile, monkeypatch
):
    from profiler import actions
    from workload import specs

    imported = []
    monkeypatch.setattr(specs, "_resolve_factory", lambda target: imported.append(target))
    run = make_run()
    actions.complete_run(run, compute_profile)  # an older agent: no "workload"
    resp = user_api.post("/api/v1/plans/", _request(model={"profile_run": run.pk}), format="json")
    assert resp.status_code == 400 and "no workload trace" in resp.json()["profile_run"][0]
    assert imported == []


def test_the_plan_command_still_plans_the_operators_own_factory(db, catalog, staff, capsys):
    call_command(
        "plan",
        "--model",
        "examples.tiny_model:build",
        "--input-shape",
        "3,32,32",
        "--samples",
        "100000",
        "--epochs",
        "5",
        "--objective",
        "cost",
        "--deadline-hours",
        "12",
        "--regions",
        "us-east-1",
        "--json",
    )
    assert json.loads(capsys.readouterr().out)["model"]["spec"] == "examples.tiny_model:build"


def test_the_plan_command_prints_the_table_and_json(db, catalog, staff, capsys):
    call_command(
        "plan",
        "--model",
        TINY["spec"],
        "--input-shape",
        "3,32,32",
        "--samples",
        "100000",
        "--epochs",
        "5",
        "--objective",
        "cost",
        "--deadline-hours",
        "12",
        "--regions",
        "us-east-1",
        "--spot",
        "--max-nodes",
        "4",
    )
    out = capsys.readouterr().out
    assert "configuration" in out and "baseline cheapest-gpu-hour" in out
    call_command(
        "plan",
        "--model",
        TINY["spec"],
        "--input-shape",
        "3,32,32",
        "--samples",
        "100000",
        "--epochs",
        "5",
        "--objective",
        "time",
        "--budget",
        "100",
        "--regions",
        "us-east-1",
        "--json",
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["plans"][0]["total_usd"] <= 100


def test_the_plan_command_explains_infeasible_and_bad_input(db, catalog, staff):
    with pytest.raises(CommandError, match="infeasible \\(budget_usd\\)"):
        call_command(
            "plan",
            "--model",
            TINY["spec"],
            "--input-shape",
            "3,32,32",
            "--samples",
            "10000000",
            "--epochs",
            "100",
            "--objective",
            "time",
            "--budget",
            "0.5",
            "--regions",
            "us-east-1",
        )
    with pytest.raises(CommandError, match="deadline_hours"):
        call_command(
            "plan", "--model", TINY["spec"], "--samples", "1000", "--epochs", "1", "--objective", "cost"
        )
    with pytest.raises(CommandError, match="--quota"):
        call_command(
            "plan",
            "--model",
            TINY["spec"],
            "--samples",
            "1000",
            "--epochs",
            "1",
            "--objective",
            "time",
            "--budget",
            "10",
            "--quota",
            "lots",
        )


def _profile_run(make_run, compute_profile, **device):
    from profiler import actions

    run = make_run()
    actions.complete_run(run, traced({**compute_profile, "device": {**compute_profile["device"], **device}}))
    return run


def test_it_warns_when_the_profile_ran_another_precision(user_api, catalog, make_run, compute_profile, solve):
    run = _profile_run(make_run, compute_profile, precision="fp32", precision_requested="fp32")
    resp = solve(_request(model={"profile_run": run.pk, "precision": "amp"}))
    assert resp.status_code == 200, resp.json()
    plan = resp.json()
    [warning] = plan["warnings"]
    assert warning["code"] == "precision_mismatch"
    assert f"asks for amp, but profiling run #{run.pk} ran fp32" in warning["message"]
    assert plan["result"]["warnings"] == plan["warnings"]
    model = plan["result"]["model"]
    assert model["precision_requested"] == "amp" and model["profile_precision"] == "fp32"
    assert user_api.get(f"/api/v1/plans/{plan['id']}/").json()["warnings"] == plan["warnings"]


def test_it_warns_that_an_older_cpu_profile_asked_for_amp_ran_bf16(
    user_api, catalog, make_run, compute_profile, solve
):
    run = _profile_run(make_run, compute_profile, precision="amp")  # an older agent: no precision_requested
    plan = solve(_request(model={"profile_run": run.pk, "precision": "amp"})).json()
    [warning] = plan["warnings"]
    assert "ran bf16 (CPU autocast is bf16 only)" in warning["message"]


@pytest.mark.parametrize("model_precision", ["fp32", None])
def test_it_does_not_warn_when_the_precisions_match(
    user_api, catalog, make_run, compute_profile, model_precision, solve
):
    run = _profile_run(make_run, compute_profile, precision="fp32")
    model = {"profile_run": run.pk, **({"precision": model_precision} if model_precision else {})}
    plan = solve(_request(model=model)).json()
    assert plan["warnings"] == [] and plan["result"]["warnings"] == []
    assert plan["result"]["model"]["precision_requested"] == model_precision


def test_a_spec_plan_has_no_warnings_and_still_defaults_to_amp(user_api, catalog, solve):
    plan = solve(_request(model={"spec": TINY["spec"], "input_shape": "3,32,32"})).json()
    assert plan["warnings"] == [] and plan["request"]["model"]["precision"] == "amp"


VALIDATED = {
    "measured": {
        "median_pct": 1.7,
        "p90_pct": 4.0,
        "n": 40,
        "bench": "bench/accuracy_local.py",
        "measured_at": "2026-12-04",
    },
    "analytical": {
        "median_pct": 14.0,
        "p90_pct": 38.5,
        "n": 210,
        "bench": "bench/accuracy_public.py",
        "measured_at": "2026-12-05",
    },
}


def test_each_plan_row_names_its_prediction_source_with_the_validated_p90_error(
    user_api, catalog, settings, tmp_path, solve
):
    path = tmp_path / "validated_errors.json"
    path.write_text(json.dumps(VALIDATED))
    settings.VALIDATED_ERRORS_PATH = path
    plan = solve(_request()).json()
    rows = plan["result"]["plans"] + [a["plan"] for a in plan["result"]["alternatives"].values() if a["plan"]]
    rows += [b["plan"] for b in plan["result"]["baselines"] if b["plan"]]
    for row in rows:
        assert row["prediction_source"] == "analytical"  # a spec plan: no profile at all
        assert row["prediction_error"] == {
            "validated": True,
            **VALIDATED["analytical"],
            "source": "analytical",
        }


def test_a_source_the_benches_have_not_validated_is_shown_as_not_validated(
    user_api, catalog, settings, tmp_path, solve
):
    settings.VALIDATED_ERRORS_PATH = tmp_path / "missing.json"
    plan = solve(_request()).json()
    row = plan["result"]["plans"][0]
    assert row["prediction_source"] == "analytical"
    assert row["prediction_error"] == {"source": "analytical", "validated": False}


def test_rows_on_the_profiled_gpu_are_measured_and_others_transferred(
    user_api, catalog, make_run, compute_profile, solve
):
    run = _profile_run(make_run, compute_profile, type="cuda", name="NVIDIA A10G", precision="fp32")
    body = _request(
        model={"profile_run": run.pk},
        global_batch_min=4,
        global_batch_max=4,
        max_nodes=1,
        objective="throughput",
        deadline_hours=None,
        max_hourly_usd=100,
        top_k=50,
        gpu_models=["A10G", "T4"],
    )
    plan = solve(body).json()
    sources = {
        (g["gpu_model"], g["gpus_per_node"]): p["prediction_source"]
        for p in plan["result"]["plans"]
        for g in p["groups"]
    }
    assert sources, plan
    assert {s for (gpu, n), s in sources.items() if gpu == "A10G" and n == 1} <= {"measured"}
    assert {s for (gpu, _), s in sources.items() if gpu != "A10G"} <= {"transferred", "analytical"}
    assert "measured" in sources.values() and "transferred" in sources.values()


@pytest.mark.parametrize(
    "over, field",
    [
        ({"deadline_hours": True}, "deadline_hours"),
        ({"epochs": True}, "epochs"),
        ({"budget_usd": False, "objective": "time", "deadline_hours": None}, "budget_usd"),
        ({"quotas_on_demand": {"P": True}}, "quotas_on_demand"),
        ({"max_miss_risk": True}, "max_miss_risk"),
    ],
)
def test_a_boolean_is_not_a_number_in_a_plan_request(user_api, catalog, over, field):
    body = {k: v for k, v in _request(**over).items() if v is not None}
    resp = user_api.post("/api/v1/plans/", body, format="json")
    assert resp.status_code == 400 and field in resp.json(), resp.json()
    assert not PlanRecord.objects.exists()
