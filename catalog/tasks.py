"""Background catalog work (django-tasks; run by ``manage.py db_worker``)."""

from __future__ import annotations

from django_tasks import task

from catalog.refresh import refresh_region


@task()
def refresh_prices_task(region: str, names: list[str] | None = None) -> str:
    return refresh_region(region, names).summary()
