"""Cross-device transfer: FLOP/byte counting, roofline calibration, transferred predictions."""

from __future__ import annotations

import pytest

from planner.hardware import GpuSpec
from planner.perf.compute import PhaseSpread, PhaseTimes
from planner.perf.transfer import (
    CALIBRATION_ALIASES,
    CalibrationRow,
    OpCost,
    RooflineParams,
    TransferModel,
    WorkloadCost,
    calibrate,
    count_workload,
    roofline_ms,
    spec_name_for,
)

SPECS = {
    "SLOW": GpuSpec(
        "SLOW", "Arch1", fp32_tflops=10, tf32_tflops=80, fp16_tflops=160, memory_bandwidth_gb_s=600
    ),
    "MID": GpuSpec(
        "MID", "Arch1", fp32_tflops=20, tf32_tflops=150, fp16_tflops=300, memory_bandwidth_gb_s=1500
    ),
    "FAST": GpuSpec(
        "FAST", "Arch2", fp32_tflops=60, tf32_tflops=500, fp16_tflops=1000, memory_bandwidth_gb_s=3300
    ),
    "HUGE": GpuSpec(
        "HUGE", "Arch2", fp32_tflops=60, tf32_tflops=500, fp16_tflops=1000, memory_bandwidth_gb_s=4800
    ),
}


def tiny_cnn():
    import torch.nn as nn

    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))


def synthetic_cost(precision="tf32", scale=1.0):
    ops = {
        "forward": (OpCost("conv", 0, 8e9 * scale, 1e6, 3e8 * scale),),
        "backward": (OpCost("conv_bwd", 0, 16e9 * scale, 2e6, 6e8 * scale),),
        "optimizer": (OpCost("sgd", 0, 0, 5e8, 0),),
    }
    return WorkloadCost("synthetic", precision, ops)


def test_count_workload_agrees_with_flop_counter_mode():
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    cost = count_workload(tiny_cnn, (3, 8, 8), batch_sizes=(2, 4))
    model = tiny_cnn()
    forward = FlopCounterMode(display=False)
    with forward:
        out = model(torch.randn(3, 3, 8, 8))
    backward = FlopCounterMode(display=False)
    with backward:
        out.sum().backward()
    assert cost.totals(3)["forward"][0] == pytest.approx(forward.get_total_flops(), rel=1e-9)
    # no input gradient for the first layer, so less than twice the forward
    assert cost.totals(3)["backward"][0] == pytest.approx(backward.get_total_flops(), rel=1e-9)


def test_counted_bytes_grow_linearly_with_the_batch_and_include_the_weights():
    cost = count_workload(tiny_cnn, (3, 8, 8), batch_sizes=(2, 4))
    b1, b2, b3 = (cost.totals(b)["forward"][1] for b in (1, 2, 3))
    assert b3 - b2 == pytest.approx(b2 - b1)
    weights = (8 * 3 * 9 + 8 + 8 * 64 * 10 + 10) * 4
    assert b1 - (b2 - b1) >= weights  # the batch-independent part reads at least the weights
    assert cost.totals(1)["optimizer"][0] == 0.0
    assert cost.totals(1)["optimizer"][1] > 4 * weights
    assert cost.param_count == weights // 4


def test_half_precision_touches_half_the_bytes():
    full = count_workload(tiny_cnn, (3, 8, 8), precision="tf32")
    half = count_workload(tiny_cnn, (3, 8, 8), precision="amp")
    assert half.totals(64)["forward"][1] == pytest.approx(full.totals(64)["forward"][1] / 2, rel=0.05)
    assert WorkloadCost.from_dict(half.to_dict()) == half


def test_the_sum_roofline_adds_compute_and_memory_time():
    params = RooflineParams(eta_tensor=0.5, eta_memory={"full": 0.5, "half": 0.5}, beta=1.0)
    t = roofline_ms(synthetic_cost(), 10, SPECS["MID"], params)
    # forward: 8e10 FLOP / (150e12·0.5) + (1e6 + 3e9) B / (1500e9·0.5), in ms
    assert t["forward"] == pytest.approx(8e10 / 75e12 * 1e3 + 3.001e9 / 750e9 * 1e3)


def test_calibration_recovers_known_efficiencies():
    truth = TransferModel(
        RooflineParams(eta_tensor=0.4, eta_cuda=0.6, eta_memory={"full": 0.5, "half": 0.4}, beta=0.7),
        dict(SPECS),
    )
    costs = {"full": synthetic_cost("tf32"), "half": synthetic_cost("amp", 0.5)}
    rows = [
        CalibrationRow(g, p, 64, truth.images_per_s(costs["half" if p == "amp" else "full"], 64, g, p))
        for g in SPECS
        for p in ("fp32", "tf32", "amp")
    ]
    fitted = calibrate(rows, costs, SPECS, batch=64)
    assert fitted.params.beta == pytest.approx(0.7)
    for row in rows:
        cost = costs["half" if row.precision == "amp" else "full"]
        assert fitted.images_per_s(cost, 64, row.gpu, row.precision) == pytest.approx(
            row.images_per_s, rel=0.03
        )
    for k in fitted.gpu_factors.values():
        assert k == pytest.approx(1.0, abs=0.05)


def test_an_uncalibrated_gpu_uses_its_architecture_factor():
    model = TransferModel(
        RooflineParams(), dict(SPECS), gpu_factors={"MID": 1.2}, arch_factors={"Arch1": 1.1}
    )
    assert model.factor("MID") == (1.2, "gpu")
    assert model.factor("SLOW") == (1.1, "architecture")
    assert model.factor("FAST") == (1.0, "global")


def test_transfer_scales_a_measurement_by_the_roofline_ratio():
    model = TransferModel(RooflineParams(), dict(SPECS))
    cost = synthetic_cost()
    measured = PhaseTimes(10.0, 20.0, 2.0, spread=PhaseSpread(0.05, 0.05, 0.05))
    out = model.transfer(measured, cost, 32, "MID", "FAST")
    src, dst = model.phase_ms(cost, 32, "MID"), model.phase_ms(cost, 32, "FAST")
    assert out.forward == pytest.approx(10.0 * dst["forward"] / src["forward"])
    assert out.optimizer == pytest.approx(2.0 * dst["optimizer"] / src["optimizer"])
    assert out.source == "transferred"
    assert out.spread == measured.spread


def test_predict_says_measured_transferred_or_analytical():
    model = TransferModel(RooflineParams(), dict(SPECS))
    cost = synthetic_cost()
    measured = PhaseTimes(10.0, 20.0, 2.0)
    assert model.predict(cost, 32, "MID", measured=measured, measured_on="MID").source == "measured"
    assert model.predict(cost, 32, "FAST", measured=measured, measured_on="MID").source == "transferred"
    assert model.predict(cost, 32, "FAST", measured=measured, measured_on="AMD EPYC").source == "analytical"
    assert model.predict(cost, 32, "FAST").source == "analytical"


def test_calibration_board_names_map_onto_catalog_spec_rows():
    assert spec_name_for("A100-SXM4-40GB") == "A100"
    assert spec_name_for("A100-SXM4-80GB") == "A100-80GB"
    assert spec_name_for("A10") == "A10G"
    assert spec_name_for("V100-SXM2-32GB") == "V100"
    assert spec_name_for("GH200") == "GH200"  # no catalog row: a supplementary spec
    model = TransferModel(RooflineParams(), {})
    assert model.spec("H100-PCIe-80GB").memory_bandwidth_gb_s == 2000
    assert set(CALIBRATION_ALIASES.values()) <= {"V100", "A100", "A100-80GB", "H100", "H200", "A10G"}


def test_a_transfer_model_roundtrips_through_a_dict():
    model = TransferModel(
        RooflineParams(0.3, 0.6, {"full": 0.5, "half": 0.4}, 0.8), dict(SPECS), {"MID": 1.1}, {"Arch1": 1.05}
    )
    again = TransferModel.from_dict(model.to_dict(), SPECS)
    assert again.images_per_s(synthetic_cost(), 64, "MID") == model.images_per_s(synthetic_cost(), 64, "MID")
