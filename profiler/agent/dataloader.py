"""Input-pipeline throughput per vCPU: how many samples one data-loader worker prepares per second.

A DDP node trains only as fast as its data loaders feed it. Each loader worker is one process on
one vCPU, so the node's input ceiling is about ``workers * rate_per_vcpu`` with
``workers = vcpus - gpus`` (one core stays with each training process). This module measures
``rate_per_vcpu`` for the two pipelines that matter for planning:

* ``image``: ImageNet-style training input -- decode a JPEG (500 x 375, the ImageNet median),
  RandomResizedCrop to 224, horizontal flip, convert to float and normalise;
* ``small_image``: CIFAR-style input -- a 32 x 32 ``uint8`` image already in memory (as the
  CIFAR/SVHN datasets hold them), ``Image.fromarray``, RandomCrop with 4 pixels of padding,
  horizontal flip, ToTensor and Normalize: torchvision's CIFAR-10 reference transforms;
* ``text``: pre-tokenised text -- slice a fixed-length window out of a token array (as a
  memory-mapped ``uint16`` corpus is read) and collate it into a batch.

It runs in this process on one thread (``torch.set_num_threads(1)``), as one loader worker does.
No Django import: it runs inside the agent on a bare VM. The compute profile carries the rate of
the model's data kind (:func:`profile_entry`, the ``input_pipeline`` field of
``docs/profile-format.md``); the planner uses it instead of its default for that kind.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workload.runs import KINDS, data_kind


@dataclass(frozen=True)
class PipelineRate:
    kind: str
    samples_per_s_per_vcpu: float
    samples: int
    seconds: float
    detail: str


def _jpeg(seed: int, width: int = 500, height: int = 375) -> bytes:
    """A photo-like JPEG (smooth gradients plus noise, so it compresses like a photo, ~100 KB)."""
    import torch
    from torchvision.io import encode_jpeg

    g = torch.Generator().manual_seed(seed)
    y = torch.linspace(0, 1, height).view(1, height, 1)
    x = torch.linspace(0, 1, width).view(1, 1, width)
    y, x = y.expand(1, height, width), x.expand(1, height, width)
    base = torch.cat([y * 200 + 20, x * 180 + 40, (x + y) * 90 + 30], 0)
    noise = torch.randint(-40, 40, (3, height, width), generator=g)
    img = (base + noise).clamp(0, 255).to(torch.uint8)
    return bytes(encode_jpeg(img, quality=90).numpy().tobytes())


def measure(kind: str, seconds: float = 2.0, *, seq_len: int = 512, seed: int = 0) -> PipelineRate:
    """Samples per second that one worker on one vCPU prepares for ``kind``."""
    import torch

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if kind == "image":
            return _measure_image(seconds, seed)
        if kind == "small_image":
            return _measure_small_image(seconds, seed)
        return _measure_text(seconds, seq_len, seed)
    finally:
        torch.set_num_threads(threads)


def profile_entry(input_shape: Sequence[int], seconds: float = 1.0) -> dict[str, Any] | None:
    """The compute profile's ``input_pipeline`` field: the rate of the input's data kind,
    measured for ``seconds`` (``{kind, samples_per_s_per_vcpu, samples, seconds, detail}``);
    None when the shape has no known pipeline. A text input measures windows of its own length."""
    kind = data_kind(input_shape)
    if kind is None:
        return None
    seq_len = min(max(1, int(input_shape[0])), 65_536) if kind == "text" else 512
    rate = measure(kind, seconds, seq_len=seq_len)
    return {
        "kind": rate.kind,
        "samples_per_s_per_vcpu": rate.samples_per_s_per_vcpu,
        "samples": rate.samples,
        "seconds": rate.seconds,
        "detail": rate.detail,
    }


def _measure_image(seconds: float, seed: int) -> PipelineRate:
    import torch
    from torchvision.io import decode_jpeg
    from torchvision.transforms import v2

    files = [torch.frombuffer(bytearray(_jpeg(seed + i)), dtype=torch.uint8) for i in range(8)]
    transform = v2.Compose(
        [
            v2.RandomResizedCrop(224, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ]
    )
    transform(decode_jpeg(files[0]))  # warm-up
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or n < 10:
        transform(decode_jpeg(files[n % len(files)]))
        n += 1
    size_kb = sum(f.numel() for f in files) / len(files) / 1024
    return PipelineRate(
        "image", n / elapsed, n, elapsed, f"JPEG 500x375 (~{size_kb:.0f} KB) decode + RandomResizedCrop 224"
    )


def _measure_small_image(seconds: float, seed: int, side: int = 32) -> PipelineRate:
    import numpy as np
    from PIL import Image
    from torchvision import transforms

    images = np.random.default_rng(seed).integers(0, 256, size=(64, side, side, 3), dtype=np.uint8)
    transform = transforms.Compose(
        [
            transforms.RandomCrop(side, padding=side // 8),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
        ]
    )
    transform(Image.fromarray(images[0]))  # warm-up
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or n < 10:
        transform(Image.fromarray(images[n % len(images)]))
        n += 1
    return PipelineRate(
        "small_image", n / elapsed, n, elapsed, f"in-memory {side}x{side} uint8 image + RandomCrop/flip"
    )


def _measure_text(seconds: float, seq_len: int, seed: int) -> PipelineRate:
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    corpus = rng.integers(0, 50_000, size=8_000_000, dtype=np.uint16)  # 16 MB of tokens
    batch = 32
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or n < batch:
        offsets = rng.integers(0, corpus.size - seq_len - 1, size=batch)
        windows = np.stack([corpus[o : o + seq_len + 1] for o in offsets]).astype(np.int64)
        tokens = torch.from_numpy(windows)
        _inputs, _labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        n += batch
    return PipelineRate("text", n / elapsed, n, elapsed, f"pre-tokenised windows of {seq_len} tokens")
