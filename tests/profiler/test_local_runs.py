"""Local provider, background tasks and the shell command, with the real agent as a subprocess."""

import os
import signal
import time
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from profiler import actions, tasks
from profiler.models import ProfilingRun, RunEvent, RunStatus
from profiler.providers import LocalProvider, _is_our_agent

TINY = {"model_spec": "examples.tiny_model:build", "input_shape": "3,16,16", "batch_sizes": "2,4", "iters": 2}


@pytest.fixture(autouse=True)
def _local_code(settings):
    """These runs profile examples.tiny_model (model code) in a local agent: the operator's
    single-user mode (SRIFTY_LOCAL_CODE=1, as ./run sets it)."""
    settings.LOCAL_CODE_EXECUTION = True


def _wait(predicate, timeout_s: float = 120.0, every_s: float = 0.25):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return False


@pytest.mark.django_db(transaction=True)
def test_a_local_run_reports_over_http_and_ends_with_samples_stored(make_run, live_server, settings):
    settings.SITE_URL = live_server.url
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    run = make_run(**TINY)
    assert tasks.start_run(run).startswith("started")
    assert _wait(lambda: ProfilingRun.objects.get(pk=run.pk).finished), LocalProvider().log_tail(run)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.compute_samples.count() == 6 and run.bucket_samples.exists()
    assert RunEvent.objects.filter(run=run, type="progress").exists()  # live progress came over HTTP
    assert run.profile["model"]["spec"] == TINY["model_spec"]
    assert not run.token_matches("anything")


@pytest.mark.django_db(transaction=True)
def test_a_killed_agent_fails_the_run_and_keeps_partial_events(make_run, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    run = make_run(**{**TINY, "batch_sizes": "2,4,8,16,32,64", "iters": 50})
    provider = LocalProvider()
    pid = provider.start(run, token=None)
    actions.mark_starting(run, pid=pid)
    actions.record_event(run, {"seq": 1, "type": "progress", "phase": "compute", "fraction": 0.2})
    run.refresh_from_db()
    assert tasks.watch_run(run) == "watching"
    os.killpg(pid, signal.SIGKILL)
    assert _wait(lambda: provider.poll(run).alive is False, 20)
    assert tasks.watch_run(run) == "failed"
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "agent process exited before reporting a result" in run.error
    assert RunEvent.objects.filter(run=run).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_run_past_its_hard_limit_is_stopped(make_run, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
    run = make_run(**{**TINY, "batch_sizes": "2,4,8,16,32,64", "iters": 50})
    provider = LocalProvider()
    pid = provider.start(run, token=None)
    actions.mark_starting(run, pid=pid)
    ProfilingRun.objects.filter(pk=run.pk).update(deadline_at=timezone.now() - timedelta(seconds=1))
    run.refresh_from_db()
    assert tasks.watch_run(run) == "timed out"  # fail_run queues stop_run_task (immediate here)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "hard time limit" in run.error
    assert _wait(lambda: not _is_our_agent(pid, provider.paths(run)[0]), 10)


@pytest.mark.django_db(transaction=True)
def test_the_result_file_completes_a_run_whose_posts_never_arrived(make_run, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    run = make_run(**TINY)
    proc = LocalProvider().spawn(run, token=None)
    actions.mark_starting(run, pid=proc.pid)
    assert proc.wait(timeout=120) == 0
    run.refresh_from_db()
    assert tasks.watch_run(run) == "succeeded from the result file"
    assert ProfilingRun.objects.get(pk=run.pk).compute_samples.count() == 6


@pytest.mark.django_db(transaction=True)
def test_a_bad_model_spec_fails_with_the_agents_message(make_run, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    run = make_run(**{**TINY, "model_spec": "torchvision:not_a_model"})
    proc = LocalProvider().spawn(run, token=None)
    actions.mark_starting(run, pid=proc.pid)
    assert proc.wait(timeout=60) != 0
    run.refresh_from_db()
    assert tasks.watch_run(run) == "failed"
    run.refresh_from_db()
    assert "not_a_model" in run.error


def test_profile_model_stores_a_run_from_the_shell(db, staff, capsys):
    call_command(
        "profile_model",
        "--local",
        "--model",
        "examples.tiny_model:build",
        "--input-shape",
        "3,16,16",
        "--batch-sizes",
        "2,4",
        "--iters",
        "2",
    )
    out = capsys.readouterr().out
    assert "succeeded" in out and "batch     4" in out
    run = ProfilingRun.objects.get()
    assert run.status == RunStatus.SUCCEEDED and run.owner == staff


def test_profile_model_names_bad_arguments(db, staff):
    with pytest.raises(CommandError, match="--input-shape"):
        call_command("profile_model", "--local", "--model", "torchvision:resnet18", "--input-shape", "abc")
    with pytest.raises(CommandError, match="only --local"):
        call_command("profile_model", "--model", "torchvision:resnet18")
    assert not ProfilingRun.objects.exists()
