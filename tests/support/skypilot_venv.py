"""SkyPilot's own reader, for tests: ``sky launch``'s reading of a task file (``Task.from_yaml_config``,
then ``Task.validate``) in SkyPilot 0.14.1, run in a separate
virtual environment (``pip install skypilot==0.14.1``, no cloud extras) whose Python is named by
``SRIFTY_SKYPILOT_PYTHON``. Tests that need it skip, saying why, when the variable is unset.

SkyPilot checks a task's resources against its AWS catalog (instance type in the region and
zone, the accelerators the type has). Its hosted catalog is fetched from the internet; here it
is ``catalog/fixtures/aws_gpu_instances.csv``, which has the columns of SkyPilot's ``vms.csv``,
written into a private ``SKY_RUNTIME_DIR``. SkyPilot's catalog names zones by ID (``use1-az1``);
an account maps IDs to names (``us-east-1a``), so the runtime dir gets a mapping too: each
region's zone IDs, in order, are its zones ``a``, ``b``, ... No AWS credentials are visible to
the child (empty credential files, no instance metadata), so nothing calls AWS.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest

ENV = "SRIFTY_SKYPILOT_PYTHON"
VERSION = "0.14.1"
CATALOG = Path(__file__).resolve().parents[2] / "catalog" / "fixtures" / "aws_gpu_instances.csv"
CATALOG_VERSION = "v8"  # sky.skylet.constants.CATALOG_SCHEMA_VERSION in 0.14.1

# Runs in the SkyPilot venv: reads each file as ``sky launch FILE --env ... --secret ...`` does
# (sky.Task.from_yaml_config through dag_utils, then Task.validate) and prints what SkyPilot
# understood (or its error), one JSON object for all files.
_READER = r"""
import json, sys
import yaml
import sky
from sky import catalog
from sky.utils import dag_utils

envs, secrets = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
for path in sys.argv[3:]:
    try:
        # sky launch's reading: Task.from_yaml_config with --env/--secret for the names the file
        # declares (as a user launching it gives them)
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f) or {}
        declared = set(config.get("envs") or {}) | set(config.get("secrets") or {})
        dag = dag_utils.load_chain_dag_from_yaml(
            path,
            env_overrides=[(k, v) for k, v in envs.items() if k in declared],
            secret_overrides=[(k, v) for k, v in secrets.items() if k in declared],
        )
        [task] = dag.tasks
        task.validate()  # what sky launch checks next: resources against the catalog, workdir, mounts
    except Exception as exc:  # SkyPilot's refusal, in its words
        out[path] = {"error": f"{type(exc).__name__}: {exc}"}
        continue
    resources = []
    for r in task.resources:
        got = {
            "cloud": str(r.cloud) if r.cloud else None,
            "instance_type": r.instance_type,
            "accelerators": r.accelerators,
            "use_spot": r.use_spot,
            "region": r.region,
            "zone": r.zone,
            "image_id": r.image_id,
            "cpus": r.cpus,
            "memory": r.memory,
            "disk_size": r.disk_size,
            "disk_tier": str(r.disk_tier.value) if r.disk_tier else None,
            "network_tier": str(r.network_tier.value) if r.network_tier else None,
            "ports": r.ports,
            "labels": r.labels,
        }
        if r.instance_type:
            # What SkyPilot's optimizer holds the request to: the type's accelerators and where
            # it is offered in this market, from the catalog.
            got["catalog_accelerators"] = catalog.get_accelerators_from_instance_type(r.instance_type, "aws")
            got["catalog_zones"] = {
                region.name: [z.name for z in region.zones or []]
                for region in catalog.get_region_zones_for_instance_type(r.instance_type, r.use_spot, "aws")
            }
        resources.append(got)
    mounts = {
        path: {"source": s.source, "mode": s.mode.value}
        for path, s in (task.storage_mounts or {}).items()
    }
    out[path] = {
        "name": task.name,
        "num_nodes": task.num_nodes,
        "resources": resources,
        "envs": task.envs,
        "secrets": sorted(task.secrets),
        "workdir": task.workdir,
        "file_mounts": task.file_mounts,
        "storage_mounts": mounts,
        "setup": task.setup,
        "run": task.run,
        "version": sky.__version__,
    }
print(json.dumps(out, default=str))
"""


def skypilot_python() -> str:
    """The SkyPilot venv's Python, or a skip saying how to make one."""
    python = os.environ.get(ENV, "")
    if not python:
        pytest.skip(
            f"{ENV} is unset: SkyPilot's own reader needs a venv with skypilot=={VERSION} "
            "(./test makes it once; or python -m venv V && V/bin/pip install skypilot==0.14.1)"
        )
    if not Path(python).exists():
        pytest.fail(f"{ENV}={python} does not exist")
    return python


def read_with_skypilot(
    files: dict[str, str],
    workdir: Path,
    envs: dict[str, str] | None = None,
    secrets: dict[str, str] | None = None,
) -> dict[str, dict]:
    """What SkyPilot reads from each file ``{name: yaml}`` (by name), launched from ``workdir``
    with ``--env NAME=VALUE`` / ``--secret NAME=VALUE`` for each of ``envs`` / ``secrets`` that the
    file declares: the task's fields (with the catalog's accelerators and zones of its instance
    type), or ``{"error": ...}``."""
    python = skypilot_python()
    runtime = workdir / "sky-runtime"
    _write_catalog(runtime / ".sky" / "catalogs" / CATALOG_VERSION / "aws")
    paths = {}
    for name, text in files.items():
        path = workdir / name
        path.write_text(text)
        paths[str(path)] = name
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(runtime),  # no ~/.sky config or ~/.aws of the machine
        "SKY_RUNTIME_DIR": str(runtime),
        "AWS_CONFIG_FILE": str(runtime / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(runtime / "aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    done = subprocess.run(
        [python, "-c", _READER, json.dumps(envs or {}), json.dumps(secrets or {}), *paths],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"SkyPilot's reader failed:\n{done.stderr[-4000:]}")
    last = done.stdout.strip().splitlines()[-1]
    return {paths[p]: got for p, got in json.loads(last).items()}


def zone_name(zone_id: str, region: str) -> str:
    """The name :func:`read_with_skypilot`'s account gives ``zone_id`` (its region's zones, in order)."""
    return _zone_names()[region][zone_id]


def _zone_names() -> dict[str, dict[str, str]]:
    by_region: dict[str, set[str]] = {}
    with CATALOG.open(newline="") as f:
        for row in csv.DictReader(f):
            if row["AvailabilityZone"]:
                by_region.setdefault(row["Region"], set()).add(row["AvailabilityZone"])
    return {
        region: {zid: f"{region}{chr(ord('a') + i)}" for i, zid in enumerate(sorted(ids))}
        for region, ids in by_region.items()
    }


def _sky_rows() -> list[dict[str, str]]:
    """The project's catalog rows with each GPU named as SkyPilot's own AWS catalog names it
    (``launcher.taskfile.sky_accelerator``: g7e's "RTX PRO Server 6000" is ``RTXPRO6000``), so
    SkyPilot here knows only its own names and an export that wrote ours would fail to read."""
    from launcher.taskfile import sky_accelerator

    with CATALOG.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        if row["AcceleratorName"]:
            row["AcceleratorName"] = sky_accelerator(row["InstanceType"], row["AcceleratorName"])
    return rows


def _write_catalog(folder: Path) -> None:
    """SkyPilot's AWS catalog files: the instance types (the project's fixture, GPUs in SkyPilot's
    names: :func:`_sky_rows`), their accelerator
    names (``common/accelerators.csv``) and the account's zone names (``az_mappings-default.csv``,
    read when no AWS identity is found)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = _sky_rows()
    with (folder / "vms.csv").open("w", newline="") as f:
        vms = csv.DictWriter(f, fieldnames=list(rows[0]))
        vms.writeheader()
        vms.writerows(rows)
    gpus = sorted({row["AcceleratorName"] for row in rows if row["AcceleratorName"]})
    common = folder.parent / "common"  # SkyPilot's canonical accelerator names, by cloud
    common.mkdir(exist_ok=True)
    with (common / "accelerators.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["AcceleratorName", "Clouds"])
        writer.writerows([gpu, "['AWS']"] for gpu in gpus)
    with (folder / "az_mappings-default.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["AvailabilityZoneName", "AvailabilityZone"])
        for zones in _zone_names().values():
            writer.writerows([name, zid] for zid, name in zones.items())
