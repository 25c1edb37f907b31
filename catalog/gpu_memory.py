"""The memory a model must fit in, as the catalog knows it: both the profiler (a library spec
to profile) and the planner (a spec to plan) bound a model by the catalog's largest GPU."""

from __future__ import annotations

from django.db.models import Max

from catalog.models import Accelerator, AcceleratorKind


def largest_gpu_bytes() -> int:
    """Memory of the catalog's largest CUDA GPU: a model must train in it (DDP keeps one whole
    replica per GPU). The agent's constant (``config_bounds.LARGEST_GPU_BYTES``) while the
    catalog has no GPU with a known memory."""
    from workload.config_bounds import LARGEST_GPU_BYTES

    most = Accelerator.objects.filter(kind=AcceleratorKind.NVIDIA_GPU).aggregate(m=Max("memory_mib"))["m"]
    return int(most) * 2**20 if most else LARGEST_GPU_BYTES
