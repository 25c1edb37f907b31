"""The training step's workload, counted on the ``meta`` device: per-operator FLOPs and bytes.

This is the one workload counter of the project. The agent runs it where the model's code may
run (its own VM, or a local subprocess the operator allowed) and posts the result with the
profile (``"workload"``, see ``trace_workload``), so the planner never imports a team's model;
the planner runs it on the server for library models only (``planner.oracle.workload_for_spec``).

:func:`count_workload` runs one training step under a dispatch mode that records, for every aten
operator ``i`` of forward, backward and optimizer, its floating-point operations ``F_i`` (the
formulas of ``torch.utils.flop_counter``, i.e. what ``FlopCounterMode`` counts) and the bytes it
touches ``M_i = Σ |inputs| + Σ |outputs|`` (view operators move nothing and are skipped). It
does so at two batch sizes and keeps ``F_i(b) = F_i⁰ + F_i¹·b``, ``M_i(b) = M_i⁰ + M_i¹·b``:
weights are batch independent, activations proportional to the batch.

Operator classes (:func:`op_class`, :data:`OP_CLASSES`): each operator belongs to one class whose
kernels behave alike on a GPU — ``conv_dense``, ``conv_grouped``, ``conv_depthwise`` (the
recorder tags ``aten.convolution``/``convolution_backward`` by their ``groups`` argument:
depthwise when every group has one input channel), ``matmul`` (``mm``/``addmm``: linear layers),
``attention`` (batched matmuls ``bmm``/``baddbmm`` and the fused scaled-dot-product kernels:
in the models here a batched matmul is the ``QKᵀ``/``PV`` product of attention), ``norm``
(batch/layer/group/RMS norm and their backwards), ``reduction`` (softmax, pooling, sums, losses),
``embedding`` (embedding lookups, gathers, scatters, indexing), ``elementwise`` (everything
else: activations, adds, copies, casts) and ``optimizer`` (every operator of the optimizer
step). :meth:`WorkloadCost.class_sums` adds the per-operator lines of each class, which is all
the planner's compute model needs (it is linear in FLOPs, bytes and kernel counts per class).

Torch only (no Django, no planner): it travels with the agent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PHASES = ("forward", "backward", "optimizer")
WORKLOAD_VERSION = 1
# A posted trace is user input: bounds that no real model comes near.
MAX_TRACE_OPS = 200_000


OP_CLASSES = (
    "conv_dense",
    "conv_grouped",
    "conv_depthwise",
    "matmul",
    "attention",
    "norm",
    "elementwise",
    "reduction",
    "embedding",
    "optimizer",
)
# Classes whose FLOPs run on tensor cores (or the FP32 FMA pipes): the GEMM-like ones.
GEMM_CLASSES = ("conv_dense", "conv_grouped", "conv_depthwise", "matmul", "attention")

_CONV_OPS = {
    "convolution",
    "convolution_backward",
    "_convolution",
    "conv2d",
    "conv3d",
    "conv1d",
    "cudnn_convolution",
    "mkldnn_convolution",
}
_MATMUL_OPS = {"mm", "addmm", "matmul", "linear", "_addmm_activation", "addmv", "mv", "dot", "_int_mm"}
_ATTENTION_OPS = {"bmm", "baddbmm"}
_REDUCTION_PARTS = (
    "softmax",
    "pool",
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "var",
    "std",
    "nll_loss",
    "cross_entropy",
    "logsumexp",
    "cumsum",
    "topk",
    "sort",
    "argmax",
    "argmin",
    "norm",
)
_EMBEDDING_PARTS = ("embedding", "index", "gather", "scatter", "take")


def op_class(name: str, phase: str = "forward") -> str:
    """The class of one recorded operator (see the module docstring); ``name`` is the recorded
    name, e.g. ``aten.convolution:depthwise`` or ``aten.addmm``."""
    if phase == "optimizer":
        return "optimizer"
    base, _, variant = name.partition(":")
    base = base.removeprefix("aten.").split(".")[0]
    if base in _CONV_OPS:
        return f"conv_{variant}" if variant in ("dense", "grouped", "depthwise") else "conv_dense"
    if base in _MATMUL_OPS:
        return "matmul"
    if base in _ATTENTION_OPS or "attention" in base:
        return "attention"
    if "norm" in base and base not in ("norm", "linalg_vector_norm", "renorm"):
        return "norm"
    if any(part in base for part in _EMBEDDING_PARTS):
        return "embedding"
    if any(part in base for part in _REDUCTION_PARTS):
        return "reduction"
    return "elementwise"


@dataclass(frozen=True)
class ClassSums:
    """One (phase, class): ``flops(b) = f0 + f1·b``, ``bytes(b) = m0 + m1·b``, ``kernels`` operators."""

    f0: float = 0.0
    f1: float = 0.0
    m0: float = 0.0
    m1: float = 0.0
    kernels: int = 0

    def at(self, batch: float) -> tuple[float, float]:
        return max(self.f0 + self.f1 * batch, 0.0), max(self.m0 + self.m1 * batch, 0.0)


def precision_family(precision: str) -> str:
    """``"half"`` for fp16/bf16/amp (16-bit activations), else ``"full"``."""
    return "half" if precision.lower() in ("fp16", "bf16", "amp") else "full"


@dataclass(frozen=True)
class OpCost:
    """One operator: ``flops(b) = f0 + f1·b``, ``bytes(b) = m0 + m1·b``."""

    name: str
    f0: float
    f1: float
    m0: float
    m1: float


@dataclass(frozen=True)
class WorkloadCost:
    """Per-operator FLOPs and bytes of one training step, linear in the batch size."""

    model_spec: str
    precision: str
    ops: Mapping[str, tuple[OpCost, ...]]
    param_count: int = 0

    def arrays(self, phase: str, batch: float) -> tuple[Any, Any]:
        import numpy as np

        ops = self.ops[phase]
        flops = np.array([max(o.f0 + o.f1 * batch, 0.0) for o in ops])
        nbytes = np.array([max(o.m0 + o.m1 * batch, 0.0) for o in ops])
        return flops, nbytes

    def totals(self, batch: float) -> dict[str, tuple[float, float]]:
        """``{phase: (FLOPs, bytes)}`` at ``batch``."""
        out = {}
        for p in PHASES:
            f, m = self.arrays(p, batch)
            out[p] = (float(f.sum()), float(m.sum()))
        return out

    def class_sums(self) -> dict[str, dict[str, ClassSums]]:
        """``{phase: {class: ClassSums}}``: the operators of each class added up (cached)."""
        cached = self.__dict__.get("_class_sums")
        if cached is None:
            cached = {}
            for p in PHASES:
                acc: dict[str, list[float]] = {}
                for o in self.ops[p]:
                    a = acc.setdefault(op_class(o.name, p), [0.0, 0.0, 0.0, 0.0, 0])
                    a[0] += o.f0
                    a[1] += o.f1
                    a[2] += o.m0
                    a[3] += o.m1
                    a[4] += 1
                cached[p] = {c: ClassSums(a[0], a[1], a[2], a[3], int(a[4])) for c, a in acc.items()}
            object.__setattr__(self, "_class_sums", cached)  # frozen: a derived cache, not state
        return cached

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "model_spec": self.model_spec,
            "precision": self.precision,
            "param_count": self.param_count,
            "ops": {p: [[o.name, o.f0, o.f1, o.m0, o.m1] for o in ops] for p, ops in self.ops.items()},
        }

    @classmethod
    def from_dict(cls, doc: Any) -> WorkloadCost:
        """Read :meth:`to_dict`'s form; a posted trace is untrusted, so every field is checked
        (``ValueError`` says which)."""
        if not isinstance(doc, Mapping) or doc.get("version") != 1:
            raise ValueError(f"workload cost: version must be 1, got {_get(doc, 'version')!r}")
        ops = doc.get("ops")
        if not isinstance(ops, Mapping) or set(ops) != set(PHASES):
            raise ValueError(f"workload cost: ops must have exactly the phases {', '.join(PHASES)}")
        if sum(len(v) if isinstance(v, list | tuple) else 0 for v in ops.values()) > MAX_TRACE_OPS:
            raise ValueError(f"workload cost: more than {MAX_TRACE_OPS} operators")
        return cls(
            _text(doc.get("model_spec"), "model_spec"),
            _text(doc.get("precision"), "precision"),
            {p: tuple(_op(o) for o in _items(ops[p], f"ops.{p}")) for p in PHASES},
            int(_number(doc.get("param_count", 0), "param_count")),
        )


def count_workload(
    builder: Callable[[], Any],
    input_shape: Sequence[int],
    *,
    precision: str = "fp32",
    model_spec: str = "",
    optimizer: str = "sgd",
    num_classes: int | None = None,
    batch_sizes: tuple[int, int] = (2, 4),
    make_batch: Callable[[int], tuple[Any, Any]] | None = None,
) -> WorkloadCost:
    """Count per-operator FLOPs and bytes of one training step on the ``meta`` device.

    ``builder()`` must create the model (it is called under ``torch.device("meta")``);
    ``make_batch(b) -> (inputs, targets)`` overrides the default random float inputs of
    ``input_shape`` with integer class targets and a cross-entropy loss.
    """
    per_batch = [
        _trace_step(builder, input_shape, b, precision, optimizer, num_classes, make_batch)
        for b in batch_sizes
    ]
    (b1, (ops1, params)), (b2, (ops2, _)) = zip(batch_sizes, per_batch, strict=True)
    phases = {}
    for p in PHASES:
        a, c = ops1[p], ops2[p]
        if len(a) != len(c) or any(x[0] != y[0] for x, y in zip(a, c, strict=True)):
            a = [("aggregate", sum(x[1] for x in a), sum(x[2] for x in a))]
            c = [("aggregate", sum(x[1] for x in c), sum(x[2] for x in c))]
        phases[p] = tuple(_linear_op(x, y, b1, b2) for x, y in zip(a, c, strict=True))
    return WorkloadCost(model_spec, precision, phases, params)


def _linear_op(x: tuple[str, float, float], y: tuple[str, float, float], b1: int, b2: int) -> OpCost:
    f1 = (y[1] - x[1]) / (b2 - b1)
    m1 = (y[2] - x[2]) / (b2 - b1)
    return OpCost(x[0], x[1] - f1 * b1, f1, x[2] - m1 * b1, m1)


def _trace_step(
    builder: Callable[[], Any],
    input_shape: Sequence[int],
    batch: int,
    precision: str,
    optimizer: str,
    num_classes: int | None,
    make_batch: Callable[[int], tuple[Any, Any]] | None,
) -> tuple[dict[str, list[tuple[str, float, float]]], int]:
    import torch
    import torch.nn.functional as fn

    dtype = torch.float16 if precision_family(precision) == "half" else torch.float32
    with torch.device("meta"):
        model = builder().to(dtype)
        if make_batch is not None:
            x, y = make_batch(batch)
        else:
            x = torch.randn(batch, *input_shape, dtype=dtype)
            y = None
    params = [p for p in model.parameters() if p.requires_grad]
    opt = (
        torch.optim.Adam(params, lr=1e-3, foreach=False)
        if optimizer == "adam"
        else torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=False)
    )
    recorder = _CostRecorder()
    with recorder.phase("forward"):
        out = model(x)
        if isinstance(out, tuple | list):
            out = out[0]
        if y is None and out.dim() == 2:
            classes = num_classes or out.shape[1]
            y = torch.zeros(batch, dtype=torch.long, device="meta").clamp_(0, classes - 1)
        loss = fn.cross_entropy(out, y) if y is not None and out.dim() == 2 else out.float().mean()
    with recorder.phase("backward"):
        loss.backward()
    with recorder.phase("optimizer"):
        opt.step()
    return recorder.ops, sum(p.numel() for p in params)


class _CostRecorder:
    """Collects ``(op name, FLOPs, bytes)`` per phase through a ``TorchDispatchMode``."""

    def __init__(self) -> None:
        self.ops: dict[str, list[tuple[str, float, float]]] = {p: [] for p in PHASES}

    def phase(self, name: str) -> Any:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten
        from torch.utils.flop_counter import flop_registry

        sink = self.ops[name]

        def nbytes(obj: Any) -> float:
            return float(
                sum(t.numel() * t.element_size() for t in tree_flatten(obj)[0] if isinstance(t, torch.Tensor))
            )

        class Mode(TorchDispatchMode):  # type: ignore[misc]  # torch is not followed by mypy: Any
            def __torch_dispatch__(
                self,
                func: Any,
                types: Any,
                args: tuple[Any, ...] = (),
                kwargs: dict[str, Any] | None = None,
            ) -> Any:
                kwargs = kwargs or {}
                packet = func._overloadpacket
                if packet not in flop_registry and not func.is_view:
                    decomposed = func.decompose(*args, **kwargs)
                    if decomposed is not NotImplemented:
                        return decomposed
                out = func(*args, **kwargs)
                if func.is_view:
                    return out
                flops = (
                    float(flop_registry[packet](*args, **kwargs, out_val=out))
                    if packet in flop_registry
                    else 0.0
                )
                name = _op_name(packet, args)
                if name.startswith("aten.convolution_backward:") and not name.endswith(":dense"):
                    flops = _grouped_conv_backward_flops(args)
                sink.append((name, flops, nbytes((args, kwargs)) + nbytes(out)))
                return out

        return Mode()


def _op_name(packet: Any, args: Sequence[Any]) -> str:
    """The operator's name; convolutions carry their kind (``:dense``, ``:grouped``,
    ``:depthwise``), read from ``groups`` and the weight's input channels per group."""
    name = str(packet)
    base = name.removeprefix("aten.")
    try:
        if (
            base == "convolution"
        ):  # (input, weight, bias, stride, padding, dilation, transposed, out_pad, groups)
            groups, weight = int(args[8]), args[1]
        elif base == "convolution_backward":  # (grad_out, input, weight, bias_sizes, ..., groups, mask)
            groups, weight = int(args[9]), args[2]
        else:
            return name
        per_group_in = int(weight.shape[1])
    except (IndexError, TypeError, AttributeError, ValueError):
        return name
    kind = "dense" if groups == 1 else "depthwise" if per_group_in == 1 else "grouped"
    return f"{name}:{kind}"


def _grouped_conv_backward_flops(args: Sequence[Any]) -> float:
    """FLOPs of a grouped/depthwise ``convolution_backward``: each requested gradient (input,
    weight) costs what the forward convolution costs, ``2·|grad_out|·|weight[1:]|``.
    (``torch.utils.flop_counter`` ignores ``groups`` for the weight gradient and counts a
    depthwise 7×7 backward about 250× too high.)"""
    grad_out, weight, mask = args[0], args[2], args[10]
    forward = 2.0 * grad_out.numel() * math.prod(int(d) for d in weight.shape[1:])
    return float(forward * (int(bool(mask[0])) + int(bool(mask[1]))))


# --------------------------------------------------------------------------- a full trace


def trace_workload(
    build: Callable[[], Any],
    input_shape: Sequence[int],
    *,
    precision: str = "fp32",
    model_spec: str = "",
    num_classes: int | None = 1000,
) -> dict[str, Any]:
    """Everything the planner needs of a model, as a JSON-able dict (``planner.oracle.Workload``'s
    form): per-operator costs, DDP bucket sizes, static memory (weights, gradients, optimizer
    state) and saved activation bytes per sample. ``build()`` is called under the meta device,
    so nothing is allocated and no weights are read."""
    import torch

    from workload.buckets import ddp_buckets
    from workload.memory import measure_saved_activations, static_memory

    shape = tuple(int(x) for x in input_shape)
    cost = count_workload(build, shape, precision=precision, model_spec=model_spec, num_classes=num_classes)
    half = precision_family(precision) == "half"
    with torch.device("meta"):
        model = build()
        batch = 4
        x = torch.randn(batch, *shape, dtype=torch.float16 if half else torch.float32)
    params = [p for p in model.parameters() if p.requires_grad]
    static = static_memory(model).total_bytes
    if half:  # AMP keeps fp32 weights and grads; activations are half precision (counted below)
        static += sum(p.numel() * 2 for p in params)
        model = model.half()
    saved = measure_saved_activations(lambda: model(x), exclude=list(model.parameters()))
    sizes = [p.numel() * p.element_size() for p in params]
    return {
        "version": WORKLOAD_VERSION,
        "model_spec": model_spec,
        "input_shape": list(shape),
        "precision": precision,
        "cost": cost.to_dict(),
        "bucket_sizes": [b.size_bytes for b in ddp_buckets(sizes)],
        "static_bytes": int(static),
        "activation_bytes_per_sample": saved.total_bytes / batch,
    }


# --------------------------------------------------------------------------- checks of posted data


def _get(doc: Any, key: str) -> Any:
    return doc.get(key) if isinstance(doc, Mapping) else None


def _text(value: Any, name: str, limit: int = 400) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise ValueError(f"workload: {name} must be a string of at most {limit} characters")
    return value


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"workload: {name} must be a finite number ≥ 0, got {value!r}")
    return float(value)


def _items(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"workload: {name} must be a list")
    return list(value)


def _op(row: Any) -> OpCost:
    """``[name, f0, f1, m0, m1]``; intercepts may be negative (a fit through two batches)."""
    if not isinstance(row, list | tuple) or len(row) != 5:
        raise ValueError("workload: each operator is [name, f0, f1, m0, m1]")
    name = _text(row[0], "operator name", 200)
    nums = []
    for v in row[1:]:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or abs(v) > 1e21:
            raise ValueError(f"workload: operator {name!r} has a bad number {v!r}")
        nums.append(float(v))
    return OpCost(name, *nums)


def check_trace(doc: Any) -> dict[str, Any]:
    """``doc`` if it is a well-formed :func:`trace_workload` result, else ``ValueError``."""
    if not isinstance(doc, Mapping) or doc.get("version") != WORKLOAD_VERSION:
        raise ValueError(f"workload: version must be {WORKLOAD_VERSION}")
    WorkloadCost.from_dict(doc.get("cost"))
    shape = _items(doc.get("input_shape"), "input_shape")
    if not 1 <= len(shape) <= 8 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise ValueError("workload: input_shape must be 1-8 positive integers")
    buckets = _items(doc.get("bucket_sizes"), "bucket_sizes")
    if len(buckets) > 100_000:
        raise ValueError("workload: too many buckets")
    for b in buckets:
        _number(b, "bucket size")
    _number(doc.get("static_bytes"), "static_bytes")
    _number(doc.get("activation_bytes_per_sample"), "activation_bytes_per_sample")
    _text(doc.get("model_spec"), "model_spec")
    _text(doc.get("precision"), "precision", 16)
    return dict(doc)
