"""Live updates: one way to push a small JSON message to a websocket group.

Messages leave only after the current transaction commits (``transaction.on_commit``), so a
browser never sees a state that was rolled back; a full or unreachable channel layer is logged
and never fails the request that changed the state.

A message is encoded to JSON once, by the sender, and every viewer forwards that text as it is:
with 100 viewers of a run, encoding per viewer (``send_json``) and channels' per-message
``close_old_connections()`` (a thread hop each) were most of the fan-out's CPU.

Frames are coalesced per viewer: a message that arrives when the viewer sent nothing in the last
``COALESCE_S`` goes out at once, as the object itself; messages arriving within that window wait
for its end and go out together as one JSON array of those objects (in order). At an agent's
50 events/s that is 10 frames/s per viewer instead of 50, at most ``COALESCE_S`` later. Clients
accept both forms (``Array.isArray``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

COALESCE_S = 0.1  # seconds a viewer's frames are gathered when messages come faster than that


def send_on_commit(group: str, handler: str, message: dict) -> None:
    """Queue ``message`` for consumers of ``group``; ``handler`` is the message type the
    group's :class:`ViewerConsumer` forwards (its ``live_handler``, e.g. ``"run.message"``)."""

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


if TYPE_CHECKING:  # a mixin for AsyncJsonWebsocketConsumer: type-check it as one
    from channels.generic.websocket import AsyncJsonWebsocketConsumer as _ConsumerBase
else:
    _ConsumerBase = object


class ViewerConsumer(_ConsumerBase):
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
    _pending: list[str] | None = None
    _flush: asyncio.Task | None = None
    _last_sent = 0.0  # time.monotonic() of this viewer's last live frame

    async def dispatch(self, message: dict) -> None:
        # A group message is forwarded as the text it came in: no database, so none of the
        # close_old_connections() thread hop channels makes before every other handler.
        if message.get("type") == self.live_handler:
            await self._forward(message["text"])
            return
        await super().dispatch(message)

    async def _forward(self, text: str) -> None:
        if self._pending is None:
            self._pending = []
        self._pending.append(text)
        if self._flush is not None:
            return  # a flush is due at the end of the window and takes this one too
        wait = self._last_sent + COALESCE_S - time.monotonic()
        if wait <= 0:
            await self._send_pending()
        else:
            self._flush = asyncio.ensure_future(self._flush_after(wait))

    async def _flush_after(self, wait: float) -> None:
        await asyncio.sleep(wait)
        self._flush = None
        await self._send_pending()

    async def _send_pending(self) -> None:
        texts, self._pending = self._pending or [], []
        if not texts:
            return
        self._last_sent = time.monotonic()
        # joined, not re-encoded: each text is already one JSON object
        await self.send(text_data=texts[0] if len(texts) == 1 else "[" + ",".join(texts) + "]")

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
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        # Viewers only listen: a frame is dropped undecoded (channels would json.loads it first,
        # and a deeply nested one raises RecursionError; a binary one, ValueError).
        return

    async def receive_json(self, content, **kwargs) -> None:
        return  # viewers only listen

    def snapshot(self, user, pk: int) -> dict | None:  # pragma: no cover - subclasses define it
        raise NotImplementedError
