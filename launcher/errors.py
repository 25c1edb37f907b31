"""The errors of launcher requests, shared by every launcher module (the API maps them to 400,
403 and 409)."""

from __future__ import annotations


class JobError(ValueError):
    """A request that cannot become a job; ``field`` names the offending field (API: 400)."""

    def __init__(self, field: str, message: str, details: list[dict] | None = None) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        # Structured problems behind the message (a task file's: [{"line", "field", "message"}]);
        # the API answers ``{field: details}`` when there are some.
        self.details = details


class NotAllowed(PermissionError):
    """The user lacks the permission for this (API: 403)."""


class JobClosed(Exception):
    """The job has finished; it accepts no more reports (API: 409)."""
