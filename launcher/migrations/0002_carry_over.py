"""What else named the jobs' old home (``plans``, ``planner.app.job_tasks``) in an existing
database, renamed so nothing is lost in the move:

* content types ``plans.job``/``jobreport``/``jobevent`` become ``launcher.*``, so the
  permissions granted on them (``plans.add_job`` -> ``launcher.add_job``, ``change_job``, ...)
  stay granted to the same users and groups;
* queued background tasks (the self-repeating reconciler, a job's watch chain, a pending launch or
  cleanup) point at ``launcher.tasks`` instead of ``planner.app.job_tasks``, so the worker can
  still import them.

A fresh database has neither yet: both steps then change nothing.
"""

from django.db import migrations

MODELS = ("job", "jobreport", "jobevent")
TASKS = ("launch_job_task", "watch_job_task", "stop_job_task", "cleanup_job_task", "reconcile_task")
OLD_TASKS, NEW_TASKS = "planner.app.job_tasks", "launcher.tasks"


def _move_content_types(apps, old: str, new: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if ContentType.objects.filter(app_label=new, model=model).exists():
            continue  # already there (created by an earlier post_migrate): keep it
        ContentType.objects.filter(app_label=old, model=model).update(app_label=new)


def _move_task_paths(apps, old: str, new: str) -> None:
    DBTaskResult = apps.get_model("django_tasks_database", "DBTaskResult")
    for name in TASKS:
        DBTaskResult.objects.filter(task_path=f"{old}.{name}").update(task_path=f"{new}.{name}")


def forwards(apps, schema_editor):
    _move_content_types(apps, "plans", "launcher")
    _move_task_paths(apps, OLD_TASKS, NEW_TASKS)


def backwards(apps, schema_editor):
    _move_content_types(apps, "launcher", "plans")
    _move_task_paths(apps, NEW_TASKS, OLD_TASKS)


class Migration(migrations.Migration):
    dependencies = [
        ("launcher", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("django_tasks_database", "0001_initial"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
