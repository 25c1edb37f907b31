"""Cluster-plan solver: pick instance types, markets and node counts for a DDP training job.

The rooms:

============  =================================================================================
module        what lives there
============  =================================================================================
request       the request, plan and result types, validation, plan defaults (from
              :mod:`planner.defaults`)
candidates    enumeration and bounds: homogeneous curves, mix bounds, streamed subsets and
              count vectors
evaluate      oracle calls (memoised), time/cost/goodput of a configuration, progress counting
search        the exact branch and bound, its memory budget, :func:`solve`, the brute-force
              reference
rank          order of the plans, tie tolerance, Pareto frontier, the chart's points, plans
              built from columns
explain       the words: why a plan ranks where it does, which constraint makes a request
              infeasible
============  =================================================================================

Everything a caller needs is re-exported here.
"""

from planner.solver.evaluate import ConfigMetrics, evaluate_config
from planner.solver.rank import pareto_frontier, plan_for_config
from planner.solver.request import (
    DEFAULT_MAX_MEMORY_MB,
    OBJECTIVES,
    Config,
    Estimate,
    Infeasible,
    NodeGroup,
    PerfOracle,
    Plan,
    PlanRequest,
    PlanResult,
    Point,
    ProgressCallback,
    RequestError,
    SolveStats,
    batch_grid,
)
from planner.solver.search import exhaustive_search, preflight, solve

__all__ = [
    "DEFAULT_MAX_MEMORY_MB",
    "OBJECTIVES",
    "Config",
    "ConfigMetrics",
    "Estimate",
    "Infeasible",
    "NodeGroup",
    "PerfOracle",
    "Plan",
    "PlanRequest",
    "PlanResult",
    "Point",
    "ProgressCallback",
    "RequestError",
    "SolveStats",
    "batch_grid",
    "evaluate_config",
    "exhaustive_search",
    "pareto_frontier",
    "plan_for_config",
    "preflight",
    "solve",
]
