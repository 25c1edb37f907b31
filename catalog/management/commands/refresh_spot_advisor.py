"""``manage.py refresh_spot_advisor [--url URL | --csv PATH]``: interruption buckets from AWS."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from catalog import spot_advisor


class Command(BaseCommand):
    help = "Refresh spot interruption buckets from AWS Spot Advisor's public feed (or a CSV of the bundled columns)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--url", default=spot_advisor.FEED_URL, help="feed URL (default: AWS's public feed)"
        )
        parser.add_argument("--csv", help="a CSV with the bundled file's columns instead of the feed")

    def handle(self, *args, url, csv=None, **opts):
        try:
            if csv:
                if not Path(csv).is_file():
                    raise CommandError(f"file not found: {csv}")
                rows = spot_advisor.parse_csv(Path(csv))
                note = f"Spot Advisor CSV {Path(csv).name}"
            else:
                rows = spot_advisor.fetch_feed(url)
                note = f"AWS Spot Advisor feed {url}"
        except spot_advisor.SpotAdvisorError as exc:
            raise CommandError(f"nothing refreshed: {exc}") from exc
        self.stdout.write(self.style.SUCCESS(spot_advisor.store(rows, note).summary()))
