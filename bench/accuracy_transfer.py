"""Leave-one-GPU-out accuracy of the cross-device transfer model on published ResNet-50 numbers.

For every GPU chip of ``catalog/fixtures/calibration_resnet50_single_gpu.csv`` (boards that map
to the same spec row — V100-SXM2-16GB and -32GB — are held out together), calibrate the
roofline (η_c, η_m, per-GPU and per-architecture factors) on all other chips, then predict the
held-out chip's training throughput (images/s) at each precision it was published for.  The
"published" figure is the median of that (GPU, precision)'s rows; their range is printed too.

A second, stricter pass also removes the held-out chip's architecture factor (as if the whole
architecture were new) so the reader can see what the architecture level buys.

Run: ``.venv/bin/python bench/accuracy_transfer.py`` (about 10 s, CPU only, no downloads).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.hardware import load_gpu_specs  # noqa: E402
from planner.perf.transfer import (  # noqa: E402
    CalibrationRow,
    TransferModel,
    calibrate,
    count_workload,
    load_calibration_csv,
    precision_family,
    spec_name_for,
)

CALIBRATION = ROOT / "catalog/fixtures/calibration_resnet50_single_gpu.csv"
SPECS = ROOT / "catalog/fixtures/gpu_specs.csv"
BATCH = 256


def resnet50_costs() -> dict:
    import torchvision

    def build():
        return torchvision.models.resnet50()

    return {
        "full": count_workload(build, (3, 224, 224), precision="tf32", model_spec="torchvision:resnet50"),
        "half": count_workload(build, (3, 224, 224), precision="amp", model_spec="torchvision:resnet50"),
    }


def leave_one_out(
    rows: list[CalibrationRow],
    costs: dict,
    specs: dict,
    *,
    drop_arch: bool,
    form: str = "sum",
    betas: tuple | None = None,
) -> list[tuple]:
    chips = sorted({spec_name_for(r.gpu) for r in rows})
    out = []
    for chip in chips:
        train = [r for r in rows if spec_name_for(r.gpu) != chip]
        test = [r for r in rows if spec_name_for(r.gpu) == chip]
        model: TransferModel = (
            calibrate(train, costs, specs, batch=BATCH, form=form, betas=betas)
            if betas
            else calibrate(train, costs, specs, batch=BATCH, form=form)
        )
        spec = model.spec(test[0].gpu)
        cuda_note = "" if any(r.precision == "fp32" for r in train) else " (eta_cuda = prior)"
        if drop_arch:
            model.arch_factors.pop(spec.architecture, None)
        _, level = model.factor(spec)
        for gpu, prec in sorted({(r.gpu, r.precision) for r in test}):
            published = [r.images_per_s for r in test if (r.gpu, r.precision) == (gpu, prec)]
            pred = model.images_per_s(costs[precision_family(prec)], BATCH, spec, prec)
            med = statistics.median(published)
            out.append(
                (
                    gpu,
                    spec.name,
                    prec,
                    len(published),
                    min(published),
                    max(published),
                    med,
                    pred,
                    100 * (pred - med) / med,
                    level + cuda_note * (prec == "fp32"),
                )
            )
    return out


def summary(result: list[tuple]) -> str:
    errs = [abs(r[8]) for r in result]
    return (
        f"median |error| {statistics.median(errs):.1f} %   max |error| {max(errs):.1f} %   "
        f"groups {len(errs)}   within 15 %: {sum(e <= 15 for e in errs)}/{len(errs)}"
    )


def print_table(title: str, result: list[tuple]) -> list[float]:
    print(f"\n{title}")
    print(
        f"{'gpu (calibration name)':24} {'spec':15} {'prec':5} {'n':>2} {'published':>10} {'range':>13} "
        f"{'predicted':>10} {'error %':>8}  factor"
    )
    errs = []
    for gpu, spec, prec, n, lo, hi, med, pred, err, level in result:
        rng = f"{lo:.0f}-{hi:.0f}" if n > 1 else ""
        print(
            f"{gpu:24} {spec:15} {prec:5} {n:>2} {med:>10.0f} {rng:>13} {pred:>10.0f} {err:>+8.1f}  {level}"
        )
        errs.append(abs(err))
    print(summary(result))
    return errs


def main() -> int:
    rows = load_calibration_csv(CALIBRATION)
    specs = load_gpu_specs(SPECS)
    costs = resnet50_costs()
    full = calibrate(rows, costs, specs, batch=BATCH)
    fwd = costs["full"].totals(1)["forward"][0] / 1e9
    step = sum(v[0] for v in costs["full"].totals(BATCH).values()) / BATCH / 1e9
    touched = [sum(v[1] for v in costs[f].totals(BATCH).values()) / BATCH / 1e9 for f in ("full", "half")]
    print(
        f"ResNet-50 per image: forward {fwd:.2f} GFLOP; training step {step:.2f} GFLOP, "
        f"{touched[0]:.3f} GB (32-bit) / {touched[1]:.3f} GB (16-bit) touched"
    )
    p = full.params
    print(
        f"calibrated on all chips: form {p.form}, eta_tensor {p.eta_tensor:.3f}, eta_cuda {p.eta_cuda:.3f}, "
        f"eta_memory { {k: round(v, 3) for k, v in p.eta_memory.items()} }, beta {p.beta:.2f}"
    )
    print("per-GPU factors k_g:", {k: round(v, 3) for k, v in sorted(full.gpu_factors.items())})
    print("per-architecture factors:", {k: round(v, 3) for k, v in sorted(full.arch_factors.items())})
    errs = print_table(
        "Leave one GPU chip out (held-out chip uses its architecture factor when calibrated)",
        leave_one_out(rows, costs, specs, drop_arch=False),
    )
    print_table(
        "Stricter: held-out chip also loses its architecture factor (global efficiencies only)",
        leave_one_out(rows, costs, specs, drop_arch=True),
    )
    print("\nAlternatives (same leave-one-chip-out protocol, with architecture factors):")
    for form, betas in (("sum", (1.0,)), ("max", (1.0,)), ("max", None)):
        label = f"form={form} beta={'1 fixed' if betas else 'fitted'}"
        print(
            f"  {label:26} {summary(leave_one_out(rows, costs, specs, drop_arch=False, form=form, betas=betas))}"
        )
    return 0 if statistics.median(errs) <= 15 else 1


if __name__ == "__main__":
    raise SystemExit(main())
