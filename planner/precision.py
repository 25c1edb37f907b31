"""Does a profile's precision match the one a plan asks for? Pure: no Django.

The planner's request precisions are ``fp32``, ``tf32``, ``amp``, ``fp16`` and ``bf16``; the agent
runs ``fp32``, ``amp`` (fp16 autocast with a GradScaler, CUDA only) and ``bf16``. ``amp`` and
``fp16`` are the same arithmetic (fp16 tensor-core math with fp32 master weights).
"""

from __future__ import annotations

_SAME = {"fp16": "amp"}


def canonical(precision: str) -> str:
    p = precision.strip().lower()
    return _SAME.get(p, p)


def same_precision(a: str, b: str) -> bool:
    return canonical(a) == canonical(b)


def precision_warning(
    requested: str | None, ran: str, *, run_id: int, device_type: str, device_name: str, planned: str
) -> str | None:
    """The sentence a plan shows when its profile ran another precision than it asked for, else None.

    ``planned`` is the precision the predictions are made at (the profile's workload trace)."""
    if requested is None or same_precision(requested, ran):
        return None
    where = (
        "CPU autocast is bf16 only"
        if device_type != "cuda" and canonical(requested) == "amp"
        else device_name
    )
    return (
        f"This plan asks for {requested}, but profiling run #{run_id} ran {ran} ({where}), so no step of "
        f"this model was measured at {requested}; the predictions are made at {planned}. Profile it at "
        f"{requested} on a GPU to plan {requested} from measurements."
    )
