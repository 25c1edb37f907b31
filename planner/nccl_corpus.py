"""Published all-reduce curves (``catalog/fixtures/public_nccl_allreduce.csv``) and their split.

A *sweep* is one source, instance type (the GPU where no type is stated) and node count.  The
split (:func:`make_split`, written once to ``planner/data/nccl_split.json``)::

    sweeps = sorted sweep ids; random.Random(NCCL_SPLIT_SEED).shuffle(sweeps)
    validation = every third shuffled sweep (positions 0, 3, 6, …); train = the rest
    amendment: the p3dn sweep, missing from the first split (its GPU had no spec row yet), is
               validation (see the split file's ``amendment``)

Each row becomes ``(size bytes, Topology, measured µs, sweep id)``: the measured time is
``time_us`` when published, else ``S / algbw``, else from ``busbw`` (``algbw = busbw·n/(2(n−1))``).
Rows with neither a time nor a non-zero bandwidth are dropped (the smallest sizes of some
sweeps print 0.00 GB/s).
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, SupportsFloat

from planner.corpus import BOARD_TO_CHIP
from planner.hardware import GpuSpec, efa_gbps, load_gpu_specs
from planner.perf.nccl import Topology, efa_interfaces, gpudirect_rdma, pcie_gb_s_of
from planner.perf.transfer import SUPPLEMENTARY_SPECS

if TYPE_CHECKING:
    from planner.perf.nccl import LearnedComm

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "catalog/fixtures/public_nccl_allreduce.csv"
# The second corpus (issue 35: p4d over 4 EFA, 1 EFA and TCP; p5 at 2-32 nodes): not in the split,
# only for leave-one-regime-out checks (bench/accuracy_comm.py).  Its sweep ids carry the
# transport and a digest of the interconnect text (one source publishes five p4d setups).
CSV_2 = ROOT / "catalog/fixtures/public_nccl_allreduce_2.csv"
NETWORK_CSV = ROOT / "catalog/fixtures/aws_instance_network.csv"
SPECS_CSV = ROOT / "catalog/fixtures/gpu_specs.csv"
SPLIT_FILE = ROOT / "planner/data/nccl_split.json"
NCCL_SPLIT_SEED = 19
GPU_NAMES = {
    **BOARD_TO_CHIP,
    "T4": "T4",
    "A10G": "A10G",
    "B200": "B200",
    "A100 (SXM/NVLink3; 40 vs 80 GB not stated)": "A100",
}


@dataclass(frozen=True)
class Point:
    row_id: int
    sweep: str
    instance_type: str
    size_bytes: float
    topology: Topology
    measured_us: float


USER_SWEEP_PREFIX = "user|"  # curves users measured (planner.app.comm_training): train data, never validation


def spec_for(gpu: str, specs: dict[str, GpuSpec]) -> GpuSpec | None:
    """The datasheet row of a GPU named as the corpus or the catalog names it."""
    name = GPU_NAMES.get(gpu, gpu)
    return specs.get(name) or SUPPLEMENTARY_SPECS.get(name)


def network_gbps(
    peak: SupportsFloat | str | None,
    baseline: SupportsFloat | str | None,
    performance: str = "",
    efa: bool = False,
) -> float:
    """What a topology counts for the instance's network: the peak where known, else the baseline;
    on an EFA type at least its stated network performance (:func:`planner.hardware.efa_gbps`)."""
    gbps = float(peak or baseline or 0.0)
    return max(gbps, efa_gbps(performance)) if efa else gbps


def interconnect_is_efa(text: str) -> bool:
    """Whether a corpus row's interconnect text says EFA between nodes ("no EFA", "non-EFA" and
    "EFA disabled" say TCP)."""
    return "EFA" in text and not re.search(r"\bno EFA\b|\bnon-EFA\b|\bEFA disabled\b", text)


def stated_efa_gbps(text: str) -> float:
    """Gbit/s of the EFA interfaces a row's interconnect text states ("EFA 1x100 Gbps": 100;
    0 when it states none): a run may attach fewer interfaces than the instance has."""
    m = re.search(r"EFA (\d+)x(\d+(?:\.\d+)?) Gbps", text)
    return float(m.group(1)) * float(m.group(2)) if m else 0.0


def stated_efa_interfaces(text: str, instance_type: str) -> int:
    """EFA interfaces per node a row's interconnect text states ("EFA 4x100 Gbps", "32 EFA
    interfaces/node", "EFAv2 32 interfaces", "8x 400 Gbps", "found 1 nics"), else the instance
    type's ``MaximumEfaInterfaces`` (0 when neither is known)."""
    for pattern in (
        r"EFA (\d+)x\d",
        r"(\d+) EFA interfaces",
        r"EFA\w* (\d+) interfaces",
        r"(\d+)x \d+ Gbps",
        r"found (\d+) nics",
    ):
        m = re.search(pattern, text)
        if m:
            return int(m.group(1))
    return efa_interfaces(instance_type)


def catalog_topology(
    spec: GpuSpec, itype: Any, gpus_per_node: int, nodes: int, *, network: str, nccl_version: str
) -> Topology:
    """:func:`topology_for` a measured sweep on a catalog instance type (``itype``: its
    ``peak_gbps``, ``baseline_gbps``, ``network_performance``, ``efa_supported``), EFA when the
    sweep's ``network`` says so: how users' comm profiles are replayed for the refit and charted."""
    return topology_for(
        spec,
        gpus_per_node,
        nodes,
        efa=network == "efa",
        net_gbps=network_gbps(
            itype.peak_gbps, itype.baseline_gbps, itype.network_performance, itype.efa_supported
        ),
        nccl_version=nccl_version,
    )


def topology_for(
    spec: GpuSpec,
    gpus_per_node: int,
    nodes: int,
    *,
    efa: bool,
    net_gbps: float,
    nccl_version: str,
    nvls_allowed: bool = True,
    net_cards: int = 1,
    instance_type: str = "",
    interfaces: int = 0,
) -> Topology:
    """``nodes`` × ``gpus_per_node`` GPUs of ``spec``, over EFA (``efa``) or TCP between nodes, in
    a cluster placement group: the one construction the corpus rows and users' curves share.
    A benchmark runs for minutes, so TCP counts the burst peak (``sustained`` off).  EFA is
    GPUDirect RDMA or host-staged by ``instance_type`` (:func:`planner.perf.nccl.gpudirect_rdma`)
    over ``interfaces`` EFA interfaces per node."""
    kind = "none" if nodes == 1 else "efa" if efa else "tcp"
    return Topology(
        gpus_per_node,
        nodes,
        spec.architecture,
        spec.nvlink_gb_s,
        pcie_gb_s_of(spec.architecture),
        kind,
        net_gbps,
        True,
        nccl_version,
        nvls_allowed=nvls_allowed,
        net_cards=net_cards,
        gdr=gpudirect_rdma(instance_type),
        net_interfaces=interfaces if kind == "efa" else 0,
    )


def _network() -> dict[str, dict[str, Any]]:
    with open(NETWORK_CSV, newline="") as fh:
        return {r["InstanceType"]: r for r in csv.DictReader(fh)}


def sweep_id(row: dict[str, Any], detailed: bool = False) -> str:
    """``source|instance type (or GPU)|nodes``; ``detailed`` adds the transport and a digest of
    the interconnect text (the second corpus: several setups of one source and type)."""
    source = row["source"].split(" ")[0]
    base = f"{source}|{row['instance_type'] or row['gpu']}|{row['nodes']}"
    if not detailed:
        return base
    transport = "efa" if interconnect_is_efa(row["interconnect"]) else "tcp"
    return f"{base}|{transport}|{hashlib.sha256(row['interconnect'].encode()).hexdigest()[:6]}"


def load_points(path: Path = CSV, specs: dict[str, GpuSpec] | None = None) -> list[Point]:
    specs = specs or load_gpu_specs(SPECS_CSV)
    detailed = Path(path).resolve() != CSV.resolve()
    net = _network()
    out = []
    with open(path, newline="") as fh:
        for i, r in enumerate(csv.DictReader(fh)):
            spec = spec_for(r["gpu"], specs)
            if spec is None:
                continue
            g, n_nodes = int(r["gpus_per_node"]), int(r["nodes"])
            text = r["interconnect"]
            row_net = net.get(r["instance_type"], {})
            efa = interconnect_is_efa(text)
            gbps = (efa and stated_efa_gbps(text)) or network_gbps(
                row_net.get("PeakBandwidthGbps"),
                row_net.get("BaselineBandwidthGbps"),
                row_net.get("NetworkPerformance", ""),
                efa,
            )
            nvls_off = "NVLS_ENABLE=0" in text or "(forced)" in text and "nvls" not in text.lower()
            topo = topology_for(
                spec,
                g,
                n_nodes,
                efa=efa,
                net_gbps=gbps,
                nccl_version=r["nccl_version"],
                nvls_allowed=not nvls_off,
                net_cards=int(row_net.get("MaximumNetworkCards") or 1),
                instance_type=r["instance_type"],
                interfaces=stated_efa_interfaces(text, r["instance_type"]) if efa else 0,
            )
            t = _measured_us(r, topo.ranks)
            if t:
                sweep = sweep_id(r, detailed)
                out.append(Point(i, sweep, r["instance_type"] or r["gpu"], float(r["size_bytes"]), topo, t))
    return out


def _measured_us(r: dict[str, Any], n: int) -> float | None:
    size = float(r["size_bytes"])
    if r["time_us"]:
        return float(r["time_us"])
    if r["algbw_GBps"] and float(r["algbw_GBps"]) > 0:
        return size / (float(r["algbw_GBps"]) * 1e9) * 1e6
    if r["busbw_GBps"] and float(r["busbw_GBps"]) > 0 and n > 1:
        return size / (float(r["busbw_GBps"]) * n / (2 * (n - 1)) * 1e9) * 1e6
    return None


def digest(path: Path = CSV) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def make_split(points: list[Point], seed: int = NCCL_SPLIT_SEED) -> dict[str, Any]:
    sweeps = sorted({p.sweep for p in points})
    random.Random(seed).shuffle(sweeps)
    validation = sorted(sweeps[0::3])
    return {
        "rule": "sweeps = sorted(source|instance type (or GPU)|nodes); random.Random(seed).shuffle; "
        "validation = shuffled[0::3]; train = the rest",
        "seed": seed,
        "csv_sha256": digest(),
        "validation_sweeps": validation,
        "train_sweeps": sorted(set(sweeps) - set(validation)),
    }


def load_split(path: Path = SPLIT_FILE) -> dict[str, Any]:
    split: dict[str, Any] = json.loads(path.read_text())
    return split


def train_points(points: list[Point], split: dict[str, Any]) -> list[Point]:
    """The points a fit may see: train sweeps and users' curves (``user|…``); raises
    ``ValueError`` on a validation or unknown sweep."""
    train = set(split["train_sweeps"])
    bad = sorted(
        {p.sweep for p in points if p.sweep not in train and not p.sweep.startswith(USER_SWEEP_PREFIX)}
    )
    if bad:
        raise ValueError(f"sweeps {bad} are not train sweeps of the NCCL split")
    return points


NCCL_MODEL_FILE = ROOT / "planner/data/nccl-model.json"


def calibrate(split: dict[str, Any] | None = None, extra_points: Sequence[Point] = ()) -> LearnedComm:
    """Fit the correction on the train sweeps plus ``extra_points`` (users' curves, sweep ids
    ``user|…``); returns the :class:`LearnedComm`, its meta counting the user points."""
    from planner.perf import nccl

    split = split or load_split()
    if split["csv_sha256"] != digest():
        raise ValueError("the NCCL corpus changed since the split was written; re-split deliberately")
    extra = list(extra_points)
    if any(not p.sweep.startswith(USER_SWEEP_PREFIX) for p in extra):
        raise ValueError(f"extra points must be users' curves (sweep ids starting {USER_SWEEP_PREFIX!r})")
    published = [p for p in load_points() if p.sweep in set(split["train_sweeps"])]
    points = train_points(published + extra, split)
    model = nccl.fit([(p.size_bytes, p.topology, p.measured_us, p.sweep) for p in points])
    model.meta.update(
        {
            "split_seed": split["seed"],
            "csv_sha256": split["csv_sha256"],
            "made_by": "manage.py calibrate_comm",
            "user_points": len(extra),
            "user_sweeps": sorted({p.sweep for p in extra}),
        }
    )
    return model
