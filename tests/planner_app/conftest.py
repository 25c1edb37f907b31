"""Fixtures of the planner app's tests."""

import pytest


@pytest.fixture
def run_queued_plans(db):
    """Solve every queued plan here and now, as ``manage.py db_worker`` runs their task
    (``planner.app.tasks.solve_plan_task``); returns their ids."""

    def run() -> list[int]:
        from planner.app.models import PlanRecord, PlanStatus
        from planner.app.tasks import solve_plan_task

        ids = list(
            PlanRecord.objects.filter(status=PlanStatus.QUEUED).order_by("pk").values_list("pk", flat=True)
        )
        for pk in ids:
            solve_plan_task.call(pk)
        return ids

    return run
