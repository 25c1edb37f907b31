import pytest

from profiler import actions
from profiler.models import CommSample, ComputeSample, RunEvent, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)


def test_a_token_is_stored_only_as_its_hash(agent_run):
    run, token = agent_run
    run.refresh_from_db()
    assert token not in run.token_hash and run.token_matches(token)
    assert not run.token_matches(token + "x")


def test_a_new_token_replaces_the_old_one(agent_run):
    run, old = agent_run
    new = actions.issue_token(run)
    run.refresh_from_db()
    assert run.token_matches(new) and not run.token_matches(old)


def test_events_are_idempotent_by_sequence_number(agent_run, django_capture_on_commit_callbacks):
    run, _ = agent_run
    with django_capture_on_commit_callbacks(execute=True):
        assert actions.record_event(run, {"seq": 1, "type": "progress", "phase": "compute", "fraction": 0.2})
        assert not actions.record_event(
            run, {"seq": 1, "type": "progress", "phase": "compute", "fraction": 0.9}
        )
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.progress == pytest.approx(0.2)
    assert RunEvent.objects.filter(run=run).count() == 1


def test_progress_never_moves_backwards(agent_run):
    run, _ = agent_run
    actions.record_event(run, {"seq": 1, "type": "progress", "fraction": 0.5})
    actions.record_event(run, {"seq": 2, "type": "progress", "fraction": 0.3})
    run.refresh_from_db()
    assert run.progress == 0.5


def test_a_result_stores_every_phase_bucket_and_iteration(agent_run, compute_profile):
    run, token = agent_run
    actions.record_event(run, {"seq": 1, "type": "result", "profile": compute_profile})
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.progress == 1.0 and run.finished_at
    assert not run.token_matches(token)  # the token dies with the run
    n = len(compute_profile["samples"])
    assert ComputeSample.objects.filter(run=run).count() == 3 * n
    fwd = ComputeSample.objects.get(
        run=run, batch_size=compute_profile["samples"][0]["batch_size"], phase="forward"
    )
    assert fwd.times_ms == compute_profile["samples"][0]["phases"]["forward"]["times_ms"]
    assert run.bucket_samples.count() == sum(len(s["buckets"]) for s in compute_profile["samples"])


def test_a_comm_result_keeps_each_repeat(make_run, comm_profile):
    run = make_run(kind="comm", model_spec="", input_shape="")
    actions.complete_run(run, comm_profile)
    sample = CommSample.objects.filter(run=run).first()
    assert len(sample.times_ms) == len(comm_profile["samples"][0]["times_ms"]) and sample.world_size == 2


def test_a_finished_run_takes_no_more_events(agent_run, compute_profile):
    run, _ = agent_run
    actions.cancel_run(run)
    with pytest.raises(actions.RunClosed):
        actions.record_event(run, {"seq": 5, "type": "progress", "fraction": 0.1})


@pytest.mark.parametrize("bad", [float("nan"), -1.0, 1e12])
def test_absurd_times_in_a_result_are_rejected_and_nothing_is_stored(agent_run, compute_profile, bad):
    run, _ = agent_run
    compute_profile["samples"][0]["phases"]["backward"]["times_ms"][0] = bad
    with pytest.raises(actions.BadProfile, match=r"samples.0.*backward"):
        actions.record_event(run, {"seq": 1, "type": "result", "profile": compute_profile})
    run.refresh_from_db()
    assert run.status == RunStatus.PENDING and not RunEvent.objects.filter(run=run).exists()
    assert not ComputeSample.objects.filter(run=run).exists()


def test_a_wrong_schema_version_is_rejected(agent_run, compute_profile):
    run, _ = agent_run
    compute_profile["schema_version"] = 99
    with pytest.raises(actions.BadProfile, match="schema_version"):
        actions.complete_run(run, compute_profile)


def test_a_profile_of_the_other_kind_is_rejected(agent_run, comm_profile):
    run, _ = agent_run
    with pytest.raises(actions.BadProfile, match="does not match run kind"):
        actions.complete_run(run, comm_profile)


def test_an_agent_error_fails_the_run_and_keeps_partial_events(agent_run):
    run, _ = agent_run
    actions.record_event(run, {"seq": 1, "type": "progress", "phase": "compute", "fraction": 0.4})
    actions.record_event(run, {"seq": 2, "type": "error", "message": "CUDA error: device-side assert"})
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "device-side assert" in run.error
    assert RunEvent.objects.filter(run=run).count() == 2


@pytest.mark.parametrize("bad", [-0.5, 50.0])
def test_an_absurd_cpu_share_in_a_comm_profile_is_rejected(make_run, comm_profile, bad):
    run = make_run(kind="comm", world_size=2)
    comm_profile["samples"][0]["cpu_share"] = bad
    with pytest.raises(actions.BadProfile, match="cpu_share"):
        actions.complete_run(run, comm_profile)
    run.refresh_from_db()
    assert run.profile is None
