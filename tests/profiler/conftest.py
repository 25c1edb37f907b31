import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from profiler.models import ProfilingRun

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def compute_profile() -> dict:
    return json.loads((FIXTURES / "tiny_compute.json").read_text())


@pytest.fixture
def comm_profile() -> dict:
    return json.loads((FIXTURES / "tiny_comm.json").read_text())


@pytest.fixture
def make_run(db, user):
    def make(owner=None, **fields) -> ProfilingRun:
        defaults = {"kind": "compute", "model_spec": "examples.tiny_model:build", "input_shape": "3,32,32",
                    "batch_sizes": "4,8", "iters": 3, "deadline_at": timezone.now() + timedelta(minutes=10)}
        defaults.update(fields)
        return ProfilingRun.objects.create(owner=owner or user, **defaults)

    return make


@pytest.fixture
def agent_run(make_run):
    """A run with a live agent token: (run, token)."""
    from profiler.actions import issue_token

    run = make_run()
    return run, issue_token(run)
