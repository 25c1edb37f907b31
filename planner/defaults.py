"""The one set of plan defaults: the web form, the API serializer, ``manage.py plan``, the service
and :class:`planner.solver.PlanRequest` all read these, so one question asked three ways gets one
answer.

The global batch is the training recipe's (256 unless the user widens the range): the planner
does not change the batch, and with it the learning dynamics, unless asked to search a range.
"""

from __future__ import annotations

PLAN_DEFAULTS: dict[str, int | float] = {
    "max_nodes": 16,
    "max_types": 1,
    "global_batch_min": 256,
    "global_batch_max": 256,
    "checkpoint_interval_h": 0.5,  # hours between checkpoints (spot: work lost per interruption)
    "restart_overhead_h": 0.1,  # hours to replace an interrupted node and reload
    "top_k": 8,  # ranked plans returned
}
# Markets: both, unless the user rules one out.
MARKET_DEFAULTS: dict[str, bool] = {"spot": True, "on_demand": True}
