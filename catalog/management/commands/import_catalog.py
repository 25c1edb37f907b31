"""``manage.py import_catalog [--csv PATH [--network PATH] [--observed-at ISO]]``."""

from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from catalog import spot_advisor
from catalog.importer import CatalogImportError, import_catalog, import_snapshot
from catalog.models import PriceSource


class Command(BaseCommand):
    help = "Import the bundled EC2 GPU catalog snapshot, or a CSV of the same columns (all-or-nothing)."

    def add_arguments(self, parser):
        parser.add_argument("--csv", help="Instances CSV (snapshot columns); default: the bundled snapshot")
        parser.add_argument("--network", help="Network CSV (aws_instance_network.csv columns)")
        parser.add_argument("--observed-at", help="ISO time the prices were observed (default: now)")

    def handle(self, *args, csv=None, network=None, observed_at=None, **opts):
        when = None
        if observed_at:
            try:
                when = datetime.fromisoformat(observed_at)
            except ValueError as exc:
                raise CommandError(f"--observed-at {observed_at!r} is not an ISO date-time") from exc
            if when.tzinfo is None:
                raise CommandError("--observed-at needs a time zone, e.g. 2026-01-01T00:00:00+00:00")
        try:
            if csv:
                report = import_catalog(csv, network=network, source=PriceSource.CSV, observed_at=when)
            else:
                report = import_snapshot()
        except FileNotFoundError as exc:
            raise CommandError(f"file not found: {exc.filename}") from exc
        except CatalogImportError as exc:
            raise CommandError(f"nothing imported: {exc}") from exc
        self.stdout.write(self.style.SUCCESS(report.summary()))
        if not csv:  # the bundled snapshot comes with its Spot Advisor rows
            try:
                advisor = spot_advisor.import_bundled()
            except spot_advisor.SpotAdvisorError as exc:
                raise CommandError(f"Spot Advisor rows not imported: {exc}") from exc
            self.stdout.write(self.style.SUCCESS(advisor.summary()))
