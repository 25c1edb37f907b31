"""``manage.py calibrate_compute``: fit the operator-class compute model on every publisher
but the frozen test ones.

Reproduces ``planner/data/compute-model.json`` (the artefact the app plans with) from
``catalog/fixtures/public_gpu_training.csv``, ``public_gpu_training_2.csv`` and the ResNet-50
calibration rows: every row of every publisher except those of
``planner/data/frozen_test_publishers.json`` (``planner.corpus.all_publishers_split``), the fit
that ``bench/accuracy_public.py`` repeats once per publisher without that publisher.
"""

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from planner import calibration
from planner.hardware import load_gpu_specs


class Command(BaseCommand):
    help = "Calibrate the operator-class compute model on every non-frozen publisher; write planner/data/."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--jobs", type=int, default=1, help="processes for tracing models (default 1)")
        parser.add_argument(
            "--output",
            default=str(calibration.COMPUTE_MODEL_FILE),
            help="where to write the model (default: the shipped planner/data/compute-model.json)",
        )
        parser.add_argument(
            "--no-residual", action="store_true", help="fit the roofline only (no XGBoost correction)"
        )
        parser.add_argument(
            "--families",
            default="",
            help="comma-separated corpus families to fit on (a quick check; default: every train family)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["jobs"] < 1:
            raise CommandError("--jobs must be at least 1")
        out = Path(opts["output"])
        if not out.parent.is_dir():
            raise CommandError(f"--output: directory {out.parent} does not exist")
        families = [f.strip() for f in opts["families"].split(",") if f.strip()]
        if families:
            from planner import corpus

            known = {m.family for m in corpus.all_models().values()}
            unknown = sorted(set(families) - known)
            if unknown:
                raise CommandError(
                    f"--families: unknown {', '.join(unknown)} (known: {', '.join(sorted(known))})"
                )
        # The datasheet fixture, not the catalog database: the artefact must not depend on an
        # admin's edits (the app then applies the database's figures to the same model).
        specs = load_gpu_specs(Path(settings.CATALOG_FIXTURES_DIR) / "gpu_specs.csv")
        try:
            model, info = calibration.calibrate_compute(
                specs, jobs=opts["jobs"], residual=not opts["no_residual"], families=families or None
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        calibration.write_compute_model(model, out)
        for key, err in info["trace_errors"].items():
            self.stderr.write(f"not traced: {key[0]} {key[1]} {key[2]}: {err}")
        theta = model.theta
        self.stdout.write(
            self.style.SUCCESS(
                f"wrote {out}: {info['samples']} train samples, beta {model.beta:.2f}, "
                f"{model.meta.get('residual_trees', 0)} residual trees, kappa {model.nccl_slowdown:.2f} "
                f"({info['scaling_pairs']} scaling pairs), eta matmul/tensor "
                f"{1 / theta['flop:matmul:tensor'] if theta.get('flop:matmul:tensor') else float('nan'):.2f}, "
                f"kernel floor {theta['kern:gemm']:.1f}/{theta['kern:other']:.1f} us"
            )
        )
