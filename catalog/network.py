"""The catalog's network field, parsed: what an instance type's stated ``NetworkPerformance``
(DescribeInstanceTypes) says in Gbit/s.

Plain Python (no Django), so that the pure planner (``planner.hardware``) reads the field the
same way the catalog's rows (``catalog.models.InstanceType.link_gbps``) do.
"""

from __future__ import annotations

import re

# "3200 Gigabit", "4x 100 Gigabit": an optional NIC count times the Gbit/s of each.
_GIGABIT = re.compile(r"^\s*(?:(\d+)\s*x\s*)?(\d+(?:\.\d+)?)\s*Gigabit\s*$", re.IGNORECASE)


def efa_gbps(performance: str | None) -> float:
    """Gbit/s of an EFA type's stated network performance ("3200 Gigabit", "4x 100 Gigabit"; 0
    for "Up to ..." and anything else): ``count * gbps``, the count 1 when it is not written.

    Why not only the cards' bandwidth fields: DescribeInstanceTypes gives p6-b200.48xlarge
    1,600 Gbit/s of baseline and peak over its cards, while its NetworkPerformance says
    "3200 Gigabit" -- the 8 x 400 Gbit/s EFA NICs AWS documents for it, which RDMA traffic
    (NCCL over EFA) uses.  An EFA type's all-reduce link is the larger figure."""
    m = _GIGABIT.match(performance or "")
    if not m:
        return 0.0
    return float(m.group(1) or 1) * float(m.group(2))
