"""Live view of one profiling run: a websocket per run, a channel-layer group per run.

On connect the client gets the run's current state and its recent events (so a late viewer
sees the chart so far); after that, every event the agent posts, as a small JSON message.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from profiler.actions import status_message
from profiler.models import ProfilingRun, RunEvent
from srifty_web.teams import visible_owner_q

REPLAY_EVENTS = 500


class RunConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        run_id = self.scope["url_route"]["kwargs"]["run_id"]
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        snapshot = await self._snapshot(user, run_id)
        if snapshot is None:
            await self.close(code=4403)  # not found and not yours look the same: no probing
            return
        self.group = f"profiling-run-{run_id}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json(snapshot)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        # Viewers only listen; anything they send is ignored.
        return

    async def run_message(self, event: dict) -> None:
        await self.send_json(event["message"])

    @database_sync_to_async
    def _snapshot(self, user, run_id: int) -> dict | None:
        run = ProfilingRun.objects.filter(visible_owner_q(user)).filter(pk=run_id).first()
        if run is None:
            return None
        recent = list(
            RunEvent.objects.filter(run=run, type__in=["progress", "sample"]).order_by("-seq")[:REPLAY_EVENTS]
        )
        events = [{"type": e.type, "seq": e.seq, **e.payload} for e in reversed(recent)]
        return {**status_message(run), "type": "snapshot", "kind": run.kind, "events": events}
