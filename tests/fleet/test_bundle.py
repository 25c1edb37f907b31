"""The agent bundle (fleet.bundle.agent_tarball): what a VM unpacks onto its PYTHONPATH."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import textwrap

from fleet.bundle import agent_tarball

# Run inside the unpacked folder: every agent module imports, comes from that folder, pulls in no
# web code, and the workload tracer counts a small model's training step on the meta device.
AGENT_CHECK = textwrap.dedent(
    """
    import sys
    import profiler.agent.cli, profiler.agent.comm, profiler.agent.compute, profiler.agent.dataloader
    import profiler.agent.report, profiler.agent.spotwatch
    import workload.cost, workload.specs
    import torch.nn as nn

    here = sys.argv[1]
    for name in ("profiler", "profiler.agent.compute", "workload.cost"):
        assert sys.modules[name].__file__.startswith(here), (name, sys.modules[name].__file__)
    web = sorted({m.split(".")[0] for m in sys.modules} & {"django", "rest_framework", "planner", "launcher", "fleet"})
    assert not web, web
    trace = workload.cost.trace_workload(lambda: nn.Sequential(nn.Flatten(), nn.Linear(12, 10)), (3, 2, 2))
    assert trace["cost"]["ops"], trace
    print("agent ok")
    """
)


def _unpack(tmp_path):
    with tarfile.open(fileobj=io.BytesIO(agent_tarball()), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path


def test_it_holds_the_agent_and_workload_and_no_web_code():
    with tarfile.open(fileobj=io.BytesIO(agent_tarball()), mode="r:gz") as tar:
        names = set(tar.getnames())
        empty_init = tar.extractfile("profiler/__init__.py").read()
    assert {"profiler/agent/__main__.py", "profiler/agent/report.py", "workload/__init__.py"} <= names
    assert {"workload/specs.py", "workload/cost.py", "workload/runs.py"} <= names
    assert empty_init == b""  # the web app's profiler/__init__.py stays home
    assert not [n for n in names if n.split("/")[0] not in {"profiler", "workload"}]
    assert {n for n in names if n.startswith("profiler/") and not n.startswith("profiler/agent/")} == {
        "profiler/__init__.py"
    }
    assert not [n for n in names if "__pycache__" in n]


def test_it_unpacked_in_an_empty_folder_runs_the_agent_with_torch_alone(tmp_path):
    folder = _unpack(tmp_path / "agent")
    done = subprocess.run(
        [sys.executable, "-c", AGENT_CHECK, str(folder)],
        cwd=folder,
        env={"PYTHONPATH": str(folder), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "agent ok"
