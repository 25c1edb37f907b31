"""The validated error of each prediction source, as the benches last measured it.

``planner/data/validated_errors.json`` is written by the benches (``bench/accuracy_local.py``
for *measured*; ``bench/accuracy_public.py``, leave one publisher out, for *transferred*,
*analytical*, *scaling* and *ddp-multinode*: rows on several nodes)::

    {"measured": {"median_pct": 1.7, "p90_pct": 4.0, "n": 40, "bench": "bench/accuracy_local.py",
                  "measured_at": "2026-12-04"},
     "transferred": {...}, "analytical": {...}}

A missing file, a missing source or a malformed entry means that source is *not validated*:
callers show it as such and never put a number in its place. Pure: no Django, no printing.

Model error: p10/p50/p90 (issue 34)
-----------------------------------
``bench/accuracy_public.py``'s leave-one-publisher-out section adds, next to those fields, the
empirical quantiles of ``ln(measured / predicted)`` iteration time over its LOPO *validation* rows
(never a frozen test row) per source: ``lopo_q10``, ``lopo_q50``, ``lopo_q90``, ``lopo_n``,
``lopo_bench``, ``lopo_measured_at`` (also under ``"ddp-multinode"``: rows on several nodes, and
``"scaling"``, where the ratio is of the 1-to-n step time, i.e. predicted / measured speed-up).
The rule, fixed before any figure was read: the quantiles are the bench's ``pct`` (linear
interpolation between order statistics) of the log-ratios of each group, nothing fitted, no
shrinkage, no tuning after coverage was seen.

A prediction's band (:func:`iteration_band`, :func:`job_quantile`) combines the simulator's spread
with its source's model error in log space, *comonotonically*: the p-quantile of the time is the
simulator's p-quantile of a run whose compute takes ``exp(q_p)`` times the predicted::

    iter_p   = sim_iter_p · exp(q_p)                       (p = 10, 50, 90)
    time_p   = startup + C_p(base · exp(q_p))              (C_p: planner.spot's completion quantile,
    cost_p   = hourly · time_p                              jitter and interruptions)

Why this and not sampling the residuals into the Monte-Carlo: the model error is *systematic* —
one draw per plan, the same for every iteration — while the simulator's jitter is drawn per
iteration and averages out over a run (its job-level spread is ``sqrt(iterations)`` times smaller).
A job's time is increasing in the model error, so with the model error alone ``C(base · exp(q_p))``
is its exact p-quantile; putting the small remaining jitter and interruptions at the same quantile
(comonotone) is the conservative bound, and it keeps one p90 for the row, the deadline risk and
the page: the deadline-miss risk (:func:`miss_with_error`) is ``1 - p*`` where the p*-quantile of
the time equals the deadline, so ``miss <= 10 %`` exactly when ``time_p90 <= deadline``. Between
the three validated quantiles the model error is the split normal through them (``q50`` its
median, ``(q50 - q10)/z90`` and ``(q90 - q50)/z90`` its two scales).

A source without validated quantiles gets no model-error band (the simulator's spread only) and
says so (``model_error`` is ``{"validated": false}``): no invented band.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

from planner import spot
from planner.spot import SpotParams

log = logging.getLogger(__name__)

SOURCES = ("measured", "transferred", "analytical")
#: The model error of rows on several nodes (the LOPO bench's ddp-multinode group).
MULTINODE = "ddp-multinode"
#: Not a prediction source of a row: the error of scaling to several GPUs and nodes (plans state it).
SCALING = "scaling"
DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "validated_errors.json"


@dataclass(frozen=True)
class SourceError:
    """Relative iteration-time error of one prediction source on a bench's validation rows."""

    source: str
    median_pct: float
    p90_pct: float
    n: int
    bench: str
    measured_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _finite(value: Any) -> float | None:
    """A JSON number as a finite float, else None (booleans are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _pct(value: Any) -> float | None:
    value = _finite(value)
    return value if value is not None and value >= 0 else None


def _entry(source: str, doc: Any) -> SourceError | None:
    if not isinstance(doc, Mapping):
        return None
    median, p90, n = _pct(doc.get("median_pct")), _pct(doc.get("p90_pct")), doc.get("n")
    if median is None or p90 is None or isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return None
    bench = doc.get("bench")
    measured_at = doc.get("measured_at")
    return SourceError(
        source=source,
        median_pct=median,
        p90_pct=p90,
        n=n,
        bench=str(bench) if bench else "",
        measured_at=str(measured_at) if measured_at else None,
    )


def _read_doc(path: Path) -> Mapping[str, Any]:
    """The validated-errors file as an object; absent, unreadable or not an object: empty (logged,
    except absent), so planning never fails on it."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("validated errors %s unreadable, every source shown as not validated: %s", path, exc)
        return {}
    if not isinstance(doc, Mapping):
        log.warning("validated errors %s is not an object; ignored", path)
        return {}
    return doc


def load_validated_errors(path: Path | None = None) -> dict[str, SourceError]:
    """``{source: SourceError}`` for the sources the file validates (possibly none).

    An unreadable or malformed file is logged and treated as absent: planning never fails on it.
    """
    path = DEFAULT_PATH if path is None else Path(path)
    doc = _read_doc(path)
    out = {}
    for source in (*SOURCES, SCALING, MULTINODE):
        entry = _entry(source, doc.get(source))
        if entry is not None:
            out[source] = entry
        elif source in doc:
            log.warning("validated errors %s: entry %r is malformed; shown as not validated", path, source)
    return out


def error_of(source: str, errors: Mapping[str, SourceError]) -> dict[str, Any]:
    """The JSON a plan row carries: ``{"validated": false, "source": ...}`` or the entry's fields."""
    entry = errors.get(source)
    if entry is None:
        return {"source": source, "validated": False}
    return {"validated": True, **entry.as_dict()}


# ------------------------------------------------------------------ model error (issue 34)
Z90 = 1.2815515655446004
_NORMAL = NormalDist()


@dataclass(frozen=True)
class ModelError:
    """Quantiles of ``ln(measured / predicted)`` iteration time over LOPO validation rows."""

    source: str
    q10: float
    q50: float
    q90: float
    n: int
    bench: str
    measured_at: str | None = None

    def log_quantile(self, p: float) -> float:
        """The split normal through (q10, q50, q90) at probability ``p`` (module docstring)."""
        z = _NORMAL.inv_cdf(p)
        scale = (self.q50 - self.q10) if z < 0 else (self.q90 - self.q50)
        return self.q50 + z * scale / Z90

    def as_dict(self) -> dict[str, Any]:
        """The quantiles and ``factor_p10/p50/p90``: ``exp(q)``, measured / predicted."""
        factors = {f"factor_p{p}": math.exp(q) for p, q in ((10, self.q10), (50, self.q50), (90, self.q90))}
        return {"validated": True, **asdict(self), **factors}

    def text(self) -> str:
        """e.g. "measured 0.92-1.85x the prediction (median 1.21x; n=48, LOPO, bench, date)"."""
        when = f", {self.measured_at}" if self.measured_at else ""
        return (
            f"{self.source}: measured {math.exp(self.q10):.2f}-{math.exp(self.q90):.2f}x the prediction "
            f"(p10-p90, median {math.exp(self.q50):.2f}x; n={self.n}, {self.bench}{when})"
        )


def _model_entry(source: str, doc: Any) -> ModelError | None:
    if not isinstance(doc, Mapping):
        return None
    q10, q50, q90 = (_finite(doc.get(k)) for k in ("lopo_q10", "lopo_q50", "lopo_q90"))
    n = doc.get("lopo_n")
    if q10 is None or q50 is None or q90 is None or not q10 <= q50 <= q90:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return None
    bench, when = doc.get("lopo_bench"), doc.get("lopo_measured_at")
    return ModelError(source, q10, q50, q90, n, str(bench) if bench else "", str(when) if when else None)


def load_model_errors(path: Path | None = None) -> dict[str, ModelError]:
    """``{source: ModelError}`` for the sources with validated LOPO quantiles (possibly none);
    an unreadable file or entry counts as absent (planning never fails on it)."""
    doc = _read_doc(DEFAULT_PATH if path is None else Path(path))
    out = {}
    for source in (*SOURCES, SCALING, MULTINODE):
        entry = _model_entry(source, doc.get(source))
        if entry is not None:
            out[source] = entry
    return out


def model_error_of(source: str | None, errors: Mapping[str, ModelError]) -> dict[str, Any]:
    """The JSON a plan row carries for the model error in its band."""
    entry = errors.get(source) if source else None
    if entry is None:
        return {"source": source, "validated": False}
    return entry.as_dict()


def row_model_error(
    sources: Sequence[str], nodes: int, errors: Mapping[str, ModelError]
) -> ModelError | None:
    """The model error of a prediction: on several nodes the ddp-multinode quantiles (they measure
    the whole DDP iteration), else the least trustworthy source of its GPU groups; None when
    that has no validated quantiles."""
    if nodes > 1 and MULTINODE in errors:
        return errors[MULTINODE]
    order = {s: i for i, s in enumerate(SOURCES)}
    worst = max(sources or ["analytical"], key=lambda s: order.get(s, len(SOURCES)))
    return errors.get(worst)


def iteration_band(p50_s: float, p90_s: float, err: ModelError | None) -> tuple[float, float, float]:
    """(p10, p50, p90) iteration time: the simulator's p50/p90 (its p10 mirrors its p90: the
    search's delta-method spread is normal) times ``exp(q10/q50/q90)`` of the model error."""
    p10 = max(0.0, 2 * p50_s - p90_s)
    if err is None:
        return p10, p50_s, p90_s
    return p10 * math.exp(err.q10), p50_s * math.exp(err.q50), p90_s * math.exp(err.q90)


def _sim_quantile(p: float, base_h: float, hazard: float, params: SpotParams, jitter_sd_h: float) -> float:
    """The simulator's p-quantile of the computing time (jitter, interruptions), in hours."""
    if hazard <= 0:
        return base_h + _NORMAL.inv_cdf(p) * max(0.0, jitter_sd_h)
    return spot.completion_quantile(p, base_h, hazard, params, jitter_sd_h)


def job_quantile(
    p: float, base_h: float, hazard: float, params: SpotParams, jitter_sd_h: float, err: ModelError | None
) -> float:
    """The p-quantile of the computing time (startup excluded), model error included (module
    docstring): ``C_p(base · exp(q_p))``; the simulator's alone when ``err`` is None."""
    scale = math.exp(err.log_quantile(p)) if err is not None else 1.0
    return _sim_quantile(p, base_h * scale, hazard, params, jitter_sd_h)


def miss_with_error(
    deadline_h: float,
    base_h: float,
    hazard: float,
    params: SpotParams,
    jitter_sd_h: float,
    err: ModelError | None,
) -> float:
    """Probability of not being done ``deadline_h`` hours after computing starts: ``1 - p*`` where
    ``job_quantile(p*) = deadline_h`` (so ``<= 0.1`` exactly when the p90 meets the deadline)."""
    if err is None:
        return spot.miss_probability(deadline_h, base_h, hazard, params, jitter_sd_h)

    def done_by(p: float) -> bool:  # is the p-quantile within the deadline? (increasing in p)
        scale = math.exp(err.log_quantile(p))
        return spot.completion_cdf(deadline_h, base_h * scale, hazard, params, jitter_sd_h) >= p

    lo, hi = 1e-9, 1 - 1e-9
    if not done_by(lo):
        return 1.0
    if done_by(hi):
        return 0.0
    for _ in range(40):  # done_by(lo) and not done_by(hi): p* in [lo, hi], 2^-40 wide at the end
        mid = 0.5 * (lo + hi)
        if done_by(mid):
            lo = mid
        else:
            hi = mid
    return max(0.0, 1.0 - lo)
