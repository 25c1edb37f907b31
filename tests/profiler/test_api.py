import json

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from profiler.models import ProfilingRun, RunEvent, RunStatus

pytestmark = pytest.mark.django_db


def agent(token: str) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return c


def events_url(run) -> str:
    return f"/api/v1/profiling-runs/{run.pk}/events/"


def test_an_agent_posts_progress_with_its_token(agent_run):
    run, token = agent_run
    resp = agent(token).post(
        events_url(run), {"seq": 1, "type": "progress", "phase": "compute", "fraction": 0.1}, format="json"
    )
    assert resp.status_code == 201
    again = agent(token).post(events_url(run), {"seq": 1, "type": "progress", "fraction": 0.1}, format="json")
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert RunEvent.objects.filter(run=run).count() == 1


def test_it_rejects_a_token_used_on_a_foreign_run(agent_run, make_run):
    run, token = agent_run
    other = make_run()
    resp = agent(token).post(events_url(other), {"seq": 1, "type": "progress"}, format="json")
    assert resp.status_code == 403
    assert not RunEvent.objects.filter(run=other).exists()


def test_it_rejects_missing_wrong_and_expired_tokens(agent_run, compute_profile):
    run, token = agent_run
    body = {"seq": 1, "type": "progress"}
    assert APIClient().post(events_url(run), body, format="json").status_code == 401
    assert agent("nope").post(events_url(run), body, format="json").status_code == 401
    agent(token).post(
        events_url(run), {"seq": 1, "type": "result", "profile": compute_profile}, format="json"
    )
    assert (
        agent(token).post(events_url(run), {"seq": 2, "type": "progress"}, format="json").status_code == 401
    )


def test_a_user_session_cannot_post_agent_events(client, user, agent_run):
    run, _ = agent_run
    client.force_login(user)
    resp = client.post(events_url(run), {"seq": 1, "type": "progress"}, content_type="application/json")
    assert resp.status_code in (401, 403)


@pytest.mark.parametrize(
    "body, field",
    [
        ({"type": "progress"}, "seq"),
        ({"seq": 0, "type": "progress"}, "seq"),
        ({"seq": 1, "type": "gossip"}, "type"),
        ({"seq": 1, "type": "progress", "fraction": 7}, "fraction"),
        ({"seq": 1, "type": "progress", "time_ms": -3}, "time_ms"),
        ({"seq": 1, "type": "result"}, "profile"),
    ],
)
def test_malformed_events_are_a_400_naming_the_field(agent_run, body, field):
    run, token = agent_run
    resp = agent(token).post(events_url(run), body, format="json")
    assert resp.status_code == 400 and field in resp.json()
    assert not RunEvent.objects.filter(run=run).exists()


def test_nan_in_json_is_refused(agent_run):
    run, token = agent_run
    resp = agent(token).post(
        events_url(run),
        data='{"seq": 1, "type": "progress", "time_ms": NaN}',
        content_type="application/json",
    )
    assert resp.status_code == 400


def test_an_oversized_body_is_refused(agent_run):
    run, token = agent_run
    big = json.dumps({"seq": 1, "type": "progress", "pad": "x" * (9 * 1024 * 1024)})
    resp = agent(token).post(events_url(run), data=big, content_type="application/json")
    assert resp.status_code == 413


def test_a_bad_result_is_a_400_and_the_run_goes_on(agent_run, compute_profile):
    run, token = agent_run
    compute_profile["samples"][0]["phases"]["forward"]["median_ms"] = -5
    resp = agent(token).post(
        events_url(run), {"seq": 3, "type": "result", "profile": compute_profile}, format="json"
    )
    assert resp.status_code == 400 and "profile" in resp.json()
    run.refresh_from_db()
    assert run.status == RunStatus.PENDING


def test_users_start_runs_and_bad_fields_are_named(user_api, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    ok = user_api.post(
        "/api/v1/profiling-runs/",
        {
            "kind": "compute",
            "model_spec": "torchvision:resnet18",
            "input_shape": "3,64,64",
            "batch_sizes": "auto",
            "max_memory": "2GB",
        },
        format="json",
    )
    assert ok.status_code == 201, ok.json()
    assert ok.json()["status"] == "pending" and "token" not in json.dumps(ok.json())
    bad = user_api.post(
        "/api/v1/profiling-runs/",
        {"kind": "compute", "model_spec": "rm -rf /", "input_shape": "3,x", "batch_sizes": "many"},
        format="json",
    )
    assert bad.status_code == 400 and {"model_spec", "input_shape", "batch_sizes"} <= set(bad.json())
    ec2 = user_api.post(
        "/api/v1/profiling-runs/",
        {"kind": "comm", "provider": "ec2", "instance_type": "zz.nope", "region": "mars-1"},
        format="json",
    )
    assert ec2.status_code == 400 and {"instance_type", "region"} <= set(ec2.json())


def test_creating_a_run_queues_its_start_after_commit(user_api, settings, django_capture_on_commit_callbacks):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    from django_tasks import default_task_backend

    with django_capture_on_commit_callbacks(execute=True):
        resp = user_api.post("/api/v1/profiling-runs/", {"kind": "comm", "world_size": 2}, format="json")
    run_id = resp.json()["id"]
    assert [r.args for r in default_task_backend.results] == [[run_id]]


def test_users_see_their_teams_runs_only(make_run, user, django_user_model):
    mine = make_run(owner=user)
    bob = django_user_model.objects.create_user("bob", password="x-pass-1234")
    carol = django_user_model.objects.create_user("carol", password="x-pass-1234")
    bobs = make_run(owner=bob)
    carols = make_run(owner=carol)
    team = Group.objects.create(name="vision")
    user.groups.add(team)
    bob.groups.add(team)
    c = APIClient()
    c.force_authenticate(user)
    ids = {r["id"] for r in c.get("/api/v1/profiling-runs/").json()["results"]}
    assert ids == {mine.pk, bobs.pk}
    assert c.get(f"/api/v1/profiling-runs/{carols.pk}/").status_code == 404


def test_the_profile_downloads_once_stored(user_api, agent_run, compute_profile):
    run, token = agent_run
    assert user_api.get(f"/api/v1/profiling-runs/{run.pk}/profile/").status_code == 404
    agent(token).post(
        events_url(run), {"seq": 1, "type": "result", "profile": compute_profile}, format="json"
    )
    resp = user_api.get(f"/api/v1/profiling-runs/{run.pk}/profile/")
    assert resp.status_code == 200 and resp.json()["kind"] == "compute"
    detail = user_api.get(f"/api/v1/profiling-runs/{run.pk}/").json()
    assert detail["status"] == "succeeded" and len(detail["compute_samples"]) == 3 * len(
        compute_profile["samples"]
    )


def test_cancel_ends_the_run(user_api, agent_run, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    run, _ = agent_run
    resp = user_api.post(f"/api/v1/profiling-runs/{run.pk}/cancel/")
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
    assert ProfilingRun.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_the_agent_tarball_needs_a_live_run_token(agent_run):
    import io
    import tarfile

    run, token = agent_run
    assert APIClient().get("/api/v1/agent.tar.gz").status_code == 401
    resp = agent(token).get("/api/v1/agent.tar.gz")
    names = tarfile.open(fileobj=io.BytesIO(resp.content)).getnames()
    assert "profiler/agent/__main__.py" in names and "profiler/__init__.py" in names
    assert not any("models.py" in n or "actions.py" in n for n in names)  # no Django code ships


def test_the_run_list_leaves_profiles_in_the_database(user_api, agent_run, compute_profile):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    run, token = agent_run
    agent(token).post(
        events_url(run), {"seq": 1, "type": "result", "profile": compute_profile}, format="json"
    )
    with CaptureQueriesContext(connection) as ctx:
        resp = user_api.get("/api/v1/profiling-runs/")
    assert resp.status_code == 200 and run.pk in {r["id"] for r in resp.json()["results"]}
    run_selects = [q["sql"] for q in ctx.captured_queries if 'FROM "profiler_profilingrun"' in q["sql"]]
    assert run_selects and not any('"profiler_profilingrun"."profile"' in sql for sql in run_selects)
    assert user_api.get(f"/api/v1/profiling-runs/{run.pk}/").status_code == 200
