"""The CUDA-only code paths, driven on CPU with stand-ins for CUDA events and OOM errors.

They cannot show that CUDA timing is right - only that the Python around it (event pools,
hooks, the OOM recovery of the search and of the ladder) runs and keeps its promises.
"""

from __future__ import annotations

import time

import pytest
import torch

from profiler.agent import compute
from profiler.agent.compute import (
    ComputeOptions,
    ComputeProfiler,
    CudaClock,
    CudaStepProbe,
    GradReadyRecorder,
    Trainer,
)
from workload.specs import load_model


class FakeEvent:
    """torch.cuda.Event on the host clock."""

    created = 0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        FakeEvent.created += 1
        self.t: float | None = None

    def record(self, stream: object = None) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.t is not None and end.t is not None, "elapsed_time on an event never recorded"
        return (end.t - self.t) * 1000.0

    def synchronize(self) -> None:
        pass


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    FakeEvent.created = 0


def _trainer(**kwargs) -> Trainer:
    options = ComputeOptions(
        model="examples.tiny_model:build", input_shape=(3, 16, 16), num_classes=10, **kwargs
    )
    trainer = Trainer(load_model(options.model, 10, options.input_shape, allow_code=True), options.resolved())
    trainer.probe_output()
    return trainer


def test_cuda_clock_stamps_every_gradient_from_a_premade_event_pool(fake_cuda):
    trainer = _trainer()
    trainer.recorder.remove()
    trainer.clock = CudaClock(torch.device("cpu"))
    trainer.recorder = GradReadyRecorder(trainer.params, trainer.clock)
    made = FakeEvent.created
    assert made == 4 + len(trainer.params)  # four phase marks plus one per parameter
    timing = trainer.step(*trainer.batch(4), timed=True)
    timing = trainer.step(*trainer.batch(4), timed=True)  # events are reused after the sync
    assert FakeEvent.created == made
    assert set(timing.ready_ms) == set(range(len(trainer.params)))
    assert all(0 <= t <= timing.backward_ms for t in timing.ready_ms.values())
    # The head's gradients are ready before the first conv's.
    assert timing.ready_ms[len(trainer.params) - 1] <= timing.ready_ms[0]
    trainer.close()


@pytest.mark.filterwarnings("ignore:torch.cuda.amp.GradScaler is enabled")
def test_out_of_memory_probes_fail_cleanly_and_the_search_goes_on(monkeypatch):
    trainer = _trainer()
    real_step = trainer.step
    trainer.scaler = torch.amp.GradScaler("cuda", init_scale=1024.0, enabled=False)
    scalers = [trainer.scaler]

    def step(x, y, **kwargs):
        if x.shape[0] > 20:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if x.shape[0] > 12:
            raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate")
        return real_step(x, y, **kwargs)

    monkeypatch.setattr(trainer, "step", step)
    probe = CudaStepProbe(trainer)
    results = []
    found = compute.search_max_batch(lambda b: results.append(probe(b)) or results[-1].fits, 1, 64)
    assert found == 12
    assert [(r.batch_size, r.fits) for r in results][-4:] == [
        (16, False),
        (12, True),
        (14, False),
        (13, False),
    ]
    assert all(r.reason == "out of memory" for r in results if not r.fits)
    assert trainer.scaler is not scalers[0]  # replaced after the first OOM
    assert all(p.grad is None for p in trainer.params)
    trainer.close()


def test_other_errors_in_a_probe_are_not_mistaken_for_oom(monkeypatch):
    trainer = _trainer()
    monkeypatch.setattr(
        trainer, "step", lambda x, y, **kw: (_ for _ in ()).throw(RuntimeError("shape mismatch"))
    )
    with pytest.raises(RuntimeError, match="shape mismatch"):
        CudaStepProbe(trainer)(4)
    trainer.close()


def test_a_ladder_size_that_runs_out_of_memory_is_skipped_on_cuda_and_fatal_on_cpu(monkeypatch):
    trainer = _trainer(batch_sizes=[2, 4], iters=1, warmup=0)
    profiler = ComputeProfiler(trainer.options)
    real_measure = profiler._measure

    def measure(trainer_, size, buckets, progress):
        if size == 4:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return real_measure(trainer_, size, buckets, progress)

    monkeypatch.setattr(profiler, "_measure", measure)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        profiler._measure_all(trainer, [2, 4])  # on CPU an OOM error is a real error

    trainer.device = torch.device("cuda")  # only its type is consulted on this path
    monkeypatch.setattr(
        trainer, "batch", lambda size: (torch.randn(size, 3, 16, 16), torch.randint(0, 10, (size,)))
    )
    for name in ("reset_peak_memory_stats", "empty_cache"):
        monkeypatch.setattr(torch.cuda, name, lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 123)
    samples, failed = profiler._measure_all(trainer, [2, 4])
    assert [s["batch_size"] for s in samples] == [2]
    assert samples[0]["peak_memory_bytes"] == 123
    assert samples[0]["peak_memory_source"] == "cuda_max_memory_allocated"
    assert failed == [{"batch_size": 4, "reason": "out of memory"}]
    trainer.close()


def test_oom_errors_are_recognised_by_type_and_by_message():
    assert compute.is_oom(torch.cuda.OutOfMemoryError("x"))
    assert compute.is_oom(RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB"))
    assert compute.is_oom(RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"))
    assert not compute.is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not compute.is_oom(ValueError("out of memory"))
