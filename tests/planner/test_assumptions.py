"""Assumptions stated on every plan (planner/assumptions.py)."""

from __future__ import annotations

from dataclasses import replace

from planner.assumptions import describe
from planner.input_pipeline import InputPipeline
from planner.solver import PlanRequest, solve
from planner.validated import SourceError
from tests.planner.test_solver import cand, toy_perf

ERRORS = {
    "measured": SourceError("measured", 2.4, 5.1, 11, "bench/accuracy_local.py", "2026-12-05"),
    "transferred": SourceError("transferred", 8.0, 19.8, 386, "bench/accuracy_public.py", "2026-12-05"),
    "scaling": SourceError("scaling", 4.2, 10.0, 36, "bench/accuracy_public.py", "2026-12-05"),
}


def plans(spot: bool = True):
    cands = [cand("p3.2xlarge"), cand("g5.xlarge")] + ([cand("g5.xlarge", market="spot")] if spot else [])
    req = PlanRequest(objective="cost", total_samples=1e7, deadline_hours=100, max_nodes=4)
    return req, solve(req, cands, toy_perf).plans


def assumptions(req, ps, **kw):
    args = {
        "source_of": lambda gpu, b: {"p3.2xlarge": "measured", "g5.xlarge": "transferred"}[gpu],
        "errors": ERRORS,
        "measured_on": "V100",
        "requested_precision": "amp",
        "profile_precision": "amp",
        "planned_precision": "amp",
        "precision_warning": None,
        "pipeline": InputPipeline("image", 100.0, False),
    }
    return describe(ps, req, **{**args, **kw})


def test_each_gpu_type_of_the_plans_names_its_source_and_validated_error():
    req, ps = plans()
    a = assumptions(req, ps)
    by_gpu = {t["gpu_model"]: t for t in a["types"]}
    assert set(by_gpu) == {g.gpu_model for p in ps for g in p.groups}
    g5 = by_gpu["g5.xlarge"]
    assert g5["source"] == "transferred" and g5["instance_types"] == ["g5.xlarge"]
    assert g5["source_text"] == "transferred: scaled from the profile on V100 by the compute model"
    assert g5["error_text"] == (
        "validated p90 error ±19.8% (median 8.0%, n=386, bench/accuracy_public.py, 2026-12-05)"
    )
    assert a["scaling"]["text"].endswith(
        "validated p90 error ±10.0% (median 4.2%, n=36, bench/accuracy_public.py, 2026-12-05)"
    )


def test_a_source_the_benches_did_not_validate_says_so_without_a_number():
    req, ps = plans()
    a = assumptions(req, ps, source_of=lambda gpu, b: "analytical")
    assert all(t["error_text"] == "not validated" and not t["error"]["validated"] for t in a["types"])


def test_an_amp_request_answered_from_an_fp32_profile_is_flagged():
    req, ps = plans()
    warning = "This plan asks for amp, but profiling run #3 ran fp32 (...)"
    a = assumptions(req, ps, profile_precision="fp32", planned_precision="fp32", precision_warning=warning)
    assert a["precision"] == {
        "requested": "amp",
        "profile_ran": "fp32",
        "planned": "fp32",
        "mismatch": True,
        "text": warning,
    }
    same = assumptions(req, ps)["precision"]
    assert (
        not same["mismatch"] and same["text"] == "Predictions are made at amp; the profile ran amp, as asked."
    )
    none = assumptions(req, ps, profile_precision=None)["precision"]
    assert not none["mismatch"] and none["text"].startswith("No profile: predictions are made at amp")


def test_the_data_loader_assumption_names_its_rate_and_origin():
    req, ps = plans()
    loader = assumptions(req, ps)["data_loader"]
    assert loader["rate_per_vcpu"] == 100.0 and not loader["measured"]
    assert "100 samples/s (assumed for JPEG image data" in loader["text"]
    measured = assumptions(req, ps, pipeline=InputPipeline("image", 180.0, True))["data_loader"]
    assert "180 samples/s (measured by the profile on one thread, x 0.6" in measured["text"]
    assert assumptions(req, ps, pipeline=None)["data_loader"]["text"].startswith("No input-pipeline limit")


def test_p90_says_what_it_includes_and_interruptions_only_with_spot():
    req, ps = plans(spot=True)
    assert any(p.uses_spot for p in ps)
    text = assumptions(replace(req, checkpoint_interval_h=0.25), ps)["p90"]
    assert "0.1 h of startup" in text and "jitter" in text
    assert "interruptions" in text and "every 0.25 h" in text and "0.1 h to replace the node" in text
    req, ps = plans(spot=False)
    assert "interruptions" not in assumptions(req, ps)["p90"]


def test_only_the_gpus_nothing_predicts_are_listed_each_with_its_types_once():
    from planner.assumptions import unpredicted

    cands = [cand("p3.2xlarge"), cand("g5.xlarge"), cand("g5.xlarge", market="spot")]
    why = {"g5.xlarge": "no amp compute peak"}
    out = unpredicted(cands, lambda gpu: why.get(gpu))
    assert out == [
        {"gpu_model": "g5.xlarge", "instance_types": ["g5.xlarge"], "reason": "no amp compute peak"}
    ]
