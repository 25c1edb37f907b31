"""``manage.py reconcile_instances [--region R ...] [--dry-run] [--json] [--schedule]``.

Terminates Srifty-managed EC2 instances that belong to no live job or run (see
``fleet.reconcile``) and prints what it did. ``--schedule`` instead queues the
self-repeating background reconciler (every ``RECONCILE_EVERY_S``, default 600 s). Exit code 1
when a region could not be scanned or an instance could not be terminated.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet import reconcile


class Command(BaseCommand):
    help = "Terminate Srifty-managed EC2 instances whose job or run is gone, finished or past its cap."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--region",
            action="append",
            default=[],
            help="Region to scan (repeatable; default: regions of recent jobs/runs + settings)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Report what would be terminated, do nothing"
        )
        parser.add_argument("--json", action="store_true", help="Print the report as JSON")
        parser.add_argument(
            "--schedule", action="store_true", help="Queue the periodic reconciler task and exit"
        )

    def handle(self, *args: Any, **o: Any) -> None:
        if o["schedule"]:
            from django_tasks import TaskResultStatus

            from launcher.tasks import reconcile_task

            # Once per install: every ./run calls this, and two chains would reconcile twice.
            if _queued(reconcile_task.module_path, (TaskResultStatus.READY, TaskResultStatus.RUNNING)):
                self.stdout.write("the periodic reconciler is already queued")
                return
            reconcile_task.enqueue(o["region"] or None, o["dry_run"], True)
            self.stdout.write("queued the periodic reconciler")
            return
        report = reconcile.reconcile(regions=o["region"] or None, dry_run=o["dry_run"])
        if o["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
        else:
            for line in report.lines():
                self.stdout.write(line)
        if report.errors:
            raise CommandError(f"{len(report.errors)} error(s); see above")


def _queued(task_path: str, statuses: tuple[str, ...]) -> bool:
    from django.conf import settings

    if "django_tasks_db" not in settings.TASKS["default"]["BACKEND"]:
        return False
    from django_tasks_db.models import DBTaskResult

    return bool(DBTaskResult.objects.filter(task_path=task_path, status__in=statuses).exists())
