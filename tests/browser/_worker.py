"""``manage.py db_worker`` for the browser tests, with EC2 placement-group calls stubbed out.

moto 5.2 does not implement ``CreatePlacementGroup`` / ``DeletePlacementGroup`` (its server
answers 500 and botocore retries, then the launch fails); ``tests/launcher`` stubs the same two
calls. Everything else the launch does (launch templates, ``run_instances``, tags, user-data)
goes to the moto server for real. Usage: ``python tests/browser/_worker.py --interval 0.2``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srifty_web.settings")


def main() -> None:
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from cloud import ec2

    ec2.create_placement_group = lambda region, name: None
    ec2.delete_placement_group = lambda region, name: None
    execute_from_command_line(["manage.py", "db_worker", *sys.argv[1:]])


if __name__ == "__main__":
    main()
