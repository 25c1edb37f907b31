"""Every state change of a profiling run, one function each.

Websocket events go out with ``transaction.on_commit`` so a browser never sees a state that was
rolled back. Agent events are idempotent by ``seq``: a retried post changes nothing twice.
Background work (start, stop, refit) is asked for by name through ``srifty_web.queue`` once the
change commits; ``profiler.tasks`` binds the names and calls back into this module, which never
imports it.
"""

from __future__ import annotations

import logging
import math
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from fleet import network, prechecks
from fleet.rendezvous import Cluster, decide
from profiler.models import (
    FINISHED,
    BucketSample,
    CommCurvePoint,
    CommSample,
    ComputeSample,
    ProfilingRun,
    Provider,
    RunEvent,
    RunKind,
    RunStatus,
)
from srifty_web import queue
from srifty_web.live import send_on_commit

log = logging.getLogger(__name__)
PHASES = ("forward", "backward", "optimizer")


class RunClosed(Exception):
    """The run has finished; it accepts no more events."""


class BadProfile(ValueError):
    """A result document that cannot be stored (schema or values); nothing was stored."""


# --- websocket fan-out --------------------------------------------------------------------


def broadcast(run: ProfilingRun, message: dict) -> None:
    """Send ``message`` to the run's websocket group once the current transaction commits."""
    send_on_commit(run.group_name, "run.message", message)


def status_message(run: ProfilingRun) -> dict:
    return {
        "type": "status",
        "run": run.pk,
        "status": run.status,
        "phase": run.phase,
        "progress": round(run.progress, 4),
        "error": run.error,
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }


# --- lifecycle ----------------------------------------------------------------------------


EC2_PERMISSION = "profiler.add_profilingrun"


def check_may_start(user, provider: str) -> None:
    """An EC2 run rents a VM, which costs money: it needs ``profiler.add_profilingrun`` (staff
    have it), as a launch needs ``plans.add_job``. A local run needs only a login."""
    if provider == Provider.EC2 and not user.has_perm(EC2_PERMISSION):
        raise PermissionDenied(f"profiling on EC2 rents a VM: it needs the {EC2_PERMISSION} permission")


class PrecheckFailed(PermissionDenied):
    """AWS would refuse the EC2 run (``fleet.prechecks``): no run row was created. ``checks``:
    every check as a dict (name, status, message, fix). A ``PermissionDenied``, so that a caller
    that does not show the checks still refuses (403) rather than crashes; the API answers 400
    with them (``profiler.api``)."""

    def __init__(self, checks: list[dict[str, str]], message: str) -> None:
        super().__init__(message)
        self.checks = checks
        self.message = message


def ec2_launch_group(fields: dict[str, Any]) -> prechecks.LaunchGroup:
    """What an EC2 run starts: ``nodes`` VMs (one when empty) of its type and market; EC2
    picks the zone. A cluster's nodes take one address per EFA interface."""
    from catalog.models import InstanceType

    itype = InstanceType.objects.filter(name=fields.get("instance_type", "")).first()
    nodes = int(fields.get("nodes") or 1)
    return prechecks.LaunchGroup(
        instance_type=str(fields.get("instance_type", "")),
        count=nodes,
        region=str(fields.get("region", "")),
        zone=None,
        market=str(fields.get("market") or "on-demand"),
        addresses_per_node=max(1, network.efa_interfaces(itype)) if itype is not None and nodes > 1 else 1,
    )


def _catalog_vcpus(names: set[str]) -> dict[str, int]:
    from catalog.models import InstanceType

    return dict(InstanceType.objects.filter(name__in=names).values_list("name", "vcpus"))


def check_ec2_run(fields: dict[str, Any]) -> list[prechecks.Check]:
    """The pre-checks of an EC2 run (the same as a job launch's: credentials, quota, offering,
    subnet), or ``PrecheckFailed`` with each check and its fix. Nothing is asked when the
    setting ``AWS_PRECHECKS`` is False (test suites that fake no AWS at all)."""
    if not getattr(settings, "AWS_PRECHECKS", True):
        return []
    subnets = list(getattr(settings, "JOB_SUBNET_IDS", []) or [])
    if (fields.get("nodes") or 1) <= 1:
        subnets = []  # one VM goes where EC2 puts it (profiler.providers.EC2Provider.start)
    checks = prechecks.run([ec2_launch_group(fields)], subnet_ids=subnets[:1], vcpus=_catalog_vcpus)
    if prechecks.failed(checks):
        raise PrecheckFailed([c.as_dict() for c in checks], prechecks.refusal(checks))
    return checks


def create_run(owner, *, start: bool = True, **fields) -> ProfilingRun:
    """Create a pending run; its start is queued as a background task after commit. An EC2 run
    that starts is pre-checked first (``check_ec2_run``): what AWS would refuse creates no row."""
    if start and fields.get("provider") == Provider.EC2:
        check_ec2_run(fields)
    max_minutes = fields.pop("max_minutes", None) or settings.PROFILER_MAX_RUN_MINUTES
    with transaction.atomic():
        run = ProfilingRun.objects.create(
            owner=owner, deadline_at=timezone.now() + timedelta(minutes=max_minutes), **fields
        )
        if start:
            queue.enqueue_on_commit(queue.START_RUN, run.pk)
    return run


def issue_token(run: ProfilingRun, *, launch_key: str | None = None) -> str:
    """The run's agent token (any older one stops working). Only its hash is stored: the raw
    token goes straight to the agent (command line or user-data), never into a task row or a log.

    A finished run gets none (``RunClosed``): its token died with it.

    With ``launch_key`` (the EC2 ClientToken) the token is derived from it with an HMAC of the
    secret key, so a start re-delivered after a crash writes the same token that the instance it
    finds again (same ClientToken) already carries in its user-data.
    """
    from django.utils.crypto import salted_hmac

    with transaction.atomic():
        run = ProfilingRun.objects.select_for_update().get(pk=run.pk)
        if run.finished:  # cancelled between its start being queued and now: no live token again
            raise RunClosed(f"run {run.pk} is {run.status}")
        if launch_key:
            raw = salted_hmac("srifty.profiling-run-token", f"{run.pk}:{launch_key}").hexdigest()
            run.token_hash = run.hash_token(raw)
            run.token_expires_at = run.token_expiry()
        else:
            raw = run.new_token()
        run.save(update_fields=["token_hash", "token_expires_at"])
    return raw


def mark_starting(
    run: ProfilingRun, *, pid: int | None = None, instance_ids: list[str] | None = None
) -> None:
    with transaction.atomic():
        run = ProfilingRun.objects.select_for_update().get(pk=run.pk)
        if run.finished:
            return
        run.status = RunStatus.STARTING
        run.pid = pid if pid is not None else run.pid
        run.instance_ids = instance_ids if instance_ids is not None else run.instance_ids
        run.save(update_fields=["status", "pid", "instance_ids"])
        broadcast(run, status_message(run))


def record_node_ips(run: ProfilingRun, ips: dict[str, str]) -> ProfilingRun:
    """Remember the private IPs of a cluster's nodes (the rendezvous hands out rank 0's)."""
    with transaction.atomic():
        run = ProfilingRun.objects.select_for_update().get(pk=run.pk)
        known = {i: ip for i, ip in ips.items() if i in run.instance_ids and ip}
        if known and any(run.node_ips.get(i) != ip for i, ip in known.items()):
            run.node_ips = {**run.node_ips, **known}
            run.save(update_fields=["node_ips"])
    return run


def run_cluster(run: ProfilingRun) -> Cluster:
    """The run as the rendezvous sees it: ranks in launch-index order (rank 0: launch index 0),
    launching until ``run_instances`` has returned and the instances are recorded; each answer
    needs only rank 0's IP."""
    return Cluster(
        noun="run",
        pk=run.pk,
        region=run.region,
        status=run.status,
        ended=run.finished,
        launching=not run.instance_ids,
        instance_ids=tuple(run.instance_ids),
        node_ips=dict(run.node_ips),
        every_ip=False,
    )


def rendezvous(run: ProfilingRun, instance_id: str) -> tuple[int, dict]:
    """The server side of a comm cluster's master discovery (``fleet.rendezvous.decide``): 200
    ``{"master_addr", "node_rank", "nnodes"}`` go, 202 wait, 4xx give up; 404 for a run that is
    not a cluster."""
    if instance_id and not run.finished and not run.is_cluster:
        return 404, {"detail": f"run {run.pk} is not a cluster run"}
    answer = decide(
        run_cluster(run), instance_id, remember=lambda found: record_node_ips(run, dict(found)).node_ips
    )
    return answer.status, answer.body


def fail_run(run: ProfilingRun, error: str) -> ProfilingRun:
    return _finish(run, RunStatus.FAILED, error=error)


def cancel_run(run: ProfilingRun, reason: str = "cancelled by user") -> ProfilingRun:
    return _finish(run, RunStatus.CANCELLED, error=reason)


def _finish(run: ProfilingRun, status: str, *, error: str = "") -> ProfilingRun:
    """End a run (first writer wins) and revoke its token; partial samples are kept."""
    with transaction.atomic():
        run = ProfilingRun.objects.select_for_update().get(pk=run.pk)
        if run.finished:
            return run
        run.status = status
        run.error = error[:10_000]
        run.finished_at = timezone.now()
        run.token_expires_at = run.finished_at
        run.save(update_fields=["status", "error", "finished_at", "token_expires_at"])
        broadcast(run, status_message(run))
        if status != RunStatus.SUCCEEDED:
            queue.enqueue_on_commit(queue.STOP_RUN, run.pk)
    return run


def complete_run(run: ProfilingRun, profile: Any) -> ProfilingRun:
    """Store a validated profile and its samples, then end the run as succeeded (``profile`` is
    the agent's document, checked here first)."""
    check_profile(run, profile)
    with transaction.atomic():
        run = ProfilingRun.objects.select_for_update().get(pk=run.pk)
        if run.finished:
            raise RunClosed(f"run {run.pk} is {run.status}")
        _store_samples(run, profile)
        curve = store_comm_curve(run, profile)
        run.profile = profile
        run.progress = 1.0
        run.phase = "done"
        run.save(update_fields=["profile", "progress", "phase"])
        _finish(run, RunStatus.SUCCEEDED)
        run.refresh_from_db()
    queue.enqueue_on_commit(queue.STOP_RUN, run.pk)  # e.g. terminate the EC2 VM now
    if curve:  # new training data: refit the comm model (in the background, it takes seconds)
        queue.enqueue_on_commit(queue.REFIT_COMM_MODEL)
    return run


def store_comm_curve(run: ProfilingRun, profile: dict) -> int:
    """Keep an NCCL curve measured on EC2 GPUs as training data of the comm model
    (``CommCurvePoint``, read by ``planner.app.comm_training``); returns the points stored.

    Only curves whose topology is known count: an EC2 run of a catalog GPU type, NCCL on CUDA.
    A local curve (which machine? which network?) or a gloo one trains nothing."""
    from catalog.models import InstanceType

    run.curve_points.all().delete()  # a result replaces an earlier one of the same run
    if (
        run.kind != RunKind.COMM
        or run.provider != Provider.EC2
        or profile.get("backend") != "nccl"
        or (profile.get("device") or {}).get("type") != "cuda"
    ):
        return 0
    itype = InstanceType.objects.select_related("accelerator").filter(name=run.instance_type).first()
    if itype is None or itype.accelerator is None or not network.gpus_per_node(itype):
        log.warning(
            "run %s: %s is not a GPU type of the catalog; its curve trains nothing", run.pk, run.instance_type
        )
        return 0
    common = {
        "run": run,
        "instance_type": itype.name,
        "nodes": int(profile["nodes"]),
        "gpus_per_node": int(profile["ranks_per_node"]),
        "gpu": itype.accelerator.name,
        "device_name": str(profile["device"].get("name") or "")[:128],
        "network": network.network_of(run.nodes or 1, itype),
        "nccl_version": str((profile.get("environment") or {}).get("nccl") or "")[:32],
    }
    points = [
        CommCurvePoint(
            size_bytes=s["size_bytes"],
            median_us=s["median_ms"] * 1000.0,
            p90_us=s["p90_ms"] * 1000.0,
            **common,
        )
        for s in profile["samples"]
        if s["median_ms"] > 0
    ]
    CommCurvePoint.objects.bulk_create(points)
    return len(points)


# --- agent events -------------------------------------------------------------------------


def event_payload(event: dict) -> dict:
    """What a ``RunEvent`` stores of an agent event: all but the envelope and the profile."""
    return {k: v for k, v in event.items() if k not in ("seq", "type", "profile")}


def record_event(run: ProfilingRun, event: dict) -> bool:
    """Apply one agent event. Returns False for a duplicate (same seq already seen).

    ``event`` has been shape-checked by the API serializer: ``seq`` >= 1 and a ``type``.
    """
    seq, kind = event["seq"], event["type"]
    with transaction.atomic():
        locked = ProfilingRun.objects.select_for_update().get(pk=run.pk)
        if RunEvent.objects.filter(run=locked, seq=seq).exists():
            return False
        if locked.status in FINISHED:
            raise RunClosed(f"run {locked.pk} is {locked.status}")
        payload = event_payload(event)
        RunEvent.objects.create(run=locked, seq=seq, type=kind, payload=payload)
        newest = seq > locked.last_seq  # a late (retried) event must not move the phase back
        locked.last_seq = max(locked.last_seq, seq)
        if locked.status in (RunStatus.PENDING, RunStatus.STARTING):
            locked.status = RunStatus.RUNNING
            locked.started_at = locked.started_at or timezone.now()
            broadcast(locked, status_message(locked))
        if kind == "progress":
            _apply_progress(locked, event, newest=newest)
        locked.save(update_fields=["last_seq", "status", "started_at", "phase", "progress"])
        if kind in ("progress", "sample"):
            broadcast(locked, {"type": kind, "run": locked.pk, "seq": seq, **_small(payload)})
        if kind == "result":
            complete_run(locked, event.get("profile"))
        elif kind == "error":
            fail_run(locked, str(event.get("message") or "agent reported an error"))
    return True


def _apply_progress(run: ProfilingRun, event: dict, *, newest: bool = True) -> None:
    if newest and isinstance(event.get("phase"), str):
        run.phase = event["phase"][:32]
    fraction = event.get("fraction")
    if isinstance(fraction, (int, float)) and math.isfinite(fraction):
        run.progress = min(1.0, max(run.progress, float(fraction)))  # never moves backwards


def _small(payload: dict) -> dict:
    """Websocket messages stay small: scalars only, no long lists."""
    return {k: v for k, v in payload.items() if isinstance(v, (int, float, str, bool)) or v is None}


# --- profile documents --------------------------------------------------------------------


MAX_BATCH = 2**31 - 1
MAX_BYTES = 2**50  # a petabyte: no bucket or message is larger


def check_profile(run: ProfilingRun, profile) -> None:
    """Refuse (``BadProfile``) any document that is not a complete, storable profile of this run."""
    from profiler.agent.schema import ProfileValidationError, validate_profile
    from srifty_web.payloads import PayloadError, check_json_values

    if not isinstance(profile, dict):
        raise BadProfile("result has no profile document")
    try:
        check_json_values(profile)
        validate_profile(profile)
    except (ProfileValidationError, PayloadError) as exc:
        raise BadProfile(str(exc)) from exc
    _check_ranges_and_keys(profile)
    if profile.get("kind") != run.kind:
        raise BadProfile(f"profile kind {profile.get('kind')!r} does not match run kind {run.kind!r}")
    if run.kind == RunKind.COMM and run.is_cluster:
        _check_cluster_profile(run, profile)
    if run.kind == RunKind.COMPUTE and profile["model"]["spec"] != run.model_spec:
        raise BadProfile(
            f"model.spec: the profile is of {profile['model']['spec']!r}, this run profiles "
            f"{run.model_spec!r}"
        )
    if profile.get("workload") is not None:
        from workload.cost import check_trace

        try:  # the planner reads it instead of importing the model: it must be well-formed
            check_trace(profile["workload"])
        except ValueError as exc:
            raise BadProfile(str(exc)) from exc
    for i, sample in enumerate(profile.get("samples", [])):
        for where, stats in _timing_blocks(profile["kind"], sample):
            for key, value in stats.items():
                values = value if isinstance(value, list) else [value]
                for v in values:
                    if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or v > 3.6e6:
                        raise BadProfile(f"samples[{i}].{where}.{key}: {v!r} is not a time in ms (0..1 h)")


def _check_cluster_profile(run: ProfilingRun, profile: dict) -> None:
    """A cluster's curves become training data under the run's topology: they must be of it."""
    for key, wanted in (("nodes", run.nodes), ("world_size", run.world_size), ("backend", run.backend)):
        if profile.get(key) != wanted:
            raise BadProfile(f"{key}: the profile says {profile.get(key)!r}, this run is {wanted!r}")


def _check_ranges_and_keys(profile: dict) -> None:
    """What the schema cannot say: values within the columns' range, and one sample per key
    (the tables are unique on batch size / bucket index / message size)."""
    seen: set = set()
    for i, s in enumerate(profile["samples"]):
        where = f"samples[{i}]"
        if profile["kind"] == RunKind.COMPUTE:
            key = s["batch_size"]
            if not 1 <= key <= MAX_BATCH:
                raise BadProfile(f"{where}.batch_size: {key} is out of range")
            buckets = set()
            for j, b in enumerate(s.get("buckets", [])):
                if b["index"] in buckets:
                    raise BadProfile(f"{where}.buckets[{j}].index: bucket {b['index']} appears twice")
                buckets.add(b["index"])
                if not (
                    0 <= b["size_bytes"] <= MAX_BYTES
                    and 0 <= b["num_params"] <= MAX_BATCH
                    and 0 <= b["index"] <= MAX_BATCH
                    and 0 <= b["ready_fraction"] <= 1
                ):
                    raise BadProfile(
                        f"{where}.buckets[{j}]: size, count, index or ready fraction out of range"
                    )
            for phase in PHASES:
                cv = s["phases"][phase]["cv"]
                if not 0 <= cv <= 1e6:
                    raise BadProfile(f"{where}.{phase}.cv: {cv} is out of range")
        else:
            key = s["size_bytes"]
            if not 0 < key <= MAX_BYTES:
                raise BadProfile(f"{where}.size_bytes: {key} is out of range")
            if not (0 <= s["cv"] <= 1e6 and 0 <= s["algbw_gbps"] < 1e9 and 0 <= s["busbw_gbps"] < 1e9):
                raise BadProfile(f"{where}: cv or bandwidth out of range")
            if "cpu_share" in s and not 0 <= s["cpu_share"] <= 8:
                raise BadProfile(f"{where}.cpu_share: {s['cpu_share']} is out of range")
        if key in seen:
            raise BadProfile(
                f"{where}: {'batch size' if profile['kind'] == RunKind.COMPUTE else 'size'} "
                f"{key} appears twice"
            )
        seen.add(key)
    if profile["kind"] == RunKind.COMM and not 2 <= profile["world_size"] <= 1_000_000:
        raise BadProfile(f"world_size: {profile['world_size']} is out of range")


def _timing_blocks(kind: str, sample: dict):
    keys = ("times_ms", "median_ms", "p10_ms", "p90_ms", "mean_ms", "std_ms")
    if kind == RunKind.COMPUTE:
        for phase in PHASES:
            yield phase, {k: sample["phases"][phase][k] for k in keys}
    else:
        yield "comm", {k: sample[k] for k in keys}


def _store_samples(run: ProfilingRun, profile: dict) -> None:
    run.compute_samples.all().delete()  # a result replaces partial samples of the same run
    run.bucket_samples.all().delete()
    run.comm_samples.all().delete()
    if profile["kind"] == RunKind.COMPUTE:
        compute, buckets = [], []
        for s in profile["samples"]:
            for phase in PHASES:
                p = s["phases"][phase]
                compute.append(
                    ComputeSample(
                        run=run,
                        batch_size=s["batch_size"],
                        phase=phase,
                        median_ms=p["median_ms"],
                        p10_ms=p["p10_ms"],
                        p90_ms=p["p90_ms"],
                        mean_ms=p["mean_ms"],
                        std_ms=p["std_ms"],
                        cv=p["cv"],
                        times_ms=p["times_ms"],
                        peak_memory_bytes=s.get("peak_memory_bytes"),
                    )
                )
            for b in s.get("buckets", []):
                buckets.append(
                    BucketSample(
                        run=run,
                        batch_size=s["batch_size"],
                        index=b["index"],
                        size_bytes=b["size_bytes"],
                        num_params=b["num_params"],
                        ready_ms=b["ready_ms"],
                        ready_fraction=b["ready_fraction"],
                    )
                )
        ComputeSample.objects.bulk_create(compute)
        BucketSample.objects.bulk_create(buckets)
    else:
        CommSample.objects.bulk_create(
            [
                CommSample(
                    run=run,
                    size_bytes=s["size_bytes"],
                    world_size=profile["world_size"],
                    backend=profile["backend"],
                    median_ms=s["median_ms"],
                    p10_ms=s["p10_ms"],
                    p90_ms=s["p90_ms"],
                    mean_ms=s["mean_ms"],
                    std_ms=s["std_ms"],
                    cv=s["cv"],
                    times_ms=s["times_ms"],
                    algbw_gbps=s["algbw_gbps"],
                    busbw_gbps=s["busbw_gbps"],
                )
                for s in profile["samples"]
            ]
        )
