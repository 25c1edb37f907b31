"""Plans are solved in the background (``planner.app.solving``): statuses queued, running and
cancelled, progress counts, the worker's lease (attempts, heartbeat), started/finished times.

Rows stored before: every one was solved inside its request, so each is finished. ``solved``,
``infeasible`` and ``failed`` keep their status, with ``started_at``/``finished_at`` from their
creation and solve time and, for a solved plan, its oracle calls as the progress count;
``pending`` (a request that died before its row was completed, if any) becomes ``failed``."""

from datetime import timedelta

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    PlanRecord = apps.get_model("plans", "PlanRecord")
    PlanRecord.objects.filter(status="pending").update(
        status="failed", error="stored before plans were queued, and never solved; solve it again"
    )
    for plan in (
        PlanRecord.objects.all().only("pk", "created_at", "solve_time_s", "result", "status").iterator()
    ):
        calls = int(((plan.result or {}).get("stats") or {}).get("oracle_calls") or 0)
        finished = plan.created_at + timedelta(seconds=plan.solve_time_s or 0)
        PlanRecord.objects.filter(pk=plan.pk).update(
            started_at=plan.created_at,
            finished_at=finished,
            progress_evaluated=calls,
            progress_total=calls,
            attempts=1,
        )


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    PlanRecord = apps.get_model("plans", "PlanRecord")
    PlanRecord.objects.filter(status__in=["queued", "running"]).update(status="pending")
    PlanRecord.objects.filter(status="cancelled").update(status="failed")


class Migration(migrations.Migration):
    dependencies = [
        ("plans", "0002_move_jobs_to_launcher"),
    ]

    operations = [
        migrations.AddField(
            model_name="planrecord",
            name="attempts",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="planrecord",
            name="error_field",
            field=models.CharField(
                blank=True, help_text="the request field a failure is about", max_length=40
            ),
        ),
        migrations.AddField(
            model_name="planrecord",
            name="finished_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="planrecord",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="planrecord",
            name="phase",
            field=models.CharField(blank=True, max_length=24),
        ),
        migrations.AddField(
            model_name="planrecord",
            name="progress_evaluated",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="planrecord",
            name="progress_total",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="planrecord",
            name="started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="planrecord",
            name="status",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("solved", "Solved"),
                    ("infeasible", "Infeasible"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                db_index=True,
                default="queued",
                max_length=12,
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
