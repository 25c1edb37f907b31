"""Stored plans (request + result, so a plan can be reopened). Launched jobs live in ``launcher``.

The pure planner (``planner.solver`` etc.) never sees these: the app turns rows into
dataclasses, calls the pure code, and stores the dataclasses' JSON form.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from srifty_web.teams import TeamQuerySet


class PlanStatus(models.TextChoices):
    """queued → running → solved | infeasible (both "done": ranked plans, or none that meets the
    constraints, with the binding one) | failed | cancelled. See ``planner.app.solving``."""

    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SOLVED = "solved", "Solved"
    INFEASIBLE = "infeasible", "Infeasible"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


PLAN_ACTIVE = (PlanStatus.QUEUED, PlanStatus.RUNNING)
PLAN_FINISHED = (PlanStatus.SOLVED, PlanStatus.INFEASIBLE, PlanStatus.FAILED, PlanStatus.CANCELLED)


class PlanRecord(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="plans")
    name = models.CharField(max_length=120, blank=True)
    # The request as the user gave it (model spec or profile run, job size, objective, limits).
    request = models.JSONField()
    profile_run = models.ForeignKey(
        "profiler.ProfilingRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="plans"
    )
    status = models.CharField(
        max_length=12, choices=PlanStatus.choices, default=PlanStatus.QUEUED, db_index=True
    )
    # While it runs: the phase, and the search's configurations evaluated / estimated in all.
    phase = models.CharField(max_length=24, blank=True)
    progress_evaluated = models.PositiveBigIntegerField(default=0)
    progress_total = models.PositiveBigIntegerField(default=0)
    # The worker's lease: attempts counts the workers that took the plan (the current one's
    # number guards its writes); heartbeat_at is renewed while it runs.
    attempts = models.PositiveSmallIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # PlanResult as JSON: ranked plans, Pareto frontier, evaluated points, baselines, stats.
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    error_field = models.CharField(
        max_length=40, blank=True, help_text="the request field a failure is about"
    )
    binding_constraint = models.CharField(max_length=40, blank=True)
    solve_time_s = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TeamQuerySet.as_manager()  # PlanRecord.objects.visible_to(user): the team rule

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name or f"plan {self.pk}"

    @property
    def finished(self) -> bool:
        return self.status in PLAN_FINISHED

    def option(self, rank: int) -> dict[str, Any] | None:
        """The stored JSON of the plan ranked ``rank`` (None: no such rank)."""
        from planner.plan_result import PlanResult

        for row in PlanResult.read(self.result).plans:
            if row.rank == rank:
                return row.to_json()
        return None
