"""The one error type of ``cloud``: every botocore failure becomes a ``CloudError``.

``code`` is AWS's error code (``InvalidInstanceID.NotFound``, ``RequestLimitExceeded``...) or,
for failures that never reached AWS (no credentials, no connection, a timeout), botocore's
exception class name (``NoCredentialsError``, ``EndpointConnectionError``...). ``operation``
names the call as ``service.method`` (``ec2.run_instances``). ``str(error)`` is the message
users see: ``ec2.run_instances failed: InsufficientInstanceCapacity: We currently do not have...``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

__all__ = ["CloudError", "call", "pages", "translated"]


class CloudError(RuntimeError):
    """An AWS call failed (after the retries of ``cloud.session.RETRY``) or was refused here.

    ``code``: AWS's error code, or botocore's exception name for local failures, or a code of
    ``cloud``'s own (``Refused``, ``NoImage``...). ``message``: AWS's message. ``operation``:
    ``service.method``. ``status``: the HTTP status when AWS answered."""

    def __init__(
        self,
        code: str,
        message: str,
        operation: str = "",
        *,
        status: int | None = None,
        text: str | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.operation = operation
        self.status = status
        if text is None:
            text = f"{operation} failed: {code}: {message}" if operation else f"{code}: {message}"
        super().__init__(text)

    @classmethod
    def from_botocore(cls, operation: str, exc: Exception) -> CloudError:
        if isinstance(exc, ClientError):
            err = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            return cls(err.get("Code") or "?", err.get("Message") or str(exc), operation, status=status)
        return cls(type(exc).__name__, str(exc), operation, text=f"{operation} failed: {exc}")


def _operation(cli: Any, method: str) -> str:
    return f"{cli.meta.service_model.service_name}.{method}"


@contextmanager
def translated(operation: str) -> Iterator[None]:
    """Turn botocore's exceptions raised inside the block into ``CloudError``."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise CloudError.from_botocore(operation, exc) from exc


def call(cli: Any, method: str, **kwargs: Any) -> dict[str, Any]:
    """``cli.<method>(**kwargs)``, failing with ``CloudError``."""
    fn: Callable[..., dict[str, Any]] = getattr(cli, method)
    with translated(_operation(cli, method)):
        return fn(**kwargs)


def pages(cli: Any, method: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every item under ``key`` of every page of ``cli.<method>``, failing with ``CloudError``."""
    with translated(_operation(cli, method)):
        for page in cli.get_paginator(method).paginate(**kwargs):
            yield from page.get(key, [])
