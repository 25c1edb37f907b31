"""Accuracy of the all-reduce model on published NCCL curves (validation sweeps only).

Data: ``catalog/fixtures/public_nccl_allreduce.csv``, split by sweep (source, instance type,
node count) in ``planner/data/nccl_split.json`` (rule in ``planner/nccl_corpus.py``).  The
learned model (``planner/data/nccl-model.json``, ``manage.py calibrate_comm``) was fitted on
train sweeps only.  Error = |predicted − published| / published of the all-reduce time.

Prints per message-size band (< 1 MiB, 1–64 MiB, ≥ 64 MiB) one line for the learned model and one
for the prior alone, then a breakdown by instance type.

Run: ``.venv/bin/python bench/accuracy_comm.py [--rows]`` (a second, CPU only).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.accuracy_public import line as full_line  # noqa: E402
from planner import nccl_corpus  # noqa: E402
from planner.models.nccl import LearnedComm, prior_us  # noqa: E402

MODEL = ROOT / "planner/data/nccl-model.json"
BANDS = (("< 1 MiB", 0, 2**20), ("1-64 MiB", 2**20, 64 * 2**20), (">= 64 MiB", 64 * 2**20, math.inf))


def line(name: str, errs: list[float]) -> str:
    """``name: n=.. median X% p90 Y%`` (the issue's form, without the max)."""
    return full_line(name, errs).split(" max ")[0]


def current_prior_us(p: nccl_corpus.Point) -> float:
    """The ring prior plans used before the NCCL model (``planner.models.comm``), over the
    catalog's headline Gbps."""
    from planner.hardware import Cluster, GpuSpec
    from planner.models.comm import CommQuery, prior_ms

    topo = p.topology
    cluster = Cluster(
        nodes=topo.nodes,
        gpus_per_node=topo.gpus_per_node,
        network_gbps=topo.net_gbps if topo.nodes > 1 else None,
        efa=topo.net == "efa",
        placement_group=True,
        gpu=GpuSpec("x", nvlink_gb_s=topo.nvlink_gb_s),
    )
    return prior_ms(CommQuery.from_cluster(int(p.size_bytes), cluster)) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", action="store_true", help="print every validation point")
    args = ap.parse_args()
    split = nccl_corpus.load_split()
    if split["csv_sha256"] != nccl_corpus.digest():
        raise SystemExit("the NCCL corpus changed since the split was written")
    model = LearnedComm.from_dict(json.loads(MODEL.read_text())) if MODEL.exists() else LearnedComm()
    points = [p for p in nccl_corpus.load_points() if p.sweep in set(split["validation_sweeps"])]
    print(f"validation sweeps ({len(split['validation_sweeps'])}): {', '.join(split['validation_sweeps'])}")
    print(f"learned model: {model.meta.get('trees', 0)} trees on {model.meta.get('points', 0)} train points")
    cases = []
    today = []
    covered = []
    for p in points:
        learned, p90, source = model.predict_us(p.size_bytes, p.topology)
        covered.append(p.measured_us <= p90)
        prior, choice = prior_us(p.size_bytes, p.topology, model.params)
        cases.append(
            (
                p,
                abs(learned - p.measured_us) / p.measured_us,
                abs(prior - p.measured_us) / p.measured_us,
                choice,
                learned,
                prior,
                source,
            )
        )
        today.append(abs(current_prior_us(p) - p.measured_us) / p.measured_us)
    ok = True
    for name, lo, hi in BANDS:
        band = [c for c in cases if lo <= c[0].size_bytes < hi]
        band_errors = [c[1] for c in band]
        print(line(name, band_errors))
        print(line(f"prior {name}", [c[2] for c in band]))
        ok &= bool(band_errors) and statistics.median(band_errors) <= 0.12
    print(line("the ring prior plans used before this model (all sizes)", today))
    print(
        f"p90 coverage: {100 * sum(covered) / max(1, len(covered)):.0f} % of validation points at or under the "
        f"learned p90 (90 % would be calibrated)"
    )
    print("\n-- by instance type (median |error| %, learned / prior; n)")
    by = defaultdict(list)
    for c in cases:
        by[(c[0].instance_type, c[0].topology.nodes)].append(c)
    for (it, nodes), cs in sorted(by.items()):
        print(
            f"  {it:18} {nodes} node(s)  learned {100 * statistics.median(c[1] for c in cs):6.1f}  "
            f"prior {100 * statistics.median(c[2] for c in cs):6.1f}  n={len(cs)}"
        )
    if args.rows:
        for p, _err, _err_prior, choice, learned, prior, _ in cases:
            print(
                f"  {p.instance_type:18} {p.topology.nodes}x{p.topology.gpus_per_node} {p.size_bytes:>12.0f} B "
                f"pub {p.measured_us:10.1f} µs learned {learned:10.1f} prior {prior:10.1f} ({choice})"
            )
    print("target (learned median ≤ 12 % in every band):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
