"""The profiler's side of ``planner.app.ports``: the planner's Django app reads profiling runs
and comm curves through :class:`ProfilerStore` (registered in ``ProfilerConfig.ready``), so it
never imports this app's models."""

from __future__ import annotations

from typing import Any

from planner.app.ports import CommPoint, ProfileUnavailable, StoredProfile
from profiler.models import CommCurvePoint, ProfilingRun, RunKind, RunStatus


class ProfilerStore:
    """:class:`planner.app.ports.ProfileStore` over this app's records."""

    def compute_profile(self, run_id: int, owner: Any) -> StoredProfile:
        # The team rule: another team's run is "not found", exactly like one that does not exist.
        run = ProfilingRun.objects.visible_to(owner).filter(pk=run_id).first()
        if run is None:
            raise ProfileUnavailable(run_id, "not_found")
        if run.kind != RunKind.COMPUTE or run.status != RunStatus.SUCCEEDED or run.profile is None:
            raise ProfileUnavailable(run.pk, "not_finished")
        return StoredProfile(run_id=run.pk, profile=run.profile, input_shape=run.input_shape)

    def comm_points(self) -> list[CommPoint]:
        return [
            CommPoint(
                point_id=r.pk,
                run_id=r.run_id,
                instance_type=r.instance_type,
                gpu=r.gpu,
                gpus_per_node=r.gpus_per_node,
                nodes=r.nodes,
                network=r.network,
                nccl_version=r.nccl_version,
                size_bytes=r.size_bytes,
                median_us=r.median_us,
            )
            for r in CommCurvePoint.objects.order_by("run_id", "size_bytes")
        ]
