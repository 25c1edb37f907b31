"""What every upload endpoint asks of a request before reading its body."""

from __future__ import annotations

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response


def content_length(request: Request) -> int | None:
    """The request's Content-Length, or None when it is not a plain non-negative integer."""
    raw = str(request.META.get("CONTENT_LENGTH") or "0").strip()
    return int(raw) if raw.isdigit() and len(raw) <= 18 else None


def refuse_size(request: Request, limit: int, what: str = "post") -> Response | None:
    """400 when the Content-Length is no byte count, 413 when it is over ``limit`` bytes (the
    body is never read then); None when the body may be read. ``what`` names the body in the
    answer ("a post", "an event")."""
    length = content_length(request)
    if length is None:
        return Response({"detail": "Content-Length must be a byte count"}, status=status.HTTP_400_BAD_REQUEST)
    if length > limit:
        return Response(
            {"detail": f"{what} larger than {limit} bytes"}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
        )
    return None
