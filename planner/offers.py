"""Candidate node offers for the cluster planner, and dominance pruning.

A :class:`Candidate` is one way to rent one node: an instance type, in one region, in one market
(``"on-demand"`` or ``"spot"``), at one hourly price.  The planner combines candidates of ONE region
into a cluster; see :mod:`planner.solver`.

Loading
-------
:func:`load_candidates` turns plain row dicts (the catalog table as the Django side reads it, or the
rows of ``catalog/fixtures/aws_gpu_instances.csv``; one row per (instance type, availability zone))
into candidates:

* one **on-demand** candidate per (type, region), priced at the region's on-demand price (the
  cheapest non-empty ``Price`` over the region's rows; it is the same in every AZ);
* one **spot** candidate per (type, region), priced at the cheapest AZ's ``SpotPrice``; its ``zone``
  names that AZ;
* rows with an empty/zero price are skipped for that market;
* rows in AWS Local Zones / Wavelength Zones (zone ids like ``use1-atl2-az1``, i.e. anything but
  ``<region-code>-az<N>``) are skipped unless ``include_local_zones``: they need opt-in, have
  little capacity and odd spot prices, and do not offer the placement groups DDP wants;
* only NVIDIA (CUDA) accelerators are kept, because the plans are for PyTorch DDP over NCCL.  The
  vendor is read from ``GpuInfo`` (``Manufacturer``); when that is missing the accelerator name is
  checked against known non-CUDA names (Gaudi, Inferentia, Trainium, Virtex FPGAs, Radeon) and known
  NVIDIA names.  Fractional GPUs (``AcceleratorCount`` < 1, e.g. ``g6f`` vGPU slices) are dropped:
  DDP needs whole devices;
* network bandwidth and EFA come from the row itself (``network_gbps``/``BaselineBandwidthGbps``,
  ``efa``/``EfaSupported``) or from a separate per-type table (``aws_instance_network.csv`` rows).

Column names are matched case- and underscore-insensitively, so ``InstanceType``, ``instance_type``
and ``instancetype`` are the same key.

Spot interruption buckets
-------------------------
``interruption_bucket`` follows the AWS Spot Advisor "frequency of interruption" classes:
0: <5 %, 1: 5-10 %, 2: 10-15 %, 3: 15-20 %, 4: >20 % (share of instances interrupted per month).
It is read from a row column ``interruption_bucket`` (an int 0..4) or ``interruption_frequency``
(a percentage, mapped with :func:`bucket_for_frequency`), else from the ``interruption_buckets``
argument keyed by ``(instance_type, region)``, else ``default_spot_bucket``.  On-demand candidates
always have bucket 0 and are never interrupted (see :mod:`planner.spot`).

Quota classes
-------------
AWS limits running instances by vCPU per *quota class*, not per type: "Running On-Demand P
instances" covers every ``p*`` family and "Running On-Demand G and VT instances" covers ``g*``,
``gr*`` and ``vt*``; spot has the same classes, counted separately ("All P Spot Instance Requests").
:func:`quota_class` maps a family or type name to ``"P"`` or ``"G"`` (other families map to their
leading letters upper-cased, e.g. ``"DL"``, ``"INF"``).

Dominance pruning
-----------------
:func:`find_dominated` / :func:`prune_dominated` drop a candidate B when another candidate A can
replace it in *every* plan without making that plan worse or infeasible.  A dominates B when ALL of

1. ``A.region == B.region`` (a plan lives in one region);
2. ``A.market == B.market`` (spot and on-demand draw on separate quotas and carry different risk);
3. ``quota_class(A) == quota_class(B)`` and ``A.vcpus <= B.vcpus``: swapping B nodes for A nodes
   never uses more of the quota that B's nodes used;
4. availability (``Candidate.max_count``, ``None`` = unlimited; counts above ``max_nodes`` are
   irrelevant): ``min(cap_A, max_nodes) >= min(cap_B, max_nodes)``; when mixes are allowed also
   ``cap_A >= max_nodes``, because replacing the B nodes of a mix that already contains A merges
   them into one A group of up to ``max_nodes`` nodes;
5. ``A.price_per_hour <= B.price_per_hour``;
6. ``A.interruption_bucket <= B.interruption_bucket`` (A is no riskier);
7. ``A.network_gbps >= B.network_gbps`` and ``A.efa >= B.efa`` (A's link is no slower);
8. ``thr(A, n, G) >= thr(B, n, G)`` for every node count ``n = 1..max_nodes`` and every global
   batch ``G`` in the grid, where ``thr`` is the perf oracle's homogeneous throughput (0 when the
   oracle cannot run the configuration).

Ties (A and B equal on every criterion) are broken by :attr:`Candidate.key` so exactly one of the
two survives.  The relation is then a strict partial order, so every dropped candidate has a *kept*
dominator and the kept set is exactly the non-dominated set.

Exactness: for homogeneous plans the rule is exact by construction -- ``(A, n, G)`` costs no more
per hour, is at least as fast, uses no more quota, has no higher interruption hazard, so it is no
worse for any objective and feasible whenever ``(B, n, G)`` is.  For mixed plans it additionally
relies on the oracle being monotone in node quality (replacing nodes by nodes that are at least as
fast alone and have no slower link does not reduce the throughput of a mix), which holds for the
ring all-reduce / slowest-node DDP models used here and is checked against brute force in
``bench/solver.py`` and the tests.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from planner.hardware import efa_gbps

SPOT = "spot"
ON_DEMAND = "on-demand"
MARKETS = (ON_DEMAND, SPOT)

#: Accelerator names that are not CUDA devices (PyTorch DDP/NCCL cannot use them).
NON_CUDA_PATTERNS = ("gaudi", "inferentia", "trainium", "virtex", "radeon", "fpga", "habana", "neuron")
#: A standard AZ id (``use1-az2``); Local/Wavelength Zones have an extra segment (``use1-atl2-az1``).
_STANDARD_AZ = re.compile(r"^[a-z]+\d+-az\d+$")
#: Known NVIDIA accelerator names, used when ``GpuInfo`` carries no manufacturer.
NVIDIA_PATTERNS = (
    r"^t4g?$",
    r"^v100",
    r"^a10g?$",
    r"^a100",
    r"^l4$",
    r"^l40s?$",
    r"^h100",
    r"^h200",
    r"^b200",
    r"^b300",
    r"^k80$",
    r"^m60$",
    r"^rtx",
    r"^a10$",
    r"^gb200",
)


@dataclass(frozen=True)
class Candidate:
    """One rentable node offer: an instance type in one region and market.

    ``price_per_hour`` is USD per node-hour.  ``zone`` is the availability zone the spot price was
    taken from (the cheapest AZ of the region); ``None`` for on-demand.  ``interruption_bucket`` is
    the Spot Advisor class 0..4 (always 0 for on-demand).  ``max_count`` caps how many nodes of
    this offer may be used (capacity/availability; ``None`` = no cap beyond quotas).
    """

    instance_type: str
    family: str
    region: str
    market: str
    zone: str | None
    price_per_hour: float
    gpus_per_node: int
    gpu_model: str
    vcpus: int
    network_gbps: float
    efa: bool
    interruption_bucket: int = 0
    memory_gib: float = 0.0
    gpu_memory_gib: float = 0.0
    arch: str = "x86_64"
    max_count: int | None = None

    def __hash__(self) -> int:
        # the dataclass hash of every field, computed once: the solver keys dicts and sets by
        # offers tens of thousands of times per plan (frozen: the fields never change)
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
            object.__setattr__(self, "_hash", h)
        return int(h)

    def __getstate__(self) -> dict[str, Any]:
        # not the cached hash: str hashes differ between processes
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def key(self) -> tuple[str, str, str]:
        """``(region, market, instance_type)``: unique within a candidate list."""
        return (self.region, self.market, self.instance_type)

    @property
    def quota_class(self) -> str:
        """AWS vCPU quota class of the family (``"P"`` or ``"G"`` for GPU families)."""
        return quota_class(self.family)

    @property
    def is_spot(self) -> bool:
        return self.market == SPOT

    @property
    def price_per_gpu_hour(self) -> float:
        return self.price_per_hour / self.gpus_per_node

    @property
    def label(self) -> str:
        return f"{self.instance_type} ({self.market}, {self.region})"


def family_of(instance_type: str) -> str:
    """``"p4d.24xlarge"`` -> ``"p4d"``; ``"p6-b200.48xlarge"`` -> ``"p6-b200"``."""
    return instance_type.split(".", 1)[0].strip().lower()


@lru_cache(maxsize=4096)
def quota_class(name: str) -> str:
    """Map a quota key, family or instance type to its AWS vCPU quota class.

    ``p*`` -> ``"P"``; ``g*``, ``gr*``, ``vt*`` -> ``"G"`` ("G and VT"); an already normalised
    class (``"P"``, ``"g"``) maps to itself; anything else -> its leading letters upper-cased.
    """
    fam = family_of(name)
    letters = re.match(r"[a-z]+", fam)
    head = letters.group(0) if letters else fam
    if head.startswith("p"):
        return "P"
    if head.startswith("g") or head.startswith("vt"):
        return "G"
    return head.upper() or fam.upper()


def normalise_quotas(quotas: Mapping[str, float] | None) -> dict[str, float]:
    """Group a ``{family-or-class: vCPU limit}`` mapping by quota class (limits of one class add up
    is NOT assumed: the smallest limit given for a class wins, as the class limit is shared)."""
    out: dict[str, float] = {}
    for k, v in (quotas or {}).items():
        if v is None:
            continue
        cls = quota_class(str(k))
        out[cls] = min(float(v), out.get(cls, math.inf))
    return out


def bucket_for_frequency(percent: float) -> int:
    """Spot Advisor class for a monthly interruption frequency in percent (0..100)."""
    if percent < 5:
        return 0
    if percent < 10:
        return 1
    if percent < 15:
        return 2
    if percent < 20:
        return 3
    return 4


# ----------------------------------------------------------------------------------- loading
def _norm(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(key).lower())


def _row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {_norm(k): v for k, v in row.items()}


def _get(row: Mapping[str, Any], *names: str) -> Any:
    for n in names:
        v = row.get(_norm(n))
        if v is not None and v != "":
            return v
    return None


def _float(v: Any) -> float | None:
    if v is None or v == "":
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    return str(v).strip().lower() in {"1", "true", "yes", "y", "t"}


def _gpu_info(v: Any) -> Mapping[str, Any] | None:
    if isinstance(v, Mapping):
        return v
    if not v:
        return None
    try:
        parsed = ast.literal_eval(str(v))
    except (ValueError, SyntaxError):
        return None
    return parsed if isinstance(parsed, Mapping) else None


def is_cuda_accelerator(name: str, gpu_info: Any = None) -> bool:
    """True when the accelerator is an NVIDIA GPU usable by PyTorch CUDA/NCCL."""
    info = _gpu_info(gpu_info)
    if info:
        gpus = info.get("Gpus") or []
        if gpus and isinstance(gpus[0], Mapping) and gpus[0].get("Manufacturer"):
            return str(gpus[0]["Manufacturer"]).strip().upper() == "NVIDIA"
    low = (name or "").strip().lower()
    if not low or any(p in low for p in NON_CUDA_PATTERNS):
        return False
    return any(re.search(p, low) for p in NVIDIA_PATTERNS)


def load_network(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[float, bool]]:
    """``{instance_type: (bandwidth Gbps, EFA)}`` from ``aws_instance_network.csv``-style rows.

    Bandwidth is the baseline figure when known, else the peak ("Up to 10 Gigabit" -> 10); on an
    EFA type at least its stated network performance (p6-b200: 3,200, not the cards' 1,600)."""
    out: dict[str, tuple[float, bool]] = {}
    for raw in rows:
        r = _row(raw)
        it = _get(r, "InstanceType")
        if not it:
            continue
        bw = (
            _float(_get(r, "BaselineBandwidthGbps", "network_gbps"))
            or _float(_get(r, "PeakBandwidthGbps"))
            or 0.0
        )
        efa = _bool(_get(r, "EfaSupported", "efa") or False)
        if efa:  # RDMA over the EFA NICs: at least the stated performance (hardware.efa_gbps)
            bw = max(bw, efa_gbps(str(_get(r, "NetworkPerformance") or "")))
        out[str(it)] = (bw, efa)
    return out


def load_candidates(
    rows: Iterable[Mapping[str, Any]],
    network: Mapping[str, tuple[float, bool]] | None = None,
    *,
    regions: Collection[str] | None = None,
    allow_spot: bool = True,
    allow_on_demand: bool = True,
    gpu_models: Collection[str] | None = None,
    archs: Collection[str] | None = None,
    interruption_buckets: Mapping[tuple[str, str], int] | None = None,
    default_spot_bucket: int = 2,
    max_counts: Mapping[tuple[str, str, str], int] | None = None,
    include_local_zones: bool = False,
) -> list[Candidate]:
    """Build candidates from catalog rows (one row per instance type x availability zone).

    ``network`` maps instance type -> ``(Gbps, EFA)`` (see :func:`load_network`); a row's own
    network columns win.  ``regions`` / ``gpu_models`` / ``archs`` restrict the output (``None`` =
    all).  ``max_counts`` maps ``(region, market, instance_type)`` to an availability cap.  The
    result is sorted by :attr:`Candidate.key`.
    """
    if not (0 <= default_spot_bucket <= 4):
        raise ValueError("default_spot_bucket must be in 0..4")
    allowed_regions = set(regions) if regions is not None else None
    allowed_models = {m.lower() for m in gpu_models} if gpu_models is not None else None
    allowed_archs = {a.lower() for a in archs} if archs is not None else None
    network = network or {}
    buckets = interruption_buckets or {}
    caps = max_counts or {}

    best_od: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
    best_spot: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
    for raw in rows:
        r = _row(raw)
        itype = _get(r, "InstanceType")
        region = _get(r, "Region")
        if not itype or not region:
            continue
        itype, region = str(itype), str(region)
        if allowed_regions is not None and region not in allowed_regions:
            continue
        name = str(_get(r, "AcceleratorName", "gpu_model") or "")
        if not is_cuda_accelerator(name, _get(r, "GpuInfo")):
            continue
        count = _float(_get(r, "AcceleratorCount", "gpus_per_node"))
        if count is None or count < 1 or abs(count - round(count)) > 1e-9:
            continue  # fractional GPU slices cannot run NCCL DDP as whole devices
        if allowed_models is not None and name.lower() not in allowed_models:
            continue
        arch = str(_get(r, "Arch") or "x86_64")
        if allowed_archs is not None and arch.lower() not in allowed_archs:
            continue
        zone_id = str(_get(r, "AvailabilityZone", "zone") or "")
        if zone_id and not include_local_zones and not _STANDARD_AZ.match(zone_id):
            continue
        od = _float(_get(r, "Price", "price_per_hour", "on_demand_price"))
        spot = _float(_get(r, "SpotPrice", "spot_price"))
        k = (itype, region)
        if allow_on_demand and od and od > 0 and (k not in best_od or od < best_od[k][0]):
            best_od[k] = (od, r)
        if allow_spot and spot and spot > 0 and (k not in best_spot or spot < best_spot[k][0]):
            best_spot[k] = (spot, r)

    out: list[Candidate] = []
    for market, table in ((ON_DEMAND, best_od), (SPOT, best_spot)):
        for (itype, region), (price, r) in table.items():
            bw = _float(_get(r, "network_gbps", "BaselineBandwidthGbps"))
            efa_raw = _get(r, "efa", "EfaSupported")
            net = network.get(itype)
            if bw is None:
                bw = net[0] if net else 0.0
            efa = _bool(efa_raw) if efa_raw is not None else (net[1] if net else False)
            if market == SPOT:
                rb = _get(r, "interruption_bucket")
                rf = _float(_get(r, "interruption_frequency"))
                if rb is not None:
                    bucket = int(float(rb))
                elif rf is not None:
                    bucket = bucket_for_frequency(rf)
                else:
                    bucket = int(buckets.get((itype, region), default_spot_bucket))
                bucket = max(0, min(4, bucket))
                zone = _get(r, "AvailabilityZone", "zone")
            else:
                bucket, zone = 0, None
            info = _gpu_info(_get(r, "GpuInfo"))
            gpu_mem = 0.0
            if info and info.get("Gpus"):
                mib = (info["Gpus"][0].get("MemoryInfo") or {}).get("SizeInMiB")
                gpu_mem = float(mib) / 1024.0 if mib else 0.0
            cap = caps.get((region, market, itype))
            out.append(
                Candidate(
                    instance_type=itype,
                    family=family_of(itype),
                    region=region,
                    market=market,
                    zone=str(zone) if zone else None,
                    price_per_hour=float(price),
                    gpus_per_node=int(round(_float(_get(r, "AcceleratorCount", "gpus_per_node")) or 1)),
                    gpu_model=str(_get(r, "AcceleratorName", "gpu_model") or ""),
                    vcpus=int(round(_float(_get(r, "vCPUs", "vcpus")) or 0)),
                    network_gbps=float(bw),
                    efa=bool(efa),
                    interruption_bucket=bucket,
                    memory_gib=float(_float(_get(r, "MemoryGiB", "memory_gib")) or 0.0),
                    gpu_memory_gib=gpu_mem,
                    arch=str(_get(r, "Arch") or "x86_64"),
                    max_count=int(cap) if cap is not None else None,
                )
            )
    out.sort(key=lambda c: c.key)
    return out


# ----------------------------------------------------------------------------------- dominance
#: ``throughput(candidate, nodes, global_batch) -> samples/s`` (0 when it cannot run).
ThroughputFn = Callable[[Candidate, int, int], float]


def _cap(c: Candidate, max_nodes: int | None = None) -> float:
    cap = math.inf if c.max_count is None else float(c.max_count)
    return cap if max_nodes is None else min(cap, float(max_nodes))


def _static_dominates(a: Candidate, b: Candidate, max_nodes: int | None = None, mixes: bool = False) -> bool:
    """Criteria 1-7 of the module docstring (everything but the throughput curves)."""
    cap_a, cap_b = _cap(a, max_nodes), _cap(b, max_nodes)
    if mixes and cap_a < (math.inf if max_nodes is None else float(max_nodes)):
        return False
    return (
        a.region == b.region
        and a.market == b.market
        and a.quota_class == b.quota_class
        and a.vcpus <= b.vcpus
        and cap_a >= cap_b
        and a.price_per_hour <= b.price_per_hour
        and a.interruption_bucket <= b.interruption_bucket
        and a.network_gbps >= b.network_gbps
        and a.efa >= b.efa
    )


def _static_matrix(group: Sequence[Candidate], max_nodes: int | None, mixes: bool) -> np.ndarray:
    """``m[i, j] = _static_dominates(group[i], group[j])`` for the offers of one region, market
    and quota class, all pairs at once (``False`` on the diagonal: an offer does not drop itself)."""
    vcpus = np.array([c.vcpus for c in group], dtype=float)
    cap = np.array([_cap(c, max_nodes) for c in group])
    price = np.array([c.price_per_hour for c in group])
    bucket = np.array([c.interruption_bucket for c in group], dtype=float)
    gbps = np.array([c.network_gbps for c in group], dtype=float)
    efa = np.array([bool(c.efa) for c in group])
    m = (
        (vcpus[:, None] <= vcpus[None, :])
        & (cap[:, None] >= cap[None, :])
        & (price[:, None] <= price[None, :])
        & (bucket[:, None] <= bucket[None, :])
        & (gbps[:, None] >= gbps[None, :])
        & (efa[:, None] >= efa[None, :])
    )
    if mixes:  # a capped offer cannot stand in for another in every mix
        m &= (cap >= (math.inf if max_nodes is None else float(max_nodes)))[:, None]
    np.fill_diagonal(m, False)
    return m


def _static_equal(a: Candidate, b: Candidate, max_nodes: int | None = None) -> bool:
    return (
        a.vcpus == b.vcpus
        and _cap(a, max_nodes) == _cap(b, max_nodes)
        and a.price_per_hour == b.price_per_hour
        and a.interruption_bucket == b.interruption_bucket
        and a.network_gbps == b.network_gbps
        and a.efa == b.efa
    )


def find_dominated(
    candidates: Sequence[Candidate],
    curves: Mapping[str, Sequence[float]] | ThroughputFn,
    *,
    max_nodes: int | None = None,
    batches: Sequence[int] = (),
    mixes: bool = False,
) -> dict[Candidate, Candidate]:
    """``{dropped: kept dominator}`` under the rule of the module docstring.

    ``curves`` is either ``{instance_type: flat sequence of throughputs}`` -- any fixed ordering of
    the (node count, batch) grid, identical for every type (this is what the solver passes; the
    oracle is assumed to depend on the hardware only, not on region/market/price) -- or a function
    ``throughput(candidate, n, G)`` evaluated for ``n = 1..max_nodes`` and ``G`` in ``batches``.
    ``mixes`` says whether plans may mix candidates (it tightens the availability criterion).
    """
    if callable(curves):
        if max_nodes is None:
            raise ValueError("max_nodes is required when curves is a function")
        fn = curves
        grid = [(n, g) for n in range(1, max_nodes + 1) for g in (batches or (0,))]
        cache: dict[str, tuple[float, ...]] = {}
        for c in candidates:
            if c.instance_type not in cache:
                cache[c.instance_type] = tuple(float(fn(c, n, g) or 0.0) for n, g in grid)
        table: Mapping[str, Sequence[float]] = cache
    else:
        table = curves

    perf_ge: dict[tuple[str, str], bool] = {}

    def faster_or_equal(a: str, b: str) -> bool:
        k = (a, b)
        if k not in perf_ge:
            ta, tb = table[a], table[b]
            perf_ge[k] = len(ta) == len(tb) and all(x >= y for x, y in zip(ta, tb, strict=True))
        return perf_ge[k]

    groups: dict[tuple[str, str, str], list[Candidate]] = defaultdict(list)
    for c in candidates:
        groups[(c.region, c.market, c.quota_class)].append(c)

    dropped: dict[Candidate, Candidate] = {}
    for group in groups.values():
        group = sorted(group, key=lambda c: (c.price_per_hour, c.key))
        static = _static_matrix(group, max_nodes, mixes)
        for j, b in enumerate(group):
            for i in np.flatnonzero(static[:, j]).tolist():
                a = group[i]
                if not faster_or_equal(a.instance_type, b.instance_type):
                    continue
                if (
                    _static_equal(a, b, max_nodes)
                    and faster_or_equal(b.instance_type, a.instance_type)
                    and not a.key < b.key
                ):
                    continue  # exact tie: only the smaller key dominates
                dropped[b] = a
                break
    # Resolve chains so every dropped candidate points at a kept one.
    for b, a in list(dropped.items()):
        seen = {b}
        while a in dropped and a not in seen:
            seen.add(a)
            a = dropped[a]
        dropped[b] = a
    return dropped


def prune_dominated(
    candidates: Sequence[Candidate],
    curves: Mapping[str, Sequence[float]] | ThroughputFn,
    *,
    max_nodes: int | None = None,
    batches: Sequence[int] = (),
    mixes: bool = False,
) -> list[Candidate]:
    """The candidates that no other candidate dominates (order preserved); see :func:`find_dominated`."""
    dropped = find_dominated(candidates, curves, max_nodes=max_nodes, batches=batches, mixes=mixes)
    return [c for c in candidates if c not in dropped]
