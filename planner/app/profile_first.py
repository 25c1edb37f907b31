"""The cheap route to a *transferred* prediction: profile the model on a small GPU first.

A plan whose rows are all *analytical* (no GPU profile) or *transferred* (a profile of another
GPU) can become transferred from a real measurement for the price of a few minutes of a
g4dn.xlarge (T4) or g5.xlarge (A10G). :func:`offers` says, for a stored plan, which of these
to offer, their cheapest on-demand price in the catalog, the estimated minutes of the run, and
the profiling-form fields that start it (an EC2 compute run of the same model, shape and
precision). Whether the user may start it is the page's business (``profiler.add_profilingrun``,
``profiler.actions.check_may_start``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from planner.plan_result import PlanResult
from workload.runs import DEVICE_DEFAULTS as AGENT_DEFAULTS
from workload.runs import ladder

CHEAP_TYPES = ("g4dn.xlarge", "g5.xlarge")

# Minutes of one EC2 profiling run, as profiler.providers.EC2Provider runs it
# (fleet.boot.profiling_user_data on a Deep Learning AMI). Assumptions, not measurements:
BOOT_MINUTES = 3.0  # run_instances -> running -> cloud-init reaches the user-data (typically 2-3 min)
SETUP_MINUTES = 1.5  # the DLAMI's PyTorch env is found (no pip), the agent tarball fetched, torch + CUDA init
SEARCH_PROBE_S = 2.0  # one real training step per batch-search probe (doubling + bisection), OOMs included
TRACE_MINUTES = 0.5  # FLOP count and the meta-device workload trace posted with the profile
TEARDOWN_MINUTES = 0.5  # the EXIT trap's shutdown -h now until the instance stops billing
MAX_SEARCH_BATCH = 1024  # the agent's default --max-batch: the ladder has at most 11 sizes


def profiling_minutes(max_batch: int = MAX_SEARCH_BATCH) -> int:
    """Estimated minutes (rounded up) of an EC2 profiling run with ``--batch-sizes auto``.

    The timed part is bounded by the agent's CUDA defaults: every ladder size is timed for at
    most ``max_seconds_per_size`` (30 s) after its warm-up, which is what large models reach on
    a T4; small ones finish sooner, so this leans long.
    """
    cuda = AGENT_DEFAULTS["cuda"]
    probes = 2 * max(1, max_batch.bit_length())
    search_min = probes * SEARCH_PROBE_S / 60
    timed_min = len(ladder(max_batch)) * cuda["max_seconds_per_size"] / 60
    total = BOOT_MINUTES + SETUP_MINUTES + search_min + TRACE_MINUTES + timed_min + TEARDOWN_MINUTES
    return math.ceil(total)


def profiling_precision(precision: str) -> str:
    """The profiling form's precision (``fp32`` or ``amp``) for a plan's: half precisions -> amp."""
    return "fp32" if precision in ("fp32", "tf32") else "amp"


@dataclass(frozen=True)
class Offer:
    instance_type: str
    gpu: str
    region: str
    on_demand_usd: float
    minutes: int
    max_minutes: int
    form: dict[str, str]

    @property
    def estimated_usd(self) -> float:
        return self.on_demand_usd * self.minutes / 60

    @property
    def max_usd(self) -> float:
        return self.on_demand_usd * self.max_minutes / 60


def needs_profile(result: PlanResult | Mapping[str, Any]) -> bool:
    """True when no ranked row of the plan is *measured* (its GPUs have no profile of their own)."""
    typed = PlanResult.read(result)
    if not typed.plans:
        return False
    fallback = typed.model.source
    return all((p.prediction_source or fallback) != "measured" for p in typed.plans)


def _same_gpu(accelerator: str, measured_on: str | None) -> bool:
    if not measured_on:
        return False
    return accelerator.lower() in measured_on.lower()


def offers(
    result: PlanResult | Mapping[str, Any], request: Mapping[str, Any], max_minutes: int
) -> list[Offer]:
    """What to offer on a stored plan's page (``[]`` when a row is measured, or nothing is priced).

    ``max_minutes``: the run's hard limit (``settings.PROFILER_MAX_RUN_MINUTES``), the most it
    can cost. A type whose GPU the plan's profile was already taken on is not offered again."""
    from catalog.models import InstanceType, OnDemandPrice

    typed = PlanResult.read(result)
    if not needs_profile(typed):
        return []
    model = typed.model
    spec, shape = model.spec, model.input_shape
    if not spec or not shape:
        return []
    precision = (request.get("model") or {}).get("precision") or model.precision or "fp32"
    minutes = profiling_minutes()
    out = []
    types = InstanceType.objects.filter(name__in=CHEAP_TYPES).select_related("accelerator")
    for itype in sorted(types, key=lambda t: CHEAP_TYPES.index(t.name)):
        gpu = itype.accelerator.name if itype.accelerator else ""
        if _same_gpu(gpu, model.measured_on):
            continue
        price = (
            OnDemandPrice.objects.current()
            .filter(instance_type=itype)
            .select_related("region")
            .order_by("usd_per_hour", "region__code")
            .first()
        )
        if price is None:
            continue
        form = {
            "kind": "compute",
            "model_spec": spec,
            "input_shape": ",".join(str(d) for d in shape),
            "batch_sizes": "auto",
            "device": "cuda",
            "precision": profiling_precision(precision),
            "iters": str(AGENT_DEFAULTS["cuda"]["iters"]),
            "max_memory": "",
            "provider": "ec2",
            "instance_type": itype.name,
            "region": price.region.code,
            "market": "on-demand",
        }
        out.append(
            Offer(
                itype.name,
                gpu,
                price.region.code,
                float(Decimal(price.usd_per_hour)),
                minutes,
                max_minutes,
                form,
            )
        )
    return out
