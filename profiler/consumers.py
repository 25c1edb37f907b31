"""Live view of one profiling run: a websocket per run, a channel-layer group per run.

On connect the client gets the run's current state and its recent events (so a late viewer
sees the chart so far); after that, every event the agent posts, as a small JSON message.
"""

from __future__ import annotations

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from profiler.actions import status_message
from profiler.models import ProfilingRun, RunEvent
from srifty_web.live import ViewerConsumer

REPLAY_EVENTS = 500


class RunConsumer(ViewerConsumer, AsyncJsonWebsocketConsumer):
    url_kwarg = "run_id"
    group_prefix = "profiling-run"
    live_handler = "run.message"

    def snapshot(self, user, run_id: int) -> dict | None:
        run = ProfilingRun.objects.visible_to(user).filter(pk=run_id).first()
        if run is None:
            return None
        recent = list(
            RunEvent.objects.filter(run=run, type__in=["progress", "sample"]).order_by("-seq")[:REPLAY_EVENTS]
        )
        events = [{"type": e.type, "seq": e.seq, **e.payload} for e in reversed(recent)]
        return {**status_message(run), "type": "snapshot", "kind": run.kind, "events": events}
