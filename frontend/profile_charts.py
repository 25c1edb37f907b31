"""The charts of a profiling run's page: ``profiler.charts`` computes their data (it fits the
planner's models and reads the catalog); this module only hands it to the page, where
``frontend/static/frontend/profile_charts.js`` draws it."""

from __future__ import annotations

import logging
from typing import Any

from profiler import charts
from profiler.models import ProfilingRun

log = logging.getLogger(__name__)


def chart_data(run: ProfilingRun) -> dict[str, Any]:
    """What the page's charts draw, JSON-ready; ``{}`` before the run has a profile, and a note
    instead of the charts when their data cannot be computed (a chart must never take the page
    down with it)."""
    try:
        return charts.for_run(run)
    except Exception:
        log.exception("chart data of run %s", run.pk)
        return {"error": "the charts could not be computed for this profile"}
