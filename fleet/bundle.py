"""The agent bundle: the gzip tarball a VM fetches (``GET /api/v1/agent.tar.gz`` for a profiling
run, ``GET /api/v1/jobs/{id}/agent.tar.gz`` for a training node) and unpacks onto its
``PYTHONPATH``.

Its root holds what ``python -m profiler.agent`` and a training script's
``import profiler.agent.report`` need on a bare torch machine, and nothing of the web:

* ``profiler/__init__.py`` - empty, so ``profiler.agent`` imports without the Django app's
  ``profiler/__init__.py`` (or its models);
* ``profiler/agent/`` - the agent (CLI, compute and comm profilers, its two posters, spot watcher);
* ``workload/`` - model inspection, which the agent imports (specs, tracing, memory, buckets).

``tests/fleet/test_bundle.py`` unpacks it into an empty folder and imports the agent from there
with only the standard library and torch on the path.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the packages the bundle carries whole, relative to the repository root
PACKAGES = ("profiler/agent", "workload")


def bundle_files(root: Path = ROOT) -> Iterator[Path]:
    """Every file of :data:`PACKAGES` under ``root``, sorted, without byte-code caches."""
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path


@cache
def agent_tarball() -> bytes:
    """The bundle (gzip tar), built once per process: the files do not change while it runs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        # an empty package __init__: the web app's profiler/__init__.py is not the agent's business
        tar.addfile(tarfile.TarInfo("profiler/__init__.py"), io.BytesIO(b""))
        for path in bundle_files():
            tar.add(path, arcname=str(path.relative_to(ROOT)))
    return buf.getvalue()
