"""Cross-device transfer: predict a model's phase times on a GPU that was never profiled.

Workload cost.  :func:`count_workload` (``workload.cost``) runs one training step of
the model on the ``meta`` device (no memory, no arithmetic) under a dispatch mode that records, for every aten operator
``i`` of forward, backward and optimizer, its floating-point operations ``F_i`` (the formulas of
``torch.utils.flop_counter``, i.e. what ``FlopCounterMode`` counts) and the bytes it touches
``M_i = Σ |inputs| + Σ |outputs|`` (view operators move nothing and are skipped).  It does so at
two batch sizes and keeps ``F_i(b) = F_i⁰ + F_i¹·b``, ``M_i(b) = M_i⁰ + M_i¹·b`` — weights
are batch independent, activations proportional to the batch.

Roofline.  On GPU ``g`` with dense peak ``P_g`` (FLOP/s at the training precision) and memory
bandwidth ``W_g`` a phase takes (default ``form="sum"``)::

    t_phase(b, g) = k_g · [ ΣF_i(b) / (η_c · P_g)  +  ΣM_i(b) / (η_m · W_eff,g) ]
    W_eff,g       = W_ref · (W_g / W_ref)^β,        W_ref = 1000 GB/s

``η_c`` is ``η_tensor`` for tf32/fp16 math on tensor cores and ``η_cuda`` for fp32 on CUDA cores,
``η_m`` one per precision family (32-bit, 16-bit activations), ``β ≤ 1`` says that a faster
memory system is not used in proportion (kernel tails, launch gaps, L2 behaviour), and ``k_g`` is
a per-GPU factor.  ``form="max"`` is the classic per-operator ("per-layer") roofline
``Σ_i max(F_i/(η_c·P), M_i/(η_m·W_eff))``.  On the published ResNet-50 figures, leave one GPU
chip out, the additive form with a fitted ``β`` gave a median error of 5.4 % against 5.7 % for the
per-operator max with ``β``, and 11–12 % for either form with ``β = 1`` (``bench/accuracy_transfer.py``
prints all four), hence the default — a model choice made on the same data the bench reports,
stated here so that nobody mistakes it for independent evidence.

Calibration (:func:`calibrate`) on published ResNet-50 training throughputs:

1. ``η_tensor, η_cuda, η_m, β`` minimise ``Σ_groups (ln t̂ − ln t)²`` over (GPU, precision)
   groups, each the median of its published rows, by grid search (η log-spaced in 0.02…1,
   β in 0.30…1.00).  Without fp32 rows ``η_cuda`` is not identifiable and stays at
   :data:`ETA_CUDA_PRIOR`;
2. ``k_g = exp(mean ln(t/t̂))`` over the groups of GPU ``g``, and per architecture the geometric
   mean of its GPUs' ``k_g``.  An uncalibrated GPU uses its architecture's factor, else 1.

Transfer.  With a measured phase time ``T_s`` on source GPU ``s``::

    T_target = T_s · t_phase(b, target) / t_phase(b, s)              source = "transferred"

which keeps whatever the roofline misses about the model (kernel mix, framework overhead) from
the measurement.  Without a usable source measurement (none, or measured on a CPU) the bare
roofline is returned with ``source = "analytical"``.  A profile of the target device itself is
``"measured"`` (:mod:`planner.perf.compute`).

Calibration GPU names.  ``calibration_resnet50_single_gpu.csv`` names boards ("A100-SXM4-40GB",
"A10", "H100-PCIe-80GB") while ``gpu_specs.csv`` names the AWS chips ("A100", "A10G", "H100").
:data:`CALIBRATION_ALIASES` maps the boards that AWS sells onto spec rows: V100-SXM2-16/32GB →
V100; A100-SXM4-40GB → A100; A100-SXM4-80GB → A100-80GB; H100-SXM5-80GB → H100;
H200-SXM-141GB → H200; A10 → A10G (the A10G row carries the A10 datasheet figures, so the A10
is treated as the same chip — the real A10G is clocked slightly differently, a few % at most).
Boards without a spec row (A100-PCIe-40/80GB, H100-PCIe-80GB, A40, GH200) get
:data:`SUPPLEMENTARY_SPECS` (NVIDIA datasheet dense figures); they calibrate ``η`` and their
architecture factors but are not offered by the catalog.  PCIe boards are kept apart from SXM
ones: same peaks on paper but a lower power limit, hence a lower sustained clock.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.hardware import GpuSpec
from planner.perf.compute import PhaseSpread, PhaseTimes

# The workload counter lives with the agent (it runs where the model's code may run); these
# names stay importable from here (``X as X``: an explicit re-export).
from workload.cost import PHASES as PHASES
from workload.cost import OpCost as OpCost
from workload.cost import WorkloadCost as WorkloadCost
from workload.cost import count_workload as count_workload
from workload.cost import precision_family as precision_family

CALIBRATION_ALIASES: dict[str, str] = {
    "V100-SXM2-16GB": "V100",
    "V100-SXM2-32GB": "V100",
    "A100-SXM4-40GB": "A100",
    "A100-SXM4-80GB": "A100-80GB",
    "H100-SXM5-80GB": "H100",
    "H200-SXM-141GB": "H200",
    "A10": "A10G",
}

SUPPLEMENTARY_SPECS: dict[str, GpuSpec] = {
    "A100-PCIe-40GB": GpuSpec("A100-PCIe-40GB", "Ampere", 108, 19.5, 156, 312, 1555, 40, 0.0),
    "A100-PCIe-80GB": GpuSpec("A100-PCIe-80GB", "Ampere", 108, 19.5, 156, 312, 1935, 80, 0.0),
    "H100-PCIe-80GB": GpuSpec("H100-PCIe-80GB", "Hopper", 114, 51.2, 378, 756, 2000, 80, 0.0),
    "A40": GpuSpec("A40", "Ampere", 84, 37.4, 74.8, 149.7, 696, 48, 0.0),
    "GH200": GpuSpec("GH200", "Hopper", 132, 67, 494.5, 989.5, 4000, 96, 900),
    # The 32 GB V100 (p3dn, DGX-1/2 boards): the 16 GB row's chip with twice the memory.
    "V100-32GB": GpuSpec("V100-32GB", "Volta", 80, 15.7, None, 125, 900, 32, 300),
    # GeForce RTX 3090 (GA102): TF32 and FP16-with-FP32-accumulate tensor rates are half the
    # FP16-accumulate figure on GeForce boards; AMP accumulates in FP32, hence 71 TFLOPS.
    "RTX-3090": GpuSpec("RTX-3090", "Ampere", 82, 35.6, 35.6, 71.2, 936, 24, 0.0),
}

ETA_GRID = tuple(math.exp(math.log(0.02) + i * (math.log(1.0) - math.log(0.02)) / 59) for i in range(60))
BETA_GRID = tuple(round(0.3 + 0.05 * i, 2) for i in range(15))  # 0.30 … 1.00
W_REF_GB_S = 1000.0
# fp32 (CUDA-core) efficiency used when no calibration row exercises CUDA cores: cuDNN's FP32
# implicit-GEMM convolutions typically sustain 55–65 % of peak.  An assumption, not a fit.
ETA_CUDA_PRIOR = 0.6


def spec_name_for(calibration_gpu: str) -> str:
    return CALIBRATION_ALIASES.get(calibration_gpu, calibration_gpu)


# --------------------------------------------------------------------------- roofline model


@dataclass(frozen=True)
class RooflineParams:
    """Global efficiencies of the roofline (see the module docstring).

    ``eta_tensor`` applies to tf32/fp16/bf16 math on tensor cores, ``eta_cuda`` to fp32 math on
    CUDA cores (and to "tf32" on GPUs without TF32); ``eta_memory`` per precision family is the
    DRAM efficiency at ``W_REF_GB_S``; ``beta`` the bandwidth exponent; ``form`` ``"sum"`` or
    ``"max"``.
    """

    eta_tensor: float = 0.5
    eta_cuda: float = ETA_CUDA_PRIOR
    eta_memory: Mapping[str, float] = field(default_factory=lambda: {"full": 0.5, "half": 0.4})
    beta: float = 1.0
    form: str = "sum"

    def compute(self, gpu: GpuSpec, precision: str) -> float:
        return self.eta_cuda if compute_unit(gpu, precision) == "cuda" else self.eta_tensor

    def memory(self, precision: str) -> float:
        fam = precision_family(precision)
        return self.eta_memory.get(fam) or statistics.fmean(self.eta_memory.values())

    def effective_bandwidth_gb_s(self, gpu: GpuSpec) -> float:
        """``W_eff = W_ref · (W / W_ref)^β`` (GB/s), before the memory efficiency."""
        if not gpu.memory_bandwidth_gb_s:
            raise ValueError(f"gpu {gpu.name}: no memory bandwidth in its spec")
        return float(W_REF_GB_S * (gpu.memory_bandwidth_gb_s / W_REF_GB_S) ** self.beta)


def _analytical_times(t: Mapping[str, float], batch: int, spread: PhaseSpread | None) -> PhaseTimes:
    return PhaseTimes(
        t["forward"],
        t["backward"],
        t["optimizer"],
        spread=spread or PhaseSpread(),
        source="analytical",
        batch_size=batch,
    )


def compute_unit(gpu: GpuSpec, precision: str) -> str:
    """``"cuda"`` for fp32 (and tf32 on GPUs without TF32 units), else ``"tensor"``."""
    p = precision.lower()
    if p == "fp32" or (p == "tf32" and not gpu.tf32_tflops):
        return "cuda"
    return "tensor"


def roofline_ms(
    cost: WorkloadCost, batch: float, gpu: GpuSpec, params: RooflineParams, precision: str | None = None
) -> dict[str, float]:
    """Per-phase roofline time in ms, without the GPU factor ``k_g``.

    ``form="sum"``: ``ΣF/(η_c·P) + ΣM/(η_m·W_eff)``; ``form="max"``: ``Σ_i max(F_i/(η_c·P), M_i/(η_m·W_eff))``.
    """
    import numpy as np

    prec = precision or cost.precision
    peak = gpu.peak_tflops(prec)
    if not peak or not gpu.memory_bandwidth_gb_s:
        raise ValueError(f"gpu {gpu.name}: no {prec} peak or memory bandwidth in its spec")
    flops_per_ms = peak * 1e12 * params.compute(gpu, prec) / 1e3
    bytes_per_ms = params.effective_bandwidth_gb_s(gpu) * 1e9 * params.memory(prec) / 1e3
    out = {}
    for p in PHASES:
        f, m = cost.arrays(p, batch)
        if params.form == "max":
            out[p] = float(np.maximum(f / flops_per_ms, m / bytes_per_ms).sum())
        else:
            out[p] = float(f.sum() / flops_per_ms + m.sum() / bytes_per_ms)
    return out


@dataclass(frozen=True)
class CalibrationRow:
    gpu: str
    precision: str
    batch: int
    images_per_s: float
    source: str = ""


def load_calibration_csv(path: str | Path) -> list[CalibrationRow]:
    with open(path, newline="") as fh:
        return [
            CalibrationRow(r["gpu"], r["precision"], int(r["per_gpu_batch"]), float(r["value"]), r["source"])
            for r in csv.DictReader(fh)
            if r.get("metric", "images_per_s") == "images_per_s"
        ]


@dataclass
class TransferModel:
    """Calibrated roofline: global efficiencies plus per-GPU / per-architecture factors."""

    params: RooflineParams
    specs: dict[str, GpuSpec]
    gpu_factors: dict[str, float] = field(default_factory=dict)
    arch_factors: dict[str, float] = field(default_factory=dict)

    def spec(self, gpu: str | GpuSpec) -> GpuSpec:
        if isinstance(gpu, GpuSpec):
            return gpu
        name = spec_name_for(gpu)
        if name in self.specs:
            return self.specs[name]
        if name in SUPPLEMENTARY_SPECS:
            return SUPPLEMENTARY_SPECS[name]
        raise KeyError(f"gpu {gpu!r}: no spec")

    def multi_gpu_terms(self) -> tuple[float, float]:
        """``(κ, δ)``: how much longer backward takes beside NCCL's kernels, and the ns per input
        element a step pays for its share of the host's input pipeline, on more than one GPU.
        The plain roofline has neither (0, 0); :class:`planner.perf.opclass.OpClassModel`
        calibrates both."""
        return 0.0, 0.0

    def factor(self, gpu: str | GpuSpec) -> tuple[float, str]:
        """``(k_g, level)`` with level ``"gpu"``, ``"architecture"`` or ``"global"``."""
        spec = self.spec(gpu)
        if spec.name in self.gpu_factors:
            return self.gpu_factors[spec.name], "gpu"
        if spec.architecture in self.arch_factors:
            return self.arch_factors[spec.architecture], "architecture"
        return 1.0, "global"

    def phase_ms(
        self, cost: WorkloadCost, batch: float, gpu: str | GpuSpec, precision: str | None = None
    ) -> dict[str, float]:
        spec = self.spec(gpu)
        k, _ = self.factor(spec)
        return {p: k * t for p, t in roofline_ms(cost, batch, spec, self.params, precision).items()}

    def analytical(
        self,
        cost: WorkloadCost,
        batch: int,
        gpu: str | GpuSpec,
        precision: str | None = None,
        spread: PhaseSpread | None = None,
    ) -> PhaseTimes:
        return _analytical_times(self.phase_ms(cost, batch, gpu, precision), batch, spread)

    def analytical_many(
        self, cost: WorkloadCost, batches: Sequence[int], gpu: str | GpuSpec, precision: str | None = None
    ) -> list[PhaseTimes]:
        """:meth:`analytical` at every batch of ``batches`` (no measured spread), in one pass where
        the model has ``phase_ms_many`` (:meth:`planner.perf.opclass.OpClassModel.phase_ms_many`:
        the same figures to the bit), else one batch at a time."""
        many = getattr(self, "phase_ms_many", None)
        if many is None:
            return [self.analytical(cost, b, gpu, precision) for b in batches]
        t = many(cost, batches, gpu, precision)
        columns = [t[p].tolist() for p in ("forward", "backward", "optimizer")]
        return [
            _analytical_times({"forward": f, "backward": bw, "optimizer": o}, b, None)
            for b, f, bw, o in zip(batches, *columns, strict=True)
        ]

    def transfer(
        self,
        measured: PhaseTimes,
        cost: WorkloadCost,
        batch: int,
        source_gpu: str | GpuSpec,
        target_gpu: str | GpuSpec,
        precision: str | None = None,
    ) -> PhaseTimes:
        """Scale phase times measured on ``source_gpu`` to ``target_gpu`` by the roofline ratio."""
        src = self.phase_ms(cost, batch, source_gpu, precision)
        dst = self.phase_ms(cost, batch, target_gpu, precision)
        ratio = {p: dst[p] / src[p] if src[p] > 0 else 1.0 for p in PHASES}
        return measured.scaled(ratio["forward"], ratio["backward"], ratio["optimizer"], source="transferred")

    def predict(
        self,
        cost: WorkloadCost,
        batch: int,
        target_gpu: str | GpuSpec,
        *,
        measured: PhaseTimes | None = None,
        measured_on: str | GpuSpec | None = None,
        precision: str | None = None,
    ) -> PhaseTimes:
        """Measured if the target itself was profiled, transferred from a GPU profile, else analytical.

        ``measured_on`` names the profiled device; a CPU or unknown device cannot be scaled
        by the GPU roofline, so the result is then analytical (keeping the measured spread).
        """
        target = self.spec(target_gpu)
        source = None
        if measured is not None and measured_on is not None:
            try:
                source = self.spec(measured_on)
            except KeyError:
                source = None
        if measured is not None and source is not None:
            if source.name == target.name:
                return measured
            return self.transfer(measured, cost, batch, source, target, precision)
        spread = measured.spread if measured is not None else None
        return self.analytical(cost, batch, target, precision, spread)

    def images_per_s(
        self, cost: WorkloadCost, batch: int, gpu: str | GpuSpec, precision: str | None = None
    ) -> float:
        return batch / sum(self.phase_ms(cost, batch, gpu, precision).values()) * 1e3

    def to_dict(self) -> dict[str, Any]:
        p = self.params
        return {
            "version": 1,
            "eta_tensor": p.eta_tensor,
            "eta_cuda": p.eta_cuda,
            "eta_memory": dict(p.eta_memory),
            "beta": p.beta,
            "form": p.form,
            "gpu_factors": self.gpu_factors,
            "arch_factors": self.arch_factors,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], specs: Mapping[str, GpuSpec]) -> TransferModel:
        if doc.get("version") != 1:
            raise ValueError(f"transfer model: version must be 1, got {doc.get('version')!r}")
        params = RooflineParams(
            doc["eta_tensor"], doc["eta_cuda"], dict(doc["eta_memory"]), doc["beta"], doc["form"]
        )
        return cls(params, dict(specs), dict(doc.get("gpu_factors", {})), dict(doc.get("arch_factors", {})))


def calibrate(
    rows: Sequence[CalibrationRow],
    costs: Mapping[str, WorkloadCost],
    specs: Mapping[str, GpuSpec],
    *,
    batch: int = 256,
    form: str = "sum",
    betas: Sequence[float] = BETA_GRID,
    per_gpu_factors: bool = True,
) -> TransferModel:
    """Fit the global efficiencies and the ``k_g`` factors; see the module docstring.

    ``costs`` maps a precision family (``"full"``, ``"half"``) to the workload cost of the
    calibration model at that precision.  ``eta_cuda`` stays at :data:`ETA_CUDA_PRIOR` when no
    row exercises CUDA-core math (fp32), since nothing else identifies it.
    """
    groups = _group_rows(rows)
    model = TransferModel(RooflineParams(form=form), dict(specs))
    prepared = [
        _prepare_group(model.spec(gpu), prec, costs, batch, target) for (gpu, prec), target in groups.items()
    ]
    model.params = _grid_fit(prepared, form, betas)
    if per_gpu_factors:
        _fit_factors(model, groups, costs, batch)
    return model


def _prepare_group(
    spec: GpuSpec, prec: str, costs: Mapping[str, WorkloadCost], batch: int, target_ms_per_image: float
) -> dict[str, Any]:
    import numpy as np

    cost = costs[precision_family(prec)]
    arrays = [cost.arrays(p, batch) for p in PHASES]
    peak = spec.peak_tflops(prec)
    if not peak or not spec.memory_bandwidth_gb_s:
        raise ValueError(f"gpu {spec.name}: no {prec} peak or memory bandwidth in its spec")
    return {
        "unit": compute_unit(spec, prec),
        "family": precision_family(prec),
        "compute_ms": np.concatenate([a[0] for a in arrays]) / (peak * 1e9) / batch,
        "bytes_gb": np.concatenate([a[1] for a in arrays]) / 1e9 / batch,
        "w_ratio": spec.memory_bandwidth_gb_s / W_REF_GB_S,
        "y": math.log(target_ms_per_image),
    }


def _grid_fit(groups: Sequence[Mapping[str, Any]], form: str, betas: Sequence[float]) -> RooflineParams:
    """Least squares in log time over a log-spaced grid of every efficiency and each ``β``."""
    import numpy as np

    eta = np.asarray(ETA_GRID)
    has_cuda = any(g["unit"] == "cuda" for g in groups)
    best: tuple[float, RooflineParams] = (math.inf, RooflineParams(form=form))
    for beta in betas:
        # predicted ms per image for every (eta_c, eta_m) pair: shape (n_eta_c, n_eta_m)
        def grid_pred(g: Mapping[str, Any], beta: float = beta) -> Any:
            mem_ms = g["bytes_gb"] / (W_REF_GB_S * g["w_ratio"] ** beta) * 1e3  # at eta_m = 1
            if form == "max":
                c = g["compute_ms"][None, None, :] / eta[:, None, None]
                m = mem_ms[None, None, :] / eta[None, :, None]
                return np.maximum(c, m).sum(axis=2)
            return g["compute_ms"].sum() / eta[:, None] + mem_ms.sum() / eta[None, :]

        sq = [(g, (np.log(grid_pred(g)) - g["y"]) ** 2) for g in groups]
        # tensor groups: loss(eta_t, eta_m[fam]); cuda groups: loss(eta_cuda, eta_m[full])
        tensor = {
            fam: sum(
                (e for g, e in sq if g["unit"] == "tensor" and g["family"] == fam),
                np.zeros((len(eta), len(eta))),
            )
            for fam in ("full", "half")
        }
        cuda = sum((e for g, e in sq if g["unit"] == "cuda"), np.zeros((len(eta), len(eta))))
        for i_t in range(len(eta)):
            half_best = int(np.argmin(tensor["half"][i_t]))
            if has_cuda:
                full_loss = tensor["full"][i_t][None, :] + cuda  # (eta_cuda, eta_m_full)
                flat = np.unravel_index(int(np.argmin(full_loss)), full_loss.shape)
                i_c, i_m = int(flat[0]), int(flat[1])
            else:
                i_c, i_m = None, int(np.argmin(tensor["full"][i_t]))
                full_loss = tensor["full"][i_t][None, :]
            loss = float(full_loss[0 if i_c is None else i_c, i_m] + tensor["half"][i_t][half_best])
            if loss < best[0]:
                params = RooflineParams(
                    eta_tensor=float(eta[i_t]),
                    eta_cuda=ETA_CUDA_PRIOR if i_c is None else float(eta[i_c]),
                    eta_memory={"full": float(eta[i_m]), "half": float(eta[half_best])},
                    beta=float(beta),
                    form=form,
                )
                best = (loss, params)
    return best[1]


def _group_rows(rows: Sequence[CalibrationRow]) -> dict[tuple[str, str], float]:
    """``{(gpu, precision): median ms per image}`` over the published rows of each group."""
    by: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        by.setdefault((r.gpu, r.precision), []).append(1e3 / r.images_per_s)
    return {k: statistics.median(v) for k, v in by.items()}


def _fit_factors(
    model: TransferModel,
    groups: Mapping[tuple[str, str], float],
    costs: Mapping[str, WorkloadCost],
    batch: int,
) -> None:
    logs: dict[str, list[float]] = {}
    for (gpu, prec), ms_per_image in groups.items():
        spec = model.spec(gpu)
        pred = (
            sum(roofline_ms(costs[precision_family(prec)], batch, spec, model.params, prec).values()) / batch
        )
        logs.setdefault(spec.name, []).append(math.log(ms_per_image / pred))
    model.gpu_factors = {g: math.exp(statistics.fmean(v)) for g, v in logs.items()}
    by_arch: dict[str, list[float]] = {}
    for g, k in model.gpu_factors.items():
        by_arch.setdefault(model.spec(g).architecture, []).append(math.log(k))
    model.arch_factors = {a: math.exp(statistics.fmean(v)) for a, v in by_arch.items() if a}
