"""All-reduce time model: an analytical ring prior corrected by a learned quantile regressor.

Prior (ring all-reduce, Patarasuk & Yuan; the NCCL-tests "bus bandwidth" convention)::

    t_prior(S, n) = 2(n−1)/n · S / B  +  2(n−1) · α

``S`` message bytes, ``n`` world size, ``B`` bandwidth of the slowest link of the ring in bytes/s
and ``α`` the per-step latency.  The ring has ``2(n−1)`` steps (reduce-scatter then all-gather),
each moving ``S/n`` bytes over every link at once, so the slowest link paces all of them.
``B`` and ``α`` come from :meth:`planner.hardware.Cluster.slowest_link`:

* one node — NVLink (half the datasheet aggregate, i.e. one direction) or PCIe; α ≈ 8–12 µs;
* several nodes — the node's baseline network bandwidth (Gbit/s); with multiple rings/NICs
  the node's traffic share equals one GPU's, so ``B`` is the node NIC rate; α ≈ 20 µs with EFA,
  ≈ 50 µs over TCP.

The learned part predicts ``y = ln(t / t_prior)`` from :data:`FEATURES` (message size, world
size, nodes, GPUs per node, slowest-link baseline/peak Gbit/s, EFA, intra-node flag, same
placement group, and ``ln t_prior`` itself).  Two quantiles, ``q ∈ {0.5, 0.9}``, are learned
with XGBoost's pinball loss (``reg:quantileerror``) on every per-iteration time, so
``t_q = t_prior · exp(ŷ_q)``.  Trained on fewer than :data:`MIN_XGB_OBSERVATIONS` summary
observations, the model falls back to empirical ratios ``t/t_prior``: for a query whose
configuration matches a training configuration the ratio quantiles are interpolated in
``ln S`` between that configuration's measured sizes (clamped at the ends); otherwise the
pooled median ratio is used.  No training data at all gives the bare prior ("analytical").
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.hardware import Cluster, Link
from planner.perf.compute import interpolate
from planner.profiles import CommProfile

MODEL_FORMAT = "srifty-comm-model"
MODEL_VERSION = 1
MIN_XGB_OBSERVATIONS = 20
QUANTILES = (0.5, 0.9)
FEATURES = (
    "log2_size",
    "world_size",
    "nodes",
    "gpus_per_node",
    "link_baseline_gbps",
    "link_peak_gbps",
    "efa",
    "intra_node",
    "same_placement_group",
    "log_prior_ms",
)
# p90/p50 of the bare prior when nothing was measured (typical run-to-run spread of NCCL rings)
PRIOR_P90_RATIO = 1.15


@dataclass(frozen=True)
class CommQuery:
    """One all-reduce of ``size_bytes`` on a given cluster configuration."""

    size_bytes: int
    world_size: int
    nodes: int = 1
    gpus_per_node: int = 1
    link_gbps: float = 100.0
    link_peak_gbps: float | None = None
    alpha_us: float = 10.0
    efa: bool = False
    placement_group: bool = False
    link_kind: str = ""

    @classmethod
    def from_cluster(cls, size_bytes: int, cluster: Cluster) -> CommQuery:
        return cls.from_link(size_bytes, cluster, cluster.slowest_link())

    @classmethod
    def from_link(cls, size_bytes: int, cluster: Cluster, link: Link) -> CommQuery:
        return cls(
            size_bytes=int(size_bytes),
            world_size=cluster.world_size,
            nodes=cluster.nodes,
            gpus_per_node=cluster.gpus_per_node,
            link_gbps=link.gbps,
            link_peak_gbps=link.peak_gbps or link.gbps,
            alpha_us=link.alpha_us,
            efa=cluster.efa,
            placement_group=cluster.placement_group,
            link_kind=link.kind,
        )

    @property
    def config_key(self) -> tuple[Any, ...]:
        """Everything but the message size: queries with equal keys share a measured curve."""
        return (
            self.world_size,
            self.nodes,
            self.gpus_per_node,
            round(self.link_gbps, 6),
            round(self.link_peak_gbps or self.link_gbps, 6),
            round(self.alpha_us, 6),
            self.efa,
            self.placement_group,
        )

    def with_size(self, size_bytes: int) -> CommQuery:
        return CommQuery(
            size_bytes,
            self.world_size,
            self.nodes,
            self.gpus_per_node,
            self.link_gbps,
            self.link_peak_gbps,
            self.alpha_us,
            self.efa,
            self.placement_group,
            self.link_kind,
        )


@dataclass(frozen=True)
class CommObservation:
    """Measured per-iteration all-reduce times (ms) for one query."""

    query: CommQuery
    times_ms: tuple[float, ...]


@dataclass(frozen=True)
class CommPrediction:
    p50_ms: float
    p90_ms: float
    prior_ms: float
    method: str
    link_kind: str = ""

    @property
    def source(self) -> str:
        """``"analytical"`` for the bare prior, ``"measured"`` when fitted on samples."""
        return "analytical" if self.method == "prior" else "measured"


def ring_allreduce_prior_ms(
    size_bytes: float, world_size: int, bandwidth_gbps: float, alpha_us: float
) -> float:
    """``2(n−1)/n · S/B + 2(n−1)·α`` in milliseconds (``B`` in Gbit/s, ``α`` in µs); 0 for n = 1."""
    if world_size <= 1:
        return 0.0
    if bandwidth_gbps <= 0:
        raise ValueError(f"bandwidth_gbps must be > 0, got {bandwidth_gbps}")
    n = world_size
    bytes_per_ms = bandwidth_gbps * 1e9 / 8 / 1e3
    return 2 * (n - 1) / n * size_bytes / bytes_per_ms + 2 * (n - 1) * alpha_us / 1e3


def prior_ms(query: CommQuery) -> float:
    return ring_allreduce_prior_ms(query.size_bytes, query.world_size, query.link_gbps, query.alpha_us)


def feature_vector(query: CommQuery) -> list[float]:
    """Features in :data:`FEATURES` order."""
    return [
        math.log2(max(query.size_bytes, 1)),
        float(query.world_size),
        float(query.nodes),
        float(query.gpus_per_node),
        float(query.link_gbps),
        float(query.link_peak_gbps or query.link_gbps),
        float(query.efa),
        float(query.nodes == 1),
        float(query.placement_group),
        math.log(max(prior_ms(query), 1e-9)),
    ]


def observations_from_profile(
    profile: CommProfile, cluster: Cluster, link: Link | None = None
) -> list[CommObservation]:
    """Pair a measured comm profile with the cluster description it was measured on."""
    link = link or cluster.slowest_link()
    out = []
    for sample in profile.samples:
        times = sample.stats.times_ms or (sample.stats.median_ms,)
        out.append(CommObservation(CommQuery.from_link(sample.size_bytes, cluster, link), tuple(times)))
    return out


def time_ratios(profile: CommProfile, size_bytes: int) -> tuple[float, ...]:
    """The measured single all-reduce times over their median at the profiled size nearest to
    ``size_bytes`` (in log size): the shape of the time distribution, for the simulator's
    bootstrap (:class:`planner.simulator.CommTime`). Empty when the profile kept no per-call
    times (a summary-only profile) or the median is 0."""
    timed = [s for s in profile.samples if s.stats.times_ms and s.stats.median_ms > 0]
    if not timed or size_bytes <= 0:
        return ()
    near = min(timed, key=lambda s: (abs(math.log(s.size_bytes / size_bytes)), s.size_bytes))
    return tuple(t / near.stats.median_ms for t in near.stats.times_ms)


def fit_link_from_profile(profile: CommProfile) -> tuple[float, float]:
    """Least-squares ``(bandwidth_gbps, alpha_us)`` of the ring prior to a profile's medians.

    Solves ``t_i = c·S_i + d`` with weights ``1/t_i`` (relative error), then
    ``B = 2(n−1)/n / c`` and ``α = d / (2(n−1))``; non-physical values are clamped.
    """
    import numpy as np

    n = profile.world_size
    sizes = np.array([s.size_bytes for s in profile.samples], dtype=float)
    times = np.array([s.stats.median_ms for s in profile.samples], dtype=float)
    w = 1.0 / np.maximum(times, 1e-9)
    a = np.stack([sizes, np.ones_like(sizes)], axis=1) * w[:, None]
    (c, d), *_ = np.linalg.lstsq(a, times * w, rcond=None)
    c = max(float(c), 1e-15)
    steps = 2 * (n - 1)
    bytes_per_ms = (steps / n) / c
    gbps = bytes_per_ms * 1e3 * 8 / 1e9
    alpha_us = max(float(d), 0.0) / steps * 1e3
    return gbps, alpha_us


@dataclass
class CommModel:
    """Quantile model of all-reduce time; build with :meth:`fit`, persist with :meth:`save`."""

    method: str = "prior"
    ratio_curves: dict[tuple[Any, ...], list[tuple[float, float, float]]] = field(default_factory=dict)
    pooled_ratio: tuple[float, float] = (1.0, PRIOR_P90_RATIO)
    booster_json: dict[str, Any] | None = None
    n_observations: int = 0
    _booster: Any = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------------ fitting

    @classmethod
    def fit(
        cls,
        observations: Sequence[CommObservation],
        *,
        min_xgb_observations: int = MIN_XGB_OBSERVATIONS,
        seed: int = 0,
        n_estimators: int = 200,
    ) -> CommModel:
        obs = [o for o in observations if o.times_ms and o.query.world_size > 1]
        if not obs:
            return cls()
        model = cls(method="ratio", n_observations=len(obs))
        model.ratio_curves = _ratio_curves(obs)
        model.pooled_ratio = _pooled_ratio(obs)
        if len(obs) >= min_xgb_observations:
            model._fit_xgb(obs, seed=seed, n_estimators=n_estimators)
        return model

    def _fit_xgb(self, obs: Sequence[CommObservation], *, seed: int, n_estimators: int) -> None:
        import numpy as np
        import xgboost as xgb

        rows, ys = [], []
        for o in obs:
            feats = feature_vector(o.query)
            base = prior_ms(o.query)
            for t in o.times_ms:
                rows.append(feats)
                ys.append(math.log(max(t, 1e-9) / base))
        dtrain = xgb.DMatrix(np.asarray(rows), label=np.asarray(ys), feature_names=list(FEATURES))
        params = {
            "objective": "reg:quantileerror",
            "quantile_alpha": np.array(QUANTILES),
            "tree_method": "hist",
            "learning_rate": 0.1,
            "max_depth": 4,
            "min_child_weight": 1.0,
            "seed": seed,
            "nthread": 1,
        }
        booster = xgb.train(params, dtrain, num_boost_round=n_estimators)
        self._booster = booster
        self.booster_json = json.loads(bytes(booster.save_raw(raw_format="json")))
        self.method = "xgboost"

    # ------------------------------------------------------------------ prediction

    def predict(self, query: CommQuery) -> CommPrediction:
        return self.predict_many([query])[0]

    def predict_many(self, queries: Sequence[CommQuery]) -> list[CommPrediction]:
        priors = [prior_ms(q) for q in queries]
        if self.method == "xgboost":
            ratios = self._xgb_ratios(queries)
        else:
            ratios = [self._empirical_ratio(q) for q in queries]
        out = []
        for q, base, (r50, r90) in zip(queries, priors, ratios, strict=True):
            p50 = base * r50
            p90 = max(base * r90, p50)
            out.append(CommPrediction(p50, p90, base, self.method, q.link_kind))
        return out

    def _empirical_ratio(self, query: CommQuery) -> tuple[float, float]:
        curve = self.ratio_curves.get(query.config_key)
        if not curve:
            return self.pooled_ratio
        x = math.log(max(query.size_bytes, 1))
        xs = [c[0] for c in curve]
        r50 = math.exp(interpolate(x, xs, [c[1] for c in curve]))
        r90 = math.exp(interpolate(x, xs, [c[2] for c in curve]))
        return r50, max(r90, r50)

    def _xgb_ratios(self, queries: Sequence[CommQuery]) -> list[tuple[float, float]]:
        import numpy as np
        import xgboost as xgb

        booster = self._load_booster()
        feats = np.asarray([feature_vector(q) for q in queries])
        pred = np.asarray(booster.predict(xgb.DMatrix(feats, feature_names=list(FEATURES))))
        pred = pred.reshape(len(queries), len(QUANTILES))
        return [(math.exp(float(lo)), math.exp(float(max(lo, hi)))) for lo, hi in pred]

    def _load_booster(self) -> Any:
        if self._booster is None:
            import xgboost as xgb

            if self.booster_json is None:
                raise ValueError("comm model: method is 'xgboost' but no booster was stored")
            booster = xgb.Booster()
            booster.load_model(bytearray(json.dumps(self.booster_json).encode()))
            self._booster = booster
        return self._booster

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": MODEL_FORMAT,
            "version": MODEL_VERSION,
            "method": self.method,
            "features": list(FEATURES),
            "quantiles": list(QUANTILES),
            "n_observations": self.n_observations,
            "pooled_ratio": list(self.pooled_ratio),
            "ratio_curves": [
                {"config": list(k), "points": [list(p) for p in v]} for k, v in self.ratio_curves.items()
            ],
            "booster": self.booster_json,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> CommModel:
        if doc.get("format") != MODEL_FORMAT:
            raise ValueError(f"comm model: format must be {MODEL_FORMAT!r}, got {doc.get('format')!r}")
        if doc.get("version") != MODEL_VERSION:
            raise ValueError(f"comm model: version must be {MODEL_VERSION}, got {doc.get('version')!r}")
        if list(doc.get("features", FEATURES)) != list(FEATURES):
            raise ValueError("comm model: feature list differs from this code's FEATURES")
        curves = {tuple(c["config"]): [tuple(p) for p in c["points"]] for c in doc.get("ratio_curves", [])}
        return cls(
            method=doc["method"],
            ratio_curves=curves,
            pooled_ratio=tuple(doc["pooled_ratio"]),
            booster_json=doc.get("booster"),
            n_observations=int(doc.get("n_observations", 0)),
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str | Path) -> CommModel:
        return cls.from_dict(json.loads(Path(path).read_text()))


# --------------------------------------------------------------------------- helpers


def _quantile(xs: Sequence[float], q: float) -> float:
    ys = sorted(xs)
    pos = q * (len(ys) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def _ratio_curves(obs: Sequence[CommObservation]) -> dict[tuple[Any, ...], list[tuple[float, float, float]]]:
    """Per configuration: sorted ``(ln S, ln r50, ln r90)`` with ``r = t / t_prior``."""
    grouped: dict[tuple[Any, ...], dict[int, list[float]]] = {}
    for o in obs:
        base = prior_ms(o.query)
        ratios = [max(t, 1e-9) / base for t in o.times_ms]
        grouped.setdefault(o.query.config_key, {}).setdefault(o.query.size_bytes, []).extend(ratios)
    curves = {}
    for key, by_size in grouped.items():
        pts = [
            (math.log(size), math.log(_quantile(rs, 0.5)), math.log(_quantile(rs, 0.9)))
            for size, rs in sorted(by_size.items())
        ]
        curves[key] = pts
    return curves


def _pooled_ratio(obs: Sequence[CommObservation]) -> tuple[float, float]:
    r50 = [statistics.median(o.times_ms) / prior_ms(o.query) for o in obs]
    r90 = [_quantile(o.times_ms, 0.9) / prior_ms(o.query) for o in obs]
    return statistics.median(r50), max(statistics.median(r90), statistics.median(r50))
