import pytest

from profiler import actions
from profiler.models import ProfilingRun

pytestmark = pytest.mark.django_db


def test_the_form_starts_a_run_and_redirects_to_its_page(client, user, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    client.force_login(user)
    resp = client.post(
        "/profiling/",
        {
            "kind": "compute",
            "model_spec": "torchvision:resnet18",
            "input_shape": "3,64,64",
            "batch_sizes": "auto",
            "device": "cpu",
            "max_memory": "2GB",
            "iters": "3",
            "provider": "local",
        },
    )
    run = ProfilingRun.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/profiling/{run.pk}/"
    page = client.get(resp["Location"]).content.decode()
    assert "torchvision:resnet18" in page and 'id="latency-chart"' in page and "profiling_run.js" in page


def test_bad_fields_come_back_inline_with_the_values_kept(client, user):
    client.force_login(user)
    resp = client.post(
        "/profiling/",
        {
            "kind": "compute",
            "model_spec": "os:system",
            "input_shape": "three",
            "batch_sizes": "auto",
            "iters": "3",
        },
    )
    page = resp.content.decode()
    assert resp.status_code == 400 and "comma-separated positive integers" in page
    assert 'value="three"' in page and not ProfilingRun.objects.exists()


def test_run_pages_are_private_to_the_team(client, user, make_run, django_user_model):
    run = make_run()
    other = django_user_model.objects.create_user("eve", password="e-pass-12345")
    client.force_login(other)
    assert client.get(f"/profiling/{run.pk}/").status_code == 404
    assert client.post(f"/profiling/{run.pk}/cancel/").status_code == 404


def test_a_finished_run_page_shows_its_samples_without_javascript(client, user, make_run, compute_profile):
    run = make_run()
    actions.complete_run(run, compute_profile)
    client.force_login(user)
    page = client.get(f"/profiling/{run.pk}/").content.decode()
    assert "Compute samples" in page and "DDP buckets" in page and "Download profile JSON" in page


# --- issue 38 item 5: the form shows what applies, the run page says when to trust it ----------


def _sample(run, batch: int, phase: str, times: list[float]) -> None:
    from statistics import fmean, median, stdev

    from profiler.models import ComputeSample

    mean, sd = fmean(times), stdev(times)
    ComputeSample.objects.create(
        run=run,
        batch_size=batch,
        phase=phase,
        median_ms=median(times),
        p10_ms=min(times),
        p90_ms=max(times),
        mean_ms=mean,
        std_ms=sd,
        cv=sd / mean,
        times_ms=times,
    )


def noisy_run(make_run):
    """Batch 128 steadies at 31 ms; batch 256 measures 29 ms (faster: noise) and its forward
    pass spreads with CV ~0.6."""
    run = make_run(batch_sizes="128,256", iters=5, status="succeeded")
    for b, fwd in ((128, [10.0, 10.1, 9.9, 10.0, 10.2]), (256, [2.0, 12.0, 8.0, 3.0, 10.0])):
        _sample(run, b, "forward", fwd)
        _sample(run, b, "backward", [2 * t for t in (10.0, 10.1, 9.9, 10.0, 10.2)][: len(fwd)])
        _sample(run, b, "optimizer", [1.0, 1.01, 0.99, 1.0, 1.0])
    return run


def test_the_form_marks_each_field_with_the_kind_and_place_it_applies_to(client, user, settings):
    settings.LOCAL_CODE_EXECUTION = False
    client.force_login(user)
    page = client.get("/profiling/").content.decode()
    assert '<label data-kind="compute">Model' in page and '<label data-kind="comm">Message sizes' in page
    assert 'data-kind="comm" data-place="ec2"' in page and '<label data-place="ec2">EC2 type' in page
    assert "frontend/profiling.js" in page
    assert "ImageNet plans need 3,224,224" in page
    assert 'id="code-warning"' not in page  # code specs are refused here: nothing to warn about


def test_in_single_user_mode_the_form_warns_that_the_model_field_runs_code(client, user, settings):
    settings.LOCAL_CODE_EXECUTION = True
    client.force_login(user)
    page = client.get("/profiling/").content.decode()
    assert 'id="code-warning"' in page and "This runs code on this machine." in page
    assert "<code>os:system</code> would be called too" in page


def test_a_run_without_measurements_says_it_waits_instead_of_drawing_empty_axes(client, user, make_run):
    run = make_run(status="running")
    client.force_login(user)
    page = client.get(f"/profiling/{run.pk}/").content.decode()
    assert 'id="phase-waiting"' in page and "Waiting for the first measurements" in page
    assert 'id="phase-chart"' not in page
    assert (
        'id="latency-chart" class="chart" role="img" aria-label="Iteration latency per step" hidden' in page
    )


def test_a_noisy_run_is_flagged_with_its_reasons_and_a_link_to_run_it_again_with_more_iterations(
    client, user, make_run
):
    run = noisy_run(make_run)
    client.force_login(user)
    page = client.get(f"/profiling/{run.pk}/").content.decode()
    assert 'id="noisy"' in page and "Noisy measurements: use more iterations" in page
    assert "2 measurements of this run (5 timed iterations each) are too noisy" in page
    assert "an iteration at batch 256 (29 ms) is shorter than at the smaller batch 128 (31 ms)" in page
    assert "batch 256, forward: CV 0.6" in page
    assert page.count('class="noisy-row"') == 3  # every phase of batch 256; none of batch 128
    assert "profile again with 20 iterations" in page
    assert "iters=20" in page and "batch_sizes=128%2C256" in page and "model_spec=examples.tiny_model" in page


def test_a_steady_run_has_no_noisy_section(client, user, make_run, compute_profile):
    run = make_run()
    actions.complete_run(run, compute_profile)
    client.force_login(user)
    page = client.get(f"/profiling/{run.pk}/").content.decode()
    assert 'id="noisy"' not in page and 'class="noisy-row"' not in page and 'id="phase-chart"' in page


def test_the_stored_latency_series_is_the_step_time_per_iteration_index_like_the_live_one(make_run):
    from frontend.profiling import latency_series

    run = noisy_run(make_run)
    series = latency_series(list(run.compute_samples.all()), [])
    assert [s["key"] for s in series] == ["batch 128", "batch 256"]
    # iteration 0 of batch 256: forward 2 + backward 20 + optimizer 1
    assert series[1]["times_ms"][0] == pytest.approx(23.0) and len(series[1]["times_ms"]) == 5


def test_the_proposed_iteration_count_is_at_least_20_and_twice_the_run_s(client):
    from frontend.profiling import rerun_iters

    assert [rerun_iters(n) for n in (1, 5, 10, 30, 900)] == [20, 20, 20, 60, 1000]


def test_a_noisy_comm_run_counts_the_repeats_it_timed_not_the_iterations_it_asked_for(
    client, user, make_run, comm_profile
):
    run = make_run(kind="comm", model_spec="", input_shape="", world_size=2, sizes="1KB..64KB", iters=5)
    actions.complete_run(run, comm_profile)
    repeats = max(len(s.times_ms) for s in run.comm_samples.all())
    client.force_login(user)
    page = client.get(f"/profiling/{run.pk}/").content.decode()
    assert f"({repeats} timed repeats each)" in page and "larger batch" not in page
    assert "CV 1.01 &gt; 0.2: the repeats disagree" in page


def test_an_ec2_run_aws_would_refuse_reshows_the_form_with_every_failed_check_and_its_fix(
    client, staff, catalog, no_aws_credentials
):
    client.force_login(staff)
    resp = client.post(
        "/profiling/",
        {
            "kind": "compute",
            "model_spec": "torchvision:resnet18",
            "input_shape": "3,32,32",
            "batch_sizes": "auto",
            "iters": "3",
            "provider": "ec2",
            "instance_type": "g5.xlarge",
            "region": "us-east-1",
            "market": "on-demand",
        },
    )
    assert resp.status_code == 400
    page = resp.content.decode()
    assert 'id="prechecks"' in page and 'id="prechecks-failed"' in page and "Nothing was started" in page
    assert 'data-name="credentials" data-status="error"' in page
    assert "Unable to locate credentials" in page and "AWS_ACCESS_KEY_ID" in page  # the message and its fix
    assert 'id="profile-form"' in page and "<option selected>g5.xlarge</option>" in page  # values kept
    assert not ProfilingRun.objects.exists()
