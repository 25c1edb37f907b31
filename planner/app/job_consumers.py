"""Live view of one training job: a websocket per job, a channel-layer group per job.

Same rules as profiling runs: logged-in users of the owner's team only (4401 anonymous, 4403
otherwise, not found and not yours look the same). On connect the viewer gets a snapshot (state,
predicted p50/p90, the recent reports and the events); then small messages as they happen:
``{"type": "report", "iteration", "iter_time_s", "rank"}``, ``{"type": "status", ...}`` and
``{"type": "event", "kind", "message", "at"}``.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from planner.app.jobs import event_message, status_message, visible_jobs
from planner.app.models import JobEvent, JobReport

REPLAY_REPORTS = 2000
REPLAY_EVENTS = 200


class JobConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        job_id = self.scope["url_route"]["kwargs"]["job_id"]
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        snapshot = await self._snapshot(user, job_id)
        if snapshot is None:
            await self.close(code=4403)
            return
        self.group = f"job-{job_id}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json(snapshot)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        return  # viewers only listen

    async def job_message(self, event: dict) -> None:
        await self.send_json(event["message"])

    @database_sync_to_async
    def _snapshot(self, user, job_id: int) -> dict | None:
        job = visible_jobs(user).filter(pk=job_id).first()
        if job is None:
            return None
        reports = list(JobReport.objects.filter(job=job).order_by("-reported_at", "-seq")
                       .values("iteration", "iter_time_s", "rank")[:REPLAY_REPORTS])[::-1]  # fmt: skip
        events = [event_message(e) for e in JobEvent.objects.filter(job=job).order_by("-at")[:REPLAY_EVENTS]][::-1]
        return {**status_message(job), "type": "snapshot", "predicted_iter_s": job.predicted_iter_s,
                "predicted_iter_p90_s": job.predicted_iter_p90_s, "reports": reports, "events": events}
