"""``manage.py calibrate_comm``: fit the NCCL all-reduce correction on the published curves' train sweeps.

Reproduces ``planner/data/nccl-model.json`` from ``catalog/fixtures/public_nccl_allreduce.csv``
and the split in ``planner/data/nccl_split.json``.
"""

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from planner import nccl_corpus


class Command(BaseCommand):
    help = "Fit the NCCL all-reduce correction on the train sweeps; write planner/data/nccl-model.json."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--output", default=str(nccl_corpus.NCCL_MODEL_FILE), help="where to write the model"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        out = Path(opts["output"])
        if not out.parent.is_dir():
            raise CommandError(f"--output: directory {out.parent} does not exist")
        try:
            model = nccl_corpus.calibrate()
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        out.write_text(json.dumps(model.to_dict(), indent=1, sort_keys=True) + "\n")
        self.stdout.write(
            self.style.SUCCESS(
                f"wrote {out}: {model.meta.get('trees', 0)} trees on {model.meta.get('points', 0)} train points "
                f"of {len(model.meta.get('sweeps', []))} sweeps"
            )
        )
