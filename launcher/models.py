"""Launched training jobs: a plan option on EC2 (``Job``), the iteration times its nodes
report (``JobReport``) and what happened to it (``JobEvent``).

These models were created by ``planner.app`` (label ``plans``) and moved here without touching
the database: the tables keep their names (``plans_job``, ...); see ``launcher/migrations``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from planner.option import PlanOption
from srifty_web.teams import TeamQuerySet
from srifty_web.tokens import ScopedTokenMixin


class JobStatus(models.TextChoices):
    LAUNCHING = "launching", "Launching"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    STOPPED = "stopped", "Stopped"  # by the user, the spend/time cap or the reconciler


JOB_FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)


class Job(ScopedTokenMixin, models.Model):
    """A launched training cluster: one plan option, on EC2, capped in spend and time."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    plan = models.ForeignKey("plans.PlanRecord", on_delete=models.PROTECT, related_name="jobs")
    plan_rank = models.PositiveIntegerField()
    option = models.JSONField(help_text="The plan option as launched (groups, batch per node, prices)")
    region = models.CharField(max_length=32)
    train_command = models.TextField()
    status = models.CharField(
        max_length=10, choices=JobStatus.choices, default=JobStatus.LAUNCHING, db_index=True
    )
    status_reason = models.TextField(blank=True)
    hourly_usd = models.DecimalField(max_digits=12, decimal_places=4)
    max_spend_usd = models.DecimalField(max_digits=12, decimal_places=2)
    max_hours = models.FloatField()
    predicted_iter_s = models.FloatField()
    predicted_iter_p90_s = models.FloatField()
    total_iterations = models.PositiveBigIntegerField(default=0)
    instance_ids = models.JSONField(default=list, blank=True)
    node_ips = models.JSONField(default=dict, blank=True, help_text="instance id -> private IP")
    # Prepared once (``launcher.launch.prepare_node_env``) so a node's rendezvous poll neither
    # parses the task file nor recomputes the checkpoint interval: the option never changes.
    # Holds the task's secret values, as ``task`` does; never shown (the serializers list fields).
    node_env = models.JSONField(
        default=dict,
        blank=True,
        help_text="instance type -> the environment its nodes start from (network, task envs, checkpoints)",
    )
    placement_group = models.CharField(max_length=255, blank=True)
    launch_template_ids = models.JSONField(default=list, blank=True)
    security_group_id = models.CharField(
        max_length=64,
        blank=True,
        help_text="The cluster's own security group (members only); deleted with the job",
    )
    image_id = models.CharField(max_length=64, blank=True, help_text="The AMI the nodes boot")
    image_source = models.CharField(
        max_length=255, blank=True, help_text="Where the AMI id came from: the DLAMI SSM parameter, or custom"
    )
    task = models.TextField(
        blank=True, help_text="The task file as launched (launcher.taskfile); empty: train_command"
    )
    workdir_archive = models.CharField(
        max_length=255,
        blank=True,
        help_text="The uploaded workdir (tar.gz under SRIFTY_DATA_DIR) the nodes fetch",
    )
    launch_token = models.CharField(max_length=64, blank=True)
    # One job per confirmation id: the unique index is what makes a replayed or concurrently
    # doubled POST fail (IntegrityError) in the transaction that would create a second job.
    # NULL for jobs launched without one (manage.py launch); a 600 s token's digest needs no
    # pruning: it is one short column of a row that is kept anyway.
    confirmation_digest = models.CharField(
        max_length=64,
        null=True,
        blank=True,
        unique=True,
        editable=False,
        help_text="SHA-256 of the confirmation id that launched this job (it launches nothing again)",
    )
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    token_expires_at = models.DateTimeField(null=True, blank=True)
    last_seq = models.PositiveBigIntegerField(default=0)
    drift_since = models.DateTimeField(null=True, blank=True)
    # The rate changes when the deadline guard moves spot nodes to on-demand: spend is what was
    # billed before ``rate_since`` plus the current ``hourly_usd`` since then.
    spend_before_usd = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    rate_since = models.DateTimeField(null=True, blank=True)
    on_demand_since = models.DateTimeField(
        null=True, blank=True, help_text="When the deadline guard moved the spot nodes to on-demand"
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TeamQuerySet.as_manager()  # Job.objects.visible_to(user): the team rule

    class Meta:
        db_table = "plans_job"  # made by planner.app before jobs moved here; rows stay where they are
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.status})"

    @property
    def plan_option(self) -> PlanOption:
        """``option`` typed (read on each access: ``option`` may be updated in place)."""
        return PlanOption.from_json(self.option)

    @property
    def finished(self) -> bool:
        return self.status in JOB_FINISHED

    @property
    def task_shown(self) -> str:
        """The task file with its credential ``envs`` values redacted: what people see (the API,
        the job page); the nodes get the real values from the rendezvous."""
        from launcher.taskfile import redacted

        return redacted(self.task)

    @property
    def group_name(self) -> str:
        return f"job-{self.pk}"

    @property
    def cap_at(self) -> datetime:
        """When the time or spend cap is reached, whichever is first."""
        start = self.started_at or self.created_at
        by_time = start + timedelta(hours=self.max_hours)
        if not self.hourly_usd:
            return by_time
        since = self.rate_since or start
        left = float(self.max_spend_usd - self.spend_before_usd) / float(self.hourly_usd)
        return min(by_time, since + timedelta(hours=max(0.0, left)))

    def spend_so_far(self, now: datetime | None = None) -> float:
        now = now or timezone.now()
        start = self.rate_since or self.started_at or self.created_at
        end = self.finished_at or now
        hours = max(0.0, (end - start).total_seconds() / 3600.0)
        return float(self.spend_before_usd) + hours * float(self.hourly_usd)

    def token_expiry(self) -> datetime:
        """Node tokens die at the job's cap (or earlier, when the job ends)."""
        return self.cap_at


class JobReport(models.Model):
    """Iteration times a training process posted (via ``profiler.agent.report``)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="reports")
    seq = models.PositiveBigIntegerField()
    rank = models.PositiveIntegerField(default=0)
    iteration = models.PositiveBigIntegerField()
    iter_time_s = models.FloatField()
    samples = models.PositiveIntegerField(null=True, blank=True)
    reported_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        db_table = "plans_jobreport"
        ordering = ["reported_at"]
        constraints = [models.UniqueConstraint(fields=["job", "rank", "seq"], name="uniq_job_report_seq")]


class JobEvent(models.Model):
    """Things that happened to a job: launch, drift, spot interruption, node loss, cap, re-plan."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=32)
    message = models.TextField()
    data = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "plans_jobevent"
        ordering = ["at"]


class JobCheckpoint(models.Model):
    """A checkpoint the training reported (``POST /jobs/{id}/checkpoints/``): where a
    replacement resumes after an interruption."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="checkpoints")
    iteration = models.PositiveBigIntegerField()
    samples = models.PositiveBigIntegerField(null=True, blank=True, help_text="Samples trained so far")
    path = models.CharField(max_length=1024, blank=True, help_text="Where it was written (e.g. an S3 key)")
    rank = models.PositiveIntegerField(default=0)
    reported_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["reported_at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["job", "iteration"], name="uniq_job_checkpoint_iteration")
        ]


class JobInterruption(models.Model):
    """A node lost (spot notice, gone, stopped) or moved by the deadline guard; what it cost
    and what replaced it (``launcher.interruptions``)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="interruptions")
    instance_id = models.CharField(max_length=32)
    instance_type = models.CharField(max_length=64, blank=True)
    market = models.CharField(max_length=16, blank=True, help_text="The lost node's market")
    cause = models.CharField(max_length=32, help_text="spot_notice, gone, stopped or deadline_guard")
    at = models.DateTimeField(help_text="When the node stopped training (the notice's action time)")
    checkpoint = models.ForeignKey(
        JobCheckpoint, null=True, blank=True, on_delete=models.SET_NULL, help_text="Where the run resumes"
    )
    lost_min = models.FloatField(help_text="Training since the last checkpoint, done again")
    restart_min = models.FloatField(help_text="Until the replacement trains: assumed, then measured")
    hourly_usd = models.DecimalField(max_digits=12, decimal_places=4, help_text="The cluster's rate")
    replacement_ids = models.JSONField(default=list, blank=True)
    replacement_market = models.CharField(max_length=16, blank=True)
    resumed_at = models.DateTimeField(null=True, blank=True)
    resumed_iteration = models.PositiveBigIntegerField(null=True, blank=True)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["job", "instance_id"], name="uniq_job_interruption_instance")
        ]

    @property
    def cost_usd(self) -> float:
        """The cluster's rate over the lost and restart time (spot_policy.interruption_cost)."""
        return (self.lost_min + self.restart_min) / 60.0 * float(self.hourly_usd)
