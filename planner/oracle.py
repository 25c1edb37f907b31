"""The performance oracle the solver plans with: ``perf(config, global_batch) -> Estimate``.

It joins the pure models for a cluster of catalog instances:

* **Compute per GPU** — :class:`planner.perf.transfer.TransferModel` predicts a worker's phase
  times on GPU ``m`` at per-GPU batch ``b``: *measured* when the profile was taken on ``m``,
  *transferred* (measured × roofline ratio) from a profile on another GPU, else *analytical*
  (roofline alone; a CPU profile cannot be scaled to a GPU, its spreads are kept).
* **Memory** — the largest batch that fits on ``m``::

      b_max(m) = floor((0.92·mem_m − static − 1 GiB) / act)

  with ``static`` = parameters + gradients + optimizer state (+ buffers) and ``act`` the
  activation bytes autograd saves per sample (counted on the meta device with the agent's
  saved-tensor meter, so it is the real figure for this model, not a guess). 8 % of the card
  and 1 GiB stay free for the CUDA context, NCCL buffers and the allocator's fragmentation.
* **Batch split** — all GPUs of one type get the same batch (±1); across types the global batch
  ``G`` is split so that the slowest worker is as fast as possible: the smallest time ``τ`` with
  ``Σ_i W_i·cap_i(τ) ≥ G`` (``W_i`` workers of type ``i``, ``cap_i(τ)`` the largest batch type ``i``
  runs within ``τ``), found by bisection.
* **Communication** — every DDP bucket's all-reduce on the whole cluster (the model's real
  bucket sizes), from the NCCL model :class:`planner.perf.nccl.LearnedComm` by default: the
  NCCL-shaped prior (ring/tree/NVLS, LL/LL128/Simple over NVLink/PCIe inside a node and EFA or
  TCP between nodes) times the correction learned on published curves and users' EC2 sweeps,
  p50 and p90.  The topology is the cluster's (:meth:`planner.perf.nccl.Topology.from_cluster`:
  the slowest node NIC of a mix between nodes, EFA only if every node has it).  A
  :class:`planner.perf.comm.CommModel` fitted on a measured comm profile of this cluster may
  be passed instead (its ring prior over the slowest link).
* **Iteration** — :func:`planner.simulator.simulate_iteration` (buckets overlap backward, the
  slowest worker gates each bucket) with a small seeded Monte-Carlo for p50/p90.  On more than
  one GPU backward is slowed by ``1 + κ`` (``nccl_slowdown`` of the compute model: NCCL kernels
  take SMs from backward while they overlap it) and each step pays the shared host's input
  pipeline, ``δ · s`` ns per input element of its batch (``input_ns_per_element``), where
  ``s = REF_THREADS_PER_GPU / (vCPUs / GPUs)`` of the node (:func:`host_share`): the same
  per-sample host work is spread over more threads on a node with more CPUs per GPU (a DGX A100
  has 32 threads per GPU, a DGX-1 10, a p4d.24xlarge 12).
* **Gradient accumulation** — with ``k = Workload.accumulation_steps`` micro-steps per optimizer
  step (each GPU runs its per-GPU batch ``k`` times, DDP's ``no_sync`` on all but the last), the
  all-reduces and the optimizer step run once per ``k`` micro-steps, and the figure is the mean
  micro-step (the global batch stays the samples of one micro-step over all GPUs)::

      T = ((k − 1) · t_local + T_sync) / k

  ``t_local`` the slowest worker's forward + backward (+ δ), ``T_sync`` the timeline above.
* **Input pipeline** — a node trains no faster than its data loaders feed it
  (:mod:`planner.input_pipeline`): ``(vCPUs - GPUs) x rate per vCPU`` samples/s, the rate measured
  by the profiler (``input_rate_per_vcpu``) or the default of the data kind (image or token
  input), an assumption the row states. The iteration takes at least the slowest node's batch
  over its ceiling; where that binds, the bottleneck is "input pipeline" with a type that has
  more vCPUs per GPU.

The oracle is pure: no ORM, no printing; callers build :class:`Workload` once per model (it
needs torch) and reuse it for every configuration the solver asks about.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.hardware import Cluster, GpuSpec
from planner.input_pipeline import InputPipeline
from planner.mix_bound import ceiling, mix_bound
from planner.perf.comm import CommModel, CommQuery
from planner.perf.compute import BucketSpec, ComputeModel, ComputeRangeError, PhaseSpread, PhaseTimes
from planner.perf.nccl import (
    LearnedComm,
    Topology,
    efa_interfaces,
    gpudirect_rdma,
    least_correction,
    network_cards,
    prior_us_nodes,
    shipped_model,
)
from planner.perf.transfer import TransferModel, WorkloadCost
from planner.simulator import (
    COMM_BOUND_SHARE,
    Z90,
    CommTime,
    SimulationResult,
    WorkerLoad,
    simulate_iteration,
    timeline,
)
from planner.solver import Config, Estimate
from planner.validated import ModelError, row_model_error

if TYPE_CHECKING:
    from planner.offers import Candidate

GiB = 1024**3
#: Hardware threads per GPU at which ``δ`` is stated (a DGX-1: 80 threads over 8 GPUs).
REF_THREADS_PER_GPU = 10.0
MEMORY_USABLE = 0.92
MEMORY_RESERVED = 1 * GiB
MAX_BATCH_CAP = 1 << 16


def host_share(candidate: Candidate) -> float:
    """``REF_THREADS_PER_GPU / (vCPUs per GPU)`` of a node: how much of ``δ`` (the shared host's
    per-element input cost, stated at a DGX-1's 10 threads per GPU) one step pays there; 1 when
    the vCPUs are not known."""
    if candidate.vcpus <= 0 or candidate.gpus_per_node <= 0:
        return 1.0
    return REF_THREADS_PER_GPU * candidate.gpus_per_node / candidate.vcpus


def _cluster_key(cluster: Cluster) -> tuple[Any, ...]:
    """Everything but the node count that the comm model reads of a cluster: the memo key of its
    all-reduces and comm floors (with the node count, and the bucket sizes for the all-reduces)."""
    return (cluster.gpus_per_node, cluster.network_gbps, cluster.efa, cluster.device, _net_key(cluster))


def _net_key(cluster: Cluster) -> tuple[bool, int, int]:
    """What the comm model reads of a cluster's instance type(s) beyond its link, EFA and GPU
    (:meth:`planner.perf.nccl.Topology.from_cluster`): GPUDirect RDMA, network cards, EFA
    interfaces.  Two clusters alike in the rest (a g5.48xlarge alone, host-staged, and a mix of it
    with a p4d, counted GPUDirect) must not share a memoised all-reduce."""
    it = cluster.instance_type or ""
    return (gpudirect_rdma(it), network_cards(it), efa_interfaces(it) if cluster.efa else 0)


@dataclass(frozen=True)
class CommSource:
    """Per plan row: the comm model (``learned``, ``prior``, ``measured``, ``ring prior`` or
    ``none``), the train points near this topology, and a sentence for the page."""

    source: str
    near_points: int
    detail: str


@dataclass(frozen=True)
class Workload:
    """What the oracle knows about one model (built once, reused for every cluster)."""

    model_spec: str
    input_shape: tuple[int, ...]
    precision: str
    cost: WorkloadCost
    bucket_sizes: tuple[int, ...]
    static_bytes: int
    activation_bytes_per_sample: float
    measured: ComputeModel | None = None
    measured_on: str | None = None
    default_spread: PhaseSpread = field(default_factory=lambda: PhaseSpread(0.03, 0.03, 0.03))
    #: gradient accumulation: micro-steps per optimizer step (``k``; 1: none).  Like the measured
    #: model it is the caller's, per request, and not part of the cached form (:meth:`to_dict`);
    #: :meth:`Oracle._estimate` says what it changes.
    accumulation_steps: int = 1

    def to_dict(self) -> dict[str, Any]:
        """The measured model is not part of the cached form (it is the caller's, per request)."""
        return {
            "version": 1,
            "model_spec": self.model_spec,
            "input_shape": list(self.input_shape),
            "precision": self.precision,
            "cost": self.cost.to_dict(),
            "bucket_sizes": list(self.bucket_sizes),
            "static_bytes": self.static_bytes,
            "activation_bytes_per_sample": self.activation_bytes_per_sample,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Workload:
        """Read :meth:`to_dict`'s form, e.g. the ``workload`` an agent posted with its profile
        (untrusted: ``check_trace`` raises ``ValueError`` on anything malformed)."""
        from workload.cost import check_trace

        doc = check_trace(doc)
        return cls(
            model_spec=doc["model_spec"],
            input_shape=tuple(doc["input_shape"]),
            precision=doc["precision"],
            cost=WorkloadCost.from_dict(doc["cost"]),
            bucket_sizes=tuple(doc["bucket_sizes"]),
            static_bytes=int(doc["static_bytes"]),
            activation_bytes_per_sample=float(doc["activation_bytes_per_sample"]),
        )

    def bucket_specs(self, batch: int) -> tuple[BucketSpec, ...]:
        """Buckets with ready fractions: profiled ones when there is a profile, else bucket k is
        ready once backward has produced the gradients of buckets 0..k, taking backward time
        as proportional to gradient bytes (adequate for the layer-by-layer models DDP serves)."""
        if self.measured is not None:
            profiled = self.measured.buckets(batch)
            if profiled:
                return profiled
        total = float(sum(self.bucket_sizes)) or 1.0
        out, done = [], 0.0
        for size in self.bucket_sizes:
            done += size
            out.append(BucketSpec(int(size), min(1.0, done / total)))
        return tuple(out)


@dataclass
class Oracle:
    """``oracle(config, global_batch)`` for :func:`planner.solver.solve` (memoised)."""

    workload: Workload
    transfer: TransferModel
    specs: Mapping[str, GpuSpec]
    comm: CommModel | LearnedComm = field(default_factory=shipped_model)
    # 0: deterministic timeline with an analytic p90 (fast, for the search); > 0: Monte-Carlo
    # draws (for re-verifying the plans the solver chose).
    samples: int = 0
    seed: int = 0
    placement_group: bool = True
    # samples/s one data-loader worker prepares on one vCPU (profiler/agent/dataloader.py);
    # None: the default of the workload's data kind (planner.input_pipeline)
    input_rate_per_vcpu: float | None = None
    # the validated model error per prediction source (planner.validated.load_model_errors):
    # each estimate carries its source's, for the p10/p50/p90 band; empty: simulator spread only
    model_errors: Mapping[str, ModelError] = field(default_factory=dict)
    _phase_cache: dict[tuple[str, int], PhaseTimes | None] = field(default_factory=dict, repr=False)
    _max_cache: dict[str, int] = field(default_factory=dict, repr=False)
    #: per GPU model, step_ms by batch (index = batch; NaN until asked): split's hot loop reads a
    #: list instead of two dict lookups and a dataclass property per probe
    _step_tabs: dict[str, list[float]] = field(default_factory=dict, repr=False)
    _comm_cache: dict[tuple[Any, ...], list[CommTime]] = field(default_factory=dict, repr=False)
    # comm floors (ms) by the fields _comm keys on: many type sets share one slowest cluster
    _floor_cache: dict[tuple[Any, ...], float] = field(default_factory=dict, repr=False)
    calls: int = 0

    @property
    def accumulation(self) -> int:
        """``k``, the workload's micro-steps per optimizer step (at least 1)."""
        return max(1, int(self.workload.accumulation_steps))

    @property
    def pipeline(self) -> InputPipeline | None:
        return InputPipeline.for_workload(self.workload.input_shape, self.input_rate_per_vcpu)

    def resampled(self, samples: int, seed: int = 0) -> Oracle:
        """This oracle (workload, models, placement, input rate: every setting) drawing
        ``samples`` Monte-Carlo timelines, with caches of its own: a re-check of the search's
        plans must predict the same cluster, only with draws."""
        settings = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.init and not f.name.startswith("_") and f.name != "calls"
        }
        return Oracle(**{**settings, "samples": samples, "seed": seed})

    # --- per GPU ------------------------------------------------------------------------
    def gpu(self, model: str) -> GpuSpec:
        return self.transfer.spec(model)

    def max_batch(self, model: str) -> int:
        """Largest per-GPU batch that fits in ``model``'s memory (0: the model does not fit)."""
        if model not in self._max_cache:
            spec = self.gpu(model)
            mem = (spec.memory_gib or 0.0) * GiB
            free = MEMORY_USABLE * mem - self.workload.static_bytes - MEMORY_RESERVED
            act = max(self.workload.activation_bytes_per_sample, 1.0)
            self._max_cache[model] = max(0, min(MAX_BATCH_CAP, int(free // act)))
        return self._max_cache[model]

    def phases(self, model: str, batch: int) -> PhaseTimes | None:
        key = (model, batch)
        if key not in self._phase_cache:
            self._phase_cache[key] = self._predict_phases(model, batch)
        return self._phase_cache[key]

    def _predict_phases(self, model: str, batch: int) -> PhaseTimes | None:
        if batch < 1 or batch > self.max_batch(model):
            return None
        w = self.workload
        measured = None
        if w.measured is not None:
            try:
                measured = w.measured.predict(batch)
            except ComputeRangeError:
                measured = None
        try:
            t = self.transfer.predict(
                w.cost, batch, model, measured=measured, measured_on=w.measured_on, precision=w.precision
            )
        except (KeyError, ValueError):  # no (usable) datasheet for this GPU: it cannot be planned for
            return None
        return self._default_spread(t, batch)

    def _default_spread(self, t: PhaseTimes, batch: int) -> PhaseTimes:
        """``t`` with the workload's default spread where the model gave none."""
        if t.spread != PhaseSpread():
            return t
        return PhaseTimes(
            t.forward,
            t.backward,
            t.optimizer,
            spread=self.workload.default_spread,
            fit_error=t.fit_error,
            source=t.source,
            batch_size=batch,
        )

    def phases_many(self, model: str, batches: Sequence[int]) -> None:
        """Predict :meth:`phases` of ``model`` at every batch of ``batches`` not asked yet in one
        pass (:meth:`planner.perf.transfer.TransferModel.analytical_many`, the same figures to
        the bit) and keep them where :meth:`phases` looks.  Only for an unprofiled workload (its
        times are the analytical ones); a profiled one is asked a batch at a time."""
        if self.workload.measured is not None:
            return
        todo = [int(b) for b in batches if (model, int(b)) not in self._phase_cache]
        if not todo:
            return
        try:
            cap = self.max_batch(model)
        except KeyError:
            return  # asked one at a time, as before
        runs = sorted({b for b in todo if 1 <= b <= cap})
        for b in todo:
            if not 1 <= b <= cap:
                self._phase_cache[(model, b)] = None
        if not runs:
            return
        w = self.workload
        try:
            times = self.transfer.analytical_many(w.cost, runs, model, w.precision)
        except (KeyError, ValueError):  # no (usable) datasheet for this GPU: it cannot be planned for
            for b in runs:
                self._phase_cache[(model, b)] = None
            return
        for b, t in zip(runs, times, strict=True):
            self._phase_cache[(model, b)] = self._default_spread(t, b)

    def step_ms(self, model: str, batch: int) -> float:
        t = self.phases(model, batch)
        return math.inf if t is None else t.total

    def _step_table(self, model: str) -> list[float]:
        """``step_ms(model, b)`` at index ``b`` for ``b = 0..max_batch`` (NaN: not asked yet,
        filled by :meth:`_step_at`)."""
        tab = self._step_tabs.get(model)
        if tab is None:
            tab = self._step_tabs[model] = [math.nan] * (self.max_batch(model) + 1)
        return tab

    def _step_at(self, model: str, tab: list[float], batch: int) -> float:
        """``step_ms(model, batch)`` through ``model``'s table (``batch <= max_batch``)."""
        v = tab[batch]
        if v != v:  # NaN: first time
            v = tab[batch] = self.step_ms(model, batch)
        return v

    # --- batch split --------------------------------------------------------------------
    def split(self, groups: Sequence[tuple[str, int]], global_batch: int) -> tuple[int, ...] | None:
        """Per-GPU batch of each ``(gpu model, workers)`` group (the larger of the ±1 split)."""
        workers = sum(n for _, n in groups)
        if workers == 0 or global_batch < workers:
            return None
        if len({m for m, _ in groups}) == 1:
            b = math.ceil(global_batch / workers)
            return (b,) * len(groups) if b <= self.max_batch(groups[0][0]) else None
        caps = [self.max_batch(m) for m, _ in groups]
        if sum(c * n for c, (_, n) in zip(caps, groups, strict=True)) < global_batch:
            return None
        models = [m for m, _ in groups]
        tabs = [self._step_table(m) for m in models]
        at = self._step_at
        lo, hi = 0.0, max(at(m, t, c) for m, t, c in zip(models, tabs, caps, strict=True) if c > 0)
        # cap_i(τ) is monotone in τ, so while τ bisects (lo, hi] each group's batch stays within
        # [cap_i(lo), cap_i(hi)]: the inner searches shrink to nothing after a few rounds.
        at_lo = [self._cap_at(m, lo, c, 0, t) for m, c, t in zip(models, caps, tabs, strict=True)]
        at_hi = [
            self._cap_at(m, hi, c, at_lo[i], t)
            for i, (m, c, t) in enumerate(zip(models, caps, tabs, strict=True))
        ]
        per_group = [n for _, n in groups]
        rng = range(len(groups))
        for _ in range(40):
            if at_lo == at_hi:
                break  # every later round keeps at_hi as it is: the answer is known
            mid = (lo + hi) / 2
            at_mid = at_lo[:]
            total = 0
            for i in rng:
                a, b = at_lo[i], at_hi[i]
                if a != b:
                    # _cap_at(m, mid, b, a); with b == a + 1 its one probe is step(b) <= mid
                    if b == a + 1:
                        if at(models[i], tabs[i], b) <= mid:
                            a = b
                    else:
                        a = self._cap_at(models[i], mid, b, a, tabs[i])
                    at_mid[i] = a
                total += per_group[i] * a
            if total >= global_batch:
                hi, at_hi = mid, at_mid
            else:
                lo, at_lo = mid, at_mid
        batches = list(at_hi)
        # Give back what exceeds G from the group whose last sample costs most (stay >= 1).
        surplus = sum(b * n for b, (_, n) in zip(batches, groups, strict=True)) - global_batch
        while surplus > 0:
            i = max(
                (k for k in range(len(groups)) if batches[k] > 1),
                key=lambda k: at(models[k], tabs[k], batches[k]),
            )
            batches[i] -= 1
            surplus -= groups[i][1]
        return tuple(max(1, b) for b in batches)

    def _cap_at(
        self, model: str, tau: float, cap: int, floor: int = 0, tab: list[float] | None = None
    ) -> int:
        """Largest batch in ``[floor, cap]`` whose step takes at most ``tau`` (``floor`` when none
        above it does; the caller knows ``step(floor) <= tau`` or ``floor == 0``)."""
        if tab is None:
            tab = self._step_table(model)
        at = self._step_at
        lo, hi = floor, cap
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if at(model, tab, mid) <= tau:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # --- the oracle ---------------------------------------------------------------------
    def cluster(self, config: Config) -> Cluster:
        nodes = sum(n for _, n in config)
        gpus_per_node = min(c.gpus_per_node for c, _ in config)
        slowest = min(config, key=lambda cn: self.gpu_speed(cn[0].gpu_model))[0]
        return Cluster(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            network_gbps=min(c.network_gbps for c, _ in config) if nodes > 1 else None,
            efa=all(c.efa for c, _ in config),
            placement_group=self.placement_group,
            instance_type="+".join(sorted({c.instance_type for c, _ in config})),
            device=slowest.gpu_model,
            gpu=self.gpu(slowest.gpu_model),
        )

    def gpu_speed(self, model: str) -> float:
        """Samples/ms of one GPU at batch 1 (0 when unknown): which GPU of a mix is slowest (its
        cluster's ``device``: the first of the slowest in config order, :meth:`cluster`)."""
        t = self.step_ms(model, 1)
        return 0.0 if math.isinf(t) else 1.0 / t

    def max_workers(self, global_batch: int) -> int:
        """Most GPUs a configuration can have at ``global_batch``: every worker needs a sample
        (:meth:`split` returns ``None`` beyond it), whatever the mix."""
        return int(global_batch)

    def comm_floor_ms(self, members: Sequence[Candidate], nodes: np.ndarray) -> np.ndarray:
        """:meth:`_sync_comm_floor_ms` over ``k`` (:attr:`accumulation`): with gradient
        accumulation one micro-step takes at least ``T_sync / k`` (:func:`_accumulated`), and
        ``T_sync`` at least the sum of its all-reduces."""
        return self._sync_comm_floor_ms(members, nodes) / self.accumulation

    def _sync_comm_floor_ms(self, members: Sequence[Candidate], nodes: np.ndarray) -> np.ndarray:
        """For every total node count of ``nodes`` (numpy), a lower bound (ms) on the iteration of
        any configuration of that many nodes made of ``members`` (each with at least one node):
        the sum of its all-reduces.  The cluster a mix runs on does not depend on the counts
        (fewest GPUs per node, slowest link, EFA only if all have it, the slowest GPU), its
        all-reduces run one after another, and the deterministic timeline's iteration is
        ``max(backward end, last all-reduce end) + tail`` (the input floor only lengthens it), so
        ``global_batch / floor`` bounds the throughput of the mix at any batch.

        0 where it cannot say: one GPU, fewer nodes than members, a GPU without a datasheet, and
        the Monte-Carlo oracle (``samples > 0``: its median is not the deterministic timeline)."""
        counts = np.asarray(nodes, dtype=np.int64)
        out = np.zeros(counts.shape, dtype=float)
        if self.samples or not members:
            return out
        specs = self._floor_specs()
        k = len(members)
        base = None  # the mix's cluster on its fewest nodes; only the node count changes
        for i, n in enumerate(counts.tolist()):
            if n < max(k, 1):
                continue
            if n == 1 or base is None:
                config = tuple((c, 1) for c in members[:-1]) + ((members[-1], n - k + 1),)
                try:
                    cluster = self.cluster(config)
                except (KeyError, TypeError, ValueError):  # no datasheet, no network figure
                    continue
                if n == 1:
                    if cluster.world_size > 1:
                        out[i] = min(sum(c.p50_ms for c in self._comm(cluster, s)) for s in specs)
                    continue
                base = cluster
            out[i] = self._floor_at(base, n, specs)
        return out

    def _floor_specs(self) -> list[tuple[BucketSpec, ...]]:
        """Every bucket layout a configuration's first worker may get (the workload's, and the
        profiled layouts per batch): :meth:`comm_floor_ms` takes the least sum over them."""
        layouts = {tuple(int(s) for s in self.workload.bucket_sizes)}
        for layout in getattr(self.workload.measured, "buckets_by_batch", {}).values():
            layouts.add(tuple(int(b.size_bytes) for b in layout))
        return [tuple(BucketSpec(s, 1.0) for s in layout) for layout in layouts]

    def _floor_at(self, base: Cluster, n: int, specs: Sequence[tuple[BucketSpec, ...]]) -> float:
        """The comm floor of ``base`` (a mix's cluster, several nodes) on ``n`` nodes, memoised
        by the fields the comm model keys on."""
        key = (n, *_cluster_key(base))
        hit = self._floor_cache.get(key)
        if hit is None:
            cluster = dataclasses.replace(base, nodes=n)
            hit = self._floor_cache[key] = min(sum(c.p50_ms for c in self._comm(cluster, s)) for s in specs)
        return hit

    def comm_floor_prefix_min(self, members: Sequence[Candidate], upto: int) -> np.ndarray:
        """:meth:`_sync_floor_prefix_min` over ``k`` (:attr:`accumulation`), as :meth:`comm_floor_ms`
        (a common positive factor keeps every minimum where it was)."""
        return self._sync_floor_prefix_min(members, upto) / self.accumulation

    def _sync_floor_prefix_min(self, members: Sequence[Candidate], upto: int) -> np.ndarray:
        """``m[n]`` for ``n = 0..upto``: the least :meth:`_sync_comm_floor_ms` of ``members`` over the
        totals ``k..n`` (``k`` members; NaN below ``k``; 0 once the oracle cannot say for one).

        Not every total is asked.  With the learned comm model each all-reduce is the NCCL prior
        times ``exp(r)``, ``r`` the correction clipped to ``±clip``, so at least the prior times
        ``exp(r_min)`` (``r_min``: the trees' least output for that message size and topology at
        any node count, :func:`planner.perf.nccl.least_correction`);
        and the prior never falls as the node count grows (``nodes >= 2``: every algorithm's
        latency grows with the nodes and its bandwidth does not, the per-node network does not
        depend on them; ``tests/planner/test_nccl.py`` checks it on the catalog's clusters).  So
        once ``exp(r_min)`` times the prior's floor at ``n`` reaches the least floor found, no
        later total can go below it, and the rest is that minimum."""
        k = len(members)
        out = np.full(int(upto) + 1, np.nan)
        if upto < k:
            return out
        totals = np.arange(k, int(upto) + 1)
        if self.samples or not isinstance(self.comm, LearnedComm) or k < 2:
            floors = np.asarray(self._sync_comm_floor_ms(members, totals), dtype=float)
            out[k:] = np.minimum.accumulate(np.where(floors > 0, floors, -np.inf))
            return np.where(out == -np.inf, 0.0, out)
        specs = self._floor_specs()
        try:
            base = self.cluster(tuple((c, 1) for c in members))  # on k nodes; only n changes
        except (KeyError, TypeError, ValueError):  # no datasheet, no network figure: cannot say
            out[k:] = 0.0
            return out
        topo = Topology.from_cluster(base)
        comm = self.comm
        # per bucket size, the least correction over every node count of this topology
        factor = {
            b.size_bytes: math.exp(least_correction(comm, b.size_bytes, topo)) for sp in specs for b in sp
        }
        best = math.inf
        start, step = k, 8
        while start <= upto:
            # a run of totals at a time: their priors and all-reduces in one pass each
            # (prior_us_nodes, _comm_fill: the same figures as one total at a time)
            chunk = list(range(start, min(start + step, int(upto) + 1)))
            start, step = chunk[-1] + 1, step * 2
            lows = np.full(len(chunk), math.inf)
            for sp in specs:
                total: Any = 0
                for b in sp:
                    prior = prior_us_nodes(b.size_bytes, topo, chunk, comm.params)
                    total = total + factor[b.size_bytes] * prior
                lows = np.minimum(lows, total)
            chunk_floors = self._chunk_floors(base, topo, chunk, specs)
            # (prior_us_nodes is in µs, the floors in ms)
            for n, low in zip(chunk, (lows / 1e3).tolist(), strict=True):
                if low * (1 - 1e-12) >= best:
                    out[n:] = best  # the prior only grows from here: no later total goes below best
                    return out
                best = min(best, chunk_floors[n])
                out[n] = best
        return out

    def _chunk_floors(
        self, base: Cluster, topo: Topology, chunk: Sequence[int], specs: Sequence[tuple[BucketSpec, ...]]
    ) -> dict[int, float]:
        """:meth:`_floor_at` of ``base`` on every count of ``chunk``, to the bit, the missing ones
        from the p50s of all their all-reduces in one pass (:meth:`LearnedComm.estimate_nodes`
        without p90: a floor needs the p50 only) or the memoised all-reduces a plan already asked."""
        assert isinstance(self.comm, LearnedComm)
        fixed = _cluster_key(base)
        missing = [n for n in chunk if (n, *fixed) not in self._floor_cache]
        if missing:
            least = dict.fromkeys(missing, math.inf)
            for sp in specs:
                sizes = tuple(b.size_bytes for b in sp)
                distinct = sorted(set(sizes))
                p50, _ = self.comm.estimate_nodes(distinct, topo, missing, with_p90=False)
                ms = (p50 / 1e3).tolist()  # µs → ms, as _comm divides
                row = [distinct.index(s) for s in sizes]
                for i, n in enumerate(missing):
                    memo = self._comm_cache.get((n, *fixed, sizes))
                    values = [c.p50_ms for c in memo] if memo is not None else [ms[r][i] for r in row]
                    least[n] = min(least[n], sum(values))
            for n in missing:
                self._floor_cache[(n, *fixed)] = least[n]
        return {n: self._floor_cache[(n, *fixed)] for n in chunk}

    def throughput_curve(
        self, candidate: Candidate, counts: Sequence[int], global_batch: int
    ) -> np.ndarray | None:
        """``self(((candidate, n),), global_batch).throughput_sps`` for every ``n`` of ``counts``
        at once (0 where that is ``None``), to the bit: the same split, phase adjustments,
        all-reduces and deterministic timeline (:func:`planner.simulator.timeline` with one
        worker: bucket ``k`` starts at ``max(opt + fwd + f_k·bwd, end of bucket k-1)``) and the
        loaders' floor, over arrays.  The plan search asks hundreds of counts of one type; one
        call at a time costs ~0.2 ms.  ``None`` where this path does not apply (the Monte-Carlo
        oracle, a profiled workload's per-batch buckets, a comm model other than the learned
        one): ask the configurations one by one."""
        if (
            self.samples
            or self.workload.measured is not None
            or not isinstance(self.comm, LearnedComm)
            or self.accumulation > 1  # _estimate's accumulated mean (_accumulated) is not mirrored here
        ):
            return None
        ns = np.asarray(counts, dtype=np.int64)
        out = np.zeros(len(ns))
        model, gpn = candidate.gpu_model, int(candidate.gpus_per_node)
        g = int(global_batch)
        try:
            cap = self.max_batch(model)
            base = self.cluster(((candidate, 1),))
            multi_base = self.cluster(((candidate, 2),))
        except (KeyError, TypeError, ValueError):
            return None
        workers = ns * gpn
        ok = (workers >= 1) & (workers <= g)
        # split()'s ceil(G / workers), in integers (the same for any G and workers below 2**26)
        batch = np.where(ok, -(-g // np.maximum(workers, 1)), 0)
        ok &= batch <= cap
        opt, fwd, bwd, ok = self._adjusted_phases(candidate, batch, workers, ok)
        sizes = tuple(int(s) for s in self.workload.bucket_sizes)
        specs = self.workload.bucket_specs(1)  # the workload's own layout: the same at every batch
        fractions = [b.ready_fraction for b in specs]
        comm = np.zeros((len(ns), len(specs)))
        if gpn > 1 and np.any(ok & (ns == 1)):
            comm[ns == 1] = [c.p50_ms for c in self._comm(base, specs)]
        several = np.flatnonzero(ok & (ns >= 2))
        if len(several):
            self._comm_fill(multi_base, ns[several].tolist(), sizes)
            fixed = (*_cluster_key(multi_base), sizes)
            comm[several] = [[c.p50_ms for c in self._comm_cache[(n, *fixed)]] for n in ns[several].tolist()]
        starts = opt + fwd
        ends = starts + bwd
        prev = np.zeros(len(ns))
        for k, f in enumerate(fractions):
            prev = np.maximum(starts + f * bwd, prev) + comm[:, k]
        p50 = np.maximum(ends, prev) + 0.0  # + the tail (0): as timeline() adds it
        pipeline = self.pipeline
        if pipeline is not None:
            input_ms = batch * gpn / pipeline.ceiling(candidate.vcpus, gpn) * 1e3
            p50 = np.where(input_ms > p50, input_ms, p50)
        processed = np.minimum(batch * workers, g)
        with np.errstate(divide="ignore", invalid="ignore"):
            thr = processed / (p50 / 1e3)
        good = ok & (thr > 0) & np.isfinite(thr)
        out[good] = thr[good]
        return out

    # -- what the mix bound (planner.mix_bound.BoundOracle) asks, besides phases and clusters --

    def multi_gpu_terms(self) -> tuple[float, float]:
        """``(κ, δ)`` of the compute model (:meth:`TransferModel.multi_gpu_terms`): the backward
        slowdown and the ns per input element that :meth:`_estimate` applies on more than one GPU."""
        return self.transfer.multi_gpu_terms()

    def host_share_of(self, candidate: Candidate) -> float:
        """The share of ``δ`` one step pays on ``candidate``'s node (:func:`host_share`)."""
        return host_share(candidate)

    def input_elements(self) -> int:
        """Elements of one input sample (``prod(input_shape)``; 0 without a shape)."""
        return math.prod(self.workload.input_shape) if self.workload.input_shape else 0

    def profiled_layout(self) -> bool:
        """Whether the phases and bucket layout come from a profile (the comm floor is then the
        layout-free :meth:`comm_floor_ms`)."""
        return self.workload.measured is not None

    def bucket_ready_fractions(self) -> list[float]:
        """Per bucket at batch 1: the share of backward done when its gradients are ready."""
        return [b.ready_fraction for b in self.workload.bucket_specs(1)]

    def allreduce_p50_ms(self, cluster: Cluster) -> list[float]:
        """The median all-reduce time (ms) of each bucket at batch 1 on ``cluster`` (:meth:`_comm`)."""
        return [c.p50_ms for c in self._comm(cluster, self.workload.bucket_specs(1))]

    def mix_throughput_bound(
        self, members: Sequence[Candidate], counts: Sequence[np.ndarray], grid: Sequence[int]
    ) -> np.ndarray:
        """An upper bound on ``max_G self(config, G).throughput_sps`` over ``grid`` for every count
        vector of a mix of the distinct types ``members`` (numpy): :mod:`planner.mix_bound`;
        ``inf`` (no bound) with gradient accumulation, whose mean micro-step that bound does not
        follow (:func:`_accumulated`)."""
        if self.accumulation > 1:
            return np.full(len(counts[0]) if len(counts) else 0, np.inf)
        return np.asarray(mix_bound(self)(members, counts, grid), dtype=float)

    def mix_ceiling_terms(self, candidate: Candidate, gmax: int) -> tuple[float, float, float] | None:
        """One instance type's terms of the count-free ceiling on :meth:`mix_throughput_bound`
        (:func:`planner.mix_bound.ceiling`); ``None`` where it cannot say (gradient accumulation
        among them, as :meth:`mix_throughput_bound`)."""
        if self.accumulation > 1:
            return None
        return mix_bound(self).ceiling_terms(candidate, gmax)

    @staticmethod
    def mix_ceiling(first_ms: Any, paced_ms: Any, beta: Any, floor_ms: Any, gmax: int) -> np.ndarray:
        """The count-free ceiling on :meth:`mix_throughput_bound` of mixes whose members' largest
        terms (:meth:`mix_ceiling_terms`) and comm floor are these (numpy, many at once):
        :func:`planner.mix_bound.ceiling`."""
        return ceiling(first_ms, paced_ms, beta, floor_ms, gmax)

    def throughput_bound(self, candidate: Candidate, counts: np.ndarray, global_batch: int) -> np.ndarray:
        """An upper bound on ``self(((candidate, n),), global_batch).throughput_sps`` for every ``n``
        of ``counts`` at once (numpy), from compute alone; 0 exactly where the oracle returns
        ``None`` for lack of memory or of samples (``G < workers``, ``b > b_max``, no phase times).

        The timeline's iteration is ``max(backward end, last all-reduce end) + tail`` and the
        backward end is ``optimizer + forward + backward`` of the (κ-, δ-adjusted) worker, so
        ``G / (opt + fwd + bwd)`` computed with the same operations as :meth:`_estimate` bounds
        the throughput from above, without any comm-model call.  The phase times are memoised
        per ``(GPU, batch)``, so a whole curve costs one phase prediction per distinct batch."""
        counts = np.asarray(counts, dtype=np.int64)
        out = np.zeros(counts.shape, dtype=float)
        model, gpn = candidate.gpu_model, int(candidate.gpus_per_node)
        try:
            cap = self.max_batch(model)
        except KeyError:
            return out
        pipeline = self.pipeline
        ceiling = pipeline.ceiling(candidate.vcpus, gpn) if pipeline else math.inf
        g = int(global_batch)
        workers = counts * gpn
        ok = (workers >= 1) & (workers <= g)
        batch = np.where(ok, -(-g // np.maximum(workers, 1)), 0)
        ok &= batch <= cap
        opt, fwd, bwd, ok = self._adjusted_phases(candidate, batch, workers, ok)
        compute_ms = (opt + fwd) + bwd
        k = self.accumulation
        if k > 1:
            # _accumulated: T >= ((k-1)(fwd + bwd_raw) + opt + fwd + bwd) / k, bwd_raw before κ
            # (the k - 1 local micro-steps run without NCCL); a hair below it for rounding
            raw = bwd / (1.0 + np.where(workers > 1, self.multi_gpu_terms()[0], 0.0))
            compute_ms = (fwd + ((k - 1) * raw + opt + bwd) / k) * (1 - 1e-12)
        compute_ms = np.maximum(compute_ms, batch * gpn / ceiling * 1e3)  # the loaders' floor
        with np.errstate(divide="ignore"):
            out[ok] = np.where(compute_ms[ok] > 0, g / (compute_ms[ok] / 1e3), math.inf)
        return out

    def _adjusted_phases(
        self, candidate: Candidate, batch: np.ndarray, workers: np.ndarray, ok: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(optimizer, forward, backward, ok)`` per row of ``candidate`` at per-GPU ``batch``
        with ``workers`` GPUs in all, as :meth:`_estimate` adjusts them: backward ``× (1 + κ)`` and
        ``δ`` per input element on the optimizer on more than one GPU (the same operations);
        ``ok`` cleared where the GPU has no phase times at that batch."""
        model = candidate.gpu_model
        opt, fwd, bwd = (np.zeros(len(batch)) for _ in range(3))
        ok = ok.copy()
        rows = np.flatnonzero(ok)
        if not len(rows):
            return opt, fwd, bwd, ok
        kappa_all, input_all = self.multi_gpu_terms()
        elements = self.input_elements()
        share = host_share(candidate)
        b = batch[rows]
        uniq = np.unique(b)
        self.phases_many(model, uniq.tolist())
        table = np.zeros((len(uniq), 3))  # (optimizer, forward, backward) of each batch
        runs = np.ones(len(uniq), dtype=bool)
        for j, size in enumerate(uniq.tolist()):
            try:
                ph = self.phases(model, size)
            except KeyError:
                ph = None
            if ph is None:
                runs[j] = False
            else:
                table[j] = (ph.optimizer, ph.forward, ph.backward)
        at = np.searchsorted(uniq, b)
        multi = workers[rows] > 1
        # κ and δ only on more than one GPU; elsewhere (1 + 0) and + 0.0 leave the times as they are
        kappa = np.where(multi, kappa_all, 0.0)
        sync_ms = np.where(multi, input_all, 0.0) * share * elements * b / 1e6
        opt[rows] = table[at, 0] + sync_ms
        fwd[rows] = table[at, 1]
        bwd[rows] = table[at, 2] * (1 + kappa)
        ok[rows] = runs[at]
        return opt, fwd, bwd, ok

    def __call__(self, config: Config, global_batch: int) -> Estimate | None:
        self.calls += 1
        try:
            return self._estimate(config, global_batch)
        except KeyError:
            return None

    def _estimate(self, config: Config, global_batch: int) -> Estimate | None:
        groups = [(c.gpu_model, c.gpus_per_node * n) for c, n in config]
        batches = self.split(groups, global_batch)
        if batches is None:
            return None
        loads = []
        sources = []
        # NCCL's all-reduce kernels share the SMs with backward on a multi-GPU worker: backward
        # takes (1 + κ) longer there; and n GPUs share one host's input pipeline, which costs
        # each step δ ns per input element of its batch (decode, augment, copy) — both
        # calibrated on the corpus's 1–8 GPU rows; 0 if the compute model has none.
        multi = sum(n for _, n in groups) > 1
        kappa, input_ns = self.multi_gpu_terms() if multi else (0.0, 0.0)
        elements = self.input_elements()
        local_ms = 0.0  # the slowest worker's micro-step without all-reduce or optimizer
        for (model, _), (cand, _), b in zip(groups, config, batches, strict=True):
            phases = self.phases(model, b)
            if phases is None:
                return None
            sources.append(phases.source)
            sync_ms = input_ns * host_share(cand) * elements * b / 1e6
            local_ms = max(local_ms, phases.forward + phases.backward + sync_ms)
            if kappa or sync_ms:
                phases = dataclasses.replace(
                    phases, backward=phases.backward * (1 + kappa), optimizer=phases.optimizer + sync_ms
                )
            loads.append(WorkerLoad(phases, self.workload.bucket_specs(b), b, model))
        cluster = self.cluster(config)
        comm = self._comm(cluster, loads[0].buckets)
        if self.samples:
            sim = simulate_iteration(loads, comm, samples=self.samples, seed=self.seed)
            p50_ms, p90_ms = _p50_p90(sim)
            communication_bound = sim.bottleneck == "communication"
        else:  # the search: one deterministic timeline, p90 by the delta method
            det = timeline(loads, [c.p50_ms for c in comm])
            exposed = max(0.0, det.iteration_ms - det.backward_end_ms) if comm else 0.0
            p50_ms = det.iteration_ms
            p90_ms = _analytic_p90(p50_ms, exposed, loads, comm)
            communication_bound = exposed >= COMM_BOUND_SHARE * p50_ms
        k = self.accumulation
        if k > 1:
            det = timeline(loads, [c.p50_ms for c in comm])
            exposed = max(0.0, det.iteration_ms - det.backward_end_ms) if comm else 0.0
            p50_ms, p90_ms = _accumulated(p50_ms, local_ms, k), _accumulated(p90_ms, local_ms, k)
            communication_bound = exposed / k >= COMM_BOUND_SHARE * p50_ms
        per_node = tuple(b * c.gpus_per_node for (c, _), b in zip(config, batches, strict=True))
        processed = sum(b * w for (_, w), b in zip(groups, batches, strict=True))
        bottleneck = _bottleneck(communication_bound, cluster)
        fed = self._input_floor(config, per_node, p50_ms)
        if fed is not None:  # the loaders, not the GPUs, set the pace; the jitter stays
            input_ms, bottleneck = fed
            p90_ms, p50_ms = input_ms + (p90_ms - p50_ms), input_ms
        return Estimate(
            iter_time_s=p50_ms / 1e3,
            iter_time_p90_s=p90_ms / 1e3,
            throughput_sps=min(processed, global_batch) / (p50_ms / 1e3),
            bottleneck=bottleneck,
            per_node_batch=per_node,
            model_error=row_model_error(sources, sum(n for _, n in config), self.model_errors)
            if self.model_errors
            else None,
        )

    def _input_floor(
        self, config: Config, per_node: Sequence[int], iteration_ms: float
    ) -> tuple[float, str] | None:
        """``(ms, bottleneck text)`` when the slowest node's loaders need longer than
        ``iteration_ms`` for its batch, else None."""
        pipeline = self.pipeline
        if pipeline is None:
            return None
        floors = [
            (nb / pipeline.ceiling(c.vcpus, c.gpus_per_node) * 1e3, c, nb)
            for (c, _), nb in zip(config, per_node, strict=True)
        ]
        input_ms, c, nb = max(floors, key=lambda t: t[0])
        if not input_ms > iteration_ms:
            return None
        wanted = nb / (iteration_ms / 1e3)
        return input_ms, pipeline.describe(c.instance_type, c.vcpus, c.gpus_per_node, c.gpu_model, wanted)

    def _comm(self, cluster: Cluster, buckets: Sequence[BucketSpec]) -> list[CommTime]:
        if cluster.world_size <= 1:
            return [CommTime(0.0, 0.0) for _ in buckets]
        key = (cluster.nodes, *_cluster_key(cluster), tuple(b.size_bytes for b in buckets))
        if key not in self._comm_cache:
            if isinstance(self.comm, LearnedComm):
                topo = Topology.from_cluster(cluster)
                est = [self.comm.estimate(b.size_bytes, topo) for b in buckets]
                # µs → ms
                self._comm_cache[key] = [CommTime(e.p50_us / 1e3, e.p90_us / 1e3) for e in est]
            else:
                queries = [CommQuery.from_cluster(b.size_bytes, cluster) for b in buckets]
                self._comm_cache[key] = [
                    CommTime(p.p50_ms, p.p90_ms) for p in self.comm.predict_many(queries)
                ]
        return self._comm_cache[key]

    def _comm_fill(self, base: Cluster, nodes: Sequence[int], sizes: tuple[int, ...]) -> None:
        """:meth:`_comm`'s entries of ``base`` on each of ``nodes`` (every one at least 2) with
        buckets of ``sizes``, the missing ones computed over all counts at once
        (:meth:`planner.perf.nccl.LearnedComm.estimate_nodes`: the same figures to the bit)."""
        assert isinstance(self.comm, LearnedComm)
        fixed = (*_cluster_key(base), sizes)
        missing = [n for n in nodes if (n, *fixed) not in self._comm_cache]
        if not missing or not sizes:
            return
        topo = Topology.from_cluster(base)
        distinct = sorted(set(sizes))
        p50, p90 = self.comm.estimate_nodes(distinct, topo, missing)  # every bucket size at once
        row = [distinct.index(s) for s in sizes]
        ms50, ms90 = (p50 / 1e3).tolist(), (p90 / 1e3).tolist()  # µs → ms, as _comm divides
        for i, n in enumerate(missing):
            self._comm_cache[(n, *fixed)] = [CommTime(ms50[r][i], ms90[r][i]) for r in row]

    def comm_source(self, config: Config) -> CommSource:
        """Which comm model times this configuration's all-reduces, and on how many train points
        near its topology (same interconnect class, nodes and GPUs per node) it was fitted."""
        cluster = self.cluster(config)
        if cluster.world_size <= 1:
            return CommSource("none", 0, "one GPU: no all-reduce")
        if isinstance(self.comm, LearnedComm):
            topo = Topology.from_cluster(cluster)
            e = self.comm.estimate(1 << 22, topo)
            what = (
                "NCCL prior × correction learned on published and profiled curves"
                if e.source == "learned"
                else "NCCL prior (no learned correction)"
            )
            # how NCCL moves the bytes ("sockets over TCP", "EFA, 4 interfaces, GPUDirect RDMA"), with
            # the interconnect class the model keys on when the two differ
            link = (
                topo.transport
                if topo.transport == topo.interconnect
                else f"{topo.transport} ({topo.interconnect})"
            )
            return CommSource(
                e.source,
                e.near_points,
                f"{what}; {link}, {topo.nodes}×{topo.gpus_per_node} GPUs",
            )
        return CommSource(
            "measured" if self.comm.method != "prior" else "ring prior",
            self.comm.n_observations,
            "fitted on this cluster's comm profile" if self.comm.method != "prior" else "ring formula",
        )


def _p50_p90(sim: SimulationResult) -> tuple[float, float]:
    return sim.iteration_ms_p50, max(sim.iteration_ms_p90, sim.iteration_ms_p50)


def _accumulated(sync_ms: float, local_ms: float, k: int) -> float:
    """The mean time of one of ``k`` accumulated micro-steps (:meth:`Oracle._estimate`)::

        T = ((k − 1) · t_local + T_sync) / k

    ``t_local``: the slowest worker's forward + backward (+ its input cost δ), the ``k − 1``
    micro-steps that run under DDP's ``no_sync`` (no all-reduce, no κ, no optimizer step);
    ``T_sync``: the timeline of the last micro-step, whose backward overlaps the all-reduces
    and which ends with the optimizer step."""
    return ((k - 1) * local_ms + sync_ms) / k


def _analytic_p90(p50: float, exposed: float, loads: Sequence[WorkerLoad], comm: Sequence[CommTime]) -> float:
    """p90 ≈ p50·exp(z90·σ) with σ the iteration's relative spread from independent phases:
    ``σ² = Σ_phase (t·s)² / T²`` over the slowest worker's phases plus the exposed share of each
    all-reduce's log-normal spread (a first-order delta-method estimate; Monte-Carlo
    re-verifies the plans the solver picks)."""
    slow = max(loads, key=lambda w: w.phases.total).phases
    var = sum((slow.get(p) * slow.spread.get(p)) ** 2 for p in ("forward", "backward", "optimizer"))
    total_comm = sum(c.p50_ms for c in comm) or 1.0
    var += sum((c.p50_ms * exposed / total_comm * c.sigma) ** 2 for c in comm)
    sigma = math.sqrt(var) / p50 if p50 > 0 else 0.0
    return p50 * math.exp(Z90 * sigma)


def _bottleneck(communication_bound: bool, cluster: Cluster) -> str:
    if communication_bound:
        link = cluster.slowest_link()
        return f"communication ({link.kind}, {link.gbps:g} Gb/s)"
    return "compute"


# --- building a workload (needs torch) ----------------------------------------------------


#: Library workloads traced in this process, by (spec, input shape, precision, classes): a meta
#: trace takes seconds and is the same every time, so repeated plans do not re-trace.
WORKLOAD_CACHE_SIZE = 32
_workload_cache: OrderedDict[tuple[Any, ...], Workload] = OrderedDict()
_workload_lock = threading.Lock()


def workload_for_spec(
    spec: str,
    input_shape: Sequence[int],
    *,
    precision: str = "fp32",
    num_classes: int = 1000,
    measured: ComputeModel | None = None,
    measured_on: str | None = None,
    allow_code: bool = False,
) -> Workload:
    """Count FLOPs/bytes, bucket sizes, static memory and saved activations of ``spec`` on the
    meta device (no weights, no memory, seconds even for large models).

    Library specs only, unless ``allow_code`` (the operator's own commands): the web process
    and the task worker never import a team's model code (``workload.specs``).

    Library workloads are cached in the process by ``(spec, input shape, precision,
    num_classes)`` (an LRU of :data:`WORKLOAD_CACHE_SIZE`); a code spec is traced every time,
    since its module may change under the same name."""
    from workload.cost import trace_workload
    from workload.specs import load_model, parse_spec

    shape = tuple(int(x) for x in input_shape)
    try:
        library = parse_spec(spec).is_library
    except Exception:  # noqa: BLE001 - load_model reports a bad spec properly below
        library = False
    key = (spec, shape, precision, int(num_classes))
    base = None
    if library:
        with _workload_lock:
            base = _workload_cache.get(key)
            if base is not None:
                _workload_cache.move_to_end(key)
    if base is None:

        def build() -> Any:
            return load_model(spec, num_classes=num_classes, input_shape=shape, allow_code=allow_code)

        doc = trace_workload(build, shape, precision=precision, model_spec=spec, num_classes=num_classes)
        base = Workload.from_dict(doc)
        if library:
            with _workload_lock:
                _workload_cache[key] = base
                while len(_workload_cache) > WORKLOAD_CACHE_SIZE:
                    _workload_cache.popitem(last=False)
    return dataclasses.replace(base, measured=measured, measured_on=measured_on)
