"""Live updates: one way to push a small JSON message to a websocket group.

Messages leave only after the current transaction commits (``transaction.on_commit``), so a
browser never sees a state that was rolled back; a full or unreachable channel layer is logged
and never fails the request that changed the state.

A message is encoded to JSON once, by the sender, and every viewer forwards that text as it is:
with 100 viewers of a run, encoding per viewer (``send_json``) and channels' per-message
``close_old_connections()`` (a thread hop each) were most of the fan-out's CPU.
"""

from __future__ import annotations

import json
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def send_on_commit(group: str, handler: str, message: dict) -> None:
    """Queue ``message`` for consumers of ``group``; ``handler`` is the consumer method's type
    (``"run.message"`` calls ``run_message``)."""

    text = json.dumps(message)  # now: the message may be mutated before the commit

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(group, {"type": handler, "text": text})
        except Exception:
            log.exception("websocket fan-out to %s failed", group)

    transaction.on_commit(send)


class ViewerConsumer:
    """Mixin for a read-only live view of one object (a run, a job) over a websocket.

    Anonymous viewers are closed with 4401; anyone who may not see the object with 4403 (not
    found and not yours look the same, so ids cannot be probed). A viewer gets the snapshot
    first, then every group message; whatever it sends is ignored. Subclasses set ``url_kwarg``,
    ``group_prefix`` and ``live_handler`` (the ``handler`` their senders pass to
    :func:`send_on_commit`) and implement ``snapshot(user, pk)`` (sync; ``None`` = refused).
    """

    url_kwarg = "pk"
    group_prefix = ""
    live_handler = ""

    async def dispatch(self, message: dict) -> None:
        # A group message is forwarded as the text it came in: no database, so none of the
        # close_old_connections() thread hop channels makes before every other handler.
        if message.get("type") == self.live_handler:
            await self.send(text_data=message["text"])
            return
        await super().dispatch(message)

    async def connect(self) -> None:
        from channels.db import database_sync_to_async

        user = self.scope.get("user")
        pk = self.scope["url_route"]["kwargs"][self.url_kwarg]
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        snapshot = await database_sync_to_async(self.snapshot)(user, pk)
        if snapshot is None:
            await self.close(code=4403)
            return
        self.group = f"{self.group_prefix}-{pk}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json(snapshot)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        return  # viewers only listen

    def snapshot(self, user, pk: int) -> dict | None:  # pragma: no cover - subclasses define it
        raise NotImplementedError
