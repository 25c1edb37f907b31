"""What the planner's Django app needs of the profiler's records, stated here as a port.

The planner plans from a stored compute profile (a request's ``profile_run``) and refits its
comm model on the all-reduce curves users measured; both are the profiler app's records. The
profiler imports the planner (its charts and its refit task call it), so the planner does not
import the profiler back: it declares what it reads (:class:`ProfileStore`, plain frozen rows)
and the profiler registers the adapter that serves it (``profiler.planning``, from
``ProfilerConfig.ready``). Nothing under ``planner/`` imports ``profiler/``
(tests/test_import_cycles.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol


@dataclass(frozen=True)
class StoredProfile:
    """A finished compute profiling run, as the planner reads it."""

    run_id: int
    profile: Mapping[str, Any]  # the agent's profile JSON (``planner.profiles.parse_compute_profile``)
    input_shape: str  # the run's requested shape, comma-separated (older profiles lack their own)


@dataclass(frozen=True)
class CommPoint:
    """One stored all-reduce measurement of a user's comm-profiling run."""

    point_id: int
    run_id: int
    instance_type: str
    gpu: str
    gpus_per_node: int
    nodes: int
    network: str
    nccl_version: str
    size_bytes: int
    median_us: float


class ProfileUnavailable(Exception):
    """The run cannot be planned from: ``not_found`` (absent, or not visible to the owner under
    the team rule: both read the same) or ``not_finished`` (not a succeeded compute run with a
    profile)."""

    def __init__(self, run_id: int, reason: Literal["not_found", "not_finished"]):
        super().__init__(f"profiling run {run_id}: {reason}")
        self.run_id = run_id
        self.reason = reason


class ProfileStore(Protocol):
    def compute_profile(self, run_id: int, owner: Any) -> StoredProfile:
        """The finished compute profile of run ``run_id`` as ``owner`` may see it (the team
        rule); raises :class:`ProfileUnavailable` otherwise."""
        ...

    def comm_points(self) -> list[CommPoint]:
        """Every stored comm curve point, by run then message size."""
        ...


_store: ProfileStore | None = None


def register_profile_store(store: ProfileStore) -> None:
    """Called once by the app that keeps the profiles (``profiler.apps.ProfilerConfig.ready``)."""
    global _store
    _store = store


def profile_store() -> ProfileStore:
    if _store is None:
        raise RuntimeError(
            "no profile store is registered: planner.app reads profiling runs through "
            "planner.app.ports.register_profile_store, which the profiler app calls when Django "
            "starts (is 'profiler' in INSTALLED_APPS?)"
        )
    return _store
