"""Parsing of profile JSON v1 into planner dataclasses."""

from __future__ import annotations

import copy
import json
import math

import pytest

from planner.profiles import (
    ComputeProfile,
    InputPipelineRate,
    ProfileError,
    load_comm_profile,
    load_compute_profile,
    load_profile,
    merge_comm_profiles,
    merge_compute_profiles,
)


def phase(times):
    return {"times_ms": list(times)}


def compute_doc():
    return {
        "schema_version": 1,
        "kind": "compute",
        "model": {"spec": "torchvision:resnet18", "input_shape": [3, 32, 32], "num_params": 10},
        "device": {"type": "cpu", "name": "EPYC", "precision": "fp32"},
        "max_batch_size": 64,
        "samples": [
            {
                "batch_size": 16,
                "phases": {
                    "forward": phase([2.0, 2.2, 1.8]),
                    "backward": phase([4.0, 4.0, 4.0]),
                    "optimizer": phase([1.0, 1.0, 1.0]),
                },
                "buckets": [
                    {"index": 0, "size_bytes": 1024, "num_params": 1, "ready_ms": 1.0},
                    {"index": 1, "size_bytes": 2048, "num_params": 2, "ready_ms": 4.0, "ready_fraction": 1.0},
                ],
            },
            {
                "batch_size": 8,
                "phases": {
                    "forward": {"median_ms": 1.0},
                    "backward": {"median_ms": 2.0},
                    "optimizer": {"median_ms": 1.0},
                },
            },
        ],
    }


def comm_doc():
    return {
        "schema_version": 1,
        "kind": "comm",
        "backend": "gloo",
        "world_size": 2,
        "nodes": 1,
        "ranks_per_node": 2,
        "samples": [{"size_bytes": 4096, "times_ms": [0.5, 0.6]}, {"size_bytes": 1024, "median_ms": 0.2}],
    }


def test_it_parses_a_compute_profile_sorted_by_batch():
    profile = load_compute_profile(compute_doc())
    assert isinstance(profile, ComputeProfile)
    assert profile.batch_sizes == (8, 16)
    assert profile.max_batch_size == 64
    assert profile.sample_for(16).phase("forward").median_ms == pytest.approx(2.0)


def test_it_recomputes_summaries_from_the_per_iteration_times():
    doc = compute_doc()
    doc["samples"][0]["phases"]["forward"]["median_ms"] = 99.0  # inconsistent summary is ignored
    stats = load_compute_profile(doc).sample_for(16).phase("forward")
    assert stats.median_ms == pytest.approx(2.0)
    assert stats.p90_ms == pytest.approx(2.16)
    assert stats.relative_spread > 0


def test_it_defaults_a_missing_ready_fraction_from_the_backward_time():
    buckets = load_compute_profile(compute_doc()).sample_for(16).buckets
    assert buckets[0].ready_fraction == pytest.approx(0.25)
    assert buckets[1].ready_fraction == pytest.approx(1.0)


def test_it_loads_a_profile_from_a_path_and_from_a_json_string(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(comm_doc()))
    from_path = load_comm_profile(path)
    from_str = load_profile(json.dumps(comm_doc()))
    assert from_path == from_str
    assert [s.size_bytes for s in from_path.samples] == [1024, 4096]
    assert from_path.samples[1].stats.median_ms == pytest.approx(0.55)


def test_it_rejects_a_wrong_schema_version_naming_the_field():
    doc = compute_doc()
    doc["schema_version"] = 2
    with pytest.raises(ProfileError, match="schema_version"):
        load_profile(doc)


def test_it_rejects_nan_times_naming_the_iteration():
    doc = compute_doc()
    doc["samples"][0]["phases"]["backward"]["times_ms"][1] = math.nan
    with pytest.raises(ValueError, match=r"samples\[0\]\.phases\.backward\.times_ms\[1\]: must be finite"):
        load_profile(doc)


def test_it_rejects_negative_times():
    doc = compute_doc()
    doc["samples"][1]["phases"]["optimizer"]["median_ms"] = -1
    with pytest.raises(ProfileError, match=r"samples\[1\]\.phases\.optimizer\.median_ms: must be >= 0"):
        load_profile(doc)


def test_it_rejects_a_missing_phase():
    doc = compute_doc()
    del doc["samples"][0]["phases"]["optimizer"]
    with pytest.raises(ProfileError, match=r"samples\[0\]\.phases\.optimizer: is missing"):
        load_profile(doc)


def test_it_rejects_duplicate_batch_sizes():
    doc = compute_doc()
    doc["samples"][1]["batch_size"] = 16
    with pytest.raises(ProfileError, match="duplicate batch size"):
        load_profile(doc)


def test_it_rejects_an_unknown_kind_and_a_kind_mismatch():
    doc = compute_doc()
    doc["kind"] = "memory"
    with pytest.raises(ProfileError, match="kind"):
        load_profile(doc)
    with pytest.raises(ProfileError, match="expected a comm profile"):
        load_comm_profile(compute_doc())


def test_it_rejects_a_comm_profile_without_world_size():
    doc = comm_doc()
    del doc["world_size"]
    with pytest.raises(ProfileError, match="world_size: is missing"):
        load_profile(doc)


def test_it_reads_the_cpu_share_of_cpu_collectives_and_rejects_absurd_ones():
    doc = comm_doc()
    doc["samples"][0]["cpu_share"] = 0.75
    prof = load_comm_profile(doc)
    shares = {s.size_bytes: s.cpu_share for s in prof.samples}
    assert shares == {4096: 0.75, 1024: None}
    for bad in (-0.1, 9.0, "high"):
        doc["samples"][0]["cpu_share"] = bad
        with pytest.raises(ProfileError, match="cpu_share"):
            load_profile(doc)


def test_it_merges_repeated_profiles_by_pooling_iterations():
    a = compute_doc()
    b = copy.deepcopy(a)
    b["samples"][0]["phases"]["forward"]["times_ms"] = [3.0, 3.0, 3.0]
    b["samples"][0]["buckets"][0]["ready_ms"] = 3.0
    merged = merge_compute_profiles([load_compute_profile(a), load_compute_profile(b)])
    fwd = merged.sample_for(16).phase("forward")
    assert len(fwd.times_ms) == 6
    assert fwd.median_ms == pytest.approx(2.6)
    assert merged.sample_for(16).buckets[0].ready_fraction == pytest.approx((0.25 + 0.75) / 2)


def test_it_merges_comm_profiles_taken_before_and_after_a_run():
    before, after = comm_doc(), comm_doc()
    before["samples"][0]["cpu_share"] = 0.5
    after["samples"][0].update(times_ms=[0.7, 0.8], cpu_share=1.0)
    after["samples"].append({"size_bytes": 8192, "times_ms": [1.0]})
    merged = merge_comm_profiles([load_comm_profile(before), load_comm_profile(after)])
    by_size = {s.size_bytes: s for s in merged.samples}
    assert sorted(by_size) == [1024, 4096, 8192]
    assert by_size[4096].stats.times_ms == (0.5, 0.6, 0.7, 0.8)
    assert by_size[4096].stats.median_ms == pytest.approx(0.65)
    assert by_size[4096].cpu_share == pytest.approx(0.75)
    assert by_size[4096].algbw_gbps == pytest.approx(4096 * 8 / 0.65e6)
    assert by_size[1024].stats.times_ms == (0.2, 0.2) and by_size[1024].cpu_share is None
    assert len(by_size[8192].stats.times_ms) == 1


def test_it_refuses_to_merge_comm_profiles_of_different_groups():
    four = comm_doc()
    four.update(world_size=4, ranks_per_node=4)
    with pytest.raises(ProfileError, match="world size"):
        merge_comm_profiles([load_comm_profile(comm_doc()), load_comm_profile(four)])
    with pytest.raises(ValueError, match="no profiles"):
        merge_comm_profiles([])


def test_aligned_merging_keeps_the_iteration_spread_and_leaves_the_drift_out():
    fast, slow = compute_doc(), compute_doc()
    fast["samples"][0]["phases"]["backward"] = phase([3.9, 4.0, 4.1])
    slow["samples"][0]["phases"]["backward"] = phase([7.8, 8.0, 8.2])  # same noise, twice as slow
    profiles = [load_compute_profile(fast), load_compute_profile(slow)]
    plain = merge_compute_profiles(profiles).sample_for(16).phase("backward")
    aligned = merge_compute_profiles(profiles, align=True).sample_for(16).phase("backward")
    assert aligned.median_ms == pytest.approx(math.sqrt(4.0 * 8.0))
    same_twice = merge_compute_profiles([profiles[0], profiles[0]]).sample_for(16).phase("backward")
    assert aligned.relative_spread == pytest.approx(same_twice.relative_spread)
    assert plain.relative_spread > 5 * aligned.relative_spread


@pytest.mark.parametrize(
    "device, ran, requested",
    [
        (
            {"type": "cpu", "name": "EPYC", "precision": "amp"},
            "bf16",
            "amp",
        ),  # an older agent: CPU amp ran bf16
        ({"type": "cuda", "name": "NVIDIA A10G", "precision": "amp"}, "amp", "amp"),
        ({"type": "cpu", "name": "EPYC", "precision": "bf16", "precision_requested": "amp"}, "bf16", "amp"),
        ({"type": "cpu", "name": "EPYC"}, "fp32", "fp32"),
    ],
)
def test_it_reads_the_precision_a_profile_ran_also_from_older_profiles(device, ran, requested):
    doc = compute_doc()
    doc["device"] = device
    profile = load_compute_profile(doc)
    assert (profile.device.precision, profile.device.precision_requested) == (ran, requested)


def test_it_reads_the_measured_loader_rate_and_loads_older_profiles_without_it():
    doc = compute_doc()
    assert load_compute_profile(doc).input_pipeline is None  # an older agent: no field
    assert load_compute_profile({**doc, "input_pipeline": None}).input_pipeline is None  # skipped
    entry = {
        "kind": "small_image",
        "samples_per_s_per_vcpu": 2500.5,
        "samples": 2501,
        "seconds": 1.0,
        "detail": "x",
    }
    got = load_compute_profile({**doc, "input_pipeline": entry}).input_pipeline
    assert got == InputPipelineRate("small_image", 2500.5, 1.0, "x")
    merged = merge_compute_profiles([load_compute_profile({**doc, "input_pipeline": entry})] * 2)
    assert merged.input_pipeline == got


@pytest.mark.parametrize(
    ("entry", "where"),
    [
        ({"kind": "audio", "samples_per_s_per_vcpu": 1.0}, "input_pipeline.kind"),
        ({"kind": "image", "samples_per_s_per_vcpu": 0}, "input_pipeline.samples_per_s_per_vcpu"),
        ({"kind": "image", "samples_per_s_per_vcpu": float("inf")}, "input_pipeline.samples_per_s_per_vcpu"),
        ({"kind": "image"}, "input_pipeline.samples_per_s_per_vcpu"),
        ([1, 2], "input_pipeline"),
    ],
)
def test_it_rejects_a_malformed_loader_rate_naming_the_field(entry, where):
    with pytest.raises(ProfileError, match=where.replace(".", r"\.")):
        load_compute_profile({**compute_doc(), "input_pipeline": entry})
