"""Users' NCCL curves as training data of the comm model, and its refit.

Every all-reduce curve an EC2 comm-profiling run measured (the profiler's records, read as
``planner.app.ports.CommPoint`` rows) becomes corpus points (:func:`user_points`) with the
topology the published curves get (``planner.nccl_corpus.topology_for``: the catalog's GPU and
network of the type). :func:`refit`
fits the correction on the published train sweeps plus these points and writes
``{SRIFTY_DATA_DIR}/nccl-model.json``; the repository's ``planner/data/nccl-model.json`` (the
published sweeps only, ``manage.py calibrate_comm``) is never overwritten. Planning reads
:func:`current_model_path`: the refit where there is one, else the repository's model.

User curves are train data only: they never enter the validation split, so the figures of
``bench/accuracy_comm.py`` stay comparable.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings

from planner import nccl_corpus
from planner.app.ports import profile_store
from planner.hardware import GpuSpec, load_gpu_specs

log = logging.getLogger(__name__)

REFIT_FILE_NAME = "nccl-model.json"


def refit_path() -> Path:
    return Path(settings.DATA_DIR) / REFIT_FILE_NAME


def current_model_path() -> Path:
    """The comm model plans should use: the user refit if there is one, else the repository's."""
    path = refit_path()
    return path if path.is_file() else nccl_corpus.NCCL_MODEL_FILE


def sweep_id(run_id: int, instance_type: str, nodes: int) -> str:
    """One user sweep per profiling run (like the corpus: one source, type and node count)."""
    return f"{nccl_corpus.USER_SWEEP_PREFIX}run-{run_id}|{instance_type}|{nodes}"


def _spec(gpu: str, specs: dict[str, GpuSpec], accelerators: dict[str, Any]) -> GpuSpec | None:
    """The datasheet row; the catalog's accelerator (architecture, NVLink) where the bundled
    datasheets lack the GPU."""
    spec = nccl_corpus.spec_for(gpu, specs)
    if spec is not None:
        return spec
    acc = accelerators.get(gpu)
    if acc is None or not acc.architecture:
        return None
    return GpuSpec(name=acc.name, architecture=acc.architecture, nvlink_gb_s=acc.nvlink_gbs or 0.0)


def user_points() -> list[nccl_corpus.Point]:
    """Every stored user curve point whose GPU and type are known, as a corpus point."""
    from catalog.models import Accelerator, InstanceType

    rows = profile_store().comm_points()
    types = {t.name: t for t in InstanceType.objects.filter(name__in={r.instance_type for r in rows})}
    accelerators = {a.name: a for a in Accelerator.objects.filter(name__in={r.gpu for r in rows})}
    specs = load_gpu_specs(nccl_corpus.SPECS_CSV)
    out: list[nccl_corpus.Point] = []
    skipped: set[int] = set()
    for r in rows:
        itype, spec = types.get(r.instance_type), _spec(r.gpu, specs, accelerators)
        if itype is None or spec is None or r.median_us <= 0:
            skipped.add(r.run_id)
            continue
        topo = nccl_corpus.catalog_topology(
            spec, itype, r.gpus_per_node, r.nodes, network=r.network, nccl_version=r.nccl_version
        )
        out.append(
            nccl_corpus.Point(
                row_id=-r.point_id,
                sweep=sweep_id(r.run_id, r.instance_type, r.nodes),
                instance_type=r.instance_type,
                size_bytes=float(r.size_bytes),
                topology=topo,
                measured_us=r.median_us,
            )
        )
    if skipped:
        log.warning("comm curves of runs %s left out: type or GPU unknown to the catalog", sorted(skipped))
    return out


def refit() -> Path:
    """Fit the comm model on the published train sweeps plus every user curve; write it to
    ``{SRIFTY_DATA_DIR}/nccl-model.json`` (atomically, one refit at a time) and return the path."""
    path = refit_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Two curves landing together start two refits: the lock makes the later one fit after the
    # earlier one wrote, so the file always ends with every stored curve in it.
    import xgboost as xgb

    with open(path.parent / f".{REFIT_FILE_NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        points = user_points()
        # One thread: the refit runs in the task worker beside the web server, and a few hundred
        # points need no more; with all cores, OpenMP's spinning threads slowed a sub-second fit
        # to minutes on a busy 2-core host.
        with xgb.config_context(nthread=1):
            model = nccl_corpus.calibrate(extra_points=points)
        model.meta["made_by"] = "planner.app.comm_training.refit"
        _write_atomically(path, json.dumps(model.to_dict(), indent=1, sort_keys=True) + "\n")
    log.info(
        "refit the comm model with %d user points of %d runs: %s",
        len(points),
        len({p.sweep for p in points}),
        path,
    )
    return path


def _write_atomically(path: Path, text: str) -> None:
    """A reader (a plan being made) sees the old model or the new one, never half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
