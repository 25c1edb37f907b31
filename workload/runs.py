"""The rules of a profiling run that the planner reads as well as the agent.

The agent (``profiler.agent.compute``, ``profiler.agent.dataloader``) measures by these rules,
and the planner predicts what such a run will take or will report (``planner.app.profile_first``,
``planner.profiles``, ``planner.input_pipeline``): one definition keeps the two in step.

* :func:`ladder` - the batch sizes a compute profile times: powers of two from ``min_batch``
  up to ``max_batch``, plus both ends.
* :data:`DEVICE_DEFAULTS` - warm-up and timed iterations per batch, and a time budget per batch,
  on each device type.
* :func:`precision_run` - the precision a step runs as for a requested one on a device.
* :func:`data_kind` - the input pipeline a model's input shape implies (:data:`KINDS`).

Stdlib only: it travels with the agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

PRECISIONS = ("fp32", "amp", "bf16")
KINDS = ("image", "small_image", "text")
# pixels per side up to which images are taken to come from an in-memory array (no JPEG decode)
SMALL_IMAGE_MAX_SIDE = 64


class DeviceDefaults(TypedDict):
    warmup: int
    iters: int
    max_seconds_per_size: float


# Per-device defaults. On CPU a big step takes seconds, so fewer iterations and a time
# budget per batch size keep a whole ladder within minutes; on GPU steps are milliseconds.
DEVICE_DEFAULTS: dict[str, DeviceDefaults] = {
    "cpu": {"warmup": 1, "iters": 5, "max_seconds_per_size": 8.0},
    "cuda": {"warmup": 5, "iters": 20, "max_seconds_per_size": 30.0},
}


def precision_run(requested: str, device_type: str) -> str:
    """The precision a step actually runs for ``--precision requested`` on ``device_type``.

    ``amp`` is fp16 autocast with a GradScaler on CUDA, but CPU autocast is bf16 only: there it
    runs as ``bf16`` (and the profile says so, next to ``precision_requested``)."""
    if requested == "amp" and device_type != "cuda":
        return "bf16"
    return requested


def ladder(max_batch: int, min_batch: int = 1) -> list[int]:
    """Powers of two from ``min_batch`` up to ``max_batch``, plus ``max_batch`` itself.

    Dense at small sizes, where a device goes from launch-bound to compute-bound, so the
    piecewise-linear knee of step time over batch size is visible.
    """
    sizes = {max_batch}
    power = 1
    while power < max_batch:
        if power >= min_batch:
            sizes.add(power)
        power *= 2
    return sorted(sizes | {min_batch})


def data_kind(input_shape: Sequence[int]) -> str | None:
    """``"image"`` for ``(C, H, W)`` (``"small_image"`` up to 64 x 64), ``"text"`` for
    ``(seq_len,)``, else None (no known pipeline). The agent measures the kind's loader rate and
    the planner reads the kind the same way, so a profile's rate matches a plan's kind."""
    if len(input_shape) == 3:
        return "small_image" if max(input_shape[1:]) <= SMALL_IMAGE_MAX_SIDE else "image"
    if len(input_shape) == 1:
        return "text"
    return None
