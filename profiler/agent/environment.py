"""Facts about the machine a profile was taken on."""

from __future__ import annotations

import os
import platform
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def utc_now_iso() -> str:
    """``2026-12-02T13:00:00Z``: the profile's ``created_at``."""
    # timezone.utc, not datetime.UTC: a bare GPU VM may have Python 3.10.
    now = datetime.now(timezone.utc)  # noqa: UP017
    return now.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name from /proc/cpuinfo, falling back to ``platform.processor()``."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def available_memory_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable from /proc/meminfo (bytes), or None where it cannot be read."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # the file says kB, meaning KiB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cuda_facts() -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {
        "cuda": torch.version.cuda,
        "cudnn": None,
        "gpu_count": 0,
        "gpus": [],
        "nccl": None,
    }
    try:
        if torch.backends.cudnn.is_available():
            facts["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # a broken CUDA install must not stop a CPU profile
        pass
    try:
        if torch.cuda.is_available():
            facts["gpu_count"] = torch.cuda.device_count()
            facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(facts["gpu_count"])]
            version = torch.cuda.nccl.version()
            facts["nccl"] = (
                ".".join(str(part) for part in version) if isinstance(version, tuple) else str(version)
            )
    except Exception:
        pass
    return facts


def environment() -> dict[str, Any]:
    """The profile's ``environment`` block."""
    import torch

    return {
        "torch": torch.__version__,
        **_cuda_facts(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
    }


def device_info(device: str, precision: str | None = None) -> dict[str, Any]:
    """The compute profile's ``device`` block for ``cpu`` or ``cuda[:N]``."""
    import torch

    dev = torch.device(device)
    info: dict[str, Any] = {"type": dev.type, "name": cpu_model(), "precision": precision}
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        info.update(
            {
                "name": props.name,
                "index": index,
                "total_memory_bytes": props.total_memory,
                "capability": f"{props.major}.{props.minor}",
                "multiprocessors": props.multi_processor_count,
                # Whether "fp32" matmuls/convs may run on TF32 tensor cores: it changes fp32 speed a lot.
                "tf32": _tf32_settings(),
            }
        )
    if precision is None:
        info.pop("precision")
    return info


def _tf32_settings() -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    try:
        out["matmul"] = torch.backends.cuda.matmul.fp32_precision
        out["cudnn_conv"] = torch.backends.cudnn.conv.fp32_precision
    except AttributeError:  # older torch: only the boolean switches
        out["matmul"] = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
        out["cudnn_conv"] = "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"
    return out
