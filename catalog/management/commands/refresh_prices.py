"""``manage.py refresh_prices --region us-east-1 [--region ...] [--type p4d.24xlarge ...]``."""

from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError

from catalog.refresh import refresh_region
from catalog.regions import AWS_REGIONS
from cloud import CloudError


class Command(BaseCommand):
    help = (
        "Add instance specs, spot price history and on-demand prices from AWS (credentials: boto3's chain)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--region", action="append", required=True, help="Repeat for several regions")
        parser.add_argument(
            "--type", action="append", dest="types", help="Instance types (default: catalog's)"
        )
        parser.add_argument("--since-hours", type=float, default=24.0, help="Spot history window")
        parser.add_argument("--no-on-demand", action="store_true", help="Skip the Price List API")

    def handle(self, *args, region, types, since_hours, no_on_demand, **opts):
        bad = [r for r in region if r not in AWS_REGIONS]
        if bad:
            raise CommandError(f"unknown region(s): {', '.join(bad)}")
        if since_hours <= 0:
            raise CommandError("--since-hours must be > 0")
        since = datetime.now(UTC) - timedelta(hours=since_hours)
        failed = []
        for code in region:
            try:
                report = refresh_region(code, types, since=since, on_demand=not no_on_demand)
            except CloudError as exc:
                failed.append(code)
                self.stderr.write(self.style.ERROR(f"{code}: {exc} (nothing stored for this region)"))
                continue
            self.stdout.write(self.style.SUCCESS(report.summary()))
        if failed:
            raise CommandError(f"refresh failed for {', '.join(failed)}")
