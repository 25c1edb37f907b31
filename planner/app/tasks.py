"""Background work of plans (django-tasks; ``manage.py db_worker`` runs it): see
``planner.app.solving``."""

from __future__ import annotations

from django_tasks import task

from planner.app import solving


@task()
def solve_plan_task(plan_id: int) -> str:
    # A worker that starts a plan first recovers those whose worker died mid-solve.
    solving.recover_stale_plans()
    return solving.run_plan(plan_id)
