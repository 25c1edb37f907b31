"""DDP-like gradient bucketing, as a pure function.

``torch.nn.parallel.DistributedDataParallel`` all-reduces gradients in buckets. Its C++
``compute_bucket_assignment_by_size`` walks the parameters, adds each one to the open bucket
and closes the bucket as soon as its size reaches (``>=``) the current cap; the first cap is
``dist._DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB) and every later one is ``bucket_cap_mb`` (25 MiB).
DDP walks parameters in reverse registration order so that bucket 0 holds the gradients that
backward produces first.

Differences from DDP, on purpose:

* DDP also splits buckets by dtype and device; a profiled model is on one device and its
  parameters share one dtype (AMP keeps fp32 master weights), so one stream of buckets is kept.
* After its first iteration DDP rebuilds the buckets in the order in which gradients actually
  became ready. For models whose backward visits layers in reverse definition order (nearly
  all feed-forward models) that is the same as reverse registration order, which is what the
  profile format promises; the observed ready times are still recorded per bucket.
* Parameters that do not require grad are skipped by the caller, as DDP does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

MiB = 1024 * 1024
DEFAULT_FIRST_BUCKET_BYTES = 1 * MiB  # dist._DEFAULT_FIRST_BUCKET_BYTES
DEFAULT_BUCKET_CAP_BYTES = 25 * MiB  # DistributedDataParallel(bucket_cap_mb=25)


@dataclass
class Bucket:
    """One all-reduce bucket: ``param_indices`` index the list passed to :func:`ddp_buckets`."""

    index: int
    param_indices: list[int] = field(default_factory=list)
    size_bytes: int = 0

    @property
    def num_params(self) -> int:
        return len(self.param_indices)


def ddp_buckets(
    params_sizes_bytes: Sequence[int],
    first_cap: int = DEFAULT_FIRST_BUCKET_BYTES,
    cap: int = DEFAULT_BUCKET_CAP_BYTES,
) -> list[Bucket]:
    """Group parameters into DDP-style buckets.

    ``params_sizes_bytes`` are gradient sizes in registration order (``model.parameters()``).
    Buckets are returned in all-reduce order: bucket 0 starts with the *last* parameter.
    A bucket closes once its size is ``>=`` its cap, so it may exceed the cap by its last
    parameter (a single parameter larger than the cap gets a bucket of its own), exactly as DDP.
    """
    if first_cap <= 0 or cap <= 0:
        raise ValueError("bucket caps must be positive")
    if any(size < 0 for size in params_sizes_bytes):
        raise ValueError("parameter sizes must be non-negative")
    buckets: list[Bucket] = []
    current = Bucket(index=0)
    limit = first_cap
    for idx in reversed(range(len(params_sizes_bytes))):
        current.param_indices.append(idx)
        current.size_bytes += params_sizes_bytes[idx]
        if current.size_bytes >= limit:
            buckets.append(current)
            current = Bucket(index=len(buckets))
            limit = cap  # only the first bucket uses the small cap
    if current.param_indices:
        buckets.append(current)
    return buckets
