"""Profile charts on the profiling run page: throughput vs batch with the fitted curve, knee and
largest batch; bucket readiness; all-reduce vs the model; predicted vs measured of jobs."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest

from frontend.profile_charts import chart_data
from profiler import actions
from profiler.models import CommCurvePoint, Provider
from tests.frontend.knee_profile import BATCHES, KNEE, MAX_BATCH, knee_profile

pytestmark = pytest.mark.django_db


def _page_charts(client, user, run) -> tuple[str, dict]:
    client.force_login(user)
    resp = client.get(f"/profiling/{run.pk}/")
    assert resp.status_code == 200
    page = resp.content.decode()
    found = re.search(r'id="chart-data" type="application/json">(.*?)</script>', page, re.S)
    assert found, "no chart data on the page"
    data = json.loads(found.group(1))
    return page, data


def test_throughput_vs_batch_has_measured_points_the_fit_the_knee_and_the_largest_batch(
    client, user, make_run
):
    profile = knee_profile()
    run = actions.complete_run(make_run(batch_sizes="auto"), profile)
    page, charts = _page_charts(client, user, run)
    assert charts["kind"] == "compute" and 'id="throughput-chart"' in page

    t = charts["throughput"]
    assert [p["batch"] for p in t["measured"]] == list(BATCHES)
    for p, s in zip(t["measured"], profile["samples"], strict=True):
        total = sum(s["phases"][ph]["median_ms"] for ph in ("forward", "backward", "optimizer"))
        assert p["samples_per_s"] == pytest.approx(s["batch_size"] * 1000 / total)
        assert p["err_plus"] > 0 and p["err_minus"] > 0 and p["iterations"] == 6
    # the planner's fit: it reproduces the measured points within a few percent
    fit = dict(zip(t["fit"]["batch"], t["fit"]["samples_per_s"], strict=True))
    for p in t["measured"]:
        assert fit[float(p["batch"])] == pytest.approx(p["samples_per_s"], rel=0.05)
    assert t["fit"]["range"] == [3, MAX_BATCH]
    assert t["knees"] == [
        {"phase": "forward, backward", "batch": KNEE, "samples_per_s": pytest.approx(fit[KNEE])}
    ]
    assert t["max_batch"] == {"batch": MAX_BATCH, "capped": False}
    assert (
        "knee at batch 32 (forward, backward)" in page
        and f"Largest batch that fits in memory: {MAX_BATCH}" in page
    )

    # gradient readiness: every batch size, buckets in the order they became ready
    assert [g["batch"] for g in charts["buckets"]] == list(BATCHES)
    first = charts["buckets"][0]
    assert [b["index"] for b in first["buckets"]] == [0, 1, 2]
    assert [b["ready_fraction"] for b in first["buckets"]] == [0.31, 0.66, 0.99]
    assert first["buckets"][0]["size_mib"] == 25.0 and 'id="buckets-chart"' in page
    assert charts["jobs"] == [] and 'id="jobs-chart"' not in page


def test_a_profile_without_a_batch_search_gets_a_line_and_says_so(client, user, make_run, compute_profile):
    run = actions.complete_run(make_run(), compute_profile)
    page, charts = _page_charts(client, user, run)
    t = charts["throughput"]
    assert len(t["measured"]) == 2 and t["knees"] == [] and t["max_batch"] is None
    assert "no knee" in page and "was not searched" in page


def test_a_run_without_a_profile_has_no_charts(client, user, make_run):
    run = make_run()
    assert chart_data(run) == {}
    page, charts = _page_charts(client, user, run)
    assert charts == {} and 'id="throughput-chart"' not in page


def test_a_local_gloo_allreduce_is_compared_with_a_ring_fitted_to_it(client, user, make_run, comm_profile):
    run = actions.complete_run(make_run(kind="comm", model_spec="", input_shape=""), comm_profile)
    page, charts = _page_charts(client, user, run)
    a = charts["allreduce"]
    assert [p["size_bytes"] for p in a["measured"]] == sorted(
        s["size_bytes"] for s in comm_profile["samples"]
    )
    assert all(p["p10_us"] <= p["median_us"] <= p["p90_us"] for p in a["measured"])
    assert a["model"]["kind"] == "ring-fit" and a["model"]["p90_us"] is None
    assert all(v > 0 for v in a["model"]["p50_us"])
    assert 'id="allreduce-chart"' in page and "ring model" in page


def test_an_ec2_nccl_curve_is_compared_with_the_nccl_model_plans_use(make_run, comm_profile, catalog):
    run = actions.complete_run(
        make_run(
            kind="comm", model_spec="", input_shape="", provider=Provider.EC2, instance_type="p4d.24xlarge"
        ),
        comm_profile,
    )
    CommCurvePoint.objects.bulk_create(
        CommCurvePoint(
            run=run,
            instance_type="p4d.24xlarge",
            nodes=2,
            gpus_per_node=8,
            gpu="A100",
            network="efa",
            nccl_version="2.21.5",
            size_bytes=s["size_bytes"],
            median_us=s["median_ms"] * 1000,
            p90_us=s["p90_ms"] * 1000,
        )
        for s in comm_profile["samples"]
    )
    from planner.app.service import comm_model
    from planner.perf.nccl import Topology

    model = chart_data(run)["allreduce"]["model"]
    assert model["kind"] == "nccl" and "2× p4d.24xlarge" in model["label"]
    assert all(p90 >= p50 > 0 for p50, p90 in zip(model["p50_us"], model["p90_us"], strict=True))
    # the same numbers the planner gets for that cluster
    topo = Topology(8, 2, "Ampere", 600.0, 20.0, "efa", 400.0, True, "2.21.5")
    size = model["size_bytes"][-1]
    assert model["p50_us"][-1] == pytest.approx(comm_model().estimate(size, topo).p50_us, rel=0.25)


def test_jobs_planned_from_the_profile_compare_predicted_and_measured(client, user, make_run):
    launcher = pytest.importorskip("launcher.models")
    from planner.app.models import PlanRecord

    run = actions.complete_run(make_run(batch_sizes="auto"), knee_profile())
    plan = PlanRecord.objects.create(
        owner=user, request={}, profile_run=run, status="solved", result={"plans": []}
    )
    job = launcher.Job.objects.create(
        owner=user,
        plan=plan,
        plan_rank=1,
        option={},
        region="us-east-1",
        train_command="python train.py",
        hourly_usd=Decimal("3.5"),
        max_spend_usd=Decimal("100"),
        max_hours=10,
        predicted_iter_s=0.20,
        predicted_iter_p90_s=0.25,
    )
    for i, t in enumerate([0.21, 0.22, 0.23, 0.30, 0.22]):
        launcher.JobReport.objects.create(job=job, seq=i, iteration=i, iter_time_s=t)
    page, charts = _page_charts(client, user, run)
    assert charts["jobs"] == [
        {
            "job": job.pk,
            "plan": plan.pk,
            "status": job.status,
            "predicted_iter_s": 0.20,
            "predicted_iter_p90_s": 0.25,
            "observed_median_s": 0.22,
            "reports": 5,
        }
    ]
    assert 'id="jobs-chart"' in page and "0.220" in page
