"""planner.app reads the profiler's records through its port (planner.app.ports), served by
profiler.planning: the team rule, the refusals and their words are the same as when the
service read the profiler's models itself."""

import pytest
from django.contrib.auth import get_user_model

from planner.app import ports, service
from planner.app.plan_input import PlanInputError
from planner.app.ports import CommPoint, ProfileUnavailable, StoredProfile
from profiler.planning import ProfilerStore

pytestmark = pytest.mark.django_db


def _finished(make_run, compute_profile, **fields):
    from profiler import actions

    run = make_run(**fields)
    actions.complete_run(run, compute_profile)
    return run


def test_a_finished_compute_run_is_read_as_its_stored_profile(make_run, compute_profile, user):
    run = _finished(make_run, compute_profile)
    run.refresh_from_db()
    stored = ProfilerStore().compute_profile(run.pk, user)
    assert stored == StoredProfile(run_id=run.pk, profile=run.profile, input_shape="3,32,32")


def test_another_teams_run_reads_as_one_that_does_not_exist(make_run, compute_profile, user):
    stranger = get_user_model().objects.create_user("stranger", password="x-long-password-1")
    theirs = _finished(make_run, compute_profile, owner=stranger)
    for run_id in (theirs.pk, theirs.pk + 1000):
        with pytest.raises(PlanInputError) as caught:
            service._profile_run(run_id, user, allow_code=False)
        assert (caught.value.field, str(caught.value.message)) == (
            "profile_run",
            f"profiling run {run_id} not found",
        )


@pytest.mark.parametrize("fields", [{"status": "running"}, {"kind": "comm"}])
def test_a_run_that_is_no_finished_compute_profile_is_refused_by_name(make_run, user, fields):
    run = make_run(**fields)
    with pytest.raises(ProfileUnavailable) as unavailable:
        ProfilerStore().compute_profile(run.pk, user)
    assert unavailable.value.reason == "not_finished"
    with pytest.raises(PlanInputError) as caught:
        service._profile_run(run.pk, user, allow_code=False)
    assert (caught.value.field, str(caught.value.message)) == (
        "profile_run",
        f"profiling run {run.pk} is not a finished compute profile",
    )


def test_the_service_reads_whatever_store_is_registered(monkeypatch, compute_profile):
    class OneProfile:
        def compute_profile(self, run_id, owner):
            return StoredProfile(run_id=run_id, profile=compute_profile, input_shape="3,32,32")

        def comm_points(self):
            return []

    monkeypatch.setattr(ports, "_store", OneProfile())
    with pytest.raises(PlanInputError) as caught:  # the fixture has no trace and names model code
        service._profile_run(7, owner=None, allow_code=False)
    assert "run 7 carries no workload trace" in str(caught.value.message)
    run, profile = service._profile_run(7, owner=None, allow_code=True)
    assert run.run_id == 7 and profile.model.spec == compute_profile["model"]["spec"]


def test_without_a_registered_store_the_port_says_who_registers_it(monkeypatch):
    monkeypatch.setattr(ports, "_store", None)
    with pytest.raises(RuntimeError, match="no profile store is registered.*profiler"):
        ports.profile_store()


def test_comm_points_come_by_run_then_message_size(make_run):
    from profiler.models import CommCurvePoint

    runs = [make_run(kind="comm", provider="ec2", instance_type="g5.2xlarge", nodes=2) for _ in range(2)]
    for run, size in [(runs[1], 1 << 10), (runs[0], 1 << 20), (runs[0], 1 << 10)]:
        CommCurvePoint.objects.create(
            run=run,
            instance_type="g5.2xlarge",
            nodes=2,
            gpus_per_node=1,
            gpu="A10G",
            network="tcp",
            nccl_version="2.21.5",
            size_bytes=size,
            median_us=float(size),
            p90_us=float(size),
        )
    points = ProfilerStore().comm_points()
    assert [(p.run_id, p.size_bytes) for p in points] == [
        (runs[0].pk, 1 << 10),
        (runs[0].pk, 1 << 20),
        (runs[1].pk, 1 << 10),
    ]
    assert all(isinstance(p, CommPoint) for p in points) and points[0].median_us == 1024.0
