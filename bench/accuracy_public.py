"""Accuracy of the compute and comm models on published GPU training figures (GPUs, not this CPU).

Leave one publisher out (LOPO, issue 34)
----------------------------------------
Rows: ``catalog/fixtures/public_gpu_training.csv``, the ResNet-50 calibration rows and
``catalog/fixtures/public_gpu_training_2.csv`` (other publishers and stacks), grouped by
publisher (``planner.corpus.publisher_of``: the ``github.com/OWNER/REPO`` of each row's source).
A fifth of the publishers, drawn once by a fixed seed from those no shipped fit has read, form
the frozen test set (``planner/data/frozen_test_publishers.json``, rule in its header): no fit
reads their rows (``planner.corpus.train_rows`` refuses them), and their figures are printed
once, separately, after the validation figures.

THE RULE: no parameter or form of any model is chosen after looking at validation or test rows.
These figures are a measurement, not a target to tune against; a change of model is judged
by the next run of this bench, on publishers it was not fitted on.

For each other publisher P, the compute model is refitted with the product's own fitting
function (``planner.calibration.calibrate_compute``: the operator-class roofline, its residual
trees and the multi-GPU κ/δ grid) on every row of every other non-frozen publisher, then P's rows
are predicted through the product's oracle (``planner.oracle.Oracle``, as ``manage.py predict``
builds it, with the comm model of ``planner.app.service.comm_model``):

* ``analytical`` — P's single-GPU rows, from nothing of P: ``Oracle.phases(gpu, batch)``.
* ``transferred`` — P's single-GPU row on GPU B from P's own row on GPU A (same model,
  precision and per-GPU batch: what a user's profile is), ``TransferModel.predict(measured=…,
  measured_on=A)``, the call the oracle makes for a profiled workload.  The "measured" phases are
  A's time split in the model's phase proportions on A (:func:`transfer`).
* ``scaling`` — P's 8-GPU one-node rows against P's 1-GPU row: the oracle's ``n·t₁/t_n``.
* ``ddp-multinode`` — P's rows on several nodes: the oracle's iteration time for the row's
  nodes; an EC2 row (e.g. Pollux's T4 traces on g4dn.12xlarge) on the catalog's instance type
  (its vCPUs, network and EFA from the catalog fixtures, as ``manage.py predict`` reads them from
  the catalog), a non-EC2 row on a DGX-like node (``calibration.node_candidate``).
* gradient accumulation — a row whose run accumulated gradients over ``k`` micro-batches
  (``planner/data/corpus_accumulation.csv``: NVIDIA's BERT pre-training, LAMB) is predicted with
  ``Workload.accumulation_steps = k``: the all-reduces and the optimizer step once per ``k``
  micro-steps, as the oracle plans a user's accumulated run (:func:`step_ms` on one GPU).
* ``coverage`` — how often the measured value falls inside the range the product states: its
  p10-p90 (``planner.validated.iteration_band``: the oracle's p50/p90 times ``exp(q10/q90)`` of the
  model error of the row's source: analytical, transferred or, on several nodes, ddp-multinode).
  On the LOPO rows each publisher's rows are banded with the quantiles of the *other* publishers'
  LOPO rows (cross-fitted: a row never sits in the quantiles that band it); on the frozen test
  rows with the quantiles of every LOPO row, the ones the product reads.

Errors are ``|predicted − measured| / measured`` of the step time (of the speed-up for scaling).

Written to ``planner/data/validated_errors.json`` (issue 34, rule fixed before any figure), per
group transferred, analytical, scaling and ddp-multinode, from the LOPO validation rows only
(never a frozen test row), nothing fitted or tuned on them:

* ``median_pct``, ``p90_pct``, ``max_pct``, ``n`` — the errors above as the group's line prints
  them (``pct``: linear between order statistics), with ``bench`` and ``measured_at``: what the
  plan page states per source (``planner.validated.load_validated_errors``);
* ``lopo_q10`` ... ``lopo_measured_at`` — the empirical quantiles q10/q50/q90 of
  ``ln(measured / predicted)`` (scaling: of the 1-to-n step time, i.e. ln(predicted / published
  speed-up)), the model error plan rows are banded with (``planner.validated.load_model_errors``).

The "measured" entry is ``bench/accuracy_local.py``'s and is left as it is.

Targets (issue 34, leave one publisher out): median error transferred ≤ 10 %, analytical ≤ 20 %,
8-GPU scaling ≤ 5 %, ddp-multinode ≤ 15 %; coverage of the p10-p90 between 75 and 90 %; and for
every GPU the median predicted/measured time ratio between 0.8 and 1.25.  The exit status is 0
when all are met, 1 otherwise.

Run: ``.venv/bin/python bench/accuracy_public.py [--jobs 2]`` (traces are cached in
``var/corpus_traces``; the first run traces ~100 models on the meta device, a few minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner import calibration, corpus  # noqa: E402
from planner.hardware import load_gpu_specs  # noqa: E402
from planner.oracle import Oracle, Workload  # noqa: E402
from planner.perf.compute import PhaseTimes  # noqa: E402
from planner.perf.transfer import WorkloadCost  # noqa: E402

SPECS = ROOT / "catalog/fixtures/gpu_specs.csv"
VALIDATED = ROOT / "planner/data/validated_errors.json"
FIXTURES = ROOT / "catalog/fixtures"
BENCH = "bench/accuracy_public.py (LOPO)"
GROUPS = ("transferred", "analytical", "scaling", "ddp-multinode")
# Groups whose error is on a time (the per-GPU ratio compares them); scaling is a speed-up.
TIME_GROUPS = ("analytical", "transferred", "ddp-multinode")
# Issue 34's targets, leave one publisher out: the median |error| % per group, the share of
# measured values inside the stated p10-p90 (%), and the median predicted/measured ratio per GPU.
MEDIAN_TARGETS = {"transferred": 10.0, "analytical": 20.0, "scaling": 5.0, "ddp-multinode": 15.0}
COVERAGE_TARGET = (75.0, 90.0)
RATIO_TARGET = (0.8, 1.25)


def pct(values: list[float], q: float) -> float:
    """The q-quantile of ``values``, linear between order statistics (nan when empty)."""
    s = sorted(values)
    if not s:
        return math.nan
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def line(name: str, errs: list[float]) -> str:
    """``name: n=.. median X% p90 Y% max Z%`` of relative errors (bench/accuracy_comm.py's lines)."""
    if not errs:
        return f"{name}: n=0"
    return (
        f"{name}: n={len(errs)} median {100 * statistics.median(errs):.1f}% p90 {100 * pct(errs, 0.9):.1f}% "
        f"max {100 * max(errs):.1f}%"
    )


def row_workload(traces: Mapping, models: Mapping, row: corpus.CorpusRow) -> Workload | None:
    """The cached trace of ``row``'s model as a workload at the row's precision, or None."""
    doc = traces.get(calibration.row_trace_key(row, models))
    if doc is None:
        return None
    shape = models[row.key].data_shape  # what the loaders feed (the trace may stand in for it)
    return dataclasses.replace(
        Workload.from_dict(doc),
        precision=row.precision,
        input_shape=shape,
        accumulation_steps=row.accumulation_steps,  # all-reduce and optimizer once per k micro-steps
    )


def step_ms(phases: PhaseTimes, row: corpus.CorpusRow) -> float:
    """One micro-step of ``row`` on one GPU (ms): forward + backward, and the optimizer step when
    the row's figure includes it, once per the row's ``k`` accumulated micro-steps (the oracle's
    one-GPU estimate: ``planner.oracle._accumulated`` with nothing to all-reduce)."""
    optimizer = phases.optimizer / row.accumulation_steps if row.with_optimizer else 0.0
    return phases.forward + phases.backward + optimizer


def oracle_step(model, wl: Workload, r: corpus.CorpusRow) -> float | None:
    """The oracle's one-GPU step time of ``r`` (ms): forward + backward (+ optimizer when the
    row's figure includes it); None when the batch does not fit the GPU."""
    oracle = Oracle(wl, model, model.specs)
    phases = oracle.phases(r.chip, r.per_gpu_batch)
    if phases is None:
        return None
    return step_ms(phases, r)


def transfer(model, cost: WorkloadCost, a: corpus.CorpusRow, b: corpus.CorpusRow, t_a: float) -> float:
    """Row ``b``'s step time (ms) predicted from row ``a``'s measured ``t_a`` on another chip.

    The "measured" phases are ``t_a`` split in the model's phase proportions on A
    (``phase_p · t_a / Σ phases``, the optimizer unscaled when A's figure leaves it out); when B's
    batch differs, each phase is moved along the model's batch curve on A first (what a profile's
    linear fit gives). Then ``TransferModel.predict(measured=…, measured_on=A)`` on B."""
    pa = model.phase_ms(cost, a.per_gpu_batch, a.chip, a.precision)
    base = step_ms(PhaseTimes(pa["forward"], pa["backward"], pa["optimizer"]), a)
    scale = t_a / base
    if b.per_gpu_batch != a.per_gpu_batch:  # along the source GPU's batch curve (a profile's fit)
        pb = model.phase_ms(cost, b.per_gpu_batch, a.chip, a.precision)
        ratio = {p: pb[p] / pa[p] if pa[p] > 0 else 1.0 for p in pa}
    else:
        ratio = dict.fromkeys(pa, 1.0)
    fwd, bwd = pa["forward"] * scale * ratio["forward"], pa["backward"] * scale * ratio["backward"]
    opt = pa["optimizer"] * (scale if a.with_optimizer else 1.0) * ratio["optimizer"]
    measured = PhaseTimes(fwd, bwd, opt, source="measured", batch_size=b.per_gpu_batch)
    t = model.predict(
        cost, b.per_gpu_batch, b.chip, measured=measured, measured_on=a.chip, precision=b.precision
    )
    return step_ms(t, b)


def unmapped_line(rows: list[corpus.CorpusRow], models: Mapping) -> str:
    """The rows whose model has no builder: out of every figure (reasons in the models CSVs)."""
    missing = [r for r in rows if not (models.get(r.key) and models[r.key].mapped)]
    names = sorted({r.model for r in missing})
    return (
        f"rows without a builder (out of every figure): {len(missing)} of {len(rows)}, {len(names)} model "
        f"configs: {', '.join(names)} (reasons in planner/data/corpus_models*.csv)"
    )


# --------------------------------------------------------------------------- LOPO (issue 34)


@dataclasses.dataclass
class LopoCase:
    group: str
    row: corpus.CorpusRow
    publisher: str
    measured: float
    predicted: float
    source: str  # the product's prediction source: analytical / transferred / scaling
    p90: float | None = None  # the oracle's own p90 (ddp rows), when it states one
    detail: str = ""

    @property
    def err(self) -> float:
        return abs(self.predicted - self.measured) / self.measured

    @property
    def ratio(self) -> float:
        return self.predicted / self.measured


def catalog_candidate(instance: str, gpus_per_node: int):
    """The catalog's offer of ``instance`` as ``manage.py predict`` builds its ``Candidate``
    (name, family, GPUs, accelerator, vCPUs, ``InstanceType.link_gbps``, EFA), read from the
    catalog fixtures the catalog is imported from; ``gpus_per_node`` of them in use (Pollux
    ran 1, 2 or 4 of a g4dn.12xlarge's 4 T4).  None when the fixtures lack the type."""
    import csv

    from planner.hardware import efa_gbps
    from planner.offers import Candidate, family_of

    gpu = vcpus = None
    with open(FIXTURES / "aws_gpu_instances.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            if r["InstanceType"] == instance:
                gpu, vcpus = r["AcceleratorName"], int(float(r["vCPUs"]))
                break
    net = None
    with open(FIXTURES / "aws_instance_network.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            if r["InstanceType"] == instance:
                net = r
                break
    if gpu is None or vcpus is None or net is None:
        return None
    base = float(net["BaselineBandwidthGbps"]) if net["BaselineBandwidthGbps"] else None
    peak = float(net["PeakBandwidthGbps"]) if net["PeakBandwidthGbps"] else None
    efa = net["EfaSupported"].strip().lower() == "true"
    link = base if base is not None else peak
    if efa:
        link = max(link or 0.0, efa_gbps(net["NetworkPerformance"])) or link
    return Candidate(
        instance, family_of(instance), "", "on-demand", None, 0.0, gpus_per_node, gpu, vcpus, link or 0.0, efa
    )


class Lopo:
    """Leave-one-publisher-out: one refit per publisher, its rows predicted by the oracle."""

    def __init__(self, jobs: int) -> None:
        import os

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srifty_web.settings")
        import django

        django.setup()
        from planner.app import service

        self.specs = load_gpu_specs(SPECS)
        self.jobs = jobs
        self.models = corpus.all_models()
        self.rows = corpus.load_all_rows()
        self.frozen = corpus.load_frozen()
        self.comm = service.comm_model()  # the product's comm model (nccl-model.json)
        self.model_errors: dict = {}  # the LOPO quantiles plan rows band with (set by lopo_report)
        self.traces: dict = {}  # (spec, shape, precision) -> trace, filled by load_traces
        self.fit_seconds: list[float] = []
        by: dict[str, list[corpus.CorpusRow]] = defaultdict(list)
        for r in self.rows:
            by[corpus.publisher_of(r.source)].append(r)
        self.by_publisher = dict(sorted(by.items()))

    def load_traces(self) -> None:
        needed = {k for r in self.rows if (k := calibration.row_trace_key(r, self.models)) is not None}
        traces, errors = calibration.corpus_traces(needed - set(self.traces), jobs=self.jobs)
        self.traces.update(traces)
        for key, err in errors.items():
            print(f"  trace failed: {key[0]} {key[1]} {key[2]}: {err}")

    def needs_multi_gpu(self, rows: list[corpus.CorpusRow]) -> bool:
        """Whether predicting ``rows`` asks the oracle for a multi-GPU configuration (an 8-GPU
        scaling pair or a multi-node row): only those read κ and δ."""
        eight = any(many.gpus_per_node == 8 for _, many in calibration.scaling_pairs(rows, self.models))
        return eight or any(r.nodes > 1 and self.workload(r) is not None for r in rows)

    def fit(self, left_out: str | None, multi_gpu: bool = True):
        """The product's fit (``calibrate_compute``) on every non-frozen publisher but ``left_out``.

        ``multi_gpu=False`` offers it the single-GPU rows only: the operator-class model, its
        residual and per-GPU factors are fitted on those alone in any case, and without a
        multi-GPU row the κ/δ grid (most of a fit's time) has no pair to fit; for a fold whose
        rows are all predicted on one GPU (``Oracle.phases``, which reads neither κ nor δ) the
        figures are the same as with the full fit."""
        import time

        # Rows on a GPU without a datasheet row (K80, P100, RTX 6000, …) cannot be fitted on.
        rows = [r for r in self.rows if self.has_spec(r.chip) and (multi_gpu or r.gpus == 1)]
        split = corpus.lopo_split(rows, left_out or "", self.frozen)
        t0 = time.perf_counter()
        # jobs=1: every trace is cached by load_traces, and a fold may run in a pool's worker
        model, _ = calibration.calibrate_compute(
            self.specs, jobs=1, split=split, rows=rows, models=self.models
        )
        self.fit_seconds.append(time.perf_counter() - t0)
        return model

    def has_spec(self, chip: str) -> bool:
        return calibration.has_spec(self.specs, chip)

    def workload(self, row: corpus.CorpusRow) -> Workload | None:
        return row_workload(self.traces, self.models, row)

    def predict(self, model, rows: list[corpus.CorpusRow], publisher: str) -> list[LopoCase]:
        return (
            self.analytical(model, rows, publisher)
            + self.transferred(model, rows, publisher)
            + self.scaling(model, rows, publisher)
            + self.multinode(model, rows, publisher)
        )

    def analytical(self, model, rows, publisher) -> list[LopoCase]:
        out = []
        for r in rows:
            if r.gpus != 1 or (wl := self.workload(r)) is None:
                continue
            t = corpus.iteration_ms(r, self.models.get(r.key))
            try:
                pred = oracle_step(model, wl, r) if t else None
            except KeyError:  # a GPU the datasheets do not have (K80, P100, A40, …)
                pred = None
            if t and pred:
                out.append(LopoCase("analytical", r, publisher, t, pred, "analytical"))
        return out

    def transferred(self, model, rows, publisher) -> list[LopoCase]:
        """One case per (target row, profiled chip): the median of the predictions from each of
        the publisher's rows on that chip (repeated runs of one configuration are one profile,
        so a publisher with many repeats does not outweigh the others)."""
        out = []
        single = [r for r in rows if r.gpus == 1 and r.nodes == 1]
        for b in single:
            wl = self.workload(b)
            m = self.models.get(b.key)
            t_b = corpus.iteration_ms(b, m)
            if wl is None or not t_b:
                continue
            by_chip: dict[str, list[float]] = defaultdict(list)
            for a in single:
                same = (a.key, a.precision, a.per_gpu_batch) == (b.key, b.precision, b.per_gpu_batch)
                if not same or a.chip == b.chip:
                    continue
                t_a = corpus.iteration_ms(a, m)
                try:
                    pred = transfer(model, wl.cost, a, b, t_a) if t_a else None
                except KeyError:
                    pred = None
                if pred:
                    by_chip[a.chip].append(pred)
            for chip, preds in sorted(by_chip.items()):
                detail = f"from {chip} ({len(preds)} rows)"
                pred = statistics.median(preds)
                out.append(LopoCase("transferred", b, publisher, t_b, pred, "transferred", None, detail))
        return out

    def scaling(self, model, rows, publisher) -> list[LopoCase]:
        out = []
        for one, many in calibration.scaling_pairs(rows, self.models):
            if many.gpus_per_node != 8 or (wl := self.workload(one)) is None:
                continue
            try:
                pred = calibration.predicted_speedup(
                    model, wl, one.chip, 8, one.per_gpu_batch, one.precision, self.specs, many.host_vcpus
                )
            except KeyError:
                pred = None
            if pred:
                s = calibration.published_speedup(one, many)
                out.append(LopoCase("scaling", many, publisher, s, pred, "scaling"))
        return out

    def multinode(self, model, rows, publisher) -> list[LopoCase]:
        out = []
        for r in rows:
            if r.nodes < 2 or (wl := self.workload(r)) is None:
                continue
            t = corpus.iteration_ms(r, self.models.get(r.key))
            instance = corpus.instance_of(r)
            try:
                spec = model.spec(r.chip)
            except KeyError:
                continue
            cand = (
                catalog_candidate(instance, r.gpus_per_node)
                if instance
                else calibration.node_candidate(r.chip, r.gpus_per_node, spec, r.host_vcpus)
            )
            if cand is not None and cand.efa and "EFA not configured" in r.notes:
                cand = dataclasses.replace(cand, efa=False)  # the run's transport: NCCL over TCP
            if cand is None or not t:
                continue
            oracle = Oracle(wl, model, model.specs, self.comm, samples=2000)
            est = oracle(((cand, r.nodes),), r.per_gpu_batch * r.gpus)
            if est is None:
                continue
            where = cand.instance_type if instance else f"non-EC2 node {cand.instance_type}"
            out.append(
                LopoCase(
                    "ddp-multinode",
                    r,
                    publisher,
                    t,
                    est.iter_time_s * 1e3,
                    "analytical",
                    est.iter_time_p90_s * 1e3,
                    f"{r.nodes}x {where}",
                )
            )
        return out

    def fold(self, left_out: str | None) -> tuple[list[LopoCase], float]:
        """One fit and its predictions: the left-out publisher's rows, or (``None``: the fit on
        every non-frozen publisher) the frozen test publishers' rows; with the fit's seconds."""
        targets = (
            self.by_publisher[left_out]
            if left_out is not None
            else [r for p in sorted(self.frozen.publishers) for r in self.by_publisher.get(p, [])]
        )
        model = self.fit(left_out, multi_gpu=self.needs_multi_gpu(targets))
        seconds = self.fit_seconds[-1]
        if left_out is not None:
            return self.predict(model, targets, left_out), seconds
        test: list[LopoCase] = []
        for publisher in sorted(self.frozen.publishers):
            test += self.predict(model, self.by_publisher.get(publisher, []), publisher)
        return test, seconds

    def run(self) -> tuple[list[LopoCase], list[LopoCase]]:
        """(validation cases of every fold, frozen test cases from the all-publisher fit).

        One ``calibrate_compute`` per fold, the folds spread over ``jobs`` forked processes. Its
        κ/δ grid is most of the ~50 s a full fit takes on this corpus (11 full fits ran 10.5 min
        on 2 busy cores), so it runs only in the folds whose rows need it (:meth:`fit`)."""
        global _WORKER
        folds: list[str | None] = [p for p in self.by_publisher if p not in self.frozen.publishers]
        folds.append(None)
        if self.jobs > 1:
            import multiprocessing

            _WORKER = self
            with multiprocessing.get_context("fork").Pool(self.jobs) as pool:
                results = pool.map(_fold, folds, chunksize=1)
        else:
            results = [self.fold(p) for p in folds]
        self.fit_seconds = [seconds for _, seconds in results]
        cases = [c for (cs, _), p in zip(results, folds, strict=True) if p is not None for c in cs]
        return cases, results[-1][0]

    def stated_range(self, c: LopoCase, errors: dict | None = None) -> tuple[float, float] | None:
        """The p10-p90 a plan row states for this prediction (``planner.validated.iteration_band``
        with the model error of its source); None where that source has no validated quantiles."""
        from planner.validated import iteration_band

        errors = self.model_errors if errors is None else errors
        err = errors.get(band_source(c))
        if err is None:
            return None
        p10, _, p90 = iteration_band(c.predicted, c.p90 if c.p90 is not None else c.predicted, err)
        return p10, p90


def band_source(c: LopoCase) -> str:
    """The validated_errors.json entry whose model error bands this case in the product."""
    return c.group  # analytical, transferred, ddp-multinode: as planner.validated.row_model_error


def log_ratio(c: LopoCase) -> float:
    """ln(measured / predicted) of the time (for scaling, of the 1-to-n step time)."""
    return math.log(c.predicted / c.measured) if c.group == "scaling" else math.log(c.measured / c.predicted)


def model_errors(cases: list[LopoCase], today: str) -> dict:
    """The module docstring's rule: per group, q10/q50/q90 of the LOPO log-ratios."""
    from planner.validated import ModelError

    out = {}
    for g in GROUPS:
        logs = [log_ratio(c) for c in cases if c.group == g and c.measured > 0 and c.predicted > 0]
        if logs:
            out[g] = ModelError(
                g,
                pct(logs, 0.1),
                pct(logs, 0.5),
                pct(logs, 0.9),
                len(logs),
                BENCH,
                today,
            )
    return out


def error_figures(cases: list[LopoCase]) -> dict[str, Any] | None:
    """``median_pct``, ``p90_pct``, ``max_pct`` (of ``|predicted − measured| / measured``, %, one
    decimal) and ``n`` of ``cases``: the figures a group's line prints; None without a case."""
    errs = [c.err for c in cases]
    if not errs:
        return None
    return {
        "median_pct": round(100 * statistics.median(errs), 1),
        "p90_pct": round(100 * pct(errs, 0.9), 1),
        "max_pct": round(100 * max(errs), 1),
        "n": len(errs),
    }


def validated_entries(cases: list[LopoCase], today: str) -> dict[str, dict[str, Any] | None]:
    """Per group, the fields this bench owns in validated_errors.json (module docstring), from
    the LOPO validation ``cases``; None for a group without a case (its old figures go)."""
    errors = model_errors(cases, today)
    out: dict[str, dict[str, Any] | None] = {}
    for g in GROUPS:
        figures = error_figures([c for c in cases if c.group == g])
        e = errors.get(g)
        if figures is None or e is None:
            out[g] = None
            continue
        out[g] = {
            **figures,
            "bench": BENCH,
            "measured_at": today,
            "lopo_q10": round(e.q10, 4),
            "lopo_q50": round(e.q50, 4),
            "lopo_q90": round(e.q90, 4),
            "lopo_n": e.n,
            "lopo_bench": e.bench,
            "lopo_measured_at": e.measured_at,
        }
    return out


# The fields of a group's entry this bench writes; any other field (none today) is kept.
OWNED = (
    "median_pct",
    "p90_pct",
    "max_pct",
    "n",
    "bench",
    "measured_at",
    "lopo_q10",
    "lopo_q50",
    "lopo_q90",
    "lopo_n",
    "lopo_bench",
    "lopo_measured_at",
)


def write_validated(entries: Mapping[str, dict[str, Any] | None], path: Path = VALIDATED) -> None:
    """Replace this bench's fields of each group in ``path``; other entries ("measured", written
    by bench/accuracy_local.py) are left as they are.  A group without figures loses its old
    ones: a stale number would be shown as validated."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    for g, fields in entries.items():
        entry = {k: v for k, v in doc.get(g, {}).items() if k not in OWNED}
        entry.update(fields or {})
        if entry:
            doc[g] = entry
        else:
            doc.pop(g, None)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


_WORKER: Lopo | None = None  # the parent's Lopo, inherited by the forked fold workers


def _fold(left_out: str | None) -> tuple[list[LopoCase], float]:
    assert _WORKER is not None
    return _WORKER.fold(left_out)


def lopo_case_dict(c: LopoCase) -> dict:
    r = c.row
    return {
        "group": c.group,
        "publisher": c.publisher,
        "model": r.model,
        "gpu": r.chip,
        "precision": r.precision,
        "batch": r.per_gpu_batch,
        "gpus_per_node": r.gpus_per_node,
        "nodes": r.nodes,
        "measured": c.measured,
        "predicted": c.predicted,
        "p90": c.p90,
        "detail": c.detail,
    }


def lopo_line(name: str, cases: list[LopoCase]) -> str:
    figures = error_figures(cases)
    if figures is None:
        return f"{name}: n=0"
    return f"{name}: n={figures['n']} median {figures['median_pct']:.1f}% p90 {figures['p90_pct']:.1f}%"


def coverage(lopo: Lopo, cases: list[LopoCase], cross_fit: bool = False) -> tuple[int, int]:
    """(inside, n): the time rows measured inside the product's p10-p90; ``cross_fit``: each
    publisher's rows banded with the quantiles of the other publishers' rows."""
    inside = []
    today = datetime.date.today().isoformat()
    for publisher in sorted({c.publisher for c in cases}):
        errors = model_errors([c for c in cases if c.publisher != publisher], today) if cross_fit else None
        for c in cases:
            if c.publisher == publisher and c.group in TIME_GROUPS:
                r = lopo.stated_range(c, errors)
                if r is not None:
                    inside.append(r[0] <= c.measured <= r[1])
    return sum(inside), len(inside)


def coverage_line(inside: int, n: int, prefix: str = "", cross_fit: bool = False) -> str:
    share = f"{100 * inside / n:.1f}%" if n else "-"
    how = (
        "each publisher banded by the others' LOPO quantiles"
        if cross_fit
        else "banded by every LOPO quantile"
    )
    return (
        f"{prefix}coverage p10-p90: {share} (n={n}; measured inside the product's p10-p90: the "
        f"oracle's p50/p90 x exp(q10/q90) of the source's model error; {how})"
    )


def lopo_report(lopo: Lopo, cases: list[LopoCase], test: list[LopoCase]) -> float | None:
    """Print the LOPO figures (module docstring), write this bench's fields of validated_errors.json
    and return the LOPO coverage of the p10-p90 in % (None without a banded row)."""
    folds = len(lopo.fit_seconds)
    print(
        f"\n== leave one publisher out: {len(lopo.by_publisher) - len(lopo.frozen.publishers)} "
        f"publishers, each predicted by calibrate_compute refitted without it "
        f"({folds} fits, {statistics.median(lopo.fit_seconds):.1f} s median)"
        if folds
        else "\n== leave one publisher out"
    )
    for g in GROUPS:
        print(lopo_line(g, [c for c in cases if c.group == g]))
    today = datetime.date.today().isoformat()
    lopo.model_errors = model_errors(cases, today)
    write_validated(validated_entries(cases, today))
    ec2 = [c for c in cases if c.group == "ddp-multinode" and "non-EC2" not in c.detail]
    print(lopo_line("  ddp-multinode on EC2 catalog instances only", ec2))
    inside, n = coverage(lopo, cases, cross_fit=True)
    print(coverage_line(inside, n, cross_fit=True))
    # The frozen test set: once per run, from the fit on every non-frozen publisher.
    print(f"-- frozen test set ({', '.join(sorted(lopo.frozen.publishers))}), read by no fit")
    for g in GROUPS:
        print(lopo_line(f"test {g}", [c for c in test if c.group == g]))
    print(coverage_line(*coverage(lopo, test), prefix="test "))
    lopo_breakdown(cases)
    print(
        f"wrote median/p90/max |error| % and the model error (q10/q50/q90 of ln(measured/predicted)) of "
        f"the LOPO rows to {VALIDATED.relative_to(ROOT)}"
    )
    return 100 * inside / n if n else None


def gpu_ratios(cases: list[LopoCase]) -> dict[str, float]:
    """Per GPU, the median predicted/measured time ratio of its time rows (not scaling)."""
    by_gpu: dict[str, list[float]] = defaultdict(list)
    for c in cases:
        if c.group in TIME_GROUPS:
            by_gpu[c.row.chip].append(c.ratio)
    return {gpu: statistics.median(rs) for gpu, rs in sorted(by_gpu.items())}


def outside_ratio(ratio: float) -> bool:
    return not RATIO_TARGET[0] <= ratio <= RATIO_TARGET[1]


def lopo_breakdown(cases: list[LopoCase]) -> None:
    for label, key in (("gpu", lambda c: c.row.chip), ("publisher", lambda c: c.publisher)):
        print(f"-- LOPO by {label} (n, median |error| %)")
        table: dict[tuple[str, str], list[LopoCase]] = defaultdict(list)
        for c in cases:
            table[(c.group, key(c))].append(c)
        for (group, k), cs in sorted(table.items()):
            print(
                f"  {group:14} {k:34} n={len(cs):<4} median {100 * statistics.median(c.err for c in cs):5.1f}"
            )
    lo, hi = RATIO_TARGET
    print(
        "-- LOPO predicted/measured time ratio per GPU (median; analytical, transferred, ddp-multinode; "
        f"target {lo}-{hi})"
    )
    ratios = gpu_ratios(cases)
    for gpu, ratio in ratios.items():
        cs = [c for c in cases if c.group in TIME_GROUPS and c.row.chip == gpu]
        ana = [c.ratio for c in cs if c.group == "analytical"]
        print(
            f"  {gpu:12} all {ratio:.2f} (n={len(cs)})"
            + (f"  analytical {statistics.median(ana):.2f} (n={len(ana)})" if ana else "")
            + ("  OUTSIDE" if outside_ratio(ratio) else "")
        )
    outside = [gpu for gpu, ratio in ratios.items() if outside_ratio(ratio)]
    print(f"  outside {lo}-{hi}: {', '.join(outside) if outside else 'none'}")


def missed_targets(cases: list[LopoCase], coverage_pct: float | None) -> list[str]:
    """Issue 34's targets (module docstring) that the LOPO validation ``cases`` miss, in words;
    a group without a case misses its target (nothing measured is nothing met)."""
    missed = []
    for g, target in MEDIAN_TARGETS.items():
        figures = error_figures([c for c in cases if c.group == g])
        if figures is None:
            missed.append(f"{g}: no case")
        elif figures["median_pct"] > target:
            missed.append(f"{g} median {figures['median_pct']:.1f}% > {target:g}%")
    lo, hi = COVERAGE_TARGET
    if coverage_pct is None:
        missed.append("coverage: no banded row")
    elif not lo <= coverage_pct <= hi:
        missed.append(f"coverage {coverage_pct:.1f}% outside {lo:g}-{hi:g}%")
    outside = [f"{gpu} {r:.2f}" for gpu, r in gpu_ratios(cases).items() if outside_ratio(r)]
    if outside:
        missed.append(f"ratio outside {RATIO_TARGET[0]}-{RATIO_TARGET[1]}: {', '.join(outside)}")
    return missed


def target_line(missed: list[str]) -> str:
    medians = ", ".join(f"{g} ≤ {t:g} %" for g, t in MEDIAN_TARGETS.items())
    lo, hi = COVERAGE_TARGET
    head = (
        f"targets (leave one publisher out: median {medians}; coverage p10-p90 {lo:g}-{hi:g} %; "
        f"predicted/measured {RATIO_TARGET[0]}-{RATIO_TARGET[1]} per GPU):"
    )
    return f"{head} NOT met ({'; '.join(missed)})" if missed else f"{head} met"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=1, help="processes for tracing models and for the folds")
    ap.add_argument("--rows", action="store_true", help="print every LOPO validation case")
    ap.add_argument(
        "--dump", type=Path, help="write the LOPO validation cases (no frozen test row) to this JSON file"
    )
    args = ap.parse_args()
    lopo = Lopo(args.jobs)
    print(unmapped_line(lopo.rows, lopo.models))
    lopo.load_traces()
    cases, test = lopo.run()
    coverage_pct = lopo_report(lopo, cases, test)
    if args.rows:
        print("\n== LOPO cases (validation publishers only)")
        for c in cases:
            print(
                f"  {c.group:14} {c.publisher:32} {c.row.model[:28]:28} {c.row.chip:10} {c.row.precision:5} "
                f"b={c.row.per_gpu_batch:<5} meas {c.measured:.4g} pred {c.predicted:.4g} {c.detail}"
            )
    if args.dump:
        args.dump.write_text(json.dumps([lopo_case_dict(c) for c in cases], indent=0) + "\n")
    missed = missed_targets(cases, coverage_pct)
    print(target_line(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
