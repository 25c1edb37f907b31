"""The calibrated transfer model the app plans with.

Calibration (``planner.models.transfer.calibrate``) fits roofline efficiencies and per-GPU
factors on the published ResNet-50 throughputs of ``calibration_resnet50_single_gpu.csv``. It
needs ResNet-50's workload cost (a meta-device trace, a few seconds), so the result is cached
as JSON next to the data it came from and rebuilt when the CSV or the specs change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from planner.hardware import GpuSpec
from planner.models.transfer import TransferModel, calibrate, count_workload, load_calibration_csv

CALIBRATION_BATCH = 256


def _digest(calibration_csv: Path, specs: Mapping[str, GpuSpec]) -> str:
    h = hashlib.sha256(calibration_csv.read_bytes())
    h.update(json.dumps(sorted((k, repr(v)) for k, v in specs.items())).encode())
    return h.hexdigest()[:16]


SHIPPED_DIR = Path(__file__).resolve().parent / "data"


def load_or_calibrate(calibration_csv: str | Path, specs: Mapping[str, GpuSpec], cache_dir: str | Path) -> TransferModel:
    """The model for these inputs: shipped with the code (``planner/data``, made by
    ``manage.py calibrate_transfer``), cached in ``cache_dir``, or calibrated now and cached."""
    calibration_csv = Path(calibration_csv)
    name = f"transfer-model-{_digest(calibration_csv, specs)}.json"
    cache = Path(cache_dir) / name
    for found in (SHIPPED_DIR / name, cache):
        if found.exists():
            return TransferModel.from_dict(json.loads(found.read_text()), specs)
    model = calibrate_from_csv(calibration_csv, specs)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(model.to_dict()))
    tmp.replace(cache)  # atomic: two workers calibrating at once never read half a file
    return model


def calibrate_from_csv(calibration_csv: str | Path, specs: Mapping[str, GpuSpec]) -> TransferModel:
    from profiler.agent.specs import load_model

    def build():
        return load_model("torchvision:resnet50")

    costs = {
        "full": count_workload(build, (3, 224, 224), precision="tf32", model_spec="torchvision:resnet50"),
        "half": count_workload(build, (3, 224, 224), precision="amp", model_spec="torchvision:resnet50"),
    }
    return calibrate(load_calibration_csv(calibration_csv), costs, specs, batch=CALIBRATION_BATCH)
