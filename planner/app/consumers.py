"""Live view of one plan: its state and progress (``planner.app.solving.status_message``). A
viewer only reads: a plan whose worker died shows ``stale`` until the workers recover it."""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from planner.app import solving
from planner.app.models import PlanRecord
from srifty_web.live import ViewerConsumer


class PlanConsumer(ViewerConsumer, AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    url_kwarg = "plan_id"
    group_prefix = "plan"
    live_handler = solving.LIVE_HANDLER

    def snapshot(self, user: Any, plan_id: int) -> dict[str, Any] | None:
        record = PlanRecord.objects.visible_to(user).filter(pk=plan_id).first()
        if record is None:
            return None
        return {**solving.status_message(record), "type": "snapshot"}
