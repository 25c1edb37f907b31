"""An NCCL-shaped all-reduce prior for EC2 topologies, and a learned correction of it.

Topology (:class:`Topology`).  ``n = g·N`` ranks: ``g`` GPUs per node over NVLink/NVSwitch or
PCIe, ``N`` nodes over EFA (``cards × Gbps`` of ``aws_instance_network.csv``) or TCP.

Bandwidths (bytes/s, "bus bandwidth" in the nccl-tests sense, i.e. per rank)::

    B_intra = ε_nv · NVLink_uni          (NVLink_uni = datasheet aggregate / 2)
            = ε_pcie · PCIe              (no NVLink: through the host's PCIe switches)
    B_net   = ε_efa · Σ EFA card Gbps / 8              (EFA, GPUDirect RDMA)
            = ε_tcp · min(peak, sockets · flow cap) / 8  (TCP: 5 Gbit/s per flow outside a cluster
                                                          placement group, 10 inside; NCCL opens
                                                          ``sockets`` = 2 flows per peer by default)
    B_ring  = min(B_intra, B_net)        (one node: B_intra)

Algorithms and protocols, as NCCL's tuner weighs them (``ncclTopoTuneModel``): for algorithm
``a`` ∈ {ring, tree, nvls} and protocol ``p`` ∈ {LL, LL128, Simple}::

    t(a, p) = base_lat(p) + steps(a) · α(p, link) + S / (algbw(a) · bw_factor(p))
    ring:  steps = 2(n−1),                algbw = B_ring · n / (2(n−1))
    tree:  steps = 2(⌈log2 N⌉ + g − 1),   algbw = 0.9 · B_ring · n / (2(n−1))   (N > 1 only)
    nvls:  steps = 2,                     algbw = 1.4 · B_intra · n / (2(n−1))  (one node of
                                          NVSwitch generation ≥ Hopper, NVLink SHARP)
    bw_factor: LL 0.5 (8-byte lines carry 4 bytes of data), LL128 0.92, Simple 1.0
    α (µs per step): NVLink LL 0.6 / LL128 1.2 / Simple 4; PCIe 1 / 2 / 6; EFA 5 / 7 / 12;
                     TCP 30 / 40 / 60;  base_lat: LL 4, LL128 6, Simple 8 µs (kernel launch)

and the prior is ``min_{a,p} t(a, p)`` — NCCL picks the fastest predicted pair per size.  The
ε are datasheet-to-achieved ratios of the kind NCCL's own tables hold (ε_nv 0.8, ε_pcie 0.5,
ε_efa 0.85, ε_tcp 0.6): constants of the prior, not fitted.

Learned correction (:class:`LearnedComm`).  XGBoost on ``y = ln(t_measured / t_prior)`` with
features log2 size, nodes, GPUs per node, interconnect class, GPU generation, NCCL version band
and ``ln t_prior``; trained on the train sweeps of ``planner/data/nccl_split.json`` only
(:mod:`planner.nccl_corpus`), exported to plain trees (:class:`planner.models.opclass.Trees`).
The published curves are one time per size (no per-iteration spread), so only the median is
learned; p90 keeps the prior's ratio.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.models.opclass import Trees

EPS = {"nvlink": 0.8, "pcie": 0.5, "efa": 0.85, "tcp": 0.6}
PCIE_GB_S = 20.0           # PCIe Gen4 x16 per direction; Gen3 boards (T4) sit at ~half, see ``pcie_gb_s``
BW_FACTOR = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}
ALPHA_US = {"nvlink": {"LL": 0.6, "LL128": 1.2, "Simple": 4.0}, "pcie": {"LL": 1.0, "LL128": 2.0, "Simple": 6.0},
            "efa": {"LL": 5.0, "LL128": 7.0, "Simple": 12.0}, "tcp": {"LL": 30.0, "LL128": 40.0, "Simple": 60.0}}
BASE_LAT_US = {"LL": 4.0, "LL128": 6.0, "Simple": 8.0}
TCP_SOCKETS = 2
TCP_FLOW_GBPS = {True: 10.0, False: 5.0}   # inside / outside a cluster placement group
GENERATIONS = ("Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell")
INTERCONNECTS = ("nvlink", "pcie", "efa", "tcp")
FEATURES = ("log2_size", "nodes", "gpus_per_node", "interconnect", "generation", "nccl_band", "log_prior_ms")
P90_RATIO = 1.15


@dataclass(frozen=True)
class Topology:
    gpus_per_node: int
    nodes: int
    generation: str
    nvlink_gb_s: float = 0.0        # datasheet aggregate per GPU (both directions)
    pcie_gb_s: float = PCIE_GB_S
    net: str = "none"               # "efa", "tcp" or "none" (one node)
    net_gbps: float = 0.0           # EFA: sum over cards; TCP: the instance's peak
    placement_group: bool = True
    nccl_version: str = ""
    nvls_allowed: bool = True       # NCCL_NVLS_ENABLE=0 or a forced algorithm turns NVLS off

    @property
    def ranks(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def intra(self) -> str:
        return "nvlink" if self.nvlink_gb_s > 0 else "pcie"

    @property
    def interconnect(self) -> str:
        """The class the ring's slowest hop belongs to (a feature of the correction)."""
        return self.net if self.nodes > 1 else self.intra

    def intra_bw(self) -> float:
        """Bytes/s per rank inside a node."""
        if self.gpus_per_node <= 1:
            return math.inf
        if self.nvlink_gb_s > 0:
            return EPS["nvlink"] * self.nvlink_gb_s / 2 * 1e9
        return EPS["pcie"] * self.pcie_gb_s * 1e9

    def net_bw(self) -> float:
        if self.nodes <= 1:
            return math.inf
        if self.net == "efa":
            return EPS["efa"] * self.net_gbps / 8 * 1e9
        flows = TCP_SOCKETS * TCP_FLOW_GBPS[self.placement_group]
        return EPS["tcp"] * min(self.net_gbps, flows) / 8 * 1e9

    def nvls(self) -> bool:
        return (self.nvls_allowed and self.nodes == 1 and self.nvlink_gb_s > 0 and self.gpus_per_node >= 4
                and self.generation in ("Hopper", "Blackwell"))


def nccl_band(version: str) -> float:
    """``major + minor/100`` of an NCCL version string (NaN when not stated)."""
    import re

    m = re.search(r"(\d+)\.(\d+)", version or "")
    return float(m.group(1)) + float(m.group(2)) / 100 if m else math.nan


def prior_us(size_bytes: float, topo: Topology) -> tuple[float, str]:
    """``(time µs, "algorithm/protocol")``: the fastest of NCCL's choices (module docstring)."""
    n = topo.ranks
    if n <= 1:
        return 0.0, "none"
    ring = min(topo.intra_bw(), topo.net_bw())
    link = topo.net if topo.nodes > 1 else topo.intra
    factor = n / (2 * (n - 1))
    algos: list[tuple[str, float, float]] = [("ring", 2 * (n - 1), ring * factor)]
    if topo.nodes > 1:
        algos.append(("tree", 2 * (math.ceil(math.log2(topo.nodes)) + topo.gpus_per_node - 1), 0.9 * ring * factor))
    if topo.nvls():
        algos.append(("nvls", 2, 1.4 * topo.intra_bw() * factor))
    best = (math.inf, "")
    for name, steps, algbw in algos:
        for proto, bw_factor in BW_FACTOR.items():
            t = BASE_LAT_US[proto] + steps * ALPHA_US[link][proto] + size_bytes / (algbw * bw_factor) * 1e6
            if t < best[0]:
                best = (t, f"{name}/{proto}")
    return best


def features(size_bytes: float, topo: Topology, prior: float) -> list[float]:
    return [math.log2(max(size_bytes, 1.0)), float(topo.nodes), float(topo.gpus_per_node),
            float(INTERCONNECTS.index(topo.interconnect)),
            float(GENERATIONS.index(topo.generation)) if topo.generation in GENERATIONS else math.nan,
            nccl_band(topo.nccl_version), math.log(max(prior, 1e-3) / 1e3)]


@dataclass
class LearnedComm:
    """Prior × ``exp(r(x))``, ``r`` clipped to ±ln 4; no trees = the prior."""

    trees: Trees = field(default_factory=Trees)
    clip: float = math.log(4.0)
    meta: dict[str, Any] = field(default_factory=dict)

    def predict_us(self, size_bytes: float, topo: Topology) -> tuple[float, float, str]:
        """``(p50 µs, p90 µs, source)`` with source ``"learned"`` or ``"prior"``."""
        prior, _ = prior_us(size_bytes, topo)
        if not self.trees.trees or prior <= 0:
            return prior, prior * P90_RATIO, "prior"
        r = max(-self.clip, min(self.clip, self.trees(features(size_bytes, topo, prior))))
        t = prior * math.exp(r)
        return t, t * P90_RATIO, "learned"

    def to_dict(self) -> dict[str, Any]:
        return {"format": "srifty-nccl-model", "version": 1, "features": list(FEATURES),
                "trees": self.trees.to_dict(), "clip": self.clip, "meta": self.meta}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> LearnedComm:
        if doc.get("format") != "srifty-nccl-model" or list(doc.get("features", ())) != list(FEATURES):
            raise ValueError("nccl model: not a srifty-nccl-model with these features; refit it")
        return cls(Trees.from_dict(doc["trees"]), float(doc.get("clip", math.log(4.0))), dict(doc.get("meta", {})))


XGB_PARAMS = {"max_depth": 3, "eta": 0.1, "min_child_weight": 2.0, "lambda": 2.0, "objective": "reg:squarederror",
              "seed": 0}


def fit(points: Sequence[tuple[float, Topology, float, str]], rounds: int = 150) -> LearnedComm:
    """``points``: ``(size bytes, topology, measured µs, sweep id)`` of train sweeps only.

    The number of trees is chosen by cross-validation holding out whole sweeps."""
    import json

    import numpy as np
    import xgboost as xgb

    x, y, groups = [], [], []
    for size, topo, t, sweep in points:
        prior, _ = prior_us(size, topo)
        if prior <= 0 or t <= 0:
            continue
        x.append(features(size, topo, prior))
        y.append(math.log(t / prior))
        groups.append(sweep)
    if len(x) < 20 or len(set(groups)) < 3:
        return LearnedComm(meta={"points": len(x), "trees": 0})
    xa, ya = np.asarray(x, dtype=float), np.asarray(y)
    dall = xgb.DMatrix(xa, label=ya, feature_names=list(FEATURES))
    sweeps = sorted(set(groups))
    folds = [(np.asarray([i for i, g in enumerate(groups) if g != s]), np.asarray([i for i, g in enumerate(groups)
                                                                                  if g == s])) for s in sweeps]
    cv = xgb.cv(XGB_PARAMS, dall, num_boost_round=rounds, folds=folds, metrics="rmse", seed=0)
    best = int(np.argmin(cv["test-rmse-mean"].to_numpy())) + 1
    booster = xgb.train(XGB_PARAMS, dall, num_boost_round=best)
    trees = Trees.from_xgboost_json(json.loads(booster.save_raw("json")))
    check = booster.predict(xgb.DMatrix(xa[:5], feature_names=list(FEATURES)))
    if not np.allclose(check, [trees(row) for row in xa[:5].tolist()], atol=1e-4):
        raise RuntimeError("nccl model: exported trees disagree with xgboost")
    return LearnedComm(trees, meta={"points": len(x), "sweeps": sweeps, "trees": best})
