"""Live updates: one way to push a small JSON message to a websocket group.

Messages leave only after the current transaction commits (``transaction.on_commit``), so a
browser never sees a state that was rolled back; a full or unreachable channel layer is logged
and never fails the request that changed the state.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def send_on_commit(group: str, handler: str, message: dict) -> None:
    """Queue ``message`` for consumers of ``group``; ``handler`` is the consumer method's type
    (``"run.message"`` calls ``run_message``)."""

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(group, {"type": handler, "message": message})
        except Exception:
            log.exception("websocket fan-out to %s failed", group)

    transaction.on_commit(send)
