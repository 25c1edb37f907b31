"""Live view of one training job: a websocket per job, a channel-layer group per job.

Same rules as profiling runs: logged-in users of the owner's team only (4401 anonymous, 4403
otherwise, not found and not yours look the same). On connect the viewer gets a snapshot (state,
predicted p50/p90, the recent reports and the events); then small messages as they happen:
``{"type": "report", "iteration", "iter_time_s", "rank"}``, ``{"type": "status", ...}`` and
``{"type": "event", "kind", "message", "at"}``.
"""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from launcher.jobs import event_message, status_message, visible_jobs
from launcher.models import JobEvent, JobReport
from srifty_web.live import ViewerConsumer

REPLAY_REPORTS = 2000
REPLAY_EVENTS = 200


# channels ships no types (its names are Any): the subclass cannot be checked against it.
class JobConsumer(ViewerConsumer, AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    url_kwarg = "job_id"
    group_prefix = "job"
    live_handler = "job.message"

    def snapshot(self, user: Any, job_id: int) -> dict[str, Any] | None:
        job = visible_jobs(user).filter(pk=job_id).first()
        if job is None:
            return None
        reports = list(
            JobReport.objects.filter(job=job)
            .order_by("-reported_at", "-seq")
            .values("iteration", "iter_time_s", "rank")[:REPLAY_REPORTS]
        )[::-1]
        events = [event_message(e) for e in JobEvent.objects.filter(job=job).order_by("-at")[:REPLAY_EVENTS]][
            ::-1
        ]
        return {
            **status_message(job),
            "type": "snapshot",
            "predicted_iter_s": job.predicted_iter_s,
            "predicted_iter_p90_s": job.predicted_iter_p90_s,
            "reports": reports,
            "events": events,
        }
