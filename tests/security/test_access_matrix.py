"""The access matrix: every URL pattern and every websocket route, for every kind of outsider.

Team A owns a profiling run, a finished profile, a plan and a running job. Each cell asks one
endpoint for one of them as one of:

* ``anon``: nobody logged in;
* ``other``: a logged-in user of team B, who may launch and stop (``launcher.add_job``,
  ``launcher.change_job``, ``profiler.change_profilingrun``) but is not staff;
* ``run_token``: the agent token of a live profiling run of team B (valid, but for another run);
* ``job_token``: the node token of a running job of team B (valid, but for another job);
* ``readonly``: a member of team A's group without any permission: reads, never changes.

Expected: anonymous -> 401/403 on the API, the login page for pages, 4401 on websockets;
another team -> 404, exactly what an id that does not exist gets (a referenced id in a POST
body: the same 400 as a missing one), and never the object's data; foreign tokens -> 401/403;
read-only -> reads work, state changes 403.

The walk over ``django.urls.get_resolver()`` fails for an endpoint without an entry here, and
every entry must still resolve to its pattern, so the matrix cannot rot silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, Permission
from django.core.cache import cache
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.utils import timezone
from rest_framework.test import APIClient

from tests.support.jobs import g5_spot_option

ACTORS = ("anon", "other", "run_token", "job_token", "readonly")
MARK = "alpha_owner"  # team A's owner: the username is on every list, page and object of team A
MISSING = 7999  # an id no object has
IDS = {"run": 7101, "done": 7102, "run_b": 7103, "plan": 7201, "plan_b": 7202, "job": 7301, "job_b": 7302}
OPTION = g5_spot_option(time_p90_h=1.2, label="2x g5.xlarge", total_usd=1.0)

# --- what each outcome means --------------------------------------------------------------

# ok: 2xx · listed: 200 with team A's data · hidden: 200 without it · login: redirect to the
# login page · admin_login: redirect to the admin's · refused: 401/403 · forbidden: 403 ·
# missing: 404, like an id that does not exist · no_such_ref: 400, like a referenced id that does
# not exist · ref_ok: the referenced id was found · allowed: the user's own action (not refused) ·
# public: open to everyone · bad_login: 400 (wrong password)
UNCHANGED = {"refused", "forbidden", "missing", "no_such_ref", "login", "admin_login"}

API_READ = {
    "anon": "refused",
    "other": "missing",
    "run_token": "refused",
    "job_token": "refused",
    "readonly": "ok",
}
API_ACT = {**API_READ, "readonly": "forbidden"}
API_LIST = {**API_READ, "other": "hidden", "readonly": "listed"}
API_SHARED = {**API_READ, "other": "ok"}  # the catalog: the same for every logged-in user
API_OWN = {**API_READ, "other": "allowed", "readonly": "allowed"}  # creating one's own run
API_REF = {**API_READ, "other": "no_such_ref", "readonly": "forbidden"}  # an id in the body; needs add_job
API_PLAN_REF = {**API_READ, "other": "no_such_ref", "readonly": "ref_ok"}  # planning needs no permission
SKY_EXPORT = {**API_PLAN_REF, "readonly": "ok"}  # a teammate downloads the option as a SkyPilot file
NODE = dict.fromkeys(ACTORS, "refused")  # agent/node endpoints: only the object's own token
AGENT_ANY = {**NODE, "run_token": "ok"}  # the agent package: any live run token, no run data
PAGE_READ = {
    "anon": "login",
    "other": "missing",
    "run_token": "login",
    "job_token": "login",
    "readonly": "ok",
}
PAGE_ACT = {**PAGE_READ, "readonly": "forbidden"}
PAGE_LIST = {**PAGE_READ, "other": "hidden", "readonly": "listed"}
PAGE_SHARED = {**PAGE_READ, "other": "ok"}
PAGE_PLAN_REF = {**PAGE_READ, "other": "no_such_ref", "readonly": "ref_ok"}
PUBLIC = dict.fromkeys(ACTORS, "public")
ADMIN = dict.fromkeys(ACTORS, "admin_login")  # nobody here is staff

RUN_BODY = {
    "kind": "compute",
    "model_spec": "torchvision:resnet18",
    "input_shape": "3,32,32",
    "batch_sizes": "4,8",
    "iters": 3,
}
LAUNCH = {"plan": "{plan}", "rank": 1, "train_command": "train.py", "max_spend_usd": "10", "max_hours": 5}
# A task with a local workdir, posted multipart with its folder as ``workdir_archive`` (a good
# archive): the upload must not open a way around the plan and permission checks, nor be stored
# for a refused request (``_state`` counts the stored archives).
LAUNCH_ARCHIVE = {**LAUNCH, "train_command": "", "task": "name: t\nworkdir: ./train\nrun: python train.py\n"}
ARCHIVE = {"workdir_archive": True}
PLAN_BODY = {
    "model": {"profile_run": "{done}"},
    "samples_per_epoch": 1000,
    "epochs": 1,
    "objective": "cost",
    "deadline_hours": 24,
}
PLAN_FORM = {
    "model_source": "profile",
    "profile_run": "{done}",
    "samples_per_epoch": "1000",
    "epochs": "1",
    "objective": "cost",
    "deadline_hours": "24",
    "spot": "on",
    "on_demand": "on",
}


@dataclass(frozen=True)
class Cell:
    route: str  # the pattern as the resolver walk spells it
    method: str
    url: str  # with {run}, {plan}, {job}, {done} for team A's ids
    outcomes: dict
    body: dict | None = None
    ref: str | None = None  # the id (IDS key) the body or query refers to: no_such_ref / ref_ok
    extra: dict = field(default_factory=dict)


R = "api/v1/^"
MATRIX = [
    Cell("accounts/login/", "GET", "/accounts/login/", PUBLIC),
    Cell("accounts/logout/", "POST", "/accounts/logout/", PUBLIC),
    Cell(
        "api/v1/auth/token/",
        "POST",
        "/api/v1/auth/token/",
        dict.fromkeys(ACTORS, "bad_login"),
        {"username": MARK, "password": "not-the-password"},
    ),
    Cell("api/schema/", "GET", "/api/schema/", PUBLIC),  # the API's description, no team data
    Cell("api/docs/", "GET", "/api/docs/", PUBLIC),
    Cell("favicon.ico", "GET", "/favicon.ico", PUBLIC),  # the site's icon, no team data
    Cell("api/v1/", "GET", "/api/v1/", API_SHARED),
    Cell("api/v1/<drf_format_suffix:format>", "GET", "/api/v1/.json", API_SHARED),
    # catalog (shared by everyone who is logged in)
    Cell("api/v1/prices/", "GET", "/api/v1/prices/", API_SHARED),
    Cell("api/v1/gpus/", "GET", "/api/v1/gpus/?gpu=A10G&market=spot", API_SHARED),
    Cell(R + "instance-types/$", "GET", "/api/v1/instance-types/", API_SHARED),
    Cell(R + "instance-types/(?P<name>[^/]+)/$", "GET", "/api/v1/instance-types/g5.xlarge/", API_SHARED),
    Cell(R + "accelerators/$", "GET", "/api/v1/accelerators/", API_SHARED),
    Cell(R + "accelerators/(?P<name>[^/]+)/$", "GET", "/api/v1/accelerators/A10G/", API_SHARED),
    # profiling
    Cell(
        "api/v1/profiling-runs/<int:pk>/events/",
        "POST",
        "/api/v1/profiling-runs/{run}/events/",
        NODE,
        {"seq": 1, "type": "progress", "phase": "compute", "fraction": 0.5},
    ),
    Cell(
        "api/v1/profiling-runs/<int:pk>/rendezvous/",
        "GET",
        "/api/v1/profiling-runs/{run}/rendezvous/?instance_id=i-07101a",
        NODE,
    ),
    Cell("api/v1/agent.tar.gz", "GET", "/api/v1/agent.tar.gz", AGENT_ANY),
    Cell(R + "profiling-runs/$", "GET", "/api/v1/profiling-runs/", API_LIST),
    Cell(R + "profiling-runs/$", "POST", "/api/v1/profiling-runs/", API_OWN, RUN_BODY),
    Cell(R + "profiling-runs/(?P<pk>[^/.]+)/$", "GET", "/api/v1/profiling-runs/{run}/", API_READ),
    Cell(
        R + "profiling-runs/(?P<pk>[^/.]+)/cancel/$", "POST", "/api/v1/profiling-runs/{run}/cancel/", API_ACT
    ),
    Cell(
        R + "profiling-runs/(?P<pk>[^/.]+)/profile/$",
        "GET",
        "/api/v1/profiling-runs/{run}/profile/",
        API_READ,
    ),
    # plans
    Cell(R + "plans/$", "GET", "/api/v1/plans/", API_LIST),
    Cell(
        R + "plans/$",
        "POST",
        "/api/v1/plans/",
        API_PLAN_REF,
        PLAN_BODY,
        ref="done",
        extra={"field": "profile_run"},
    ),
    Cell(R + "plans/(?P<pk>[^/.]+)/$", "GET", "/api/v1/plans/{plan}/", API_READ),
    Cell(R + "plans/(?P<pk>[^/.]+)/progress/$", "GET", "/api/v1/plans/{plan}/progress/", API_READ),
    Cell(R + "plans/(?P<pk>[^/.]+)/cancel/$", "POST", "/api/v1/plans/{plan}/cancel/", API_ACT),
    Cell(
        R + "plans/(?P<pk>[^/.]+)/options/(?P<rank>[0-9]+)/skypilot/$",
        "GET",
        "/api/v1/plans/{plan}/options/1/skypilot/",
        API_READ,
    ),
    # jobs: the nodes
    Cell(
        "api/v1/jobs/<int:pk>/reports/",
        "POST",
        "/api/v1/jobs/{job}/reports/",
        NODE,
        {"seq": 1, "rank": 0, "reports": [{"iteration": 1, "iter_time_s": 0.5}]},
    ),
    Cell(
        "api/v1/jobs/<int:pk>/rendezvous/", "GET", "/api/v1/jobs/{job}/rendezvous/?instance_id=i-07301a", NODE
    ),
    Cell("api/v1/jobs/<int:pk>/agent.tar.gz", "GET", "/api/v1/jobs/{job}/agent.tar.gz", NODE),
    Cell("api/v1/jobs/<int:pk>/workdir.tar.gz", "GET", "/api/v1/jobs/{job}/workdir.tar.gz", NODE),
    Cell(
        "api/v1/jobs/<int:pk>/checkpoints/",
        "POST",
        "/api/v1/jobs/{job}/checkpoints/",
        NODE,
        {"iteration": 100, "path": "s3://b/ckpt/100.pt"},
    ),
    Cell(
        "api/v1/jobs/<int:pk>/interruptions/",
        "POST",
        "/api/v1/jobs/{job}/interruptions/",
        NODE,
        {"instance_id": "i-07301a0000000000", "action": "terminate"},
    ),
    # jobs: the users
    Cell(R + "jobs/$", "GET", "/api/v1/jobs/", API_LIST),
    Cell(R + "jobs/$", "POST", "/api/v1/jobs/", API_REF, {**LAUNCH, "confirmation": "x"}, ref="plan"),
    Cell(R + "jobs/preview/$", "POST", "/api/v1/jobs/preview/", API_REF, LAUNCH, ref="plan"),
    Cell(
        R + "jobs/$",
        "POST",
        "/api/v1/jobs/",
        API_REF,
        {**LAUNCH_ARCHIVE, "confirmation": "x"},
        ref="plan",
        extra=ARCHIVE,
    ),
    Cell(
        R + "jobs/preview/$",
        "POST",
        "/api/v1/jobs/preview/",
        API_REF,
        LAUNCH_ARCHIVE,
        ref="plan",
        extra=ARCHIVE,
    ),
    Cell(
        R + "jobs/precheck/$",
        "POST",
        "/api/v1/jobs/precheck/",
        API_REF,
        {"plan": "{plan}", "rank": 1},
        ref="plan",
    ),
    Cell(
        R + "jobs/sky-export/$",
        "GET",
        "/api/v1/jobs/sky-export/?plan={plan}&rank=1",
        SKY_EXPORT,
        ref="plan",
    ),
    Cell(R + "jobs/(?P<pk>[^/.]+)/$", "GET", "/api/v1/jobs/{job}/", API_READ),
    Cell(R + "jobs/(?P<pk>[^/.]+)/stop/$", "POST", "/api/v1/jobs/{job}/stop/", API_ACT),
    Cell(R + "jobs/(?P<pk>[^/.]+)/replan/$", "POST", "/api/v1/jobs/{job}/replan/", API_ACT, {}),
    Cell(
        R + "jobs/(?P<pk>[^/.]+)/replan/apply/$",
        "POST",
        "/api/v1/jobs/{job}/replan/apply/",
        API_ACT,
        {"plan": "{plan}", "rank": 1, "max_spend_usd": "10", "max_hours": 5, "confirmation": "x"},
    ),
    # pages
    Cell("", "GET", "/", PAGE_LIST),
    Cell("catalog/", "GET", "/catalog/", PAGE_SHARED),
    Cell("catalog/gpus/", "GET", "/catalog/gpus/?gpu=A10G", PAGE_SHARED),
    Cell("profiling/", "GET", "/profiling/", PAGE_LIST),
    Cell("profiling/<int:run_id>/", "GET", "/profiling/{run}/", PAGE_READ),
    Cell("profiling/<int:run_id>/cancel/", "POST", "/profiling/{run}/cancel/", PAGE_ACT),
    Cell("plans/", "GET", "/plans/", PAGE_LIST),
    Cell("plans/", "POST", "/plans/", PAGE_PLAN_REF, PLAN_FORM, ref="done", extra={"field": "profile_run"}),
    Cell("plans/<int:plan_id>/", "GET", "/plans/{plan}/", PAGE_READ),
    Cell("plans/<int:plan_id>/cancel/", "POST", "/plans/{plan}/cancel/", PAGE_ACT),
    Cell("jobs/", "GET", "/jobs/", PAGE_LIST),
    Cell("jobs/new/", "GET", "/jobs/new/?plan={plan}&rank=1", PAGE_ACT),
    Cell(
        "jobs/new/",
        "POST",
        "/jobs/new/",
        PAGE_ACT,
        {"plan": "{plan}", "rank": "1", "train_command": "train.py", "max_spend_usd": "10", "max_hours": "5"},
    ),
    Cell("jobs/<int:job_id>/", "GET", "/jobs/{job}/", PAGE_READ),
    Cell("jobs/<int:job_id>/stop/", "POST", "/jobs/{job}/stop/", PAGE_ACT),
    Cell("jobs/<int:job_id>/replan/", "POST", "/jobs/{job}/replan/", PAGE_ACT),
    Cell(
        "jobs/<int:job_id>/replan/apply/",
        "POST",
        "/jobs/{job}/replan/apply/",
        PAGE_ACT,
        {"plan": "{plan}", "rank": "1", "max_spend_usd": "10", "max_hours": "5", "confirmation": "x"},
    ),
]

FORMAT = r"\.(?P<format>[a-z0-9]+)/?$"


def _format_variants(cells: list[Cell]) -> list[Cell]:
    """DRF routers add ``.json`` twins of their routes: the same view, so the same outcomes."""
    out = []
    for c in cells:
        if c.route.startswith(R) and c.route.endswith("/$"):
            path, _, query = c.url.partition("?")
            url = path[:-1] + ".json" + (f"?{query}" if query else "")
            out.append(Cell(c.route[:-2] + FORMAT, c.method, url, c.outcomes, c.body, c.ref, c.extra))
    return out


def _walk(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern)


def _admin_url(route: str) -> str:
    """A concrete URL for an admin pattern (object ids that need not exist: nobody gets that far)."""
    url = route.replace("^", "").replace("$", "")
    url = re.sub(r"\(\?P<app_label>[^)]*\)", "catalog", url)
    url = re.sub(r"\(\?P<url>\.\*\)", "no-such-page/", url)
    url = re.sub(r"<(?:\w+:)?\w+>", "1", url)
    return "/" + url


def _admin_cells() -> list[Cell]:
    cells = []
    for route in dict.fromkeys(_walk(get_resolver().url_patterns)):
        if not route.startswith("admin/"):
            continue
        if route == "admin/login/":
            cells.append(Cell(route, "GET", "/admin/login/", PUBLIC))
        elif route == "admin/logout/":
            cells.append(Cell(route, "POST", "/admin/logout/", PUBLIC))
        else:
            cells.append(Cell(route, "GET", _admin_url(route), ADMIN))
    return cells


ALL_CELLS = MATRIX + _format_variants(MATRIX) + _admin_cells()


def test_every_url_pattern_has_a_matrix_entry_and_every_entry_still_exists():
    routes = set(_walk(get_resolver().url_patterns))
    covered = {c.route for c in ALL_CELLS}
    assert sorted(routes - covered) == [], "new endpoints without an access-matrix entry"
    assert sorted(covered - routes) == [], "matrix entries for endpoints that no longer exist"


# --- the world ----------------------------------------------------------------------------


def _run(owner, pk, status, profile=None):
    from profiler.models import ProfilingRun

    return ProfilingRun.objects.create(
        pk=pk,
        owner=owner,
        kind="compute",
        model_spec="examples.tiny_model:build",
        input_shape="3,32,32",
        batch_sizes="4,8",
        iters=3,
        status=status,
        profile=profile,
        deadline_at=timezone.now() + timedelta(minutes=30),
    )


def _job(owner, plan, pk):
    from launcher import jobs
    from launcher.models import Job

    job = Job.objects.create(
        pk=pk,
        owner=owner,
        plan=plan,
        plan_rank=1,
        option=OPTION,
        region="us-east-1",
        train_command="train.py",
        hourly_usd=Decimal("1"),
        max_spend_usd=Decimal("10"),
        max_hours=5,
        predicted_iter_s=0.5,
        predicted_iter_p90_s=0.6,
        total_iterations=100,
        launch_token=f"job{pk}",
    )
    token = jobs.issue_token(job)
    jobs.mark_launched(job, instance_ids=[f"i-0{pk}a", f"i-0{pk}b"], node_ips={f"i-0{pk}a": "10.0.0.1"})
    return jobs.mark_running(job, "launched"), token


def build_world(django_user_model, compute_profile):
    from catalog.models import Accelerator, InstanceType
    from planner.app.models import PlanRecord
    from profiler.actions import issue_token

    def perms(user, *names):
        for name in names:
            app, codename = name.split(".")
            user.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label=app))

    team_a, team_b = Group.objects.create(name="team-a"), Group.objects.create(name="team-b")
    alice = django_user_model.objects.create_user(MARK, password=None)
    carol = django_user_model.objects.create_user("alpha_reader", password=None)
    bob = django_user_model.objects.create_user("beta_user", password=None)
    alice.groups.add(team_a)
    carol.groups.add(team_a)
    bob.groups.add(team_b)
    perms(alice, "launcher.add_job", "launcher.change_job")
    perms(bob, "launcher.add_job", "launcher.change_job", "profiler.change_profilingrun")
    acc = Accelerator.objects.create(name="A10G", kind="nvidia-gpu")
    InstanceType.objects.create(
        name="g5.xlarge", family="g5", accelerator=acc, gpu_count=1, vcpus=4, memory_gib=16
    )
    result = {
        "plans": [OPTION],
        "points": [],
        "pareto": [],
        "baselines": [],
        "alternatives": {},
        "model": {
            "spec": "examples.tiny_model:build",
            "precision": "fp32",
            "source": "measured",
            "profile_run": IDS["done"],
        },
    }
    plan_req = {"total_samples": 6400, "objective": "cost", "deadline_hours": 24}
    plan = PlanRecord.objects.create(
        pk=IDS["plan"], owner=alice, name="alpha plan", request=plan_req, status="solved", result=result
    )
    plan_b = PlanRecord.objects.create(
        pk=IDS["plan_b"], owner=bob, request=plan_req, status="solved", result=result
    )
    run_b = _run(bob, IDS["run_b"], "running")
    job, _ = _job(alice, plan, IDS["job"])
    _, job_b_token = _job(bob, plan_b, IDS["job_b"])
    return SimpleNamespace(
        alice=alice,
        carol=carol,
        bob=bob,
        plan=plan,
        job=job,
        run=_run(alice, IDS["run"], "running", compute_profile),
        done=_run(alice, IDS["done"], "succeeded", compute_profile),
        run_b_token=issue_token(run_b),
        job_b_token=job_b_token,
    )


@pytest.fixture
def world(db, django_user_model, compute_profile, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    cache.clear()  # throttles and cached catalog lists start empty
    yield build_world(django_user_model, compute_profile)
    cache.clear()


def client_for(actor: str, w) -> APIClient:
    c = APIClient()
    if actor == "other":
        c.force_login(w.bob)
    elif actor == "readonly":
        c.force_login(w.carol)
    elif actor == "run_token":
        c.credentials(HTTP_AUTHORIZATION=f"Bearer {w.run_b_token}")
    elif actor == "job_token":
        c.credentials(HTTP_AUTHORIZATION=f"Bearer {w.job_b_token}")
    return c


def _fill(value, ids: dict):
    if isinstance(value, str):
        return value.format(**ids) if "{" in value else value
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    return value


def _coerce(body, api: bool):
    """JSON bodies carry ids as numbers, as clients send them."""
    if not api or body is None:
        return body
    out = {}
    for k, v in body.items():
        out[k] = (
            int(v)
            if isinstance(v, str) and v.isdigit() and k in ("plan", "profile_run")
            else (_coerce(v, api) if isinstance(v, dict) else v)
        )
    return out


def request(cell: Cell, actor: str, w, ids: dict | None = None):
    ids = ids or {k: v for k, v in IDS.items()}
    api = cell.url.startswith("/api/")
    c = client_for(actor, w)
    url = _fill(cell.url, ids)
    if cell.method == "GET":
        return c.get(url)
    body = _coerce(_fill(cell.body, ids), api)
    if cell.extra.get("workdir_archive"):
        return c.post(url, {**body, "workdir_archive": _workdir_archive()}, format="multipart")
    if api:
        return c.post(url, body or {}, format="json")
    return c.post(url, body or {})


def _workdir_archive():
    import io
    import tarfile

    from django.core.files.uploadedfile import SimpleUploadedFile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"x=1"))
    return SimpleUploadedFile("train.tar.gz", buf.getvalue())


def _stored_archives() -> int:
    from django.conf import settings

    folder = Path(settings.DATA_DIR) / "workdirs"
    return sum(1 for _ in folder.iterdir()) if folder.is_dir() else 0


def _state():
    from launcher.models import Job, JobReport
    from planner.app.models import PlanRecord
    from profiler.models import ProfilingRun, RunEvent

    return (
        list(Job.objects.order_by("pk").values_list("pk", "status")),
        list(ProfilingRun.objects.order_by("pk").values_list("pk", "status")),
        PlanRecord.objects.count(),
        JobReport.objects.count(),
        RunEvent.objects.count(),
        _stored_archives(),
    )


def _errors(resp, api: bool):
    if api:
        return resp.json()
    return dict(resp.context["errors"]) if resp.context and "errors" in resp.context else resp.status_code


def _normalised(value, ident: int) -> str:
    return re.sub(rf"\b{ident}\b", "ID", str(value))


def _cell_id(cell: Cell, actor: str) -> str:
    with_file = " with workdir_archive" if cell.extra.get("workdir_archive") else ""
    return f"{cell.method} {cell.url}{with_file} as {actor}"


@pytest.mark.parametrize(
    ("cell", "actor"), [pytest.param(c, a, id=_cell_id(c, a)) for c in ALL_CELLS for a in ACTORS]
)
def test_access(cell: Cell, actor: str, world):
    expected = cell.outcomes[actor]
    path = cell.url.partition("?")[0].format(**IDS)
    assert resolve(path).route == re.sub(r"(^|/)\^", r"\1", cell.route), (
        "the matrix URL does not reach its pattern"
    )
    before = _state()
    resp = request(cell, actor, world)
    code, body = resp.status_code, resp.content.decode(errors="replace")
    api = cell.url.startswith("/api/")
    where = f"{cell.method} {cell.url} as {actor}: {code} {body[:300]}"
    if expected == "ok":
        assert 200 <= code < 300, where
    elif expected == "listed":
        assert code == 200, where
        assert MARK in body or any(f"/{IDS[k]}/" in body for k in ("run", "plan", "job")), where
    elif expected == "hidden":
        assert code == 200 and MARK not in body, where
        for key in ("run", "plan", "job"):
            assert f"/{IDS[key]}/" not in body, where
    elif expected == "login":
        assert code == 302 and resp["Location"].startswith("/accounts/login/"), where
    elif expected == "admin_login":
        assert code == 302 and resp["Location"].startswith("/admin/login/"), where
    elif expected == "refused":
        assert code in (401, 403) and MARK not in body, where
    elif expected == "forbidden":
        assert code == 403, where  # a teammate: may see the data, not change it
    elif expected == "missing":
        assert code == 404 and MARK not in body, where
        if api:  # word for word what an id that does not exist gets
            key = next(k for k in ("job", "plan", "run") if f"{{{k}}}" in cell.url)
            gone = request(cell, actor, world, {**IDS, key: MISSING})
            assert gone.status_code == 404
            assert _normalised(body, IDS[key]) == _normalised(gone.content.decode(), MISSING), where
    elif expected in ("no_such_ref", "ref_ok"):
        assert cell.ref is not None, where
        gone = request(cell, actor, world, {**IDS, cell.ref: MISSING})
        assert gone.status_code == 400, f"a missing {cell.ref} id: {gone.status_code} {gone.content[:300]}"
        same = _normalised(_errors(resp, api), IDS[cell.ref]) == _normalised(_errors(gone, api), MISSING)
        if expected == "no_such_ref":
            assert code == 400 and same and MARK not in body, where
        else:
            assert not same, f"{where}: a teammate's {cell.ref} is answered as missing"
    elif expected == "allowed":
        assert code not in (401, 403, 404) and code < 500, where
    elif expected == "public":
        assert code < 400, where
    elif expected == "bad_login":
        assert code == 400, where
    else:  # pragma: no cover
        raise AssertionError(f"unknown outcome {expected}")
    if expected in UNCHANGED:
        assert _state() == before, f"{where}: a refused request changed something"


# --- websockets ---------------------------------------------------------------------------

WS = {
    "ws/profiling-runs/<int:run_id>/": "/ws/profiling-runs/{run}/",
    "ws/jobs/<int:job_id>/": "/ws/jobs/{job}/",
    "ws/plans/<int:plan_id>/": "/ws/plans/{plan}/",
}
WS_OUTCOMES = {"anon": 4401, "other": 4403, "run_token": 4401, "job_token": 4401, "readonly": "snapshot"}


def test_every_websocket_route_has_a_matrix_entry():
    from srifty_web.routing import websocket_urlpatterns

    assert sorted(str(p.pattern) for p in websocket_urlpatterns) == sorted(WS)


def _ws_headers(actor: str, w) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000")]
    if actor in ("other", "readonly"):
        c = Client()
        c.force_login(w.bob if actor == "other" else w.carol)
        headers.append((b"cookie", f"sessionid={c.cookies['sessionid'].value}".encode()))
    elif actor in ("run_token", "job_token"):
        token = w.run_b_token if actor == "run_token" else w.job_b_token
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return headers


async def _ws(path: str, headers):
    from srifty_web.asgi import application

    comm = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await comm.connect(timeout=10)
    first = await comm.receive_json_from(timeout=5) if connected else None
    await comm.disconnect()
    return connected, code, first


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("actor", ACTORS)
@pytest.mark.parametrize("route", sorted(WS))
async def test_websocket_access(route: str, actor: str, django_user_model, compute_profile, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    w = await sync_to_async(build_world)(django_user_model, compute_profile)
    headers = await sync_to_async(_ws_headers)(actor, w)
    connected, code, first = await _ws(WS[route].format(**IDS), headers)
    expected = WS_OUTCOMES[actor]
    if expected == "snapshot":
        assert connected and first["type"] == "snapshot", (connected, code)
    else:
        assert not connected and code == expected, (connected, code, first)
        # another team's object is closed exactly like one that does not exist
        missing = WS[route].format(**{**IDS, "run": MISSING, "job": MISSING, "plan": MISSING})
        assert (await _ws(missing, headers))[:2] == (False, expected)
