"""Per-configuration prediction cost of the compute models (µs), side by side in one run.

For ResNet-50 and BERT-large (library specs, traced once on the meta device) this times
``Oracle.phases(gpu, batch)`` — the compute prediction the solver asks for each (GPU, per-GPU
batch) it visits, uncached — and a whole oracle call for one 8-GPU node (compute, buckets,
comm, simulator timeline), for the previous model (ResNet-50 roofline) and the operator-class
model (with its residual trees) the app now plans with; then one whole plan (ResNet-50, min cost
within 24 h, the full fixture catalog, up to 64 nodes of 2 types) solved with each.

Run: ``.venv/bin/python bench/prediction_cost.py`` (about 20 s, CPU only).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner import calibration  # noqa: E402
from planner.hardware import load_gpu_specs  # noqa: E402
from planner.oracle import Oracle, Workload  # noqa: E402

MODELS = (
    ("torchvision:resnet50", (3, 224, 224)),
    (
        "transformers:bert(hidden_size=1024,num_hidden_layers=24,num_attention_heads=16,intermediate_size=4096)",
        (128,),
    ),
)
GPUS = ("V100", "A10G", "A100", "H100", "L4")


def per_call_us(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for i in range(repeat):
            fn(i)
        best = min(best, (time.perf_counter() - t) / repeat)
    return best * 1e6


def main() -> int:
    specs = load_gpu_specs(ROOT / "catalog/fixtures/gpu_specs.csv")
    t = time.perf_counter()
    new = calibration.load_compute_model(specs)
    load_ms = (time.perf_counter() - t) * 1e3
    old = calibration.load_or_calibrate(
        ROOT / "catalog/fixtures/calibration_resnet50_single_gpu.csv", specs, ROOT / "var" / "models"
    )
    print(f"loading planner/data/compute-model.json: {load_ms:.1f} ms ({len(new.residual.trees)} trees)")
    for spec, shape in MODELS:
        wl = Workload.from_dict(calibration.corpus_trace(spec, shape, "amp"))
        ops = sum(len(v) for v in wl.cost.ops.values())
        for label, model in (("previous", old), ("operator-class", new)):

            def phases(i: int, model=model, wl=wl) -> None:
                Oracle(wl, model, specs).phases(GPUS[i % len(GPUS)], 1 + i % 64)

            cand = calibration.node_candidate("A100", 8, specs["A100"])

            def call(i: int, model=model, wl=wl, cand=cand) -> None:
                Oracle(wl, model, specs)(((cand, 1),), 8 * (1 + i % 64))

            print(
                f"{spec.split('(')[0]:22} ({ops:5} operators)  {label:15} compute per (GPU, batch) "
                f"{per_call_us(phases, 200):7.1f} µs   one 8-GPU configuration {per_call_us(call, 100):8.1f} µs"
            )
    plan_times(specs, old, new)
    return 0


def plan_times(specs, old, new) -> None:
    from bench.solver import load_catalog
    from planner.solver import PlanRequest, solve

    catalog = load_catalog()
    wl = Workload.from_dict(calibration.corpus_trace("torchvision:resnet50", (3, 224, 224), "amp"))
    req = PlanRequest(
        objective="cost",
        total_samples=1281167 * 90,
        deadline_hours=24.0,
        max_nodes=64,
        max_types=2,
        global_batch_min=256,
        global_batch_max=4096,
    )
    for label, model in (("previous", old), ("operator-class", new)):
        oracle = Oracle(wl, model, specs)
        t = time.perf_counter()
        res = solve(req, catalog, oracle)
        best = res.best
        what = (
            (
                " + ".join(g.label for g in best.groups) + f" in {best.region}, ${best.total_usd:,.0f}, "
                f"{best.time_h:.1f} h"
            )
            if best
            else "infeasible"
        )
        print(
            f"plan (ResNet-50, {len(catalog)} offers) {label:15} {time.perf_counter() - t:6.2f} s, "
            f"{oracle.calls} oracle calls: {what}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
