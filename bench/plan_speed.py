"""Plan speed and memory with the product's oracle and solver, old path beside the new.

Run:  .venv/bin/python bench/plan_speed.py  [--old-commit 737ef96] [--timeout 120] [--only NAME]

Every request plans over the full bundled catalog (``catalog/fixtures/aws_gpu_instances.csv``:
all regions, spot and on-demand unless a request says otherwise) with
:class:`planner.oracle.Oracle` -- the shipped compute model, NCCL comm model and DDP
simulator, as a plan request gets them -- for ResNet-50 (torchvision, amp, 224x224) and
BERT-base (``transformers:bert``, amp, 128 tokens): cost by a deadline, fastest within a
budget, most throughput within a $/h cap, spot and on-demand, mixes of 1-3 types, up to 512
nodes.  Each request goes to ``solve`` as ``planner.app`` sends it (:func:`as_the_service_sends`:
the default global batch range narrowed for ``max_nodes``, the default per-GPU minimum), to both
paths alike (the old ``solve`` takes no minimum).

Each request runs in a fresh child process (so its peak RSS is its own) under an address-space
limit (``ulimit -v``, default 4,000,000 KiB) and a timeout; a child that runs out of memory or
time is reported as ``killed`` / ``timeout``, not waited for.  The model's workload is traced
once by the parent and handed to the children as JSON (what the service's disk cache does), so
a child's wall time is the plan: catalog, oracle and ``solve``.  The same requests then run on
the old path: the solver and oracle of ``--old-commit`` (default 737ef96, before the solver
package), checked out with ``git worktree`` and imported in the child instead of this tree.

Columns: wall s (``solve`` only), configurations evaluated (new: curve points + mixes the
search evaluated; old: every homogeneous column + mixes), oracle calls, peak RSS MB of the
child (its baseline after imports in brackets).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGENET = 1_281_167
RESNET50 = ("torchvision:resnet50", (3, 224, 224))
BERT = ("transformers:bert", (128,))
#: name -> (model, PlanRequest fields, markets)
REQUESTS: dict[str, tuple[tuple[str, tuple[int, ...]], dict, tuple[str, ...]]] = {
    "r50-cost-24h-16n-1t": (RESNET50, {"objective": "cost", "deadline_hours": 24.0}, ("on_demand", "spot")),
    "r50-cost-6h-64n-2t-b4096": (
        RESNET50,
        {
            "objective": "cost",
            "deadline_hours": 6.0,
            "max_nodes": 64,
            "max_types": 2,
            "global_batch_max": 4096,
        },
        ("on_demand", "spot"),
    ),
    "r50-time-500usd-64n-2t": (
        RESNET50,
        {"objective": "time", "budget_usd": 500.0, "max_nodes": 64, "max_types": 2},
        ("on_demand", "spot"),
    ),
    "r50-thru-100usdh-128n-2t": (
        RESNET50,
        {"objective": "throughput", "max_hourly_usd": 100.0, "max_nodes": 128, "max_types": 2},
        ("on_demand", "spot"),
    ),
    "r50-cost-24h-256n-3t-ondemand": (
        RESNET50,
        {"objective": "cost", "deadline_hours": 24.0, "max_nodes": 256, "max_types": 3},
        ("on_demand",),
    ),
    "r50-cost-24h-512n-3t-spot": (
        RESNET50,
        {"objective": "cost", "deadline_hours": 24.0, "max_nodes": 512, "max_types": 3},
        ("on_demand", "spot"),
    ),
    "r50-time-1000usd-512n-3t": (
        RESNET50,
        {"objective": "time", "budget_usd": 1000.0, "max_nodes": 512, "max_types": 3},
        ("on_demand", "spot"),
    ),
    "r50-cost-3h-512n-1t-spot": (
        RESNET50,
        {"objective": "cost", "deadline_hours": 3.0, "max_nodes": 512, "max_types": 1},
        ("spot",),
    ),
    "bert-cost-12h-32n-2t": (
        BERT,
        {"objective": "cost", "deadline_hours": 12.0, "max_nodes": 32, "max_types": 2, "_samples": 3e8},
        ("on_demand", "spot"),
    ),
    "bert-time-300usd-128n-3t": (
        BERT,
        {"objective": "time", "budget_usd": 300.0, "max_nodes": 128, "max_types": 3, "_samples": 3e8},
        ("on_demand", "spot"),
    ),
    "bert-thru-50usdh-64n-1t": (
        BERT,
        {"objective": "throughput", "max_hourly_usd": 50.0, "max_nodes": 64, "_samples": 3e8},
        ("on_demand", "spot"),
    ),
    "r50-thru-25usdh-512n-2t-b256-2048": (
        RESNET50,
        {
            "objective": "throughput",
            "max_hourly_usd": 25.0,
            "max_nodes": 512,
            "max_types": 2,
            "global_batch_min": 256,
            "global_batch_max": 2048,
        },
        ("on_demand", "spot"),
    ),
}


# ----------------------------------------------------------------------------------- child
def as_the_service_sends(fields: dict) -> dict:
    """``fields`` as ``planner.app`` hands them to the solver: a request that names no global batch
    gets the default range narrowed for its ``max_nodes`` (``planner.defaults.default_batch_range``:
    512..4,096 at 512 nodes), and the solver the default per-GPU minimum (``_min_batch_per_gpu``;
    the old path's ``solve`` has no such argument and ranks without it)."""
    from planner.defaults import MIN_BATCH_PER_GPU, PLAN_DEFAULTS, default_batch_range

    out = dict(fields)
    if "global_batch_min" not in out and "global_batch_max" not in out:
        lo, hi = default_batch_range(int(out.get("max_nodes", PLAN_DEFAULTS["max_nodes"])))
        out.update(global_batch_min=lo, global_batch_max=hi)
    out["_min_batch_per_gpu"] = MIN_BATCH_PER_GPU
    return out


def child(root: str, name: str, workload_json: str, fields_json: str) -> None:
    """Plan one request with the code under ``root``; print one JSON line."""
    sys.path.insert(0, root)
    import csv
    import inspect

    from planner.calibration import load_compute_model
    from planner.hardware import load_gpu_specs
    from planner.offers import load_candidates, load_network
    from planner.oracle import Oracle, Workload
    from planner.solver import Infeasible, PlanRequest, RequestError, solve

    (spec, shape), _, markets = REQUESTS[name]
    fields = json.loads(fields_json)
    samples = fields.pop("_samples", 90 * IMAGENET)
    minimum = fields.pop("_min_batch_per_gpu", None)
    kwargs = (
        {"min_batch_per_gpu": minimum} if "min_batch_per_gpu" in inspect.signature(solve).parameters else {}
    )
    fixtures = Path(root) / "catalog" / "fixtures"
    with open(fixtures / "aws_instance_network.csv", newline="") as f:
        net = load_network(csv.DictReader(f))
    with open(fixtures / "aws_gpu_instances.csv", newline="") as f:
        catalog = load_candidates(
            csv.DictReader(f), net, allow_spot="spot" in markets, allow_on_demand="on_demand" in markets
        )
    specs = load_gpu_specs(fixtures / "gpu_specs.csv")
    workload = Workload.from_dict(json.loads(Path(workload_json).read_text()))
    oracle = Oracle(workload, load_compute_model(specs), specs)
    request = PlanRequest(total_samples=samples, **fields)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    out: dict = {"candidates": len(catalog)}
    try:
        res = solve(request, catalog, oracle, **kwargs)
        st = res.stats
        out.update(
            plan=f"{res.best.label}: ${res.best.total_usd:,.0f}, {res.best.time_h:.2f} h",
            configs=getattr(st, "configs_evaluated", 0)
            or st.homogeneous_configs + st.mixed_configs_evaluated,
            oracle_calls=st.oracle_calls,
        )
    except Infeasible as exc:
        out.update(plan=f"infeasible ({exc.constraint})", configs=None, oracle_calls=oracle.calls)
    except RequestError as exc:
        out.update(plan=f"request error ({exc})", configs=None, oracle_calls=oracle.calls)
    except MemoryError:
        out.update(plan="MemoryError", configs=None, oracle_calls=oracle.calls)
    out["wall_s"] = time.perf_counter() - t0
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["base_rss_mb"] = base_rss
    print("RESULT " + json.dumps(out), flush=True)


# ----------------------------------------------------------------------------------- parent
def _limit(kib: int):
    def set_limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (kib * 1024, kib * 1024))

    return set_limits


def run_child(root: Path, name: str, workload_json: Path, timeout: float, vmem_kib: int) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--root", str(root)]
    cmd += ["--workload", str(workload_json), "--fields", json.dumps(as_the_service_sends(REQUESTS[name][1]))]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=_limit(vmem_kib),
            cwd=str(root),
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"status": f"timeout > {timeout:g} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return {"status": "ok", **json.loads(line[7:])}
    tail = (proc.stderr.strip().splitlines() or ["?"])[-1][:80]
    return {"status": f"killed (rc {proc.returncode}: {tail})"}


def _fmt(r: dict) -> str:
    if r.get("status") != "ok":
        return f"{r.get('status')}"
    if r.get("configs") is None:
        return f"{r['wall_s']:6.2f} s  {r['plan']}  RSS {r['rss_mb']:,.0f} MB"
    return (
        f"{r['wall_s']:6.2f} s  {r['configs']:>7,} configs  {r['oracle_calls']:>7,} calls  "
        f"RSS {r['rss_mb']:,.0f} MB ({r['base_rss_mb']:,.0f})"
    )


def _summary(tag: str, rows: list[dict]) -> str:
    ok = [r for r in rows if r.get("status") == "ok" and r.get("plan") != "MemoryError"]
    bad = len(rows) - len(ok)
    if not ok:
        return f"{tag} plan time: no request finished ({bad} killed or timed out)"
    walls = [r["wall_s"] for r in ok]
    # a request that ran out of time is slower than every one that finished: the max says so
    timeouts = [r["status"].split("> ", 1)[-1] for r in rows if str(r.get("status")).startswith("timeout")]
    worst = f"> {timeouts[0]}" if timeouts else f"{max(walls):.2f} s"
    return (
        f"{tag} plan time: median {statistics.median(walls):.2f} s, max {worst}, "
        f"peak RSS {max(r['rss_mb'] for r in ok):,.0f} MB"
        + (f"  ({bad} of {len(rows)} out of memory or time, not in the figures)" if bad else "")
    )


def old_tree(commit: str) -> Path:
    """A ``git worktree`` of ``commit`` in the temp dir (created once, reused)."""
    path = Path(tempfile.gettempdir()) / f"srifty-old-{commit}"
    if not (path / "planner").exists():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit],
            check=True,
            capture_output=True,
        )
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child")
    ap.add_argument("--root", default=str(ROOT))
    ap.add_argument("--workload")
    ap.add_argument("--fields", help="(child) the request's fields as JSON")
    ap.add_argument("--old-commit", default="737ef96")
    ap.add_argument("--no-old", action="store_true", help="new path only")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per request and path")
    ap.add_argument("--vmem-kib", type=int, default=4_000_000, help="address-space limit per child")
    ap.add_argument("--only", action="append", help="request name (repeatable)")
    args = ap.parse_args(argv)
    if args.child:
        child(args.root, args.child, args.workload, args.fields)
        return 0

    sys.path.insert(0, str(ROOT))
    from planner.oracle import workload_for_spec

    names = args.only or list(REQUESTS)
    tmp = Path(tempfile.mkdtemp(prefix="plan-speed-"))
    workloads: dict[tuple, Path] = {}
    for name in names:
        (spec, shape), _, _ = REQUESTS[name]
        if (spec, shape) not in workloads:
            path = tmp / f"workload-{len(workloads)}.json"
            path.write_text(json.dumps(workload_for_spec(spec, shape, precision="amp").to_dict()))
            workloads[(spec, shape)] = path
    old = None if args.no_old else old_tree(args.old_commit)
    print(
        f"plan speed: full bundled catalog, product oracle, one child per request and path "
        f"(ulimit -v {args.vmem_kib:,} KiB, timeout {args.timeout:g} s); {os.cpu_count()} CPUs"
    )
    new_rows, old_rows = [], []
    for name in names:
        (spec, shape), _, _ = REQUESTS[name]
        wl = workloads[(spec, shape)]
        r_new = run_child(ROOT, name, wl, args.timeout, args.vmem_kib)
        new_rows.append(r_new)
        print(f"{name}")
        print(f"  new: {_fmt(r_new)}" + (f"  -> {r_new['plan']}" if r_new.get("configs") is not None else ""))
        if old is not None:
            r_old = run_child(old, name, wl, args.timeout, args.vmem_kib)
            old_rows.append(r_old)
            same = ""
            if r_old.get("status") == "ok" and r_new.get("status") == "ok":
                same = (
                    "  same plan" if r_old.get("plan") == r_new.get("plan") else f"  -> {r_old.get('plan')}"
                )
            print(f"  old: {_fmt(r_old)}{same}")
    print(_summary("new", new_rows))
    if old is not None:
        print(_summary(f"old ({args.old_commit})", old_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
