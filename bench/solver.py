"""Solver bench: optimality vs brute force, full-catalog speed, and gain over baselines.

Run:  .venv/bin/python bench/solver.py  [--quick]

It uses a simple *analytical* DDP performance oracle (``AnalyticalOracle``) instead of the learned
models, so it runs anywhere without profiles:

* per-GPU speed: ``fp16 dense tensor TFLOPS x efficiency / (3 x forward FLOPs per sample)``,
  saturating in the per-GPU batch ``b`` as ``b / (b + b_half)``; the efficiency (6 % for ResNet-50)
  is calibrated on the single-GPU ResNet-50 AMP figures in
  ``catalog/fixtures/calibration_resnet50_single_gpu.csv`` (A10: 639 img/s, A100: 1,527 img/s);
* GPU memory caps the per-GPU batch (weights + gradients + Adam state, plus activations/sample);
* gradients (fp32) are all-reduced inside a node over NVLink (or PCIe when the GPU has none), then
  with a ring over the nodes at the slowest node's network bandwidth (85 % efficiency with EFA,
  60 % over TCP) plus a per-bucket latency;
* communication overlaps the backward pass (2/3 of compute) at 80 %;
* a heterogeneous cluster splits the global batch in proportion to node speed (capped by memory),
  and the iteration takes as long as the slowest node plus the exposed communication.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from planner.candidates import Candidate, load_candidates, load_network  # noqa: E402
from planner.solver import Estimate, Infeasible, PlanRequest, solve  # noqa: E402

FIXTURES = ROOT / "catalog" / "fixtures"
PCIE_GBYTES_S = 12.0  # effective all-reduce bandwidth between GPUs without NVLink
BUCKET_BYTES = 25 * 2**20  # DDP gradient bucket


@dataclass(frozen=True)
class GpuSpec:
    name: str
    fp16_tflops: float
    memory_gib: float
    nvlink_gbytes_s: float


@dataclass(frozen=True)
class ModelSpec:
    name: str
    params: float  # parameters
    forward_flops: float  # per sample
    activation_gib: float  # per sample (mixed precision)
    efficiency: float  # of fp16 dense tensor peak
    b_half: float = 16.0  # per-GPU batch at which half the peak efficiency is reached


RESNET50 = ModelSpec("ResNet-50", 25.6e6, 4.1e9, 0.07, 0.06)
VGG19 = ModelSpec("VGG-19", 143.7e6, 19.6e9, 0.16, 0.09)
IMAGENET_SAMPLES = 1_281_167


def load_gpu_specs(path: Path = FIXTURES / "gpu_specs.csv") -> dict[str, GpuSpec]:
    out: dict[str, GpuSpec] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if not r["fp16_tensor_tflops_dense"]:
                continue
            out[r["gpu"]] = GpuSpec(r["gpu"], float(r["fp16_tensor_tflops_dense"]), float(r["memory_gib"]),
                                    float(r["nvlink_gbps_per_gpu"] or 0.0))
    return out


def load_catalog(**kwargs) -> list[Candidate]:
    with open(FIXTURES / "aws_instance_network.csv", newline="") as f:
        net = load_network(csv.DictReader(f))
    with open(FIXTURES / "aws_gpu_instances.csv", newline="") as f:
        return load_candidates(csv.DictReader(f), net, **kwargs)


class AnalyticalOracle:
    """``perf(config, global_batch) -> Estimate | None`` for one model (see the module docstring)."""

    def __init__(self, model: ModelSpec, specs: dict[str, GpuSpec] | None = None) -> None:
        self.model = model
        self.specs = specs if specs is not None else load_gpu_specs()
        self.calls = 0
        self._node: dict[str, tuple[float, float, float] | None] = {}

    def gpu(self, c: Candidate) -> GpuSpec | None:
        spec = self.specs.get(c.gpu_model) or self.specs.get(c.gpu_model.split("-")[0])
        if spec is None:
            return None
        mem = c.gpu_memory_gib or spec.memory_gib
        return replace(spec, memory_gib=mem)

    def node(self, c: Candidate) -> tuple[float, float, float] | None:
        """``(per-GPU peak samples/s, per-node batch capacity, intra-node all-reduce s)`` or None."""
        key = c.instance_type
        if key not in self._node:
            g = self.gpu(c)
            m = self.model
            if g is None:
                self._node[key] = None
            else:
                peak = g.fp16_tflops * 1e12 * m.efficiency / (3.0 * m.forward_flops)
                max_b = math.floor((g.memory_gib * 0.9 - m.params * 16 / 2**30) / m.activation_gib)
                gp = c.gpus_per_node
                intra = 0.0
                if gp > 1:
                    intra = 2 * (gp - 1) / gp * m.params * 4 / ((g.nvlink_gbytes_s or PCIE_GBYTES_S) * 1e9)
                self._node[key] = (peak, float(max_b * gp), intra) if max_b >= 1 else None
        return self._node[key]

    def __call__(self, config: tuple[tuple[Candidate, int], ...], global_batch: int) -> Estimate | None:
        self.calls += 1
        m = self.model
        merged: dict[str, list] = {}
        for c, n in config:
            if c.instance_type in merged:
                merged[c.instance_type][1] += n
            else:
                merged[c.instance_type] = [c, n]
        groups = list(merged.values())
        nodes = sum(n for _, n in groups)
        gpus = sum(c.gpus_per_node * n for c, n in groups)
        if global_batch < gpus:
            return None
        info = [self.node(c) for c, _ in groups]
        if any(x is None for x in info):
            return None
        peak = [x[0] for x in info]  # type: ignore[index]
        cap = [x[1] for x in info]  # type: ignore[index]
        speed = [peak[i] * groups[i][0].gpus_per_node for i in range(len(groups))]  # per node
        # water-filling split of the global batch, proportional to node peak speed, capped by memory
        share = [0.0] * len(groups)  # per node
        free = set(range(len(groups)))
        left = float(global_batch)
        while free and left > 1e-9:
            w = sum(speed[i] * groups[i][1] for i in free)
            capped = [i for i in free if left * speed[i] / w > cap[i] - share[i] + 1e-9]
            if not capped:
                for i in free:
                    share[i] += left * speed[i] / w
                left = 0.0
                break
            for i in capped:
                left -= (cap[i] - share[i]) * groups[i][1]
                share[i] = cap[i]
                free.discard(i)
        if left > 1e-6:
            return None  # does not fit in GPU memory
        t_compute = max((share[i] / groups[i][0].gpus_per_node + m.b_half) / peak[i]
                        for i in range(len(groups)) if share[i] > 0)
        grad_bytes = m.params * 4
        intra = max(x[2] for x in info)  # type: ignore[index]
        inter = 0.0
        if nodes > 1:
            bw = min(c.network_gbps for c, _ in groups) or 1.0
            efa = all(c.efa for c, _ in groups)
            eta, alpha = (0.85, 15e-6) if efa else (0.6, 50e-6)
            buckets = math.ceil(grad_bytes / BUCKET_BYTES)
            inter = 2 * (nodes - 1) / nodes * grad_bytes * 8 / (bw * 1e9 * eta) + 2 * (nodes - 1) * alpha * buckets
        comm = intra + inter
        exposed = max(0.0, comm - 0.8 * (2.0 / 3.0) * t_compute)
        it = t_compute + exposed + 0.005
        hetero = len(groups) > 1
        p90 = it * (1.03 + 0.01 * math.log2(max(1, nodes)) + (0.04 if hetero else 0.0))
        if exposed > 0.5 * t_compute:
            bottleneck = "network (inter-node)" if inter >= intra else "intra-node interconnect"
        elif any(share[i] >= cap[i] - 1e-9 for i in range(len(groups))):
            bottleneck = "GPU memory (batch capped)"
        else:
            bottleneck = "compute"
        # per config entry (the solver may pass same-type groups separately)
        by_type = {groups[i][0].instance_type: int(round(share[i])) for i in range(len(groups))}
        return Estimate(iter_time_s=it, iter_time_p90_s=p90, throughput_sps=global_batch / it,
                        bottleneck=bottleneck, per_node_batch=tuple(by_type[c.instance_type] for c, _ in config))


# ----------------------------------------------------------------------------------- optimality
def _supported_pool(catalog: list[Candidate], oracle: AnalyticalOracle) -> list[Candidate]:
    return [c for c in catalog if oracle.gpu(c) is not None]


def random_problem(rng: random.Random, catalog: list[Candidate],
                   medium: bool = False) -> tuple[PlanRequest, list[Candidate], AnalyticalOracle]:
    """A seeded random instance with constraints on a sensible scale: small (3-6 candidates in 1-2
    regions, 2-6 nodes, up to 3 types) or ``medium`` (8-12 candidates of one region, 6-10 nodes,
    2 types), where the bounds have more to prune."""
    from planner.solver import OBJECTIVES, evaluate_config

    model = rng.choice([RESNET50, VGG19])
    oracle = AnalyticalOracle(model)
    pool = _supported_pool(catalog, oracle)
    regions = sorted({c.region for c in pool})
    chosen = rng.sample(regions, 1 if medium else rng.choice([1, 1, 2]))
    local = [c for c in pool if c.region in chosen]
    cands = rng.sample(local, min(len(local), rng.randint(8, 12) if medium else rng.randint(3, 6)))
    out = []
    for c in cands:
        if c.is_spot:
            c = replace(c, interruption_bucket=rng.randint(0, 4))
        if rng.random() < 0.2:
            c = replace(c, max_count=rng.randint(1, 3))
        out.append(c)
    cands = out
    objective = rng.choice(OBJECTIVES)
    lo, hi = rng.choice([(256, 256), (128, 1024), (64, 512), (512, 2048)])
    base = PlanRequest(objective="cost", total_samples=rng.choice([2e6, 2e7, 1e8]), deadline_hours=1e6,
                       max_nodes=rng.randint(6, 10) if medium else rng.randint(2, 6),
                       max_types=2 if medium else rng.choice([1, 2, 2, 3]), global_batch_min=lo,
                       global_batch_max=hi, startup_overhead_h=rng.choice([0.0, 0.05, 0.2]),
                       checkpoint_interval_h=rng.choice([0.25, 0.5, 1.0]), restart_overhead_h=rng.choice([0.05, 0.2]),
                       checkpoint_write_s=rng.choice([0.0, 30.0]))
    ref = [m for c in cands for n in (1, base.max_nodes)
           if (m := evaluate_config(((c, n),), base, oracle)) is not None]
    if not ref:
        return random_problem(rng, catalog, medium)
    times = sorted(m.time_h for m in ref)
    costs = sorted(m.total_usd for m in ref)
    rates = sorted(m.hourly_usd for m in ref)
    pick = lambda xs: xs[rng.randrange(len(xs))] * rng.uniform(0.7, 1.5)  # noqa: E731
    kw: dict = {"objective": objective, "deadline_hours": None}
    if objective == "cost" or rng.random() < 0.3:
        kw["deadline_hours"] = max(pick(times), base.startup_overhead_h + 0.01)
    if objective == "time" or rng.random() < 0.3:
        kw["budget_usd"] = pick(costs)
    if objective == "throughput" or rng.random() < 0.3:
        kw["max_hourly_usd"] = pick(rates)
    if kw["deadline_hours"] is not None and rng.random() < 0.2:
        kw["max_miss_risk"] = rng.choice([0.05, 0.2, 0.5])
    if rng.random() < 0.3:
        vc = rng.choice(cands).vcpus
        kw["quotas_on_demand"] = {"P": vc * rng.randint(1, 3), "G": vc * rng.randint(1, 4)}
        kw["quotas_spot"] = {"G": vc * rng.randint(1, 4)}
    return replace(base, **kw), cands, oracle


def bench_optimality(catalog: list[Candidate], n: int = 60, seed: int = 2022, medium: bool = False) -> None:
    from planner.solver import exhaustive_search

    rng = random.Random(seed)
    matched = feasible = 0
    by_obj: dict[str, list[int]] = {}
    worst = 0.0
    t_solver = t_brute = 0.0
    for _ in range(n):
        req, cands, oracle = random_problem(rng, catalog, medium)
        t0 = time.perf_counter()
        ref = exhaustive_search(req, cands, oracle)
        t1 = time.perf_counter()
        try:
            got = solve(req, cands, oracle).best
            val = {"cost": got.total_usd, "time": got.time_h, "throughput": -got.effective_throughput_sps}[req.objective]
        except Infeasible:
            val = None
        t_brute += t1 - t0
        t_solver += time.perf_counter() - t1
        if ref is None:
            ok = val is None
        else:
            feasible += 1
            ok = val is not None and abs(val - ref[0]) <= 1e-9 * max(1.0, abs(ref[0]))
            if val is not None:
                worst = max(worst, abs(val - ref[0]) / max(1.0, abs(ref[0])))
        matched += ok
        by_obj.setdefault(req.objective, [0, 0])
        by_obj[req.objective][0] += ok
        by_obj[req.objective][1] += 1
    kind = "medium (8-12 candidates, 6-10 nodes, 2 types)" if medium else "small (3-6 candidates, 2-6 nodes, 1-3 types)"
    print(f"optimality, {kind}: solver == exhaustive search on {matched}/{n} seeded random problems "
          f"({feasible} feasible, {n - feasible} infeasible; worst relative gap {worst:.1e}; "
          f"exhaustive {t_brute:.1f} s, solver {t_solver:.1f} s in total)")
    print("  per objective: " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in sorted(by_obj.items())))


# ----------------------------------------------------------------------------------- speed
def speed_problems() -> tuple[list[tuple[str, ModelSpec, dict]], float]:
    s = 90 * IMAGENET_SAMPLES
    return [
        ("ResNet-50 90 ep, min cost, 24 h deadline", RESNET50, {"objective": "cost", "deadline_hours": 24.0}),
        ("ResNet-50 90 ep, min cost, 2 h deadline", RESNET50, {"objective": "cost", "deadline_hours": 2.0}),
        ("VGG-19 90 ep, min time, $500 budget", VGG19, {"objective": "time", "budget_usd": 500.0}),
        ("VGG-19 90 ep, max throughput, $100/h", VGG19, {"objective": "throughput", "max_hourly_usd": 100.0}),
        ("ResNet-50 90 ep, min cost, 6 h, quotas P=192 G=384", RESNET50,
         {"objective": "cost", "deadline_hours": 6.0, "quotas_on_demand": {"P": 192, "G": 384},
          "quotas_spot": {"P": 96, "G": 192}}),
    ], s


def bench_speed(catalog: list[Candidate], repeats: int = 3) -> None:
    problems, s = speed_problems()
    times: list[float] = []
    cpu_times: list[float] = []
    print(f"speed: full catalog, {len({c.instance_type for c in catalog})} NVIDIA instance types, "
          f"{len({c.region for c in catalog})} regions, spot + on-demand, max 64 nodes, mixes of 2 types, "
          f"global batch 256..4096")
    for name, model, kw in problems:
        req = PlanRequest(total_samples=s, max_nodes=64, max_types=2, global_batch_min=256, global_batch_max=4096, **kw)
        run_times = []
        res = None
        for _ in range(repeats):
            oracle = AnalyticalOracle(model)
            t0, c0 = time.perf_counter(), time.process_time()
            res = solve(req, catalog, oracle)
            run_times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
        times.extend(run_times)
        st = res.stats
        print(f"  {name}: median {statistics.median(run_times):.2f} s; candidates {st.candidates_in} -> "
              f"{st.candidates_supported} runnable -> {st.candidates_kept} after dominance pruning; "
              f"{st.homogeneous_configs} homogeneous configs; pair subsets {st.mixed_subsets} -> "
              f"{st.mixed_subsets - st.mixed_subsets_pruned} after bounds; {st.mixed_vectors_bounded} count vectors "
              f"bounded, {st.mixed_configs_evaluated} mixes evaluated; {st.milp_columns} MILP columns; "
              f"{st.oracle_calls} oracle calls; best: {res.best.label} ${res.best.total_usd:,.0f} {res.best.time_h:.2f} h")
    print(f"  median solve time over {len(times)} runs: {statistics.median(times):.2f} s wall "
          f"(max {max(times):.2f} s; target < 2 s), {statistics.median(cpu_times):.2f} s CPU in-process "
          f"(excludes the CBC subprocess); load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


# ----------------------------------------------------------------------------------- gain
def _fmt_plan(p) -> str:
    return (f"{p.label}: ${p.total_usd:,.0f}, {p.time_h:.1f} h (p90 {p.time_p90_h:.1f} h), "
            f"{p.effective_throughput_sps:,.0f} samples/s, ${p.hourly_usd:,.2f}/h")


def bench_gain(catalog: list[Candidate]) -> None:
    from planner.baselines import evaluate_baselines

    s = 90 * IMAGENET_SAMPLES
    scenarios = [
        ("ResNet-50, 90 epochs ImageNet-1k, min cost with a 24 h deadline", RESNET50,
         PlanRequest(objective="cost", total_samples=s, deadline_hours=24.0, max_nodes=64, max_types=2,
                     global_batch_min=256, global_batch_max=4096), ("V100", 8)),
        ("VGG-19, 90 epochs ImageNet-1k, min time with a $1,000 budget", VGG19,
         PlanRequest(objective="time", total_samples=s, budget_usd=1000.0, max_nodes=64, max_types=2,
                     global_batch_min=256, global_batch_max=4096), ("A100", 8)),
        ("ResNet-50, max throughput under $25/h", RESNET50,
         PlanRequest(objective="throughput", total_samples=s, max_hourly_usd=25.0, max_nodes=64, max_types=2,
                     global_batch_min=256, global_batch_max=4096), ("A10G", 4)),
    ]
    pad = " " * 19
    for title, model, req, (gpu, per_node) in scenarios:
        req = replace(req, tie_tolerance=0.01)
        oracle = AnalyticalOracle(model)
        res = solve(req, catalog, oracle)
        print(f"gain: {title} (objective {req.objective!r}, 1% tie tolerance)")
        print(f"  {'Srifty':<17} {_fmt_plan(res.best)}")
        print(f"{pad}why: {res.best.why}")
        for b in evaluate_baselines(req, catalog, oracle, res, requested_gpu=gpu, requested_gpus_per_node=per_node):
            if b.plan is None or b.infeasible_reason:
                print(f"  {b.name:<17} {b.description}: infeasible ({b.infeasible_reason})")
                continue
            print(f"  {b.name:<17} {_fmt_plan(b.plan)}  [{b.description}]")
            print(f"{pad}Srifty vs this: {b.throughput_gain_pct:+.0f}% throughput, {b.cost_gain_pct:+.0f}% cost saving, "
                  f"{b.time_gain_pct:+.0f}% time saving")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer random problems and repeats")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    catalog = load_catalog()
    bench_optimality(catalog, n=20 if args.quick else 60)
    bench_optimality(catalog, n=5 if args.quick else 20, seed=2023, medium=True)
    bench_speed(catalog, repeats=1 if args.quick else 3)
    bench_gain(catalog)
    print(f"bench done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
