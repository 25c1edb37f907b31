"""No user input runs code on the server: model specs through the API, the web form, profiling
runs and agent-posted profiles.

A spec used to be ``package.module:attr``, imported and called in the web process to count the
workload: ``os:getpid`` was called (the 400 said it "returned int"), ``launcher.reconcile:
reconcile`` (now ``fleet.reconcile``) ran the EC2 reconciler inside the request, ``os:abort``
killed the worker. Now the web process and the task worker build library models only, by
registry name."""

from __future__ import annotations

import pytest

from planner.app.models import PlanRecord
from workload import specs

pytestmark = pytest.mark.django_db

HOSTILE = [
    "os:getpid",
    "os:abort",
    "signal:pause",
    "fleet.reconcile:reconcile",
    "builtins:exec",
    "os:system",
    "subprocess:Popen",
    "srifty_probe_target:boom",
    "/etc/passwd.py:x",
    "examples/tiny_model.py:build",
]


@pytest.fixture
def no_code_runs(monkeypatch):
    """Fail the test at the first import or call of model code anywhere in the process."""
    calls: list[str] = []

    def refuse(what):
        def stop(*args, **kwargs):
            calls.append(f"{what}{args}")
            raise AssertionError(f"model code reached {what}{args}")

        return stop

    monkeypatch.setattr(specs, "_import_target", refuse("import"))
    monkeypatch.setattr(specs, "_resolve_factory", refuse("resolve"))
    monkeypatch.setattr(specs, "_call_factory", refuse("call"))
    return calls


def plan_body(model: dict) -> dict:
    return {
        "model": model,
        "samples_per_epoch": 100_000,
        "epochs": 1,
        "objective": "cost",
        "deadline_hours": 24,
        "spot": True,
        "max_nodes": 2,
        "max_types": 1,
        "regions": ["us-east-1"],
        "global_batch_min": 64,
        "global_batch_max": 128,
    }


@pytest.mark.parametrize("spec", HOSTILE)
def test_a_plan_request_naming_code_is_a_400_on_spec_and_nothing_is_imported(
    user_api, catalog, no_code_runs, spec
):
    resp = user_api.post("/api/v1/plans/", plan_body({"spec": spec, "input_shape": "3,32,32"}), format="json")
    assert resp.status_code == 400, resp.json()
    assert "spec" in resp.json()["model"]
    assert no_code_runs == [] and not PlanRecord.objects.exists()


@pytest.mark.parametrize("spec", ["os:getpid", "fleet.reconcile:reconcile", "builtins:exec"])
def test_the_plan_form_refuses_code_inline(client, user, catalog, no_code_runs, spec):
    client.force_login(user)
    form = {
        "model_source": "spec",
        "spec": spec,
        "input_shape": "3,32,32",
        "precision": "amp",
        "samples_per_epoch": "100000",
        "epochs": "1",
        "objective": "cost",
        "deadline_hours": "12",
        "regions": ["us-east-1"],
        "spot": "on",
        "on_demand": "on",
        "max_nodes": "2",
        "max_types": "1",
        "global_batch_min": "64",
        "global_batch_max": "128",
        "checkpoint_interval_h": "0.5",
        "restart_overhead_h": "0.1",
    }
    resp = client.post("/plans/", form)
    assert resp.status_code == 400 and "library model" in resp.content.decode()
    assert no_code_runs == [] and not PlanRecord.objects.exists()


def test_the_reconciler_named_as_a_spec_is_never_run(user_api, catalog, monkeypatch):
    from fleet import reconcile

    ran = []
    monkeypatch.setattr(reconcile, "reconcile", lambda *a, **k: ran.append(a))
    resp = user_api.post(
        "/api/v1/plans/",
        plan_body({"spec": "fleet.reconcile:reconcile", "input_shape": "3,32,32"}),
        format="json",
    )
    assert resp.status_code == 400 and ran == []


def solved(user_api, body: dict):
    """POST a plan (202), let the worker's task solve it, GET it."""
    from planner.app.tasks import solve_plan_task

    resp = user_api.post("/api/v1/plans/", body, format="json")
    assert resp.status_code == 202, resp.json()
    solve_plan_task.call(resp.json()["id"])
    return user_api.get(resp["Location"])


@pytest.mark.parametrize(
    ("spec", "shape"),
    [
        ("torchvision:resnet50", "3,224,224"),
        ("timm:resnet18", "3,64,64"),
        (
            "transformers:bert(num_hidden_layers=2,hidden_size=128,num_attention_heads=2,intermediate_size=512)",
            "64",
        ),
    ],
)
def test_library_models_still_plan(user_api, catalog, no_code_runs, spec, shape):
    resp = solved(user_api, plan_body({"spec": spec, "input_shape": shape}))
    assert resp.json()["status"] == "solved", resp.json()
    assert resp.json()["result"]["model"]["spec"] == spec and resp.json()["result"]["plans"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("timm:not_a_model_xyz", "unknown timm model"),
        ("transformers:bertt", "did you mean bert"),
        ("transformers:bert(name_or_path=1)", "not a numeric or boolean field"),
        ("transformers:bert(__class__=1)", "bad config override"),
        ("torchvision:resnet19", "did you mean"),
    ],
)
def test_unknown_library_names_are_a_clear_400(user_api, catalog, spec, message):
    resp = user_api.post("/api/v1/plans/", plan_body({"spec": spec, "input_shape": "3,32,32"}), format="json")
    assert resp.status_code == 400 and message in resp.json()["model"]["spec"][0]


def test_local_profiling_of_code_needs_the_operators_setting(user_api, settings, no_code_runs):
    body = {"kind": "compute", "model_spec": "examples.tiny_model:build", "input_shape": "3,32,32"}
    settings.LOCAL_CODE_EXECUTION = False
    resp = user_api.post("/api/v1/profiling-runs/", body, format="json")
    assert resp.status_code == 400 and "SRIFTY_LOCAL_CODE" in resp.json()["model_spec"][0]
    settings.LOCAL_CODE_EXECUTION = True
    assert user_api.post("/api/v1/profiling-runs/", body, format="json").status_code == 201
    assert no_code_runs == []  # validating it imported nothing; only the agent subprocess would


def test_a_stored_local_code_run_is_refused_at_start_once_the_setting_is_off(make_run, settings):
    from profiler import tasks
    from profiler.models import RunStatus

    settings.LOCAL_CODE_EXECUTION = False
    run = make_run()  # examples.tiny_model:build, provider local, stored while it was allowed
    assert tasks.start_run(run).startswith("refused")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "SRIFTY_LOCAL_CODE" in run.error


def test_library_runs_and_ec2_runs_of_code_are_accepted_while_local_code_is_off(
    user, user_api, settings, catalog
):
    from django.contrib.auth.models import Permission

    user.user_permissions.add(Permission.objects.get(codename="add_profilingrun"))  # EC2 costs money
    settings.LOCAL_CODE_EXECUTION = False
    lib = {"kind": "compute", "model_spec": "timm:resnet18", "input_shape": "3,32,32"}
    assert user_api.post("/api/v1/profiling-runs/", lib, format="json").status_code == 201
    ec2 = {
        "kind": "compute",
        "model_spec": "mypkg.models:build",
        "input_shape": "3,32,32",
        "provider": "ec2",
        "instance_type": "g5.xlarge",
        "region": "us-east-1",
    }
    assert (
        user_api.post("/api/v1/profiling-runs/", ec2, format="json").status_code == 201
    )  # runs on its own VM


def test_an_agent_profile_naming_another_model_is_refused(agent_run, compute_profile):
    from profiler import actions

    run, _ = agent_run
    with pytest.raises(actions.BadProfile, match="model.spec"):
        actions.check_profile(
            run, {**compute_profile, "model": {**compute_profile["model"], "spec": "os:abort"}}
        )


@pytest.mark.parametrize(
    "trace",
    [
        {"version": 1},
        {
            "version": 1,
            "model_spec": "m",
            "input_shape": [3],
            "precision": "fp32",
            "bucket_sizes": [1],
            "static_bytes": 1,
            "activation_bytes_per_sample": 1.0,
            "cost": {
                "version": 1,
                "model_spec": "m",
                "precision": "fp32",
                "ops": {"forward": [["conv", "NaN", 0, 0, 0]], "backward": [], "optimizer": []},
            },
        },
        {
            "version": 1,
            "model_spec": "m",
            "input_shape": [3],
            "precision": "fp32",
            "bucket_sizes": [-5],
            "static_bytes": 1,
            "activation_bytes_per_sample": 1.0,
            "cost": {
                "version": 1,
                "model_spec": "m",
                "precision": "fp32",
                "ops": {"forward": [], "backward": [], "optimizer": []},
            },
        },
        "not a dict",
    ],
)
def test_a_malformed_workload_trace_is_refused_when_posted(agent_run, compute_profile, trace):
    from profiler import actions

    run, _ = agent_run
    with pytest.raises(actions.BadProfile, match="workload"):
        actions.check_profile(run, {**compute_profile, "workload": trace})


def test_a_plan_uses_the_agents_trace_and_imports_nothing(
    user_api, catalog, make_run, compute_profile, no_code_runs
):
    from profiler import actions
    from workload.cost import trace_workload

    def build():
        import torch.nn as nn

        return nn.Sequential(
            nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)
        )

    run = make_run()
    trace = trace_workload(build, (3, 32, 32), model_spec=run.model_spec, num_classes=10)
    actions.complete_run(run, {**compute_profile, "workload": trace})
    resp = solved(user_api, plan_body({"profile_run": run.pk}))
    assert resp.json()["status"] == "solved", resp.json()
    assert resp.json()["result"]["model"]["spec"] == run.model_spec and no_code_runs == []
