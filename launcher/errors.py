"""The errors of launcher requests, shared by every launcher module (the API maps them to 400,
403 and 409)."""

from __future__ import annotations

from typing import Any


class JobError(ValueError):
    """A request that cannot become a job; ``field`` names the offending field (API: 400)."""

    def __init__(self, field: str, message: str, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        # Structured problems behind the message (a task file's: [{"line", "field", "message"}]);
        # the API answers ``{field: details}`` when there are some.
        self.details = details


class ConfirmationUsed(JobError):
    """The confirmation id already launched a job (a replay, a double click or a client retry):
    nothing new starts. ``job_id``: the job it launched (API: 409 naming it)."""

    def __init__(self, job_id: int) -> None:
        super().__init__(
            "confirmation",
            f"this confirmation already launched job {job_id}; preview again to launch another",
        )
        self.job_id = job_id


class NotAllowed(PermissionError):
    """The user lacks the permission for this (API: 403)."""


class JobClosed(Exception):
    """The job has finished; it accepts no more reports (API: 409)."""
