"""The operator-class compute model: classes, FLOP counts, floors, the exported residual."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from planner.calibration import COMPUTE_MODEL_FILE, load_compute_model
from planner.hardware import GpuSpec, load_gpu_specs
from planner.perf.opclass import PRIOR, OpClassModel, Sample, Trees
from planner.perf.transfer import SUPPLEMENTARY_SPECS, RooflineParams
from workload.cost import count_workload, op_class

A100 = GpuSpec("A100", "Ampere", 108, 19.5, 156, 312, 1555, 40, 600)
ROOT = Path(__file__).resolve().parents[2]
SPEC_ROWS = load_gpu_specs(ROOT / "catalog/fixtures/gpu_specs.csv")


def _convs():
    import torch

    return torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 3, padding=1),  # dense
        torch.nn.Conv2d(32, 32, 3, padding=1, groups=4),  # grouped
        torch.nn.Conv2d(32, 32, 3, padding=1, groups=32),  # depthwise
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 8 * 8, 10),
    )


@pytest.mark.parametrize(
    ("name", "phase", "cls"),
    [
        ("aten.convolution:dense", "forward", "conv_dense"),
        ("aten.convolution_backward:depthwise", "backward", "conv_depthwise"),
        ("aten.convolution:grouped", "forward", "conv_grouped"),
        ("aten.addmm", "forward", "matmul"),
        ("aten.mm", "backward", "matmul"),
        ("aten.bmm", "forward", "attention"),
        ("aten._scaled_dot_product_efficient_attention", "forward", "attention"),
        ("aten.native_layer_norm", "forward", "norm"),
        ("aten.native_batch_norm_backward", "backward", "norm"),
        ("aten._softmax", "forward", "reduction"),
        ("aten.max_pool2d_with_indices", "forward", "reduction"),
        ("aten.embedding_dense_backward", "backward", "embedding"),
        ("aten.gelu", "forward", "elementwise"),
        ("aten.add_", "optimizer", "optimizer"),
    ],
)
def test_it_puts_each_operator_in_its_class(name, phase, cls):
    assert op_class(name, phase) == cls


def test_it_tells_dense_grouped_and_depthwise_convolutions_apart():
    cost = count_workload(_convs, (16, 8, 8))
    sums = cost.class_sums()
    assert {"conv_dense", "conv_grouped", "conv_depthwise", "matmul"} <= set(sums["forward"])
    assert sums["forward"]["conv_depthwise"].kernels == 1
    assert set(sums["optimizer"]) == {"optimizer"}


def test_a_depthwise_backward_costs_twice_its_forward():
    # torch's flop counter ignores groups for the weight gradient (250× too high for 7×7 depthwise)
    sums = count_workload(_convs, (16, 8, 8)).class_sums()
    for cls in ("conv_depthwise", "conv_grouped"):
        fwd, bwd = sums["forward"][cls].f1, sums["backward"][cls].f1
        assert bwd == pytest.approx(2 * fwd, rel=1e-6)


def test_small_batches_stay_below_peak_because_of_kernel_floors():
    cost = count_workload(_convs, (16, 8, 8))
    model = OpClassModel(RooflineParams(), {"A100": A100}, theta=dict(PRIOR))
    per_sample = [model.step_ms(cost, b, A100, "amp") / b for b in (1, 16, 256)]
    assert per_sample[0] > per_sample[1] > per_sample[2]


def test_the_model_round_trips_through_json():
    model = OpClassModel(
        RooflineParams(),
        {"A100": A100},
        theta=dict(PRIOR),
        beta=0.7,
        gpu_factors={"GA100/tensor": 0.8},
        nccl_slowdown=0.06,
        input_ns_per_element=0.7,
    )
    again = OpClassModel.from_dict(json.loads(json.dumps(model.to_dict())), {"A100": A100})
    cost = count_workload(_convs, (16, 8, 8))
    assert again.step_ms(cost, 8, A100, "amp") == pytest.approx(model.step_ms(cost, 8, A100, "amp"))
    assert again.nccl_slowdown == 0.06 and again.input_ns_per_element == 0.7


def test_it_refuses_a_model_trained_on_other_features():
    doc = OpClassModel(RooflineParams(), {}).to_dict()
    doc["features"] = ["something", "else"]
    with pytest.raises(ValueError, match="recalibrate"):
        OpClassModel.from_dict(doc, {})


def test_exported_trees_predict_what_xgboost_predicts():
    import numpy as np
    import xgboost as xgb

    rng = np.random.default_rng(0)
    x = rng.random((300, 4)).astype(np.float32)
    x[:30, 2] = np.nan
    y = np.sin(4 * x[:, 0]) + x[:, 1] ** 2 - np.nan_to_num(x[:, 2])
    booster = xgb.train({"max_depth": 3, "eta": 0.3}, xgb.DMatrix(x, label=y), num_boost_round=12)
    trees = Trees.from_xgboost_json(json.loads(booster.save_raw("json")))
    expected = booster.predict(xgb.DMatrix(x))
    assert np.allclose([trees(row) for row in x.tolist()], expected, atol=1e-5)
    assert Trees.from_dict(trees.to_dict()) == trees


def test_the_shipped_model_plans_without_importing_xgboost():
    code = (
        "import sys; from planner.hardware import load_gpu_specs; from planner.calibration import "
        "load_compute_model; m = load_compute_model(load_gpu_specs('catalog/fixtures/gpu_specs.csv')); "
        "assert m.residual.trees, 'no residual'; assert 'xgboost' not in sys.modules; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def test_the_shipped_model_was_fitted_on_every_publisher_but_the_frozen_ones():
    from planner.corpus import load_frozen

    doc = json.loads(COMPUTE_MODEL_FILE.read_text())
    assert doc["meta"]["corpus_sha256"] == "all non-frozen publishers"
    assert doc["meta"]["frozen_publishers"] == sorted(load_frozen().publishers)
    assert doc["meta"]["made_by"] == "manage.py calibrate_compute"
    assert sum(doc["meta"]["chip_rows"].values()) == doc["meta"]["train_rows"]


def test_a_die_without_rows_gets_the_power_regression_else_its_architecture_else_the_mean():
    model = load_compute_model({"A100": A100})
    model.gpu_factors = {"GA100/tensor": 0.7, "GV100/tensor": 0.6}
    model.arch_factors = {"Hopper/tensor": 0.9}
    model.power_fit = {"slope": -0.25, "tensor": -0.2}
    l4 = GpuSpec("L4", "Ada", 58, 30.3, 60, 121, 300, 24, 0.0)  # 72 W, 58 SMs, 2.04 GHz
    k, level = model.unit_factor_source(l4, "amp")
    assert level == "power" and k == pytest.approx(math.exp(-0.2 - 0.25 * math.log(72 / (58 * 2.04))))
    no_power = GpuSpec("H999", "Hopper", 132, 67, 494.5, 989.5, 3350, 80, 900)  # no board power known
    assert model.unit_factor_source(no_power, "amp") == (0.9, "architecture")
    unknown = GpuSpec("X1", "Unknown", 1, 1, 1, 1, 1, 1, 0)
    assert model.unit_factor_source(unknown, "amp") == (pytest.approx(math.sqrt(0.7 * 0.6)), "global")
    assert "no training rows" in model.support(l4, "amp") and "power per SM-GHz" in model.support(l4, "amp")


def test_the_power_regression_finds_a_planted_slope():
    from planner.perf.opclass import fit_power

    specs = {n: SUPPLEMENTARY_SPECS.get(n) or SPEC_ROWS[n] for n in ("A100", "V100", "T4", "A10G")}
    model = load_compute_model(specs)
    # factors planted on ln k = 0.1 − 0.3·ln w (w: each board's W per SM-GHz)
    model.gpu_factors = {
        f"{die}/tensor": math.exp(0.1 - 0.3 * math.log(specs[n].watts_per_sm_ghz()))
        for n, die in (("A100", "GA100"), ("V100", "GV100"), ("T4", "TU104"), ("A10G", "GA102"))
    }
    samples = [Sample(i, "f", None, 8, n, "amp", 1.0) for i, n in enumerate(specs)]
    fitted = fit_power(model, samples)
    assert fitted["slope"] == pytest.approx(-0.3) and fitted["tensor"] == pytest.approx(0.1)


def test_an_fp32_convolution_runs_in_tf32_where_the_gpu_has_it_and_a_matmul_does_not():
    from planner.perf.opclass import class_rates

    rates = class_rates(A100, "fp32")
    assert rates["conv_dense"] == ("tensor", A100.tf32_tflops * 1e9)
    assert rates["matmul"] == ("cuda", A100.fp32_tflops * 1e9)
    assert rates["conv_depthwise"][0] == "cuda"
    v100 = GpuSpec("V100", "Volta", 80, 15.7, None, 125, 900, 16, 300)
    assert class_rates(v100, "fp32")["conv_dense"] == ("cuda", 15.7e9)
