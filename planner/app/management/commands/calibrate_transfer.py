"""``manage.py calibrate_transfer``: fit the cross-device transfer model and ship it in planner/data."""

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from planner import calibration
from planner.app import service


class Command(BaseCommand):
    help = "Calibrate the roofline transfer model on the published ResNet-50 figures; write planner/data/."

    def handle(self, *args: Any, **opts: Any) -> None:
        specs = service.gpu_specs()
        csv = Path(settings.CATALOG_FIXTURES_DIR) / "calibration_resnet50_single_gpu.csv"
        model = calibration.calibrate_from_csv(csv, specs)
        calibration.SHIPPED_DIR.mkdir(exist_ok=True)
        path = calibration.SHIPPED_DIR / f"transfer-model-{calibration._digest(csv, specs)}.json"
        path.write_text(json.dumps(model.to_dict(), indent=1))
        p = model.params
        self.stdout.write(
            self.style.SUCCESS(
                f"wrote {path.relative_to(settings.BASE_DIR)}: eta_tensor {p.eta_tensor:.3f}, eta_cuda {p.eta_cuda:.3f}, "
                f"beta {p.beta:.2f}, {len(model.gpu_factors)} GPU factors"
            )
        )
