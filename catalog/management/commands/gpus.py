"""``manage.py gpus [GPU] [--count N] [--min-memory GIB] [--efa] [--spot | --on-demand]``.

Like ``sky show-gpus``: every priced offer of a GPU across all regions and zones, cheapest per
GPU-hour first, as a table (``--json`` for the API's rows). Bad input: a message and exit 1
(unknown GPU, region or market) or 2 (a malformed option, e.g. ``--count 0``).
"""

from __future__ import annotations

import argparse
import json

from django.core.management.base import BaseCommand, CommandError

from catalog.search import DEFAULT_BUCKET_LABEL, MAX_LIMIT, GpuQuery, SearchError, search_gpus


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of GiB, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 GiB, got {text!r}")
    return value


COLUMNS = (
    ("instance type", "<"),
    ("GPU", "<"),
    ("GPU mem", ">"),
    ("region", "<"),
    ("zone", "<"),
    ("market", "<"),
    ("$/h", ">"),
    ("$/GPU-h", ">"),
    ("EFA", "<"),
    ("interruption", "<"),
)


class Command(BaseCommand):
    help = "Search GPU offers across all regions and zones, cheapest per GPU-hour first (like sky show-gpus)."

    def add_arguments(self, parser):
        parser.add_argument(
            "gpu", nargs="?", help="GPU model, case-insensitive (H100, a10g); default: every CUDA GPU"
        )
        parser.add_argument("--count", type=positive_int, help="GPUs per instance, exactly")
        parser.add_argument(
            "--min-memory", type=non_negative_float, metavar="GIB", help="Memory per GPU, at least"
        )
        parser.add_argument("--efa", action="store_true", help="Only types with EFA")
        market = parser.add_mutually_exclusive_group()
        market.add_argument(
            "--spot", action="store_const", const="spot", dest="market", help="Spot only (per zone)"
        )
        market.add_argument(
            "--on-demand",
            action="store_const",
            const="on-demand",
            dest="market",
            help="On-demand only (per region)",
        )
        market.add_argument("--market", choices=["both", "spot", "on-demand"], dest="market")
        parser.add_argument("--region", help="Only this region")
        parser.add_argument(
            "--limit", type=positive_int, default=30, help=f"Rows (default 30, at most {MAX_LIMIT})"
        )
        parser.add_argument(
            "--local-zones",
            action="store_true",
            help="Spot prices in AWS Local and Wavelength Zones too (opt-in zones, left out by default)",
        )
        parser.add_argument("--json", action="store_true", help="The API's rows as JSON")

    def handle(self, *args, gpu, count, min_memory, efa, market, region, limit, json: bool, **opts):
        query = GpuQuery(
            gpu=gpu,
            count=count,
            min_memory_gib=min_memory,
            efa=True if efa else None,
            market=market or "both",
            region=region,
            limit=limit,
            include_local_zones=bool(opts.get("local_zones")),
        )
        try:
            result = search_gpus(query)
        except SearchError as exc:
            option = {"min_memory_gib": "--min-memory", "gpu": "GPU"}.get(exc.field, f"--{exc.field}")
            raise CommandError(f"{option}: {exc.message}") from None
        if json:
            from catalog.serializers import GpuOfferSerializer

            self.stdout.write(
                _json_dumps(
                    {"count": result.total, "results": GpuOfferSerializer(result.offers, many=True).data}
                )
            )
            return
        if not result.offers:
            self.stdout.write("No priced offers match. Try --market both, fewer filters, or import_catalog.")
            return
        rows = [
            (
                o.instance_type,
                o.gpus_label,
                f"{round(o.gpu_memory_gib, 1):g} GiB" if o.gpu_memory_gib else "—",
                o.region,
                f"{o.zone} ({o.zone_label})" if o.zone_label else (o.zone or "—"),
                o.market,
                f"{o.usd_per_hour:.4f}",
                f"{o.usd_per_gpu_hour:.4f}",
                "yes" if o.efa else "no",
                o.interruption_label or ("?" if o.market == "spot" else "—"),
            )
            for o in result.offers
        ]
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, (h, _) in enumerate(COLUMNS)]

        def line(cells) -> str:
            return "  ".join(
                f"{c:{a}{w}}" for c, (_, a), w in zip(cells, COLUMNS, widths, strict=True)
            ).rstrip()

        self.stdout.write(line([h for h, _ in COLUMNS]))
        for r in rows:
            self.stdout.write(line(r))
        shown = len(rows)
        self.stdout.write(
            f"{shown} of {result.total} offers, cheapest per GPU-hour first (USD, latest observed prices). "
            f"interruption: spot frequency of interruption per month (AWS Spot Advisor / admin); "
            f"'?' unknown: plans assume {DEFAULT_BUCKET_LABEL}."
        )


def _json_dumps(data) -> str:
    return json.dumps(data, indent=1, default=str)
