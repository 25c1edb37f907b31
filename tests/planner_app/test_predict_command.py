import json
import math
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

FIXTURES = Path(__file__).resolve().parent.parent / "profiler" / "fixtures"


def test_it_predicts_local_workers_from_a_profile_and_a_comm_profile(capsys):
    call_command(
        "predict",
        "--profile",
        str(FIXTURES / "tiny_compute.json"),
        "--comm",
        str(FIXTURES / "tiny_comm.json"),
        "--workers",
        "2",
        "--json",
    )
    out = json.loads(capsys.readouterr().out)
    assert out["iteration_ms_p90"] >= out["iteration_ms_p50"] > 0
    assert out["per_worker_batch"] == [4, 4] and out["global_batch"] == 8
    assert out["breakdown"]["forward"] > 0 and out["bottleneck"] in ("compute", "communication")


def predict_with_share(tmp_path, capsys, share, *extra):
    """p50 of 2 local workers whose 40 ms all-reduces measured ``share`` of a core."""
    doc = json.loads((FIXTURES / "tiny_comm.json").read_text())
    for sample in doc["samples"]:
        sample["median_ms"] = sample["p10_ms"] = sample["p90_ms"] = sample["mean_ms"] = 40.0
        sample["times_ms"] = [40.0] * len(sample["times_ms"])
        sample["std_ms"] = sample["cv"] = 0.0
        sample["cpu_share"] = share
    path = tmp_path / f"comm_{share}.json"
    path.write_text(json.dumps(doc))
    call_command(
        "predict",
        "--profile",
        str(FIXTURES / "tiny_compute.json"),
        "--comm",
        str(path),
        "--workers",
        "2",
        "--samples",
        "0",
        "--json",
        *extra,
    )
    return json.loads(capsys.readouterr().out)["iteration_ms_p50"]


def test_over_a_network_an_all_reduce_that_mostly_waits_overlaps_more_than_a_cpu_bound_one(tmp_path, capsys):
    waiting = predict_with_share(tmp_path, capsys, 0.05, "--link", "network")
    assert waiting < predict_with_share(tmp_path, capsys, 1.0, "--link", "network")


def test_over_loopback_every_all_reduce_is_cpu_work_whatever_share_was_measured(tmp_path, capsys):
    # the peer a loopback all-reduce waits for computes on a busy core too (Contention.from_comm_profile)
    cpu_bound = predict_with_share(tmp_path, capsys, 1.0, "--link", "network")
    assert predict_with_share(tmp_path, capsys, 0.05) == pytest.approx(cpu_bound)
    assert predict_with_share(tmp_path, capsys, 0.05, "--link", "loopback") == pytest.approx(cpu_bound)


def scaled_profile(tmp_path, factor):
    doc = json.loads((FIXTURES / "tiny_compute.json").read_text())
    for sample in doc["samples"]:
        for stats in sample["phases"].values():
            for key in ("median_ms", "p10_ms", "p90_ms", "mean_ms", "std_ms"):
                if key in stats:
                    stats[key] *= factor
            if "times_ms" in stats:
                stats["times_ms"] = [t * factor for t in stats["times_ms"]]
    path = tmp_path / f"compute_x{factor}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_profiles_repeated_at_different_times_are_pooled_and_their_drift_widens_the_p90(tmp_path, capsys):
    comm = str(FIXTURES / "tiny_comm.json")
    args = ["--workers", "2", "--per-worker-batch", "4", "--json", "--comm", comm]
    call_command("predict", "--profile", str(FIXTURES / "tiny_compute.json"), *args)
    one = json.loads(capsys.readouterr().out)
    call_command(
        "predict",
        "--profile",
        str(FIXTURES / "tiny_compute.json"),
        "--profile",
        scaled_profile(tmp_path, 1.2),
        "--comm",
        comm,
        *args,
    )
    two = json.loads(capsys.readouterr().out)
    assert one["run_spread"] == 0.0
    assert two["run_spread"] > 0.1  # ln(1.2)/√2 = 0.129
    assert two["iteration_ms_p50"] > one["iteration_ms_p50"]
    assert (
        two["iteration_ms_p90"] / two["iteration_ms_p50"] > one["iteration_ms_p90"] / one["iteration_ms_p50"]
    )


def test_it_refuses_to_pool_profiles_of_different_models(tmp_path):
    doc = json.loads((FIXTURES / "tiny_compute.json").read_text())
    doc["model"]["spec"] = "torchvision:resnet18"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    with pytest.raises(CommandError, match="model spec and device must match"):
        call_command(
            "predict",
            "--profile",
            str(FIXTURES / "tiny_compute.json"),
            "--profile",
            str(other),
            "--workers",
            "1",
            "--json",
        )


def test_one_local_worker_needs_no_comm_profile(capsys):
    call_command(
        "predict",
        "--profile",
        str(FIXTURES / "tiny_compute.json"),
        "--workers",
        "1",
        "--per-worker-batch",
        "2",
        "--json",
    )
    out = json.loads(capsys.readouterr().out)
    assert out["breakdown"]["exposed_communication"] == 0


def test_bad_arguments_are_explained():
    with pytest.raises(CommandError, match="--comm is needed"):
        call_command("predict", "--profile", str(FIXTURES / "tiny_compute.json"), "--workers", "2")
    with pytest.raises(CommandError, match="outside the profiled range|exceeds"):
        call_command(
            "predict",
            "--profile",
            str(FIXTURES / "tiny_compute.json"),
            "--workers",
            "1",
            "--per-worker-batch",
            "4096",
        )
    with pytest.raises(CommandError, match="give --profile"):
        call_command("predict")
    with pytest.raises(CommandError, match="--link"):
        call_command(
            "predict",
            "--profile",
            str(FIXTURES / "tiny_compute.json"),
            "--comm",
            str(FIXTURES / "tiny_comm.json"),
            "--link",
            "carrier-pigeon",
        )


@pytest.mark.django_db
def test_it_predicts_a_catalog_cluster(catalog, capsys):
    call_command(
        "predict",
        "--model",
        "examples.tiny_model:build",
        "--input-shape",
        "3,32,32",
        "--instance",
        "p4d.24xlarge",
        "--nodes",
        "2",
        "--per-worker-batch",
        "64",
        "--json",
    )
    two = json.loads(capsys.readouterr().out)
    call_command(
        "predict",
        "--model",
        "examples.tiny_model:build",
        "--input-shape",
        "3,32,32",
        "--instance",
        "p4d.24xlarge",
        "--nodes",
        "1",
        "--per-worker-batch",
        "64",
        "--json",
    )
    one = json.loads(capsys.readouterr().out)
    assert two["source"] == "analytical" and two["per_worker_batch"] == 64
    assert two["simulator_ms_p50"] >= one["simulator_ms_p50"]  # crossing the network costs time
    assert two["throughput_samples_s"] / one["throughput_samples_s"] <= 2.0  # never superlinear
    # the all-reduce between the nodes is timed by the NCCL model learned on published EFA sweeps
    assert two["comm"]["source"] == "learned" and two["comm"]["near_points"] > 0
    assert one["comm"]["source"] == "learned" and "nvlink" in one["comm"]["detail"]
    with pytest.raises(CommandError, match="not a CUDA GPU instance type"):
        call_command("predict", "--model", "examples.tiny_model:build", "--instance", "inf2.xlarge")


@pytest.mark.django_db
def test_its_catalog_p10_p90_carries_the_validated_model_error_of_the_source(catalog, capsys):
    from planner.app import service

    args = ("--model", "examples.tiny_model:build", "--input-shape", "3,32,32", "--instance", "p4d.24xlarge")
    call_command("predict", *args, "--per-worker-batch", "64", "--json")
    out = json.loads(capsys.readouterr().out)
    err = service.model_errors()["analytical"]  # one node, no profile: the analytical source's
    assert out["model_error"]["source"] == "analytical" and out["model_error"]["n"] == err.n
    assert out["iteration_ms_p90"] == pytest.approx(out["simulator_ms_p90"] * math.exp(err.q90))
    assert out["iteration_ms_p50"] == pytest.approx(out["simulator_ms_p50"] * math.exp(err.q50))
    assert out["iteration_ms_p10"] < out["iteration_ms_p50"] < out["iteration_ms_p90"]
    assert "training rows" in out["support"]


@pytest.mark.django_db
def test_with_gradient_accumulation_a_two_node_step_averages_one_all_reduce_over_k(catalog, capsys):
    args = ("--model", "examples.tiny_model:build", "--input-shape", "3,32,32", "--instance", "g4dn.12xlarge")
    args += ("--nodes", "2", "--per-worker-batch", "8", "--json")
    call_command("predict", *args)
    plain = json.loads(capsys.readouterr().out)
    call_command("predict", *args, "--accumulation-steps", "8")
    accumulated = json.loads(capsys.readouterr().out)
    assert accumulated["simulator_ms_p50"] < plain["simulator_ms_p50"]
    with pytest.raises(CommandError, match="--accumulation-steps must be 1 to 1024"):
        call_command("predict", *args, "--accumulation-steps", "0")
