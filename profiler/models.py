"""Profiling runs and what they measured.

A run's state changes only through ``profiler.actions`` (one function per change). Samples are
kept per repeat/iteration where the agent sends them, so the variance Srifty plans with is never
averaged away.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from srifty_web.teams import TeamQuerySet
from srifty_web.tokens import ScopedTokenMixin


class RunKind(models.TextChoices):
    COMPUTE = "compute", "Compute (forward/backward/optimizer vs batch)"
    COMM = "comm", "Communication (AllReduce vs message size)"


class RunStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class Provider(models.TextChoices):
    LOCAL = "local", "This machine (subprocess)"
    EC2 = "ec2", "EC2 instance"


class Market(models.TextChoices):
    ON_DEMAND = "on-demand", "On-demand"
    SPOT = "spot", "Spot"


class ProfilingRun(ScopedTokenMixin, models.Model):
    kind = models.CharField(max_length=10, choices=RunKind.choices, default=RunKind.COMPUTE)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="profiling_runs"
    )
    # What to measure
    model_spec = models.CharField(
        max_length=200, blank=True, help_text="torchvision:NAME or package.module:factory"
    )
    input_shape = models.CharField(max_length=64, blank=True, help_text="e.g. 3,224,224")
    batch_sizes = models.CharField(max_length=200, default="auto", help_text="auto or a list like 8,16,32")
    device = models.CharField(max_length=8, default="cpu")
    precision = models.CharField(max_length=8, default="fp32")
    iters = models.PositiveIntegerField(default=5)
    max_memory = models.CharField(max_length=16, blank=True, help_text="CPU batch-search bound, e.g. 2GB")
    world_size = models.PositiveIntegerField(default=2)
    backend = models.CharField(max_length=8, default="gloo")
    sizes = models.CharField(max_length=32, blank=True, help_text="message sizes, e.g. 1KB..16MB")
    nodes = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="EC2 comm cluster: N >= 2 nodes in one placement group; empty: one VM",
    )
    # Where
    provider = models.CharField(max_length=8, choices=Provider.choices, default=Provider.LOCAL)
    instance_type = models.CharField(max_length=64, blank=True)
    region = models.CharField(max_length=32, blank=True)
    market = models.CharField(max_length=10, choices=Market.choices, default=Market.ON_DEMAND)
    # State
    status = models.CharField(
        max_length=10, choices=RunStatus.choices, default=RunStatus.PENDING, db_index=True
    )
    phase = models.CharField(max_length=32, blank=True)
    progress = models.FloatField(default=0.0, help_text="0..1")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(help_text="Hard limit: the run is stopped and its VM terminated")
    # Execution handles
    pid = models.PositiveIntegerField(null=True, blank=True)
    instance_ids = models.JSONField(default=list, blank=True)
    node_ips = models.JSONField(
        default=dict, blank=True, help_text="instance id -> private IP (cluster rendezvous)"
    )
    launch_token = models.CharField(
        max_length=64, blank=True, help_text="EC2 ClientToken: no duplicate launch"
    )
    # Agent credentials: only the SHA-256 of the token is stored.
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    token_expires_at = models.DateTimeField(null=True, blank=True)
    last_seq = models.PositiveIntegerField(default=0)
    profile = models.JSONField(null=True, blank=True)

    objects = TeamQuerySet.as_manager()  # ProfilingRun.objects.visible_to(user): the team rule

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"run {self.pk} {self.kind} {self.model_spec or self.backend} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def target(self) -> str:
        return (
            "local"
            if self.provider == Provider.LOCAL
            else f"{self.instance_type} ({self.region}, {self.market})"
        )

    @property
    def group_name(self) -> str:
        return f"profiling-run-{self.pk}"

    @property
    def is_cluster(self) -> bool:
        """A comm run over several EC2 nodes (one placement group, NCCL across them)."""
        return (self.nodes or 1) > 1

    @property
    def placement_group(self) -> str:
        """The cluster's placement group; derived, not stored, so a start that died between
        creating it and recording anything still leaves a name that ``stop`` can delete."""
        return f"srifty-run-{self.pk}" if self.is_cluster else ""

    def token_expiry(self):
        """An agent's token dies at the run's hard deadline (or earlier, when the run ends)."""
        return self.deadline_at


class ComputeSample(models.Model):
    """One phase at one batch size: the summary plus every timed iteration."""

    run = models.ForeignKey(ProfilingRun, on_delete=models.CASCADE, related_name="compute_samples")
    batch_size = models.PositiveIntegerField()
    phase = models.CharField(max_length=10)  # forward | backward | optimizer
    median_ms = models.FloatField()
    p10_ms = models.FloatField()
    p90_ms = models.FloatField()
    mean_ms = models.FloatField()
    std_ms = models.FloatField()
    cv = models.FloatField()
    times_ms = models.JSONField(default=list)
    peak_memory_bytes = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["batch_size", "phase"]
        constraints = [
            models.UniqueConstraint(fields=["run", "batch_size", "phase"], name="uniq_compute_sample")
        ]


class BucketSample(models.Model):
    """A DDP gradient bucket at one batch size: its size and when it became ready in backward."""

    run = models.ForeignKey(ProfilingRun, on_delete=models.CASCADE, related_name="bucket_samples")
    batch_size = models.PositiveIntegerField()
    index = models.PositiveIntegerField()
    size_bytes = models.BigIntegerField()
    num_params = models.PositiveIntegerField()
    ready_ms = models.FloatField()
    ready_fraction = models.FloatField()

    class Meta:
        ordering = ["batch_size", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "batch_size", "index"], name="uniq_bucket_sample")
        ]


class CommSample(models.Model):
    """AllReduce of one message size at one world size, every repeat kept."""

    run = models.ForeignKey(ProfilingRun, on_delete=models.CASCADE, related_name="comm_samples")
    size_bytes = models.BigIntegerField()
    world_size = models.PositiveIntegerField()
    backend = models.CharField(max_length=8)
    median_ms = models.FloatField()
    p10_ms = models.FloatField()
    p90_ms = models.FloatField()
    mean_ms = models.FloatField()
    std_ms = models.FloatField()
    cv = models.FloatField()
    times_ms = models.JSONField(default=list)
    algbw_gbps = models.FloatField()
    busbw_gbps = models.FloatField()

    class Meta:
        ordering = ["size_bytes"]
        constraints = [
            models.UniqueConstraint(fields=["run", "size_bytes", "world_size"], name="uniq_comm_sample")
        ]


class RunEvent(models.Model):
    """Every event an agent posted, once (by seq): the live chart's history and an audit trail."""

    run = models.ForeignKey(ProfilingRun, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=10)
    payload = models.JSONField(default=dict)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="uniq_run_event_seq")]


class CommCurvePoint(models.Model):
    """One point of an NCCL all-reduce curve measured on EC2: training data of the comm model.

    ``planner.app.comm_training`` turns these into corpus points (topology from the catalog row
    and the GPU spec) next to the published sweeps and refits the correction on them.
    """

    run = models.ForeignKey(ProfilingRun, on_delete=models.CASCADE, related_name="curve_points")
    instance_type = models.CharField(max_length=64)
    nodes = models.PositiveIntegerField()
    gpus_per_node = models.PositiveIntegerField()
    gpu = models.CharField(max_length=64, help_text="the catalog's accelerator name, e.g. A100")
    device_name = models.CharField(max_length=128, blank=True, help_text="what CUDA called it")
    network = models.CharField(max_length=8, help_text="efa | tcp | none (one node)")
    nccl_version = models.CharField(max_length=32, blank=True)
    size_bytes = models.BigIntegerField()
    median_us = models.FloatField()
    p90_us = models.FloatField()
    measured_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "size_bytes"]
        constraints = [models.UniqueConstraint(fields=["run", "size_bytes"], name="uniq_comm_curve_point")]

    def __str__(self) -> str:
        return f"{self.nodes}x {self.instance_type} {self.size_bytes} B: {self.median_us:.1f} us"
