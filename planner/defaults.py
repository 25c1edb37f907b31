"""The one set of plan defaults: the web form, the API serializer, ``manage.py plan``, the service
and :class:`planner.solver.PlanRequest` all read these, so one question asked three ways gets one
answer.

The global batch is a range, 256 (the ResNet-50 recipe's) to 4,096: a fixed 256 spread over
16 nodes x 8 GPUs leaves 2 samples per GPU, where every fast GPU waits on the all-reduce and
H100, H200 and B200 come out the same.  The range lets the batch grow with the cluster, and
the per-GPU minimum (:data:`MIN_BATCH_PER_GPU`) keeps the solver from ranking clusters that
spread it thinner: 4,096 = 16 nodes x 8 GPUs x 32.  A larger global batch changes the learning
dynamics: the linear scaling rule (learning rate proportional to the global batch, with a few
epochs of warm-up; Goyal et al. 2017, ResNet-50 up to 8k) is what the form's note says.
"""

from __future__ import annotations

PLAN_DEFAULTS: dict[str, int | float] = {
    "max_nodes": 16,
    "max_types": 1,
    "global_batch_min": 256,
    "global_batch_max": 4096,
    "checkpoint_interval_h": 0.5,  # hours between checkpoints (spot: work lost per interruption)
    "restart_overhead_h": 0.1,  # hours to replace an interrupted node and reload
    "top_k": 8,  # ranked plans returned
}
#: The most nodes one plan may search (the request's max_nodes bound; a task file's num_nodes too).
MAX_NODES = 512
# Markets: both, unless the user rules one out.
MARKET_DEFAULTS: dict[str, bool] = {"spot": True, "on_demand": True}
#: Smallest per-GPU batch the solver ranks when the request names none and its profile has no
#: occupancy knee (:func:`planner.app.service.min_batch_per_gpu`): below ~32 images a modern
#: GPU runs ResNet-class convolutions far from its peak.
MIN_BATCH_PER_GPU = 32
#: What the form and the plan page say about a batch larger than the recipe's.
LR_SCALING_NOTE = (
    "A larger global batch changes training: scale the learning rate with it (linear rule, "
    "with a few epochs of warm-up) or keep the range at your recipe's batch."
)
#: max_nodes x global batch sizes one plan may search (~57 x 2048 oracle calls, ~10 s): the
#: default range narrows itself to fit (:func:`default_batch_range`), a range the user gave that
#: does not fit is a 400 naming max_nodes.
MAX_NODE_BATCH_POINTS = 2048


def batch_grid_size(lo: int, hi: int) -> int:
    """How many global batches the solver tries for ``[lo, hi]`` (``planner.solver.batch_grid``):
    both ends and every power of two strictly between them."""
    inner, p = 0, 1
    while p <= hi:
        inner += lo < p < hi
        p *= 2
    return len({lo, hi}) + inner


def default_batch_range(
    max_nodes: int,
    lo: int = int(PLAN_DEFAULTS["global_batch_min"]),
    hi: int = int(PLAN_DEFAULTS["global_batch_max"]),
) -> tuple[int, int]:
    """A default global batch range (``lo..hi``) for ``max_nodes``, narrowed from below until
    ``max_nodes`` x its batch sizes fits :data:`MAX_NODE_BATCH_POINTS`: a large cluster drops the
    small global batches first (at 512 nodes 256..4,096 becomes 512..4,096), which would leave
    its GPUs a sample or two each, below any sensible per-GPU minimum."""
    while lo < hi and max_nodes * batch_grid_size(lo, hi) > MAX_NODE_BATCH_POINTS:
        lo *= 2
    return min(lo, hi), hi
