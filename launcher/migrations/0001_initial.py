"""Jobs move here from ``planner.app`` (label ``plans``) without touching the database.

``plans.0001_initial`` created the tables ``plans_job``, ``plans_jobevent`` and
``plans_jobreport``; this migration only tells Django's migration state that the models now belong
to ``launcher`` (``db_table`` keeps the old names), and ``plans.0002_move_jobs_to_launcher`` drops
them from ``plans``' state. Existing rows, ids, indexes and foreign keys stay as they are.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("plans", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="Job",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("plan_rank", models.PositiveIntegerField()),
                        (
                            "option",
                            models.JSONField(
                                help_text="The plan option as launched (groups, batch per node, prices)"
                            ),
                        ),
                        ("region", models.CharField(max_length=32)),
                        ("train_command", models.TextField()),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("launching", "Launching"),
                                    ("running", "Running"),
                                    ("succeeded", "Succeeded"),
                                    ("failed", "Failed"),
                                    ("stopped", "Stopped"),
                                ],
                                db_index=True,
                                default="launching",
                                max_length=10,
                            ),
                        ),
                        ("status_reason", models.TextField(blank=True)),
                        ("hourly_usd", models.DecimalField(decimal_places=4, max_digits=12)),
                        ("max_spend_usd", models.DecimalField(decimal_places=2, max_digits=12)),
                        ("max_hours", models.FloatField()),
                        ("predicted_iter_s", models.FloatField()),
                        ("predicted_iter_p90_s", models.FloatField()),
                        ("total_iterations", models.PositiveBigIntegerField(default=0)),
                        ("instance_ids", models.JSONField(blank=True, default=list)),
                        (
                            "node_ips",
                            models.JSONField(blank=True, default=dict, help_text="instance id -> private IP"),
                        ),
                        ("placement_group", models.CharField(blank=True, max_length=255)),
                        ("launch_template_ids", models.JSONField(blank=True, default=list)),
                        ("launch_token", models.CharField(blank=True, max_length=64)),
                        ("token_hash", models.CharField(blank=True, db_index=True, max_length=64)),
                        ("token_expires_at", models.DateTimeField(blank=True, null=True)),
                        ("last_seq", models.PositiveBigIntegerField(default=0)),
                        ("drift_since", models.DateTimeField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "owner",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="jobs",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "plan",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="jobs",
                                to="plans.planrecord",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "plans_job",
                        "ordering": ["-created_at"],
                    },
                ),
                migrations.CreateModel(
                    name="JobEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("kind", models.CharField(max_length=32)),
                        ("message", models.TextField()),
                        ("data", models.JSONField(blank=True, default=dict)),
                        ("at", models.DateTimeField(default=django.utils.timezone.now)),
                        (
                            "job",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="events",
                                to="launcher.job",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "plans_jobevent",
                        "ordering": ["at"],
                    },
                ),
                migrations.CreateModel(
                    name="JobReport",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("seq", models.PositiveBigIntegerField()),
                        ("rank", models.PositiveIntegerField(default=0)),
                        ("iteration", models.PositiveBigIntegerField()),
                        ("iter_time_s", models.FloatField()),
                        ("samples", models.PositiveIntegerField(blank=True, null=True)),
                        (
                            "reported_at",
                            models.DateTimeField(db_index=True, default=django.utils.timezone.now),
                        ),
                        (
                            "job",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="reports",
                                to="launcher.job",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "plans_jobreport",
                        "ordering": ["reported_at"],
                        "constraints": [
                            models.UniqueConstraint(fields=("job", "rank", "seq"), name="uniq_job_report_seq")
                        ],
                    },
                ),
            ],
        ),
    ]
