"""Issue 33 items 4 and 7: task files and JSON bodies that stand for far more than their bytes.

A task file of nested aliases (10 keys x 7 levels, 790 bytes) took the web process to 5.9 GB in
81 s; a self-referencing anchor gave a 500 (RecursionError). Each probe runs the request once in
a forked child (``tests.support.probe.in_child``) and asserts a clear 400 naming the limit within
seconds and a peak RSS growth under 200 MB; ordinary files with ordinary aliases still pass.
"""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from tests.support.jobs import g5_spot_option, may_launch, solved_plan
from tests.support.probe import in_child

pytestmark = pytest.mark.django_db

MAX_GROWTH_MB = 200
MAX_SECONDS = 10  # a refusal takes milliseconds; a slow shared 2-core host gets room
TIMEOUT_S = 60  # in_child kills the request after this: a finding, not a flake


def alias_bomb(levels: int, keys: int = 10) -> str:
    """A task file whose ``envs`` stand for ``keys ** levels`` values in a few hundred bytes: each
    level is a mapping of ``keys`` keys, all aliases of the level below (the billion-laughs
    shape the issue sent, 790 bytes at 10 x 7)."""
    names = "abcdefghijklmnopqrstuvwxyz"[:keys]
    lines = ["name: bomb", "run: python train.py", "envs:"]
    lines.append("  L0: &L0 {" + ", ".join(f"{k}: lol" for k in names) + "}")
    for i in range(1, levels):
        lines.append(f"  L{i}: &L{i} {{" + ", ".join(f"{k}: *L{i - 1}" for k in names) + "}")
    return "\n".join(lines) + "\n"


RECURSIVE = "name: loop\nrun: python train.py\nenvs: &a {X: 1, Y: *a}\n"
DEEP_LISTS = "name: deep\nrun: python train.py\nenvs: " + "[" * 10_000 + "]" * 10_000 + "\n"
HUGE_INT = "name: digits\nrun: python train.py\nenvs: {SEED: " + "7" * 5000 + "}\n"
BAD_DATE = "name: date\nrun: python train.py\nenvs: {START: 2026-13-45}\n"
ORDINARY = """\
name: shared-envs
workdir: git:https://github.com/example/bert.git@v1.2
run: python train.py --data "$DATA"
envs:
  DATA: &data s3://bucket/imagenet
  DATA_MIRROR: *data
  <<: &common {EPOCHS: 3, LR: 0.1}
file_mounts:
  /data: *data
"""


def launch_body(plan, task: str) -> dict:
    return {"plan": plan.pk, "rank": 1, "task": task, "max_spend_usd": "10", "max_hours": 2}


def post(client: APIClient, url: str, body, fmt: str = "json") -> tuple[int, str]:
    """(status, body text) of one POST: what the child sends back to the test."""
    resp = client.post(url, body, format=fmt)
    return resp.status_code, resp.content.decode(errors="replace")[:2000]


def refused_within_bounds(probe, *needles: str) -> str:
    """The probe's 400 body, after asserting it came within seconds and grew under the bound."""
    assert not probe.timed_out, f"the request still ran after {TIMEOUT_S} s"
    assert not probe.error, probe.error
    code, body = probe.result
    print(f"probe: {code} in {probe.elapsed_s:.2f} s, +{probe.growth_mb:.0f} MB")  # the figures, with -s
    assert code == 400, (code, body)
    for needle in needles:
        assert needle in body, body
    assert probe.elapsed_s < MAX_SECONDS, probe
    assert probe.growth_mb < MAX_GROWTH_MB, probe
    return body


# --- alias bombs ------------------------------------------------------------------------------


@pytest.mark.parametrize("levels", [7, 6], ids=["10x7", "10x6"])
def test_an_alias_bomb_task_file_to_the_preview_is_a_400_naming_the_limit(launcher_api, plan, levels):
    text = alias_bomb(levels)
    assert len(text) <= 800
    probe = in_child(
        post, launcher_api, "/api/v1/jobs/preview/", launch_body(plan, text), timeout_s=TIMEOUT_S
    )
    body = refused_within_bounds(probe, "task", "10000 values", "alias")
    assert json.loads(body)["task"][0]["line"] == 7  # L3's aliases of L2 (2,221 values each) pass 10,000


@pytest.mark.parametrize("levels", [7, 6], ids=["10x7", "10x6"])
def test_an_alias_bomb_task_file_to_the_launch_is_a_400_and_launches_nothing(launcher_api, plan, levels):
    from launcher.models import Job

    body = {**launch_body(plan, alias_bomb(levels)), "confirmation": "x"}
    probe = in_child(post, launcher_api, "/api/v1/jobs/", body, timeout_s=TIMEOUT_S)
    refused_within_bounds(probe, "task", "10000 values")
    assert not Job.objects.exists()


def test_an_alias_bomb_in_the_dialogs_multipart_form_is_a_400(launcher_api, plan):
    # The launch dialog sends multipart (a workdir archive may come with it); the task is a text field.
    body = launch_body(plan, alias_bomb(7))
    probe = in_child(post, launcher_api, "/api/v1/jobs/preview/", body, "multipart", timeout_s=TIMEOUT_S)
    refused_within_bounds(probe, "task", "10000 values")


def test_manage_py_launch_refuses_an_alias_bomb_task_file_naming_the_line(user, plan, tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(7))

    def launch() -> str:
        try:
            call_command("launch", "--plan", str(plan.pk), "--task", str(path), "--user", user.username)
        except CommandError as exc:
            return str(exc)
        return "launched"

    probe = in_child(launch, timeout_s=TIMEOUT_S)
    assert not probe.timed_out and not probe.error, probe
    assert f"{path}:line 7: file: the alias *L2 expands the file past 10000 values" in probe.result
    assert probe.elapsed_s < MAX_SECONDS and probe.growth_mb < MAX_GROWTH_MB, probe


# --- recursion and values Python refuses -------------------------------------------------------


@pytest.mark.parametrize(
    "text, needle",
    [
        (RECURSIVE, "the alias *a is inside the value it names"),
        (DEEP_LISTS, "nested deeper than 32 levels"),
        (HUGE_INT, "not valid YAML: Exceeds the limit"),
        (BAD_DATE, "not valid YAML: month must be in 1..12"),
    ],
    ids=["self-referencing anchor", "10,000 nested lists", "5,000-digit integer", "impossible date"],
)
def test_a_task_file_the_loader_cannot_build_is_a_400_with_its_line_not_a_500(
    launcher_api, plan, text, needle
):
    probe = in_child(
        post, launcher_api, "/api/v1/jobs/preview/", launch_body(plan, text), timeout_s=TIMEOUT_S
    )
    body = refused_within_bounds(probe, needle)
    [issue] = json.loads(body)["task"]
    assert (issue["line"], issue["field"]) == (3, "file")


def test_a_long_unknown_key_over_thousands_of_keys_is_a_400_within_bounds(launcher_api, plan):
    # Every dotted path under a 200 KB key repeated it: 4,900 of them were 950 MB of line table.
    text = "name: long\nrun: python train.py\n? " + "k" * 200_000 + "\n:\n"
    text += "".join(f"  a{i}: 1\n" for i in range(4900))
    probe = in_child(
        post, launcher_api, "/api/v1/jobs/preview/", launch_body(plan, text), timeout_s=TIMEOUT_S
    )
    refused_within_bounds(probe, "unknown key")


def test_an_ordinary_task_file_with_a_few_aliases_is_still_previewed(launcher_api, plan):
    resp = launcher_api.post("/api/v1/jobs/preview/", launch_body(plan, ORDINARY), format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["task"] == ORDINARY and resp.json()["confirmation"]


def test_an_ordinary_task_file_keeps_every_aliased_value():
    from launcher.taskfile import parse_task

    spec = parse_task(ORDINARY)
    assert spec.envs == {
        "DATA": "s3://bucket/imagenet",
        "DATA_MIRROR": "s3://bucket/imagenet",
        "EPOCHS": "3",
        "LR": "0.1",
    }
    assert spec.file_mounts == {"/data": "s3://bucket/imagenet"}


def test_the_bounds_count_the_aliases_expansion_not_the_text():
    from launcher.taskfile import MAX_TASK_VALUES, TaskFileError, parse_task

    assert 10**3 < MAX_TASK_VALUES < 10**4 + 1  # three levels pass the bound, four do not
    with pytest.raises(TaskFileError) as three:
        parse_task(alias_bomb(3))
    assert "must be a single value" in str(three.value) and "alias" not in str(three.value)
    with pytest.raises(TaskFileError, match=r"line 7: file: the alias \*L2 expands the file past"):
        parse_task(alias_bomb(4))
    chain = "name: c\nrun: x\nfile_mounts:\n" + "".join(
        f"  /k{i}: &k{i} [{f'*k{i - 1}' if i else 1}]\n" for i in range(40)
    )
    with pytest.raises(TaskFileError, match=r"line 33: file: the alias \*k28 nests the file deeper than 32"):
        parse_task(chain)


# --- JSON bodies --------------------------------------------------------------------------------


def test_deeply_nested_json_to_the_api_is_a_400(launcher_api, plan):
    body = '{"plan": 1, "rank": 1, "task": ' + "[" * 100_000 + "]" * 100_000 + "}"
    probe = in_child(post_raw, launcher_api, "/api/v1/jobs/preview/", body, timeout_s=TIMEOUT_S)
    refused_within_bounds(probe, "nested deeper than 32 levels")


def test_ten_megabytes_of_empty_lists_to_the_api_is_a_400_before_they_are_built(launcher_api, plan, settings):
    # 3.5 million [] in one body (just under DATA_UPLOAD_MAX_MEMORY_SIZE) are ~250 MB of lists.
    count = (settings.DATA_UPLOAD_MAX_MEMORY_SIZE - 100) // 3
    body = '{"plan": 1, "rank": 1, "task": [' + "[]," * (count - 1) + "[]]}"
    probe = in_child(post_raw, launcher_api, "/api/v1/jobs/preview/", body, timeout_s=TIMEOUT_S)
    refused_within_bounds(probe, "more than 1000000 values")


def test_json_bodies_of_ordinary_size_and_text_that_looks_like_json_still_parse():
    from srifty_web.payloads import count_values, loads_bounded

    doc = {"a": [1, 2.5, "x,[{", {"b": None}], "c": 'q"uote,[', "d": []}
    text = json.dumps(doc)
    assert loads_bounded(text) == doc
    assert count_values(text) >= 8  # a, its 4 items, b, c, d, the root: commas in strings not counted
    assert count_values(json.dumps(["x" * 100] * 10)) == 11


def post_raw(client: APIClient, url: str, body: str) -> tuple[int, str]:
    resp = client.post(url, body, content_type="application/json")
    return resp.status_code, resp.content.decode(errors="replace")[:2000]


# --- websocket frames ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_job_viewer_that_sends_deeply_nested_json_or_bytes_keeps_its_live_view(
    user, settings, live_next
):
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.test import Client

    from launcher import jobs
    from srifty_web.asgi import application

    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}

    def running_job() -> tuple[int, str, bytes]:
        owner = may_launch(user)
        job = jobs.create_job(owner, solved_plan(owner, g5_spot_option()), 1, "train.py", 10, 5, confirm=True)
        token = jobs.issue_token(job)
        jobs.mark_launched(job, instance_ids=["i-0a"], node_ips={"i-0a": "10.0.0.1"})
        jobs.mark_running(job, "launched")
        browser = Client()
        browser.force_login(user)
        return job.pk, token, f"sessionid={browser.cookies['sessionid'].value}".encode()

    def report(job_id: int, token: str) -> int:
        c = APIClient()
        c.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        body = {"seq": 1, "rank": 0, "reports": [{"iteration": 1, "iter_time_s": 0.5}]}
        return c.post(f"/api/v1/jobs/{job_id}/reports/", body, format="json").status_code

    job_id, token, cookie = await sync_to_async(running_job)()
    headers = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie)]
    comm = WebsocketCommunicator(application, f"/ws/jobs/{job_id}/", headers=headers)
    assert (await comm.connect(timeout=10))[0]
    assert (await live_next(comm))["type"] == "snapshot"
    await comm.send_to(text_data="[" * 100_000 + "]" * 100_000)  # channels would json.loads it
    await comm.send_to(bytes_data=b"\x00\x01")
    assert await sync_to_async(report)(job_id, token) == 201
    assert (await live_next(comm))["type"] == "report"  # the consumer did not die on the frames
    await comm.disconnect()
