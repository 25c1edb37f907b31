"""The compute model: an operator-class roofline with kernel floors and a learned residual.

Workload.  :meth:`WorkloadCost.class_sums` (``workload.cost``) gives, per phase ``φ``
(forward, backward, optimizer) and operator class ``c``, the FLOPs ``F_φc(b)`` and bytes
``M_φc(b)`` (both linear in the per-GPU batch ``b``) and the kernel count ``n_φc``.

Roofline per class.  On GPU ``g`` at precision ``p`` (peak ``P_g,p`` FLOP/s, memory bandwidth
``W_g``)::

    t_φ = e^{r(x)} · ( k_g · [ Σ_c∈GEMM F_φc / (η_c,u · P_g,p)  +  Σ_c M_φc / (μ_c · W_eff,g) ]
                       + Σ_c n_φc · τ_class(c)  +  [φ = forward] · c₀ )
    W_eff,g = W_ref · (W_g / W_ref)^β,    W_ref = 1000 GB/s

* ``η_c,u`` — the efficiency of GEMM-like class ``c`` (dense / grouped / depthwise convolution,
  matmul, attention) on unit ``u`` (tensor cores, or CUDA cores for fp32 and for tf32 on GPUs
  without TF32);
* ``μ_c`` — the DRAM efficiency of class ``c`` (elementwise, norms, reductions, embeddings, the
  optimizer — and the operand traffic of GEMMs);
* ``τ`` — a fixed floor per kernel (launch, latency, the host's dispatch), one for GEMM-like
  kernels, one for the others, one for optimizer kernels; with it a kernel's effective
  efficiency is ``η·F/(F + F½)``, ``F½ = η·P·τ`` — a saturation curve in work per kernel, so small
  batches and narrow layers do not reach peak, and a GPU with a higher peak needs more work
  per kernel to reach it;
* ``c₀`` — a fixed overhead per iteration (ms);
* ``k_g`` — a per-chip factor (clocks, power limits).  A chip without train rows gets
  ``exp(a_u + b·ln w_g)`` (:func:`fit_power`: ``w_g`` its board's power limit per SM-GHz of
  boost, :meth:`planner.hardware.GpuSpec.watts_per_sm_ghz`, regressed over the fitted chips),
  else its architecture's mean, else the mean of every fitted chip;
* the unit and peak of each GEMM class follow PyTorch's defaults (:func:`class_precision`): an
  ``fp32`` model's dense and grouped convolutions run in TF32 on GPUs that have it
  (``cudnn.allow_tf32`` is True), its matmuls on CUDA cores (``cuda.matmul.allow_tf32`` False);
* ``r(x)`` — the learned correction: an XGBoost regression of ``ln(t/t̂)`` on train rows whose
  features ``x`` are the class shares of FLOPs and bytes, arithmetic intensity, batch,
  precision, work per GEMM kernel, the kernel-floor share and the GPU's peak and bandwidth.
  At plan time it is evaluated by :class:`Trees` (plain Python over the exported trees: no
  xgboost import, a few µs).

Fitting (:func:`fit`).  With ``θ = (1/η, 1/μ, τ, c₀)`` the bracket is ``k_g·(A_fb·θ_fb) + A_k·θ_k``;
``ln θ`` and ``ln k_g`` minimise the robust (soft-L1) sum of ``w_i (ln t̂_i − ln t_i)²`` plus a
ridge ``λ Σ_j (ln θ_j − ln θ̄_j)² + λ_g Σ_g (ln k_g)²`` (the prior ``θ̄`` keeps classes that the
train rows barely exercise at physical values; ``λ_g`` keeps a chip with few rows near 1).
``β`` is the grid value with the least train loss; the residual's number of trees is chosen by
cross-validation that holds out whole families *of the train rows*.  Row weights
``w_i = 1/√(rows of its family)`` keep one heavily published family from setting every class.

Transfer keeps the measured time and scales it by the model's ratio between the two GPUs, as
:class:`planner.perf.transfer.TransferModel` does (this class is one, with another
``phase_ms``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.hardware import GpuSpec
from planner.perf.transfer import W_REF_GB_S, RooflineParams, TransferModel, compute_unit
from workload.cost import GEMM_CLASSES, OP_CLASSES, PHASES, WorkloadCost, precision_family

UNITS = ("tensor", "cuda")
KERNEL_GROUPS = ("gemm", "other", "optimizer")
COLUMNS: tuple[str, ...] = (
    tuple(f"flop:{c}:{u}" for c in GEMM_CLASSES for u in UNITS)
    + tuple(f"byte:{c}" for c in OP_CLASSES)
    + tuple(f"kern:{k}" for k in KERNEL_GROUPS)
    + ("step",)
)
# Priors θ̄: η = 0.5 (GEMM), μ = 0.6 (DRAM), τ = 5 µs per kernel, c₀ = 0.5 ms.
PRIOR = {
    **{c: 2.0 for c in COLUMNS if c.startswith("flop:")},
    **{c: 1 / 0.6 for c in COLUMNS if c.startswith("byte:")},
    **{c: 5.0 for c in COLUMNS if c.startswith("kern:")},
    "step": 0.5,
}
FEATURES: tuple[str, ...] = (
    tuple(f"fshare:{c}" for c in GEMM_CLASSES)
    + tuple(f"bshare:{c}" for c in OP_CLASSES)
    + (
        "ln_intensity",
        "ln_batch",
        "ln_work_per_gemm_kernel",
        "floor_share",
        "half",
        "tensor",
        "ln_peak",
        "ln_bw",
    )
)
# Where the physics fixes the sign of the correction: more work per GEMM kernel never makes
# a step slower than the roofline already says (kernels only get closer to peak).
MONOTONE = {"ln_work_per_gemm_kernel": -1}
MODEL_VERSION = 3


# The silicon behind each spec row: boards of one die differ only in what their datasheet says
# (clocks → peaks, memory → bandwidth), so they share one factor ``k`` per unit; a factor per
# board would learn the benchmark's software instead (A100 40 GB and 80 GB rows come from
# different suites).
DIES = {
    "V100": "GV100",
    "V100-32GB": "GV100",
    "T4": "TU104",
    "A100": "GA100",
    "A100-80GB": "GA100",
    "A100-PCIe-40GB": "GA100",
    "A100-PCIe-80GB": "GA100",
    "A10G": "GA102",
    "A40": "GA102",
    "RTX-3090": "GA102",
    "L4": "AD104",
    "L40S": "AD102",
    "H100": "GH100",
    "H200": "GH100",
    "GH200": "GH100",
    "H100-PCIe-80GB": "GH100",
}
DIE_ARCHITECTURE = {
    "GV100": "Volta",
    "TU104": "Turing",
    "GA100": "Ampere",
    "GA102": "Ampere",
    "AD104": "Ada",
    "AD102": "Ada",
    "GH100": "Hopper",
}


def die_of(gpu: GpuSpec) -> str:
    return DIES.get(gpu.name, gpu.name)


def kernel_group(cls: str) -> str:
    return "gemm" if cls in GEMM_CLASSES else "optimizer" if cls == "optimizer" else "other"


def columns(
    cost: WorkloadCost,
    batch: float,
    gpu: GpuSpec,
    precision: str,
    beta: float,
    phases: Sequence[str] = PHASES,
) -> dict[str, dict[str, float]]:
    """``{phase: {column: value}}``: the design row of the bracket (see the module docstring).

    FLOP and byte columns are in ms at efficiency 1 (they get ``k_g``), kernel columns in
    thousands of kernels (their ``θ`` is µs per kernel), ``step`` is 1 on forward."""
    peak = gpu.peak_tflops(precision)
    if not peak or not gpu.memory_bandwidth_gb_s:
        raise ValueError(f"gpu {gpu.name}: no {precision} peak or memory bandwidth in its spec")
    rates = class_rates(gpu, precision)
    bytes_per_ms = W_REF_GB_S * (gpu.memory_bandwidth_gb_s / W_REF_GB_S) ** beta * 1e6
    sums = cost.class_sums()
    out: dict[str, dict[str, float]] = {}
    for p in phases:
        items = ((c, *s.at(batch), s.kernels) for c, s in sums[p].items())
        out[p] = _design_row(((c, f, m, k, bool(f)) for c, f, m, k in items), p, rates, bytes_per_ms)
    return out


# PyTorch's defaults (since 1.12): ``torch.backends.cudnn.allow_tf32`` is True, so an fp32
# convolution runs on TF32 tensor cores where the GPU has them (Ampere and newer), while
# ``torch.backends.cuda.matmul.allow_tf32`` is False, so fp32 matmuls and attention stay on
# CUDA cores.  Depthwise convolutions are not implicit GEMMs in cuDNN: no tensor cores.
TF32_BY_DEFAULT = ("conv_dense", "conv_grouped")


def class_precision(gpu: GpuSpec, precision: str, cls: str) -> str:
    """The precision operator class ``cls`` really runs in under PyTorch's defaults."""
    if precision.lower() == "fp32" and cls in TF32_BY_DEFAULT and gpu.tf32_tflops:
        return "tf32"
    return precision


def row_unit(gpu: GpuSpec, precision: str) -> str:
    """The unit whose chip factor ``k`` a step at ``precision`` gets: ``"tensor"`` when its
    convolutions run on tensor cores (an fp32 step on a GPU with TF32 included), else
    :func:`compute_unit`'s."""
    return compute_unit(gpu, class_precision(gpu, precision, "conv_dense"))


def class_rates(gpu: GpuSpec, precision: str) -> dict[str, tuple[str, float]]:
    """``{GEMM class: (unit, peak FLOPs per ms)}`` under PyTorch's defaults."""
    out = {}
    for c in GEMM_CLASSES:
        prec = class_precision(gpu, precision, c)
        out[c] = (compute_unit(gpu, prec), (gpu.peak_tflops(prec) or 0.0) * 1e9)
    return out


def _design_row(
    items: Iterable[tuple[str, Any, Any, int, bool]],
    phase: str,
    rates: Mapping[str, tuple[str, float]],
    bytes_per_ms: float,
) -> dict[str, Any]:
    """One phase's design row from ``(class, FLOPs, bytes, kernels, has FLOPs)`` per operator
    class (floats, or arrays of many batches: the same sums in the same order); ``rates`` the
    unit and peak of each GEMM class (:func:`class_rates`)."""
    row: dict[str, Any] = {}
    for c, f, m, kernels, flops in items:
        if c in GEMM_CLASSES and flops:
            unit, flops_per_ms = rates[c]
            key = f"flop:{c}:{unit}"
            row[key] = row.get(key, 0.0) + f / flops_per_ms
        row[f"byte:{c}"] = row.get(f"byte:{c}", 0.0) + m / bytes_per_ms
        key = f"kern:{kernel_group(c)}"
        row[key] = row.get(key, 0.0) + kernels / 1e3
    if phase == "forward":
        row["step"] = 1.0
    return row


def features(
    cost: WorkloadCost,
    batch: float,
    gpu: GpuSpec,
    precision: str,
    bracket_ms: float,
    floor_ms: float,
    phases: Sequence[str] = PHASES,
) -> list[float]:
    """The residual's inputs, in :data:`FEATURES` order."""
    sums = cost.class_sums()
    flops = dict.fromkeys(OP_CLASSES, 0.0)
    nbytes = dict.fromkeys(OP_CLASSES, 0.0)
    gemm_kernels = 0
    for p in phases:
        for c, s in sums[p].items():
            f, m = s.at(batch)
            flops[c] += f
            nbytes[c] += m
            gemm_kernels += s.kernels if c in GEMM_CLASSES else 0
    total_f = sum(flops.values()) or 1.0
    total_m = sum(nbytes.values()) or 1.0
    gemm_f = sum(flops[c] for c in GEMM_CLASSES)
    return (
        [flops[c] / total_f for c in GEMM_CLASSES]
        + [nbytes[c] / total_m for c in OP_CLASSES]
        + [
            math.log(total_f / total_m + 1e-9),
            math.log(max(batch, 1.0)),
            math.log(gemm_f / max(gemm_kernels, 1) + 1.0),
            floor_ms / bracket_ms if bracket_ms > 0 else 0.0,
            1.0 if precision_family(precision) == "half" else 0.0,
            1.0 if compute_unit(gpu, precision) == "tensor" else 0.0,
            math.log((gpu.peak_tflops(precision) or 1.0) / 100.0),
            math.log((gpu.memory_bandwidth_gb_s or 1.0) / 1000.0),
        ]
    )


# --------------------------------------------------------------------------- trees


@dataclass(frozen=True)
class Trees:
    """An XGBoost regression forest in plain Python: ``base + Σ_tree leaf(x)``.

    Built from xgboost's JSON model (``Booster.save_raw("json")``); each tree is the arrays
    xgboost writes (children, split feature, threshold, default direction); a leaf's value is
    its ``split_conditions`` entry, as in xgboost's own format."""

    base: float = 0.0
    trees: tuple[
        tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[float, ...], tuple[bool, ...]], ...
    ] = ()

    def __call__(self, x: Sequence[float]) -> float:
        x = _float32(x)  # xgboost compares float32 features with float32 thresholds
        total = self.base
        for left, right, feature, threshold, default_left in self.trees:
            n = 0
            while left[n] != -1:
                v = x[feature[n]]
                if v != v:  # NaN: xgboost's default direction
                    n = left[n] if default_left[n] else right[n]
                else:
                    n = left[n] if v < threshold[n] else right[n]
            total += threshold[n]
        return total

    def predict_many(self, X: Any) -> Any:
        """:meth:`__call__` of every row of ``X`` (rows x features) at once (numpy), to the bit:
        features and thresholds compared as float32, NaN going the default way, and the leaves
        added in tree order after the base (``cumsum`` adds left to right, as the loop does)."""
        import numpy as np

        X = np.asarray(X, dtype=float)
        rows = X.shape[0]
        if not self.trees:
            return np.full(rows, self.base)
        left, right, feature, threshold, default_left, depth = self._arrays()
        xf = X.astype(np.float32).astype(float)  # as _float32 does
        T = left.shape[0]
        t = np.arange(T)[None, :]
        node = np.zeros((rows, T), dtype=np.int64)
        r = np.arange(rows)[:, None]
        for _ in range(depth):
            lf = left[t, node]
            inner = lf != -1
            v = xf[r, feature[t, node]]
            go_left = np.where(np.isnan(v), default_left[t, node], v < threshold[t, node])
            node = np.where(inner, np.where(go_left, lf, right[t, node]), node)
        leaves = threshold[t, node]
        out = np.cumsum(np.concatenate([np.full((rows, 1), self.base), leaves], axis=1), axis=1)
        return out[:, -1].copy()

    def _arrays(self) -> tuple[Any, Any, Any, Any, Any, int]:
        """The trees as padded numpy arrays (tree x node) and the deepest path, built once."""
        cached = self.__dict__.get("_np_arrays")
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        import numpy as np

        T = len(self.trees)
        width = max(len(tr[0]) for tr in self.trees)
        left = np.full((T, width), -1, dtype=np.int64)
        right = np.full((T, width), -1, dtype=np.int64)
        feature = np.zeros((T, width), dtype=np.int64)
        threshold = np.zeros((T, width))
        default_left = np.zeros((T, width), dtype=bool)
        depth = 0
        for i, (lt, rt, ft, th, dl) in enumerate(self.trees):
            m = len(lt)
            left[i, :m], right[i, :m], feature[i, :m] = lt, rt, ft
            threshold[i, :m], default_left[i, :m] = th, dl
            depth = max(depth, _depth(lt, rt))
        out = (left, right, feature, threshold, default_left, depth)
        self.__dict__["_np_arrays"] = out  # frozen: a cache, not a field
        return out

    def least(self) -> float:
        """A value :meth:`__call__` never goes below: the base plus each tree's least leaf."""
        return self.base + sum(
            min(threshold[i] for i in range(len(left)) if left[i] == -1)
            for left, _right, _feature, threshold, _default in self.trees
        )

    def least_where(self, fixed: Mapping[int, float]) -> float:
        """A value :meth:`__call__` never goes below on inputs whose feature ``i`` equals
        ``fixed[i]`` (NaN: the default direction), every other feature free: the base plus, per
        tree, the least leaf a path can reach (both branches of a split on a free feature).  At
        least :meth:`least`, and as tight as the fixed features make it."""
        xs = {i: _float32([v])[0] for i, v in fixed.items()}
        total = self.base
        for left, right, feature, threshold, default_left in self.trees:
            least, stack = math.inf, [0]
            while stack:
                n = stack.pop()
                if left[n] == -1:
                    least = min(least, threshold[n])
                    continue
                f = feature[n]
                if f not in xs:
                    stack += (left[n], right[n])
                elif xs[f] != xs[f]:  # NaN: xgboost's default direction
                    stack.append(left[n] if default_left[n] else right[n])
                else:
                    stack.append(left[n] if xs[f] < threshold[n] else right[n])
            total += least
        return total

    @classmethod
    def from_xgboost_json(cls, doc: Mapping[str, Any]) -> Trees:
        learner = doc["learner"]
        base = learner["learner_model_param"]["base_score"]
        base = float(str(base).strip("[]").split(",")[0])
        trees = []
        for t in learner["gradient_booster"]["model"]["trees"]:
            trees.append(
                (
                    tuple(int(v) for v in t["left_children"]),
                    tuple(int(v) for v in t["right_children"]),
                    tuple(int(v) for v in t["split_indices"]),
                    _float32(t["split_conditions"]),
                    tuple(bool(v) for v in t["default_left"]),
                )
            )
        return cls(base, tuple(trees))

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base, "trees": [[list(a) for a in t] for t in self.trees]}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Trees:
        trees = tuple(
            (
                tuple(int(v) for v in t[0]),
                tuple(int(v) for v in t[1]),
                tuple(int(v) for v in t[2]),
                tuple(float(v) for v in t[3]),
                tuple(bool(v) for v in t[4]),
            )
            for t in doc.get("trees", ())
        )
        return cls(float(doc.get("base", 0.0)), trees)


def _depth(left: Sequence[int], right: Sequence[int]) -> int:
    """Edges on the longest root-to-leaf path of one tree."""
    best, stack = 0, [(0, 0)]
    while stack:
        n, d = stack.pop()
        if left[n] == -1:
            best = max(best, d)
        else:
            stack += [(left[n], d + 1), (right[n], d + 1)]
    return best


def _float32(values: Sequence[float]) -> tuple[float, ...]:
    return struct.unpack(f"{len(values)}f", struct.pack(f"{len(values)}f", *values))


# --------------------------------------------------------------------------- the model


@dataclass
class OpClassModel(TransferModel):
    """Operator-class roofline + residual (see the module docstring); a :class:`TransferModel`
    whose ``phase_ms`` is this model's, so ``predict``/``transfer``/``analytical`` are shared.

    ``nccl_slowdown`` (κ): while DDP's all-reduce kernels run beside backward on the same SMs,
    backward takes ``(1 + κ)`` times longer on a multi-GPU worker; ``input_ns_per_element`` (δ):
    n GPUs share one host's input pipeline, which costs each step δ ns per input element of its
    batch (decode, augment, host-to-device copy).
    Both are fitted on the corpus's 1–8 GPU rows of one node (the oracle applies them)."""

    theta: dict[str, float] = field(default_factory=lambda: dict(PRIOR))
    beta: float = 1.0
    residual: Trees = field(default_factory=Trees)
    residual_clip: float = math.log(3.0)
    nccl_slowdown: float = 0.0
    input_ns_per_element: float = 0.0
    power_fit: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def multi_gpu_terms(self) -> tuple[float, float]:
        """``(κ, δ)`` as calibrated: ``(nccl_slowdown, input_ns_per_element)``."""
        return self.nccl_slowdown, self.input_ns_per_element

    def bracket(
        self, cost: WorkloadCost, batch: float, gpu: GpuSpec, precision: str, phases: Sequence[str] = PHASES
    ) -> tuple[dict[str, float], float]:
        """Per-phase time without the residual, and the kernel-floor part of it (ms)."""
        k = self.unit_factor(gpu, precision)
        cols = columns(cost, batch, gpu, precision, self.beta, phases)
        out, floor = {}, 0.0
        for p, row in cols.items():
            t = 0.0
            for name, v in row.items():
                w = self.theta.get(name, 0.0) * v
                if name.startswith(("flop:", "byte:")):
                    t += k * w
                else:  # kernels (θ µs × thousands of kernels = ms) and the step overhead
                    floor += w if name.startswith("kern:") else 0.0
                    t += w
            out[p] = t
        return out, floor

    def unit_factor(self, gpu: GpuSpec, precision: str) -> float:
        """``k`` of (die, unit): a die's tensor cores and its CUDA cores reach their peaks to
        different degrees.  See :meth:`unit_factor_source` for a die without training rows."""
        return self.unit_factor_source(gpu, precision)[0]

    def unit_factor_source(self, gpu: GpuSpec, precision: str) -> tuple[float, str]:
        """``(k, level)``: the die's own fitted factor (``"gpu"``); for a die without training
        rows the power regression's (``"power"``, :func:`fit_power`: the chip's board power
        per SM-GHz says how far below its boost clock it settles); else its architecture's mean
        (``"architecture"``); else the geometric mean of every fitted die (``"global"``); else 1."""
        unit = row_unit(gpu, precision)
        own = self.gpu_factors.get(f"{die_of(gpu)}/{unit}")
        if own:
            return own, "gpu"
        power = gpu.watts_per_sm_ghz()
        if power and "slope" in self.power_fit and unit in self.power_fit:
            k = math.exp(self.power_fit[unit] + self.power_fit["slope"] * math.log(power))
            return min(max(k, CHIP_FACTOR_RANGE[0]), CHIP_FACTOR_RANGE[1]), "power"
        arch = self.arch_factors.get(f"{gpu.architecture}/{unit}")
        if arch:
            return arch, "architecture"
        same = [math.log(v) for key, v in self.gpu_factors.items() if key.endswith(f"/{unit}")]
        if same:
            return math.exp(sum(same) / len(same)), "global"
        return 1.0, "none"

    def support(self, gpu: str | GpuSpec, precision: str) -> str:
        """One sentence: the training rows behind ``gpu``'s predictions and where its chip
        factor comes from (what a plan states per GPU)."""
        spec = self.spec(gpu)
        unit = row_unit(spec, precision)
        rows = int(self.meta.get("chip_rows", {}).get(f"{die_of(spec)}/{unit}", 0))
        k, level = self.unit_factor_source(spec, precision)
        chips = len([key for key in self.gpu_factors if key.endswith(f"/{unit}")])
        unit_words = "tensor cores" if unit == "tensor" else "CUDA cores"
        if level == "gpu":
            return f"{spec.name}: {rows} training rows on its chip ({die_of(spec)}, {unit_words}), chip factor {k:.2f} fitted on them"
        how = {
            "power": f"from its board power per SM-GHz ({spec.watts_per_sm_ghz() or 0:.2f} W), "
            f"regressed over {chips} fitted chips",
            "architecture": f"the mean of its architecture ({spec.architecture})",
            "global": f"the mean of all {chips} fitted chips",
            "none": "none fitted (1)",
        }[level]
        return f"{spec.name}: no training rows on its chip ({unit_words}); chip factor {k:.2f}, {how}"

    def factor(self, gpu: str | GpuSpec) -> tuple[float, str]:
        spec = self.spec(gpu)
        for level, table, key in (
            ("gpu", self.gpu_factors, die_of(spec)),
            ("architecture", self.arch_factors, spec.architecture),
        ):
            found = [v for k, v in table.items() if k.split("/")[0] == key]
            if found:
                return math.exp(sum(math.log(v) for v in found) / len(found)), level
        return 1.0, "global"

    def correction(
        self,
        cost: WorkloadCost,
        batch: float,
        gpu: GpuSpec,
        precision: str,
        bracket_ms: float,
        floor_ms: float,
        phases: Sequence[str] = PHASES,
    ) -> float:
        if not self.residual.trees:
            return 1.0
        r = self.residual(features(cost, batch, gpu, precision, bracket_ms, floor_ms, phases))
        return math.exp(max(-self.residual_clip, min(self.residual_clip, r)))

    def _corrected(
        self,
        cost: WorkloadCost,
        batch: float,
        gpu: str | GpuSpec,
        precision: str | None,
        phases: Sequence[str],
    ) -> dict[str, float]:
        """Per-phase time of ``phases``, the residual evaluated on those phases."""
        spec = self.spec(gpu)
        prec = precision or cost.precision
        t, floor = self.bracket(cost, batch, spec, prec, phases)
        factor = self.correction(cost, batch, spec, prec, sum(t.values()), floor, phases)
        return {p: v * factor for p, v in t.items()}

    def phase_ms(
        self, cost: WorkloadCost, batch: float, gpu: str | GpuSpec, precision: str | None = None
    ) -> dict[str, float]:
        return self._corrected(cost, batch, gpu, precision, PHASES)

    def phase_ms_many(
        self, cost: WorkloadCost, batches: Sequence[int], gpu: str | GpuSpec, precision: str | None = None
    ) -> dict[str, Any]:
        """:meth:`phase_ms` at every batch of ``batches`` at once: ``{phase: numpy array}``, to the
        bit (each sum accumulates its terms in the order :func:`columns`, :meth:`bracket` and
        :func:`features` add them; logs and exps per element with :mod:`math`).  The plan search
        asks hundreds of batches per GPU (step envelopes, batch splits)."""
        import numpy as np

        spec = self.spec(gpu)
        prec = precision or cost.precision
        b = np.asarray(batches, dtype=float)
        out = {p: np.zeros(len(b)) for p in PHASES}
        if not len(b):
            return out
        peak = spec.peak_tflops(prec)
        if not peak or not spec.memory_bandwidth_gb_s:
            raise ValueError(f"gpu {spec.name}: no {prec} peak or memory bandwidth in its spec")
        sums = cost.class_sums()
        at = {
            (p, c): (np.maximum(s.f0 + s.f1 * b, 0.0), np.maximum(s.m0 + s.m1 * b, 0.0))
            for p in PHASES
            for c, s in sums[p].items()
        }
        # which GEMM classes have FLOPs decides which columns a row has, hence the order of its
        # sums: rows are done in groups of one such pattern (almost always a single group)
        gemm = [(p, c) for p in PHASES for c in sums[p] if c in GEMM_CLASSES]
        pattern = np.zeros(len(b), dtype=np.int64)
        for i, key in enumerate(gemm):
            pattern |= (at[key][0] != 0).astype(np.int64) << i
        for code in np.unique(pattern).tolist():
            rows = np.flatnonzero(pattern == code)
            live = {key for i, key in enumerate(gemm) if code >> i & 1}
            sub = {key: (f[rows], m[rows]) for key, (f, m) in at.items()}
            phases = self._phases_of_rows(cost, b[rows], spec, prec, sub, live)
            for p in PHASES:
                out[p][rows] = phases[p]
        return out

    def _phases_of_rows(
        self,
        cost: WorkloadCost,
        b: Any,
        spec: GpuSpec,
        prec: str,
        at: Mapping[tuple[str, str], tuple[Any, Any]],
        live: set[tuple[str, str]],
    ) -> dict[str, Any]:
        """:meth:`phase_ms_many` for rows whose GEMM classes with FLOPs are ``live``."""
        import numpy as np

        rows = len(b)
        sums = cost.class_sums()
        unit = compute_unit(spec, prec)
        rates = class_rates(spec, prec)
        bw = spec.memory_bandwidth_gb_s or 0.0
        bytes_per_ms = W_REF_GB_S * (bw / W_REF_GB_S) ** self.beta * 1e6
        k = self.unit_factor(spec, prec)
        t: dict[str, Any] = {}
        floor: Any = 0.0
        for p in PHASES:
            row = _design_row(  # columns(): keys in the order they are first added
                ((c, *at[(p, c)], s.kernels, (p, c) in live) for c, s in sums[p].items()),
                p,
                rates,
                bytes_per_ms,
            )
            tp: Any = 0.0  # bracket()
            for name, v in row.items():
                w = self.theta.get(name, 0.0) * v
                if name.startswith(("flop:", "byte:")):
                    tp = tp + k * w
                else:
                    floor = floor + (w if name.startswith("kern:") else 0.0)
                    tp = tp + w
            t[p] = np.broadcast_to(np.asarray(tp, dtype=float), (rows,))
        if not self.residual.trees:
            return {p: v * 1.0 for p, v in t.items()}
        bracket_ms = ((0 + t["forward"]) + t["backward"]) + t["optimizer"]
        floor = np.broadcast_to(np.asarray(floor, dtype=float), (rows,))
        flops: dict[str, Any] = dict.fromkeys(OP_CLASSES, 0.0)  # features()
        nbytes: dict[str, Any] = dict.fromkeys(OP_CLASSES, 0.0)
        gemm_kernels = 0
        for p in PHASES:
            for c, s in sums[p].items():
                f, m = at[(p, c)]
                flops[c] = flops[c] + f
                nbytes[c] = nbytes[c] + m
                gemm_kernels += s.kernels if c in GEMM_CLASSES else 0
        sum_f: Any = sum(flops.values())
        total_f = np.where(sum_f != 0, sum_f, 1.0)  # `or 1.0`
        sum_m: Any = sum(nbytes.values())
        total_m = np.where(sum_m != 0, sum_m, 1.0)
        gemm_f = sum(flops[c] for c in GEMM_CLASSES)
        x = np.empty((rows, len(FEATURES)))
        col = 0
        for c in GEMM_CLASSES:
            x[:, col] = flops[c] / total_f
            col += 1
        for c in OP_CLASSES:
            x[:, col] = nbytes[c] / total_m
            col += 1
        logs = (
            [math.log(v + 1e-9) for v in np.broadcast_to(total_f / total_m, (rows,)).tolist()],
            [math.log(max(v, 1.0)) for v in b.tolist()],
            [math.log(v + 1.0) for v in np.broadcast_to(gemm_f / max(gemm_kernels, 1), (rows,)).tolist()],
        )
        for values in logs:
            x[:, col] = values
            col += 1
        with np.errstate(divide="ignore", invalid="ignore"):
            x[:, col] = np.where(bracket_ms > 0, floor / np.where(bracket_ms > 0, bracket_ms, 1.0), 0.0)
        x[:, col + 1] = 1.0 if precision_family(prec) == "half" else 0.0
        x[:, col + 2] = 1.0 if unit == "tensor" else 0.0
        x[:, col + 3] = math.log((spec.peak_tflops(prec) or 1.0) / 100.0)
        x[:, col + 4] = math.log((spec.memory_bandwidth_gb_s or 1.0) / 1000.0)
        r = self.residual.predict_many(x)
        clip = self.residual_clip
        factor = np.array([math.exp(max(-clip, min(clip, v))) for v in r.tolist()])
        return {p: v * factor for p, v in t.items()}

    def step_ms(
        self,
        cost: WorkloadCost,
        batch: float,
        gpu: str | GpuSpec,
        precision: str | None = None,
        with_optimizer: bool = True,
    ) -> float:
        """One step's time; ``with_optimizer=False`` is forward + backward (how some
        benchmarks time a step), with the residual evaluated on those phases."""
        return sum(
            self._corrected(cost, batch, gpu, precision, PHASES if with_optimizer else PHASES[:2]).values()
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": MODEL_VERSION,
            "kind": "opclass",
            "theta": self.theta,
            "beta": self.beta,
            "gpu_factors": self.gpu_factors,
            "arch_factors": self.arch_factors,
            "residual": self.residual.to_dict(),
            "residual_clip": self.residual_clip,
            "nccl_slowdown": self.nccl_slowdown,
            "input_ns_per_element": self.input_ns_per_element,
            "power_fit": self.power_fit,
            "features": list(FEATURES),
            "columns": list(COLUMNS),
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], specs: Mapping[str, GpuSpec]) -> OpClassModel:
        if doc.get("version") != MODEL_VERSION or doc.get("kind") != "opclass":
            raise ValueError(f"compute model: expected kind opclass version {MODEL_VERSION}")
        if list(doc.get("features", ())) != list(FEATURES):
            raise ValueError("compute model: its residual was trained on other features; recalibrate")
        return cls(
            RooflineParams(),
            dict(specs),
            dict(doc.get("gpu_factors", {})),
            dict(doc.get("arch_factors", {})),
            theta={k: float(v) for k, v in doc["theta"].items()},
            beta=float(doc["beta"]),
            residual=Trees.from_dict(doc.get("residual", {})),
            residual_clip=float(doc.get("residual_clip", math.log(3.0))),
            nccl_slowdown=float(doc.get("nccl_slowdown", 0.0)),
            input_ns_per_element=float(doc.get("input_ns_per_element", 0.0)),
            power_fit={k: float(v) for k, v in doc.get("power_fit", {}).items()},
            meta=dict(doc.get("meta", {})),
        )


# --------------------------------------------------------------------------- fitting


@dataclass(frozen=True)
class Sample:
    """One train measurement: a step of ``cost`` at ``batch`` on ``gpu`` took ``ms``."""

    row_id: int
    family: str
    cost: WorkloadCost
    batch: int
    gpu: str
    precision: str
    ms: float
    with_optimizer: bool = True


BETA_GRID = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
RIDGE = 0.02
XGB_PARAMS = {
    "max_depth": 3,
    "eta": 0.05,
    "min_child_weight": 3.0,
    "subsample": 0.8,
    "lambda": 5.0,
    "objective": "reg:squarederror",
    "seed": 0,
    "nthread": 1,  # a few hundred rows: one thread beats a pool on 2 busy cores
}


def fit(
    samples: Sequence[Sample],
    specs: Mapping[str, GpuSpec],
    *,
    betas: Sequence[float] = BETA_GRID,
    residual: bool = True,
    max_rounds: int = 300,
) -> OpClassModel:
    """Fit ``θ``, ``β``, ``k_g`` and the residual on ``samples`` (train rows only: the caller
    filters them through ``planner.corpus.train_rows``)."""
    best: tuple[float, OpClassModel] | None = None
    for beta in betas:
        model = OpClassModel(RooflineParams(), dict(specs), beta=beta)
        loss = _fit_linear(model, samples)
        if best is None or loss < best[0]:
            best = (loss, model)
    assert best is not None
    model = best[1]
    model.meta = {
        **model.meta,  # chip_rows, set by _fit_linear
        "train_rows": len(samples),
        "families": sorted({s.family for s in samples}),
        "linear_train_loss": round(best[0], 6),
    }
    if residual and len(samples) >= 20 and len({s.family for s in samples}) >= 3:  # CV holds out families
        model.residual, rounds = _fit_residual(model, samples, max_rounds)
        model.meta["residual_trees"] = rounds
    return model


def _weights(samples: Sequence[Sample]) -> list[float]:
    """``1/√(rows of the family)``, scaled to mean 1."""
    counts: dict[str, int] = {}
    for s in samples:
        counts[s.family] = counts.get(s.family, 0) + 1
    raw = [1 / math.sqrt(counts[s.family]) for s in samples]
    mean = sum(raw) / len(raw)
    return [w / mean for w in raw]


def _design(beta: float, specs_of: Any, s: Sample) -> list[float]:
    """The sample's bracket columns at ``k_g = 1``, summed over the phases it times."""
    spec = specs_of(s.gpu)
    phases = PHASES if s.with_optimizer else ("forward", "backward")
    row = dict.fromkeys(COLUMNS, 0.0)
    for cols in columns(s.cost, s.batch, spec, s.precision, beta, phases).values():
        for name, v in cols.items():
            row[name] += v
    return [row[c] for c in COLUMNS]


# Physical ranges of θ: no GEMM class beats its peak (η ≤ 1) nor runs below 2 % of it; the
# counted bytes are those of unfused eager operators, an upper bound on the traffic of fused
# kernels, so μ may reach 4; a kernel's floor is 0.5–40 µs; the per-step overhead 0.01–100 ms.
BOUNDS = {"flop": (1.0, 50.0), "byte": (0.25, 50.0), "kern": (0.5, 40.0), "step": (0.01, 100.0)}
CHIP_FACTOR_RANGE = (1 / 3, 3.0)
RIDGE_CHIP = 0.1  # shrinks ln k_g toward 0: a chip with a few rows does not get its own clock


def _fit_linear(model: OpClassModel, samples: Sequence[Sample]) -> float:
    """Robust least squares in log time over ``ln θ`` and ``ln k_g`` (see the module docstring)."""
    import numpy as np
    from scipy.optimize import least_squares

    w = np.sqrt(np.asarray(_weights(samples)))
    y = np.log(np.asarray([s.ms for s in samples]))
    a = np.asarray([_design(model.beta, model.spec, s) for s in samples])
    scaled = np.asarray([c.startswith(("flop:", "byte:")) for c in COLUMNS])

    def chip_key(s: Sample) -> str:
        spec = model.spec(s.gpu)
        return f"{die_of(spec)}/{row_unit(spec, s.precision)}"

    chips = sorted({chip_key(s) for s in samples})
    chip_of = np.asarray([chips.index(chip_key(s)) for s in samples])
    prior = np.log(np.asarray([PRIOR[c] for c in COLUMNS]))
    lam, lam_chip = math.sqrt(RIDGE), math.sqrt(RIDGE_CHIP)
    n_cols = len(COLUMNS)

    def predict(x: Any) -> Any:
        theta, k = np.exp(x[:n_cols]), np.exp(x[n_cols:])[chip_of]
        return (a[:, scaled] @ theta[scaled]) * k + a[:, ~scaled] @ theta[~scaled]

    def residuals(x: Any) -> Any:
        return np.concatenate(
            [w * (np.log(predict(x)) - y), lam * (x[:n_cols] - prior), lam_chip * x[n_cols:]]
        )

    lo = np.concatenate(
        [
            np.log([BOUNDS[c.split(":")[0]][0] for c in COLUMNS]),
            np.full(len(chips), math.log(CHIP_FACTOR_RANGE[0])),
        ]
    )
    hi = np.concatenate(
        [
            np.log([BOUNDS[c.split(":")[0]][1] for c in COLUMNS]),
            np.full(len(chips), math.log(CHIP_FACTOR_RANGE[1])),
        ]
    )
    x0 = np.clip(np.concatenate([prior, np.zeros(len(chips))]), lo + 1e-9, hi - 1e-9)
    sol = least_squares(residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.2, max_nfev=4000)
    model.theta = {c: float(v) for c, v in zip(COLUMNS, np.exp(sol.x[:n_cols]), strict=True)}
    model.gpu_factors = {g: float(v) for g, v in zip(chips, np.exp(sol.x[n_cols:]), strict=True)}
    by_arch: dict[str, list[float]] = {}
    for g, k in model.gpu_factors.items():
        die, unit = g.split("/")
        arch = DIE_ARCHITECTURE.get(die, "")
        if arch:
            by_arch.setdefault(f"{arch}/{unit}", []).append(math.log(k))
    model.arch_factors = {key: math.exp(sum(v) / len(v)) for key, v in by_arch.items()}
    model.power_fit = fit_power(model, samples)
    model.meta["chip_rows"] = {g: int(np.sum(chip_of == i)) for i, g in enumerate(chips)}
    err = np.log(predict(sol.x)) - y
    return float(np.sum(w**2 * err**2) / np.sum(w**2))


POWER_SLOPE_RANGE = (-1.0, 0.0)


def fit_power(model: OpClassModel, samples: Sequence[Sample]) -> dict[str, float]:
    """``ln k = a_u + b·ln w``: the fitted chip factors against their boards' power per SM-GHz
    ``w`` (``GpuSpec.watts_per_sm_ghz``), one intercept per unit ``u`` and one slope ``b``.

    Physics: a board that may draw less power per SM-GHz settles further below its boost
    clock, so its steps take longer than its datasheet peak says (``b ≤ 0``; with dynamic power
    ``∝ f·V²`` and ``V ∝ f``, a fully power-bound chip has ``f ∝ w^{1/3}``, ``b = −1/3``).  ``b``
    is least squares on the chips centred per unit, clamped to :data:`POWER_SLOPE_RANGE`; a
    die's ``w`` is the geometric mean over its boards' samples.  ``{}`` with fewer than three
    chips with a known ``w`` or no spread in ``w``."""
    logs: dict[str, list[float]] = {}
    for s in samples:
        spec = model.spec(s.gpu)
        w = spec.watts_per_sm_ghz()
        if w:
            logs.setdefault(f"{die_of(spec)}/{row_unit(spec, s.precision)}", []).append(math.log(w))
    points = [
        (key.split("/")[1], sum(v) / len(v), math.log(model.gpu_factors[key]))
        for key, v in logs.items()
        if key in model.gpu_factors
    ]
    if len(points) < 3:
        return {}
    mean: dict[str, tuple[float, float]] = {}
    for unit in {u for u, _, _ in points}:
        xs = [(x, y) for u, x, y in points if u == unit]
        mean[unit] = (sum(x for x, _ in xs) / len(xs), sum(y for _, y in xs) / len(xs))
    sxx = sum((x - mean[u][0]) ** 2 for u, x, _ in points)
    if sxx < 1e-6:
        return {}
    sxy = sum((x - mean[u][0]) * (y - mean[u][1]) for u, x, y in points)
    slope = min(max(sxy / sxx, POWER_SLOPE_RANGE[0]), POWER_SLOPE_RANGE[1])
    return {"slope": slope, **{u: my - slope * mx for u, (mx, my) in mean.items()}}


def _residual_data(model: OpClassModel, samples: Sequence[Sample]) -> tuple[Any, Any]:
    import numpy as np

    xs, ys = [], []
    for s in samples:
        spec = model.spec(s.gpu)
        phases = PHASES if s.with_optimizer else ("forward", "backward")
        t, floor = model.bracket(s.cost, s.batch, spec, s.precision, phases)
        total = sum(t.values())
        xs.append(features(s.cost, s.batch, spec, s.precision, total, floor, phases))
        ys.append(math.log(s.ms / total))
    return np.asarray(xs), np.asarray(ys)


def _fit_residual(model: OpClassModel, samples: Sequence[Sample], max_rounds: int) -> tuple[Trees, int]:
    """XGBoost on ``ln(t/t̂)``; the number of trees by leave-families-out CV on the train rows."""
    import json

    import numpy as np
    import xgboost as xgb

    x, y = _residual_data(model, samples)
    w = np.asarray(_weights(samples))
    params = {
        **XGB_PARAMS,
        "monotone_constraints": "(" + ",".join(str(MONOTONE.get(f, 0)) for f in FEATURES) + ")",
    }
    families = sorted({s.family for s in samples})
    folds = [[i for i, s in enumerate(samples) if s.family in families[k::5]] for k in range(5)]
    folds = [f for f in folds if f]
    dall = xgb.DMatrix(x, label=y, weight=w, feature_names=[f.replace(":", "_") for f in FEATURES])
    cv_folds = [(np.setdiff1d(np.arange(len(samples)), f), np.asarray(f)) for f in folds]
    # (a pandas DataFrame: as_pandas defaults to True)
    cv: Any = xgb.cv(params, dall, num_boost_round=max_rounds, folds=cv_folds, metrics="rmse", seed=0)
    rounds = int(np.argmin(cv["test-rmse-mean"].to_numpy())) + 1
    baseline = float(np.sqrt(np.average(y**2, weights=w)))
    if float(cv["test-rmse-mean"].min()) >= baseline:  # the correction does not generalise: none
        return Trees(), 0
    booster = xgb.train(params, dall, num_boost_round=rounds)
    trees = Trees.from_xgboost_json(json.loads(booster.save_raw("json")))
    check = booster.predict(xgb.DMatrix(x[:5], feature_names=dall.feature_names))
    mine = [trees(row) for row in x[:5]]
    if not np.allclose(check, mine, atol=1e-4):  # the exported form must be the trained model
        raise RuntimeError("compute model: exported trees disagree with xgboost")
    return trees, rounds
