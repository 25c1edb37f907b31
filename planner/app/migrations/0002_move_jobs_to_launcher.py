"""Jobs now belong to ``launcher`` (``launcher.0001_initial``): drop them from this app's
migration state only. The tables (``plans_job``, ``plans_jobevent``, ``plans_jobreport``) and
their rows stay; ``launcher``'s models name them with ``db_table``."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("plans", "0001_initial"),
        ("launcher", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(name="JobReport"),
                migrations.DeleteModel(name="JobEvent"),
                migrations.DeleteModel(name="Job"),
            ],
        ),
    ]
