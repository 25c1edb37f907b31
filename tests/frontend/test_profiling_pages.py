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
