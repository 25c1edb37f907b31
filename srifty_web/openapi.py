"""Summaries and tags of every API operation, in one table (drf-spectacular hooks).

The views keep their docstrings (the operations' descriptions); what a reader of the schema or
of ``/api/docs/`` scans first, a one-line summary and the group an operation belongs to, is
kept here so that it reads as one list. :func:`add_summaries_and_tags` (a post-processing
hook) applies :data:`OPERATIONS` to the generated schema:

* the tag is the table's, except that an operation whose view authenticates **only** with a
  node or agent bearer token (``srifty_web.bearer.BearerTokenAuthentication`` subclasses: a
  profiling run's agent token, a job's node token) is tagged :data:`INTERNAL` whatever the
  table says: it is decided by the authentication class, so a new node endpoint cannot land
  among the user operations;
* the summary is the view's own (``@extend_schema(summary=...)``) where it has one, else the
  table's.

An operation missing from the table keeps drf-spectacular's defaults (tag ``v1``, no summary);
``tests/srifty_web/test_openapi.py`` fails on it, which is how the table is kept whole.

:func:`register_node_token_schemes` (a pre-processing hook, run before any view is inspected)
registers the agent token's security scheme, so agent endpoints document their bearer token
instead of appearing open.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from srifty_web.bearer import BearerTokenAuthentication

AUTH = "auth"
CATALOG = "catalog"
PROFILING = "profiling"
PLANS = "plans"
JOBS = "jobs"
INTERNAL = "internal (agents and nodes)"

TAGS: list[dict[str, str]] = [
    {"name": AUTH, "description": "API tokens for scripts: POST a username and password, get a token"},
    {
        "name": CATALOG,
        "description": "GPU instance types, accelerators and their prices (money as decimal strings)",
    },
    {"name": PROFILING, "description": "Profiling runs: measure a model's iteration time on a GPU"},
    {"name": PLANS, "description": "Plans: rank GPU clusters for a training job by time and cost"},
    {"name": JOBS, "description": "Jobs: launch a plan's option on AWS, watch it, stop it, re-plan it"},
    {
        "name": INTERNAL,
        "description": "Called by profiling agents and job nodes with their own one-run or one-job "
        "bearer token, not by users: rendezvous, reports, checkpoints, tarballs",
    },
]

# "METHOD path" -> (tag, summary). Paths as the schema writes them (full, with {id}).
OPERATIONS: dict[str, tuple[str, str]] = {
    "POST /api/v1/auth/token/": (AUTH, "Get an API token for a username and password"),
    "GET /api/v1/accelerators/": (CATALOG, "List accelerators (GPUs and others) with their specs"),
    "GET /api/v1/accelerators/{name}/": (CATALOG, "Get one accelerator by name"),
    "GET /api/v1/instance-types/": (CATALOG, "List instance types with their latest prices"),
    "GET /api/v1/instance-types/{name}/": (CATALOG, "Get one instance type by name"),
    "GET /api/v1/prices/": (CATALOG, "List price observations (on-demand per region, spot per zone)"),
    "GET /api/v1/gpus/": (CATALOG, "Search GPU offers across all regions and zones"),
    "GET /api/v1/profiling-runs/": (PROFILING, "List the profiling runs you can see"),
    "POST /api/v1/profiling-runs/": (PROFILING, "Start a profiling run"),
    "GET /api/v1/profiling-runs/{id}/": (PROFILING, "Get a profiling run with its measurements"),
    "POST /api/v1/profiling-runs/{id}/cancel/": (PROFILING, "Cancel a profiling run"),
    "GET /api/v1/profiling-runs/{id}/profile/": (
        PROFILING,
        "Download the profile JSON a finished run produced",
    ),
    "POST /api/v1/profiling-runs/{id}/events/": (INTERNAL, "Agent: post measurements and status of its run"),
    "GET /api/v1/profiling-runs/{id}/rendezvous/": (
        INTERNAL,
        "Agent: get the run's rendezvous (master, rank)",
    ),
    "GET /api/v1/agent.tar.gz": (INTERNAL, "Agent: download the profiling agent's code"),
    "GET /api/v1/plans/": (PLANS, "List the plans you can see"),
    "POST /api/v1/plans/": (PLANS, "Make a plan (solved in the background)"),
    "GET /api/v1/plans/{id}/": (PLANS, "Get a plan with its ranked options"),
    "POST /api/v1/plans/{id}/cancel/": (PLANS, "Cancel a queued or running plan"),
    "GET /api/v1/plans/{id}/progress/": (PLANS, "Follow a plan's solve: status and configurations evaluated"),
    "GET /api/v1/plans/{id}/options/{rank}/skypilot/": (
        PLANS,
        "Export option rank of a plan as a SkyPilot task file (a zip for a mix of types)",
    ),
    "GET /api/v1/jobs/": (JOBS, "List the jobs you can see"),
    "POST /api/v1/jobs/": (JOBS, "Launch a job (needs a confirmation from preview)"),
    "GET /api/v1/jobs/{id}/": (JOBS, "Get a job with its events, progress and spend"),
    "POST /api/v1/jobs/preview/": (JOBS, "Preview a launch: instances, $/h, spend cap, confirmation id"),
    "POST /api/v1/jobs/precheck/": (JOBS, "Check AWS credentials, quota and offerings before a launch"),
    "GET /api/v1/jobs/sky-export/": (
        JOBS,
        "Export a plan option as a SkyPilot task file (a zip for a mix of types)",
    ),
    "POST /api/v1/jobs/{id}/stop/": (JOBS, "Stop a job and terminate its instances"),
    "POST /api/v1/jobs/{id}/replan/": (JOBS, "Re-plan a job's remaining work (a preview)"),
    "POST /api/v1/jobs/{id}/replan/apply/": (JOBS, "Apply a re-plan: launch the replacement job"),
    "GET /api/v1/jobs/{id}/agent.tar.gz": (INTERNAL, "Node: download the job agent's code"),
    "GET /api/v1/jobs/{id}/workdir.tar.gz": (INTERNAL, "Node: download the job's uploaded workdir"),
    "GET /api/v1/jobs/{id}/rendezvous/": (INTERNAL, "Node: get the job's rendezvous (master, rank, world)"),
    "POST /api/v1/jobs/{id}/reports/": (INTERNAL, "Node: report iteration times"),
    "POST /api/v1/jobs/{id}/checkpoints/": (INTERNAL, "Node: record a checkpoint the training wrote"),
    "POST /api/v1/jobs/{id}/interruptions/": (INTERNAL, "Node: report a spot interruption notice"),
}


class AgentTokenScheme(OpenApiAuthenticationExtension):
    """The profiling agent's one-run bearer token as a security scheme (``profiler.auth``)."""

    target_class = "profiler.auth.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "The profiling run's agent token"}


def register_node_token_schemes(endpoints: list[tuple[str, str, str, Callable]]) -> list:
    """Pre-processing hook: importing this module registered :class:`AgentTokenScheme` (the
    hooks are imported before the views are inspected); the endpoints pass unchanged."""
    return endpoints


def is_node_only(callback: Callable) -> bool:
    """True when the view authenticates only with node/agent bearer tokens (not user tokens,
    not sessions, and not an open view with no authentication at all)."""
    view_class = getattr(callback, "cls", None)
    if view_class is None:
        return False
    initkwargs = getattr(callback, "initkwargs", None) or {}
    classes = initkwargs.get("authentication_classes", view_class.authentication_classes)
    return bool(classes) and all(issubclass(c, BearerTokenAuthentication) for c in classes)


def shape(key: str) -> str:
    """``"METHOD path"`` with each path parameter written ``{}``: the generator's endpoints name
    a viewset's parameter ``{pk}`` where the schema writes ``{id}``."""
    return re.sub(r"\{[^}]*\}", "{}", key)


def node_only_operations(endpoints: list[tuple[str, str, str, Callable]]) -> set[str]:
    """:func:`shape` of every endpoint that :func:`is_node_only`."""
    return {
        shape(f"{method.upper()} {path}")
        for path, _regex, method, callback in endpoints
        if is_node_only(callback)
    }


def add_summaries_and_tags(result: dict, generator: Any, **_: Any) -> dict:
    """Post-processing hook: tag and summarise every operation of ``result`` (see the module)."""
    internal = node_only_operations(generator.endpoints or [])
    for path, methods in result.get("paths", {}).items():
        for method, operation in methods.items():
            key = f"{method.upper()} {path}"
            tag, summary = OPERATIONS.get(key, (None, None))
            if shape(key) in internal:
                tag = INTERNAL
            if tag is not None:
                operation["tags"] = [tag]
            if summary is not None and not operation.get("summary"):
                operation["summary"] = summary
    result["tags"] = TAGS  # the groups in this order, with their descriptions
    return result
