"""The compute profile: per-batch-size forward/backward/optimizer times and gradient buckets.

One training step is ``zero_grad -> forward + loss -> backward -> SGD(momentum) step`` on a
synthetic batch that stays on the device (no data loading is measured).

Timing:

* CUDA: ``torch.cuda.Event`` pairs recorded on the current stream around each phase, read
  after a ``torch.cuda.synchronize`` that ends every step, so each phase is GPU time in
  stream order (including any time the GPU waits for the CPU to launch kernels).
* CPU: ``time.perf_counter`` (CPU ops are synchronous).

Gradient-ready times come from ``register_post_accumulate_grad_hook`` on every trainable
parameter. On CUDA the hook records a pre-made event on the current stream (the autograd engine
runs each node under the stream of its forward op), so ready times are GPU times too; they are
relative to the end of the forward mark, i.e. the start of backward.

The hooks stay registered during the timed steps; their cost is one perf_counter or one event
record per parameter, far below a step's time.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from profiler.agent import SCHEMA_VERSION
from profiler.agent.environment import available_memory_bytes, device_info, environment, utc_now_iso
from profiler.agent.run_events import NullEventPoster
from profiler.agent.stats import summarize
from workload.buckets import DEFAULT_BUCKET_CAP_BYTES, DEFAULT_FIRST_BUCKET_BYTES, Bucket, ddp_buckets
from workload.memory import (
    BudgetExceeded,
    MemoryEstimate,
    SavedTensorMeter,
    StaticMemory,
    estimate,
    static_memory,
    tensor_bytes,
)
from workload.runs import DEVICE_DEFAULTS, PRECISIONS, ladder, precision_run
from workload.specs import load_model, logits_of

log = logging.getLogger("profiler.agent.compute")

PHASES = ("forward", "backward", "optimizer")

# Share of the progress bar given to the batch search in auto mode.
_SEARCH_SHARE = 0.1
# Default --max-memory on CPU: this share of MemAvailable when the profile starts.
_CPU_DEFAULT_MEMORY_SHARE = 0.8
# The meta-device estimate is trusted when it matches a real measurement this closely.
_META_TOLERANCE = 0.02


class ComputeError(RuntimeError):
    """The profile cannot be taken (e.g. not even the smallest batch fits)."""


@dataclass
class ComputeOptions:
    model: str
    input_shape: tuple[int, ...]
    batch_sizes: list[int] | None = None  # None: search the largest batch ("auto")
    device: str = "cpu"
    precision: str = "fp32"
    iters: int | None = None  # timed steps per batch size (at most)
    warmup: int | None = None  # untimed steps per batch size
    min_iters: int = 2  # timed steps always taken, whatever the time budget
    max_seconds_per_size: float | None = None  # stop timing a size after this (once min_iters are done)
    max_memory: int | None = None  # bytes; CPU: bound on the estimate, CUDA: caps the allocator
    max_batch: int = 1024  # upper bound of the batch search
    min_batch: int = 1
    num_classes: int = 1000
    lr: float = 0.01
    momentum: float = 0.9
    first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES
    bucket_cap_bytes: int = DEFAULT_BUCKET_CAP_BYTES
    seed: int = 0
    # seconds to measure the data loader's rate for the input's kind (profiler.agent.dataloader);
    # 0: skip it (the profile's input_pipeline is null and the planner uses its default)
    input_pipeline_seconds: float = 1.0

    def resolved(self) -> ComputeOptions:
        """A copy with the device-dependent defaults filled in and values checked."""
        kind = "cuda" if self.device.startswith("cuda") else "cpu"
        defaults = DEVICE_DEFAULTS[kind]
        out = ComputeOptions(**{**self.__dict__})
        out.warmup = defaults["warmup"] if self.warmup is None else self.warmup
        out.iters = defaults["iters"] if self.iters is None else self.iters
        if self.max_seconds_per_size is None:
            out.max_seconds_per_size = defaults["max_seconds_per_size"]
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}")
        if out.iters < 1 or out.warmup < 0 or out.min_iters < 1:
            raise ValueError("--iters and --min-iters must be >= 1 and --warmup >= 0")
        out.min_iters = min(out.min_iters, out.iters)
        if self.min_batch < 1 or self.max_batch < self.min_batch:
            raise ValueError("--max-batch must be >= --min-batch >= 1")
        if not 0 <= self.input_pipeline_seconds <= 600:
            raise ValueError("--input-pipeline-seconds must be between 0 and 600")
        return out

    def counts(self) -> tuple[int, int, float]:
        """(warmup, iters, max_seconds_per_size) of a resolved copy."""
        if self.warmup is None or self.iters is None or self.max_seconds_per_size is None:
            raise ValueError("ComputeOptions.counts() needs resolved() options")
        return self.warmup, self.iters, self.max_seconds_per_size


# -- pure helpers ------------------------------------------------------------------------


def search_max_batch(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """Largest batch in [low, high] with ``fits(batch)``, assuming fitting is monotonic.

    Doubles from ``low`` until a batch fails (or ``high`` is reached), then bisects between
    the last batch that fitted and the first that failed. None when ``low`` does not fit.
    """
    last_fit: int | None = None
    first_fail: int | None = None
    batch = low
    while True:
        if fits(batch):
            last_fit = batch
            if batch >= high:
                return batch
            batch = min(batch * 2, high)
        else:
            first_fail = batch
            break
    if last_fit is None:
        return None
    while first_fail - last_fit > 1:
        mid = (last_fit + first_fail) // 2
        if fits(mid):
            last_fit = mid
        else:
            first_fail = mid
    return last_fit


# -- clocks ------------------------------------------------------------------------------

_MARKS = ("start", "forward", "backward", "optimizer")


class CpuClock:
    def __init__(self) -> None:
        self.marks: dict[str, float] = {}

    def prepare(self, num_stamps: int) -> None:
        pass

    def mark(self, name: str) -> None:
        self.marks[name] = time.perf_counter()

    def stamp(self, index: int) -> float:
        return time.perf_counter()

    def sync(self) -> None:
        pass

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(end - start) * 1000.0


class CudaClock:
    """Events made before the timed region (creation is not free), recorded inside it."""

    def __init__(self, device: Any) -> None:
        import torch

        self._torch = torch
        self._device = device
        self.marks = {name: torch.cuda.Event(enable_timing=True) for name in _MARKS}
        self._stamps: list[Any] = []

    def prepare(self, num_stamps: int) -> None:
        while len(self._stamps) < num_stamps:
            self._stamps.append(self._torch.cuda.Event(enable_timing=True))

    def mark(self, name: str) -> None:
        self.marks[name].record()  # on the current stream

    def stamp(self, index: int) -> Any:
        # Called from the autograd thread; its current stream is the one the forward op
        # ran on, so the event completes when this gradient has been accumulated.
        event = self._stamps[index]
        event.record()
        return event

    def sync(self) -> None:
        self._torch.cuda.synchronize(self._device)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))


class GradReadyRecorder:
    """Stamps the moment each trainable parameter's gradient is accumulated."""

    def __init__(self, params: list[Any], clock: CpuClock | CudaClock) -> None:
        self._clock = clock
        self.active = False
        self.stamps: dict[int, Any] = {}
        clock.prepare(len(params))
        self._handles = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(params)]

    def _hook(self, index: int) -> Callable[[Any], None]:
        def on_ready(_param: Any) -> None:
            if self.active:
                self.stamps[index] = self._clock.stamp(index)

        return on_ready

    def begin(self) -> None:
        self.stamps = {}
        self.active = True

    def end(self) -> None:
        self.active = False

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


@dataclass
class StepTiming:
    forward_ms: float
    backward_ms: float
    optimizer_ms: float
    ready_ms: dict[int, float] = field(default_factory=dict)  # param index -> ms since backward start


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    # A collection inside a timed region would show up as a random slow phase.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "ALLOC_FAILED" in text)


def free_device_memory(device: Any) -> None:
    gc.collect()
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


# -- the trainer -------------------------------------------------------------------------


class Trainer:
    """Model, optimizer and synthetic data on one device; runs (timed) training steps."""

    def __init__(self, model: Any, options: ComputeOptions) -> None:
        import torch

        self.torch = torch
        self.options = options
        self.device = torch.device(options.device)
        self.model = model.to(self.device).train()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        if not self.params:
            raise ComputeError("the model has no trainable parameters")
        self.optimizer = torch.optim.SGD(self.params, lr=options.lr, momentum=options.momentum)
        # What runs, not what was asked: "amp" on CPU is bf16 autocast (the profile records both).
        self.precision = precision_run(options.precision, self.device.type)
        self.autocast_dtype = self._autocast_dtype(self.precision)
        # fp16 autocast needs loss scaling; bf16 has fp32's range and does not.
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "amp" else None
        self.clock: CpuClock | CudaClock = (
            CudaClock(self.device) if self.device.type == "cuda" else CpuClock()
        )
        self.recorder = GradReadyRecorder(self.params, self.clock)
        self.output_classes: int | None = None  # set by probe_output()
        self.static: StaticMemory = static_memory(self.model, momentum=options.momentum != 0)

    def _autocast_dtype(self, precision: str) -> Any:
        """``precision`` is the one that runs (``precision_run``): "amp" only on CUDA."""
        if precision == "fp32":
            return None
        if precision == "amp":
            return self.torch.float16
        return self.torch.bfloat16

    def autocast(self) -> Any:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return self.torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def batch(self, size: int) -> tuple[Any, Any]:
        torch = self.torch
        x = torch.randn(size, *self.options.input_shape, device=self.device)
        classes = self.output_classes or self.options.num_classes
        y = torch.randint(0, classes, (size,), device=self.device)
        return x, y

    def probe_output(self) -> None:
        """Find the output's class count with a batch of 2 (batch 1 breaks BatchNorm)."""
        x = self.torch.randn(2, *self.options.input_shape, device=self.device)
        with self.torch.no_grad(), self.autocast():
            logits = logits_of(self.model(x))
        self.output_classes = int(logits.shape[1]) if logits.dim() == 2 else None

    def loss(self, output: Any, y: Any) -> Any:
        logits = logits_of(output)
        if self.output_classes is not None and logits.dim() == 2:
            return self.torch.nn.functional.cross_entropy(logits.float(), y)
        # Not a [batch, classes] output: any scalar that depends on every output will do.
        return logits.float().pow(2).mean()

    def recover_from_oom(self) -> None:
        """Back to a clean state after a CUDA out-of-memory error anywhere in a step.

        Gradients are dropped, and a GradScaler is replaced by a fresh one at the same scale:
        an OOM between its ``unscale_`` and ``update`` would leave it refusing the next step.
        """
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler = self.torch.amp.GradScaler("cuda", init_scale=self.scaler.get_scale())
        free_device_memory(self.device)

    def smallest_batch(self, start: int) -> tuple[int, str | None]:
        """``start``, or 2 when a training-mode forward at batch 1 fails (why, as the 2nd item).

        BatchNorm in training mode rejects a single value per channel, which a batch of 1
        gives after global pooling (e.g. regnet's squeeze-excite blocks).
        """
        if start > 1:
            return start, None
        x = self.torch.randn(1, *self.options.input_shape, device=self.device)
        try:
            with self.torch.no_grad(), self.autocast():
                self.model(x)
        except Exception as exc:
            if is_oom(exc):
                raise
            return 2, f"{type(exc).__name__}: {exc}"
        return 1, None

    def input_bytes(self, size: int) -> int:
        x, y = self.batch(1)
        return size * (tensor_bytes(x) + tensor_bytes(y))

    def step(
        self, x: Any, y: Any, timed: bool = False, meter: SavedTensorMeter | None = None
    ) -> StepTiming | None:
        clock, recorder = self.clock, self.recorder
        self.optimizer.zero_grad(set_to_none=True)
        clock.mark("start")
        with meter if meter is not None else contextlib.nullcontext(), self.autocast():
            loss = self.loss(self.model(x), y)
        clock.mark("forward")
        if timed:
            recorder.begin()
        try:
            (self.scaler.scale(loss) if self.scaler else loss).backward()
        finally:
            recorder.end()
        clock.mark("backward")
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        clock.mark("optimizer")
        clock.sync()
        del loss
        if not timed:
            return None
        marks = clock.marks
        return StepTiming(
            forward_ms=clock.elapsed_ms(marks["start"], marks["forward"]),
            backward_ms=clock.elapsed_ms(marks["forward"], marks["backward"]),
            optimizer_ms=clock.elapsed_ms(marks["backward"], marks["optimizer"]),
            ready_ms={i: clock.elapsed_ms(marks["forward"], s) for i, s in recorder.stamps.items()},
        )

    def ensure_optimizer_state(self) -> None:
        """Make SGD's momentum buffers exist even if no step was taken yet.

        A zero buffer gives the same update as SGD's first step (which sets the buffer to
        the gradient when there is no dampening), so this changes memory, not results.
        """
        if self.options.momentum == 0:
            return
        for param in self.params:
            state = self.optimizer.state[param]
            if state.get("momentum_buffer") is None:
                state["momentum_buffer"] = self.torch.zeros_like(
                    param, memory_format=self.torch.preserve_format
                )

    def saved_activations_forward(self, size: int, budget_bytes: int | None = None) -> Any:
        """Forward only, under a meter: the activations a step at ``size`` saves."""
        x, y = self.batch(size)
        meter = SavedTensorMeter(self._excluded_tensors(x, y), budget_bytes)
        with meter, self.autocast():
            loss = self.loss(self.model(x), y)
        del loss
        return meter.result

    def _excluded_tensors(self, x: Any, y: Any) -> list[Any]:
        return [*self.model.parameters(), *self.model.buffers(), x, y]

    def meter_for(self, x: Any, y: Any) -> SavedTensorMeter:
        return SavedTensorMeter(self._excluded_tensors(x, y))

    def close(self) -> None:
        self.recorder.remove()


# -- FLOPs -------------------------------------------------------------------------------


def flops_per_sample(trace: dict[str, Any] | None) -> tuple[float | None, float | None]:
    """(forward, forward+backward) FLOPs per sample at batch 2, from the workload trace: the
    project's one FLOP counter (``workload.cost``: ``torch.utils.flop_counter``'s
    formulas, grouped and depthwise convolutions counted right). ``(None, None)`` without one."""
    from workload.cost import WorkloadCost

    if not trace:
        return None, None
    totals = WorkloadCost.from_dict(trace["cost"]).totals(2)
    forward = totals["forward"][0] / 2
    return float(forward), float(forward + totals["backward"][0] / 2)


def workload_trace(options: ComputeOptions) -> dict[str, Any] | None:
    """The model's workload (``workload.cost.trace_workload``) for the planner, which
    never imports a team's model itself; ``None`` (with a warning) when the model cannot be
    traced on the meta device, so a profile is never lost to it."""
    from workload.cost import trace_workload

    precision = "amp" if options.precision in ("amp", "bf16") else "fp32"
    try:
        return trace_workload(
            lambda: load_model(options.model, options.num_classes, options.input_shape, allow_code=True),
            options.input_shape,
            precision=precision,
            model_spec=options.model,
            num_classes=options.num_classes,
        )
    except Exception as exc:  # ops without meta kernels, data-dependent code, ...
        log.warning("workload trace failed (plans from this profile need a library model spec): %s", exc)
        return None


# -- the batch search --------------------------------------------------------------------


@dataclass
class Probe:
    batch_size: int
    fits: bool
    reason: str | None = None
    method: str = "step"
    estimated_bytes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "batch_size": self.batch_size,
            "fits": self.fits,
            "reason": self.reason,
            "method": self.method,
        }
        if self.estimated_bytes is not None:
            out["estimated_bytes"] = self.estimated_bytes
        return out


class CpuMemoryProbe:
    """Does a step at batch ``b`` fit in ``max_memory``? Judged by the memory estimate.

    Uses the meta device (free) when its saved-activation bytes match a real forward at a
    small batch; otherwise real forwards that abort as soon as they pass the budget.
    """

    def __init__(self, trainer: Trainer, max_memory: int) -> None:
        self.trainer = trainer
        self.max_memory = max_memory
        self.meta_model = self._meta_model()

    def _meta_model(self) -> Any:
        torch, options = self.trainer.torch, self.trainer.options
        if self.trainer.autocast_dtype is not None:
            return None  # CPU autocast does not apply to meta tensors: the bytes would differ
        try:
            with torch.device("meta"):
                model = load_model(
                    options.model, options.num_classes, options.input_shape, allow_code=True
                ).train()
            real = self.trainer.saved_activations_forward(2)
            meta = self._meta_saved(model, 2)
        except Exception as exc:  # ops without meta kernels, data-dependent code, ...
            log.info("meta-device memory estimate unavailable (%s); using real forwards", exc)
            return None
        if abs(meta.total_bytes - real.total_bytes) > _META_TOLERANCE * max(real.total_bytes, 1):
            log.info(
                "meta estimate %d != real %d bytes; using real forwards", meta.total_bytes, real.total_bytes
            )
            return None
        return model

    def _meta_saved(self, model: Any, size: int) -> Any:
        torch = self.trainer.torch
        x = torch.empty(size, *self.trainer.options.input_shape, device="meta")
        y = torch.zeros(size, dtype=torch.long, device="meta")
        meter = SavedTensorMeter([*model.parameters(), *model.buffers(), x, y])
        with meter:
            loss = self.trainer.loss(model(x), y)  # the loss saves tensors too
        del loss
        return meter.result

    def __call__(self, size: int) -> Probe:
        trainer = self.trainer
        fixed = trainer.static.total_bytes + trainer.input_bytes(size)
        if self.meta_model is not None:
            saved = self._meta_saved(self.meta_model, size)
            method = "meta"
        else:
            method = "forward"
            try:
                saved = trainer.saved_activations_forward(size, budget_bytes=max(self.max_memory - fixed, 0))
            except BudgetExceeded:
                free_device_memory(trainer.device)
                return Probe(size, False, "estimated peak memory exceeds --max-memory", method)
        total = estimate(trainer.static, trainer.input_bytes(size), saved).total_bytes
        if total > self.max_memory:
            return Probe(size, False, "estimated peak memory exceeds --max-memory", method, total)
        return Probe(size, True, None, method, total)


class CudaStepProbe:
    """Does a real training step at batch ``b`` run without a CUDA out-of-memory error?"""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def _step(self, size: int) -> None:
        x, y = self.trainer.batch(size)
        self.trainer.step(x, y)

    def __call__(self, size: int) -> Probe:
        trainer = self.trainer
        try:
            self._step(size)  # in its own frame, so the failed step's tensors die with it
            fits, reason = True, None
        except Exception as exc:
            if not is_oom(exc):
                raise
            fits, reason = False, "out of memory"
        # Outside the except block: the traceback (and the tensors its frames hold) is gone.
        if fits:
            trainer.optimizer.zero_grad(set_to_none=True)
            free_device_memory(trainer.device)
        else:
            trainer.recover_from_oom()
        return Probe(size, fits, reason, "step")


# -- measuring one batch size ------------------------------------------------------------


def _bucket_rows(buckets: list[Bucket], steps: list[StepTiming]) -> list[dict[str, Any]]:
    rows = []
    for bucket in buckets:
        ready, fractions = [], []
        for step in steps:
            # A parameter that got no gradient (unused in forward) is ready when backward ends.
            t = max(step.ready_ms.get(i, step.backward_ms) for i in bucket.param_indices)
            t = min(max(t, 0.0), step.backward_ms)
            ready.append(t)
            fractions.append(t / step.backward_ms if step.backward_ms > 0 else 1.0)
        rows.append(
            {
                "index": bucket.index,
                "size_bytes": bucket.size_bytes,
                "num_params": bucket.num_params,
                "ready_ms": statistics.median(ready),
                "ready_fraction": min(max(statistics.median(fractions), 0.0), 1.0),
            }
        )
    return rows


class Progress:
    """Fraction done, from work units (batch size x steps) weighted into a share of the bar."""

    def __init__(self, start: float = 0.0, share: float = 1.0) -> None:
        self.start, self.share = start, share
        self.total = 1.0
        self.done = 0.0

    def advance(self, units: float) -> float:
        self.done = min(self.done + units, self.total)
        return self.fraction()

    def fraction(self) -> float:
        return round(self.start + self.share * self.done / self.total, 4)


class ComputeProfiler:
    def __init__(self, options: ComputeOptions, reporter: NullEventPoster | None = None) -> None:
        self.options = options.resolved()
        self.reporter = reporter or NullEventPoster()

    # The heavy lifting. Splitting by phase keeps each piece small enough to read.
    def run(self) -> dict[str, Any]:
        import torch

        options = self.options
        torch.manual_seed(options.seed)
        device = torch.device(options.device)
        if device.type == "cuda":
            if device.index is None:  # set_device and the memory calls want an explicit index
                device = torch.device("cuda", torch.cuda.current_device())
                options.device = str(device)
            torch.cuda.set_device(device)
            if options.max_memory is not None:
                total = torch.cuda.get_device_properties(device).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, options.max_memory / total), device)
        # The agent is where a team's model code may run (its VM, or a local subprocess the
        # operator allowed): it builds code specs too.
        model = load_model(options.model, options.num_classes, options.input_shape, allow_code=True)
        trainer = Trainer(model, options)
        try:
            return self._run_with(trainer)
        finally:
            trainer.close()

    def _run_with(self, trainer: Trainer) -> dict[str, Any]:
        options = self.options
        trainer.probe_output()
        workload = workload_trace(options)  # the meta device: nothing allocated, seconds at most
        forward_flops, train_flops = flops_per_sample(workload)
        # One untimed step (and, should GradScaler skip it, explicit buffers) creates the
        # optimizer state, so every probe and sample includes its memory.
        trainer.step(*trainer.batch(max(2, options.min_batch)))
        trainer.ensure_optimizer_state()
        probes: list[Probe] = []
        max_batch: int | None = None
        memory_budget = self._memory_budget(trainer)
        min_batch, why = trainer.smallest_batch(options.min_batch)
        failed: list[dict[str, Any]] = []
        if why:
            log.warning("batch 1 cannot be trained (%s); batch sizes start at 2", why)
        if options.batch_sizes is None:
            max_batch, probes = self._search(trainer, memory_budget, min_batch)
            sizes = ladder(max_batch, min_batch)
        else:
            sizes = [size for size in options.batch_sizes if size >= min_batch]
            failed = [{"batch_size": size, "reason": why} for size in options.batch_sizes if size < min_batch]
        samples, oom = self._measure_all(trainer, sizes)
        doc = self._document(trainer, forward_flops, train_flops, max_batch, probes, samples, failed + oom)
        doc["memory_budget_bytes"] = memory_budget
        doc["min_batch_size"] = min_batch
        doc["workload"] = workload
        doc["input_pipeline"] = self._input_pipeline()
        return doc

    def _input_pipeline(self) -> dict[str, Any] | None:
        """The data loader's rate for the input's kind, after the timed steps (so it cannot disturb
        them); None when skipped or when this machine cannot run the pipeline (e.g. no PIL)."""
        from profiler.agent.dataloader import profile_entry

        if self.options.input_pipeline_seconds <= 0:
            return None
        try:
            return profile_entry(self.options.input_shape, self.options.input_pipeline_seconds)
        except (ImportError, RuntimeError, ValueError) as exc:
            log.warning("input pipeline not measured: %s", exc)
            return None

    def _memory_budget(self, trainer: Trainer) -> int | None:
        if self.options.max_memory is not None:
            return self.options.max_memory
        if trainer.device.type == "cpu":
            available = available_memory_bytes()
            return int(available * _CPU_DEFAULT_MEMORY_SHARE) if available else None
        return None

    def _search(self, trainer: Trainer, memory_budget: int | None, min_batch: int) -> tuple[int, list[Probe]]:
        options = self.options
        if trainer.device.type == "cuda":
            probe: Callable[[int], Probe] = CudaStepProbe(trainer)
        else:
            if memory_budget is None:
                raise ComputeError(
                    "--batch-sizes auto on CPU needs --max-memory (MemAvailable is unreadable)"
                )
            probe = CpuMemoryProbe(trainer, memory_budget)
        probes: list[Probe] = []
        expected = 2 * max(1, options.max_batch.bit_length())  # doubling + bisection, roughly

        def fits(size: int) -> bool:
            result = probe(size)
            probes.append(result)
            log.info(
                "batch search: %d %s", size, "fits" if result.fits else f"does not fit ({result.reason})"
            )
            self.reporter.progress(
                phase="batch_search",
                batch_size=size,
                fits=result.fits,
                fraction=round(_SEARCH_SHARE * min(len(probes) / expected, 1.0), 4),
            )
            return result.fits

        max_batch = search_max_batch(fits, min_batch, max(options.max_batch, min_batch))
        free_device_memory(trainer.device)
        if max_batch is None:
            raise ComputeError(
                f"batch size {min_batch} does not fit "
                + (
                    "in GPU memory"
                    if trainer.device.type == "cuda"
                    else f"in --max-memory {memory_budget} bytes"
                )
            )
        return max_batch, probes

    def _measure_all(
        self, trainer: Trainer, sizes: list[int]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        options = self.options
        auto = options.batch_sizes is None
        progress = Progress(_SEARCH_SHARE, 1 - _SEARCH_SHARE) if auto else Progress()
        warmup, iters, _ = options.counts()
        progress.total = float(sum(size * (warmup + iters) for size in sizes))
        buckets = ddp_buckets(
            [tensor_bytes(p) for p in trainer.params], options.first_bucket_bytes, options.bucket_cap_bytes
        )
        samples, failed = [], []
        for size in sizes:
            try:
                sample = self._measure(trainer, size, buckets, progress)
            except Exception as exc:
                if not (trainer.device.type == "cuda" and is_oom(exc)):
                    raise
                sample = None
                log.warning("batch %d ran out of memory while timing; skipped", size)
            if sample is None:
                trainer.recover_from_oom()
                failed.append({"batch_size": size, "reason": "out of memory"})
                continue
            samples.append(sample)
            self.reporter.sample(
                phase="compute", batch_size=size, sample=sample, fraction=progress.fraction()
            )
        return samples, failed

    def _measure(
        self, trainer: Trainer, size: int, buckets: list[Bucket], progress: Progress
    ) -> dict[str, Any]:
        options = self.options
        torch = trainer.torch
        free_device_memory(trainer.device)
        x, y = trainer.batch(size)
        if trainer.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(trainer.device)
        warmup, iters, max_seconds = options.counts()
        saved = None
        for i in range(warmup):
            meter = trainer.meter_for(x, y) if i == 0 else None
            trainer.step(x, y, meter=meter)
            if meter is not None:
                saved = meter.result
            self.reporter.progress(
                phase="warmup", batch_size=size, iteration=i, fraction=progress.advance(size)
            )
        if saved is None:  # no warm-up step: one extra forward measures the activations
            saved = trainer.saved_activations_forward(size)
        steps: list[StepTiming] = []
        began = time.perf_counter()
        for i in range(iters):
            with self.reporter.hold(), _gc_paused():
                timing = trainer.step(x, y, timed=True)
            assert timing is not None
            steps.append(timing)
            step_ms = timing.forward_ms + timing.backward_ms + timing.optimizer_ms
            self.reporter.progress(
                phase="compute",
                batch_size=size,
                iteration=i,
                time_ms=round(step_ms, 4),
                fraction=progress.advance(size),
            )
            if len(steps) >= options.min_iters and time.perf_counter() - began >= max_seconds:
                break
        progress.advance(size * (iters - len(steps)))  # budget cut: skip the rest
        mem = estimate(trainer.static, trainer.input_bytes(size), saved)
        log.info(
            "batch %d: forward %.2f ms, backward %.2f ms, optimizer %.2f ms (%d steps)",
            size,
            statistics.median(s.forward_ms for s in steps),
            statistics.median(s.backward_ms for s in steps),
            statistics.median(s.optimizer_ms for s in steps),
            len(steps),
        )
        return self._sample(trainer, size, steps, buckets, mem)

    def _sample(
        self, trainer: Trainer, size: int, steps: list[StepTiming], buckets: list[Bucket], mem: MemoryEstimate
    ) -> dict[str, Any]:
        torch = trainer.torch
        phases = {
            "forward": summarize([s.forward_ms for s in steps]),
            "backward": summarize([s.backward_ms for s in steps]),
            "optimizer": summarize([s.optimizer_ms for s in steps]),
            "step": summarize([s.forward_ms + s.backward_ms + s.optimizer_ms for s in steps]),
        }
        bucket_rows = _bucket_rows(buckets, steps)
        if trainer.device.type == "cuda":
            peak, source = int(torch.cuda.max_memory_allocated(trainer.device)), "cuda_max_memory_allocated"
        else:
            peak, source = mem.total_bytes, "estimate"
        ready = [row["ready_ms"] for row in bucket_rows]
        return {
            "batch_size": size,
            "iters": len(steps),
            "phases": phases,
            "buckets": bucket_rows,
            "buckets_in_ready_order": all(a <= b for a, b in zip(ready, ready[1:], strict=False)),
            "peak_memory_bytes": peak,
            "peak_memory_source": source,
            "memory_estimate": mem.as_dict(),
            "throughput_samples_per_s": size / (phases["step"]["median_ms"] / 1000.0)
            if phases["step"]["median_ms"] > 0
            else None,
        }

    def _document(
        self,
        trainer: Trainer,
        forward_flops: float | None,
        train_flops: float | None,
        max_batch: int | None,
        probes: list[Probe],
        samples: list[dict[str, Any]],
        failed: list[dict[str, Any]],
    ) -> dict[str, Any]:
        options = self.options
        all_params = list(trainer.model.parameters())
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "compute",
            "created_at": utc_now_iso(),
            "model": {
                "spec": options.model,
                "input_shape": list(options.input_shape),
                "num_classes": trainer.output_classes or options.num_classes,
                "num_params": sum(p.numel() for p in all_params),
                "trainable_params": sum(p.numel() for p in trainer.params),
                "param_bytes": sum(tensor_bytes(p) for p in all_params),
                "forward_flops_per_sample": forward_flops,
                "train_flops_per_sample": train_flops,
            },
            "device": {
                **device_info(options.device, trainer.precision),
                "precision_requested": options.precision,
            },
            "environment": environment(),
            "max_batch_size": max_batch,
            "max_batch_capped": max_batch is not None and max_batch >= options.max_batch,
            "batch_search": [p.as_dict() for p in probes],
            "iters": options.iters,
            "warmup": options.warmup,
            "min_iters": options.min_iters,
            "max_seconds_per_size": options.max_seconds_per_size,
            "optimizer": {"name": "SGD", "lr": options.lr, "momentum": options.momentum},
            "bucketing": {
                "first_bucket_bytes": options.first_bucket_bytes,
                "bucket_cap_bytes": options.bucket_cap_bytes,
                "order": "reverse_registration",
            },
            "samples": samples,
            "failed_samples": failed,
        }
