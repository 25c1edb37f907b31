"""Real compute profiles on CPU: the example models, the batch search, and the CLI's errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from profiler.agent.cli import main
from profiler.agent.compute import ComputeOptions, CpuMemoryProbe, Trainer, search_max_batch
from profiler.agent.schema import validate_profile
from workload.runs import ladder
from workload.specs import load_model

from .conftest import REPO_ROOT

TINY = [
    "--model",
    "examples.tiny_model:build",
    "--input-shape",
    "3,32,32",
    "--device",
    "cpu",
    "--num-classes",
    "10",
    "--input-pipeline-seconds",  # short: these tests are about the steps, not the data loader
    "0.1",
]


def _load(path) -> dict:
    with open(path) as handle:
        doc = json.load(handle)
    validate_profile(doc)
    return doc


def test_compute_profile_of_the_tiny_cnn_on_cpu_validates_and_is_reported(tmp_path, event_server):
    out = tmp_path / "tiny.json"
    code = main(
        [
            "compute",
            *TINY,
            "--batch-sizes",
            "8,4",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--out",
            str(out),
            "--report-to",
            event_server.url,
            "--token",
            "tok",
            "-q",
        ]
    )
    assert code == 0
    doc = _load(out)
    assert doc["kind"] == "compute" and doc["max_batch_size"] is None and doc["batch_search"] == []
    # a 3x32x32 input is CIFAR-like: its loader rate is measured for the small_image pipeline
    pipeline = doc["input_pipeline"]
    assert pipeline["kind"] == "small_image" and pipeline["samples_per_s_per_vcpu"] > 0
    assert pipeline["samples"] >= 10 and 0.1 <= pipeline["seconds"] < 5 and "32x32" in pipeline["detail"]
    assert doc["model"]["num_classes"] == 10
    assert doc["model"]["forward_flops_per_sample"] > 0
    assert doc["model"]["train_flops_per_sample"] > doc["model"]["forward_flops_per_sample"]
    assert doc["environment"]["threads"] >= 1 and doc["environment"]["gpu_count"] >= 0
    assert [s["batch_size"] for s in doc["samples"]] == [4, 8]
    for sample in doc["samples"]:
        for phase in ("forward", "backward", "optimizer"):
            timing = sample["phases"][phase]
            assert len(timing["times_ms"]) == 3
            assert timing["p10_ms"] <= timing["median_ms"] <= timing["p90_ms"]
        buckets = sample["buckets"]
        # 1.6 MB of parameters: the 1 MiB first bucket closes at conv4's weight, the rest is one bucket.
        assert [b["index"] for b in buckets] == [0, 1]
        assert [b["num_params"] for b in buckets] == [5, 9]
        assert sum(b["size_bytes"] for b in buckets) == doc["model"]["param_bytes"]
        assert (
            buckets[0]["ready_ms"] <= buckets[1]["ready_ms"] <= sample["phases"]["backward"]["p90_ms"] * 1.5
        )
        assert all(0 <= b["ready_fraction"] <= 1 for b in buckets)
        assert sample["peak_memory_bytes"] >= doc["model"]["param_bytes"] * 3

    events = event_server.events()
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert {r.headers["Authorization"] for r in event_server.received} == {"Bearer tok"}
    assert events[-1]["type"] == "result" and events[-1]["profile"] == doc
    samples = [e for e in events if e["type"] == "sample"]
    assert [e["batch_size"] for e in samples] == [4, 8]
    timed = [e for e in events if e["type"] == "progress" and e["phase"] == "compute"]
    # One per timed step, unless the poster fell behind and a newer one replaced an unsent one.
    assert 2 <= len(timed) <= 6 and all(e["time_ms"] > 0 for e in timed)
    fractions = [e["fraction"] for e in events if "fraction" in e]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_transformer_example_profiles_without_warmup(tmp_path):
    out = tmp_path / "tf.json"
    code = main(
        [
            "compute",
            "--model",
            "examples.tiny_model:build_transformer",
            "--input-shape",
            "16,32",
            "--batch-sizes",
            "4",
            "--iters",
            "2",
            "--warmup",
            "0",
            "--device",
            "cpu",
            "--out",
            str(out),
            "-q",
        ]
    )
    assert code == 0
    sample = _load(out)["samples"][0]
    assert sample["memory_estimate"]["activations_bytes"] > 0
    assert len(sample["buckets"]) == 2


def test_auto_batch_search_on_cpu_finds_a_max_batch_within_max_memory(tmp_path):
    out = tmp_path / "auto.json"
    budget = 32 * 1024**2
    code = main(
        [
            "compute",
            *TINY,
            "--batch-sizes",
            "auto",
            "--max-memory",
            "32MB",
            "--max-batch",
            "4096",
            "--iters",
            "1",
            "--warmup",
            "1",
            "--min-iters",
            "1",
            "--out",
            str(out),
            "-q",
        ]
    )
    assert code == 0
    doc = _load(out)
    best = doc["max_batch_size"]
    assert 8 < best < 4096 and not doc["max_batch_capped"]
    probes = {p["batch_size"]: p for p in doc["batch_search"]}
    assert probes[best]["fits"] and not probes[best + 1]["fits"]
    assert all(p["estimated_bytes"] <= budget for p in probes.values() if p["fits"])
    assert probes[best + 1]["reason"] == "estimated peak memory exceeds --max-memory"
    assert [s["batch_size"] for s in doc["samples"]] == ladder(best)
    largest = doc["samples"][-1]
    # The sample's estimate uses activations measured in a real step at that batch size.
    assert largest["peak_memory_source"] == "estimate"
    assert largest["peak_memory_bytes"] <= budget
    assert largest["peak_memory_bytes"] == probes[best]["estimated_bytes"]
    assert doc["memory_budget_bytes"] == budget


def test_real_forward_probes_agree_with_the_meta_device_estimate():
    options = ComputeOptions(
        model="examples.tiny_model:build", input_shape=(3, 32, 32), num_classes=10
    ).resolved()
    trainer = Trainer(load_model(options.model, 10, options.input_shape, allow_code=True), options)
    trainer.probe_output()
    budget = 32 * 1024**2
    meta_probe = CpuMemoryProbe(trainer, budget)
    assert meta_probe.meta_model is not None
    real_probe = CpuMemoryProbe(trainer, budget)
    real_probe.meta_model = None
    found = {}
    for name, probe in (("meta", meta_probe), ("real", real_probe)):
        found[name] = search_max_batch(lambda size, probe=probe: probe(size).fits, 1, 2048)
    assert found["meta"] == found["real"] and found["meta"] > 1
    assert real_probe(found["real"] + 1).method == "forward"
    trainer.close()


def test_unknown_model_exits_2_with_a_clear_message_and_reports_the_error(tmp_path, event_server, capsys):
    code = main(
        [
            "compute",
            "--model",
            "torchvision:resnet19",
            "--input-shape",
            "3,32,32",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "x.json"),
            "--report-to",
            event_server.url,
            "--token",
            "t",
        ]
    )
    assert code == 2
    assert "unknown torchvision classification model 'resnet19'" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
    [event] = event_server.events()
    assert event["type"] == "error" and "resnet19" in event["message"] and event["seq"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input-shape", "3,x,32"], "bad input shape"),
        (["--input-shape", "3,32,32", "--batch-sizes", "0,8"], "bad batch sizes"),
        (["--input-shape", "3,32,32", "--max-memory", "2XB"], "bad size unit"),
        (["--input-shape", "3,32,32", "--device", "tpu"], "--device must be"),
    ],
)
def test_bad_compute_arguments_exit_2_with_a_clear_message(tmp_path, capsys, args, message):
    argv = ["compute", "--model", "examples.tiny_model:build", *args, "--out", str(tmp_path / "x.json")]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_cuda_device_without_cuda_is_a_usage_error(tmp_path, capsys):
    code = main(["compute", *TINY[:4], "--device", "cuda", "--out", str(tmp_path / "x.json")])
    assert code == 2 and "no CUDA device" in capsys.readouterr().err


def test_python_m_entry_point_exits_non_zero_on_a_bad_spec(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "profiler.agent",
            "compute",
            "--model",
            "nosuchpkg_xyz:build",
            "--input-shape",
            "3,32,32",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "x.json"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "error: cannot import model module 'nosuchpkg_xyz'" in result.stderr


def test_result_file_is_written_when_the_server_is_down(tmp_path, closed_port_url):
    out = tmp_path / "down.json"
    code = main(
        [
            "compute",
            *TINY,
            "--batch-sizes",
            "2",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--out",
            str(out),
            "--report-to",
            closed_port_url,
            "--report-retries",
            "1",
            "--report-backoff",
            "0.01",
            "-q",
        ]
    )
    assert code == 0
    assert _load(out)["samples"][0]["batch_size"] == 2


def test_a_model_that_cannot_train_on_batch_1_starts_at_batch_2(tmp_path):
    model_file = tmp_path / "bn_head.py"
    model_file.write_text(
        "import torch\n"
        "def build(num_classes=3):\n"
        "    return torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, num_classes))\n"
    )
    out = tmp_path / "bn.json"
    code = main(
        [
            "compute",
            "--model",
            f"{model_file}:build",
            "--input-shape",
            "12",
            "--batch-sizes",
            "1,4",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--device",
            "cpu",
            "--out",
            str(out),
            "-q",
        ]
    )
    assert code == 0
    doc = _load(out)
    assert doc["min_batch_size"] == 2
    assert [s["batch_size"] for s in doc["samples"]] == [4]
    [failed] = doc["failed_samples"]
    assert failed["batch_size"] == 1 and "Expected more than 1 value per channel" in failed["reason"]


@pytest.mark.parametrize(
    "requested, ran",
    [("amp", "bf16"), ("fp32", "fp32"), ("bf16", "bf16")],
)
def test_a_cpu_profile_records_the_precision_it_ran_next_to_the_one_requested(tmp_path, requested, ran):
    out = tmp_path / "p.json"
    args = ["compute", *TINY, "--batch-sizes", "4", "--iters", "2", "--warmup", "0", "--precision", requested]
    assert main([*args, "--out", str(out), "-q"]) == 0
    device = _load(out)["device"]
    assert device["precision"] == ran and device["precision_requested"] == requested


def test_amp_runs_as_bf16_autocast_without_a_scaler_on_cpu():
    from workload.runs import precision_run

    options = ComputeOptions(
        model="examples.tiny_model:build", input_shape=(3, 16, 16), num_classes=10, precision="amp"
    ).resolved()
    trainer = Trainer(load_model(options.model, 10, options.input_shape, allow_code=True), options)
    try:
        assert trainer.precision == "bf16" and trainer.scaler is None
        assert trainer.autocast_dtype is trainer.torch.bfloat16
    finally:
        trainer.close()
    assert precision_run("amp", "cuda") == "amp" and precision_run("amp", "cpu") == "bf16"
    assert precision_run("fp32", "cpu") == "fp32"


def test_the_input_pipeline_measure_can_be_skipped(tmp_path):
    out = tmp_path / "skip.json"
    args = [
        *TINY[:-2],
        "--input-pipeline-seconds",
        "0",
        "--batch-sizes",
        "4",
        "--iters",
        "2",
        "--warmup",
        "0",
    ]
    assert main(["compute", *args, "--out", str(out), "-q"]) == 0
    assert _load(out)["input_pipeline"] is None
