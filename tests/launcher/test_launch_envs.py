"""Values given at launch for a task file's envs and secrets (issue 37 item 1), as ``sky launch
--env`` gives them: the API's ``env`` on preview and launch, ``manage.py launch --env``. A value
the file leaves to the launch (``null``) is required, a name the file does not declare is refused,
the values reach the nodes' environment (the rendezvous) and nothing shows a secret back: not the
preview, not the job's API, not the node script (user-data) nor the command's output."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from launcher import envvalues, jobs, launch, taskfile
from launcher.models import Job
from tests.launcher.test_task_launch import fake, option, owner, plan_of, user_data  # noqa: F401

pytestmark = pytest.mark.django_db

TOKEN = "hf_0123456789abcdefSECRET"  # a secret given at launch
WANDB = "wandb-key-9876543210"
TASK = """\
envs:
  HF_TOKEN: null
  EPOCHS: 3
  MODEL:
secrets: {WANDB_API_KEY: null}
run: torchrun train.py --epochs $EPOCHS
"""
GIVEN = {"HF_TOKEN": TOKEN, "WANDB_API_KEY": WANDB, "MODEL": "llama-3 8b"}


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def launch_body(owner, env: dict | None = None, task: str = TASK) -> dict:  # noqa: F811
    plan = plan_of(owner, option())
    body = {"plan": plan.pk, "rank": 1, "task": task, "max_spend_usd": "100", "max_hours": 2}
    return body if env is None else {**body, "env": env}


def launched(owner, env: dict = GIVEN) -> tuple[APIClient, dict, dict]:  # noqa: F811
    """(client, preview answer, job answer) of a launch through the API with ``env``."""
    client = client_for(owner)
    body = launch_body(owner, env)
    preview = client.post("/api/v1/jobs/preview/", body, format="json")
    assert preview.status_code == 200, preview.content
    made = client.post(
        "/api/v1/jobs/", {**body, "confirmation": preview.json()["confirmation"]}, format="json"
    )
    assert made.status_code == 201, made.content
    return client, preview.json(), made.json()


# --- the API ------------------------------------------------------------------------------


def test_the_api_launches_with_the_values_and_the_job_keeps_them_in_its_task(fake, owner):  # noqa: F811
    _, shown, made = launched(owner)
    assert shown["env"] == ["HF_TOKEN", "MODEL", "WANDB_API_KEY"]
    spec = taskfile.parse_task(Job.objects.get(pk=made["id"]).task)
    assert spec.required_envs == ()
    assert (spec.envs["HF_TOKEN"], spec.envs["MODEL"], spec.envs["EPOCHS"]) == (TOKEN, "llama-3 8b", "3")
    assert spec.secret_values == {"WANDB_API_KEY": WANDB}


def test_no_answer_of_the_api_shows_a_secret_given_at_launch(fake, owner):  # noqa: F811
    client, shown, made = launched(owner)
    detail = client.get(f"/api/v1/jobs/{made['id']}/").json()
    listed = client.get("/api/v1/jobs/").json()
    for answer in (shown, made, detail, listed):
        text = json.dumps(answer)
        assert TOKEN not in text and WANDB not in text
    # The task is shown with the values redacted; a plain env's value is no secret.
    assert "HF_TOKEN: '<redacted>'" in detail["task"] and "MODEL: 'llama-3 8b'" in detail["task"]
    assert "WANDB_API_KEY: '<redacted>'" in shown["task"]


def test_a_launch_without_a_value_the_file_leaves_to_the_launch_names_it_and_says_whether_secret(
    fake,  # noqa: F811
    owner,  # noqa: F811
):
    client = client_for(owner)
    resp = client.post("/api/v1/jobs/preview/", launch_body(owner, {"MODEL": "m"}), format="json")
    assert resp.status_code == 400
    problems = resp.json()["task"]
    # secret: the value is hidden where the file is shown (a secret, or a credential-like env name)
    assert [(p["env"], p["secret"], p["field"]) for p in problems] == [
        ("HF_TOKEN", True, "envs.HF_TOKEN"),
        ("WANDB_API_KEY", True, "secrets.WANDB_API_KEY"),
    ]
    assert all("must be given at launch" in p["message"] for p in problems)
    resp = client.post("/api/v1/jobs/preview/", launch_body(owner, {"HF_TOKEN": TOKEN}), format="json")
    assert [(p["env"], p["secret"]) for p in resp.json()["task"]] == [
        ("MODEL", False),
        ("WANDB_API_KEY", True),
    ]
    assert TOKEN not in resp.content.decode()


def test_a_value_for_a_name_the_file_does_not_declare_is_a_400_naming_it(fake, owner):  # noqa: F811
    resp = client_for(owner).post(
        "/api/v1/jobs/preview/", launch_body(owner, {**GIVEN, "AWS_SECRET": "x" * 8}), format="json"
    )
    assert resp.status_code == 400
    [problem] = resp.json()["env"]
    assert problem.startswith("AWS_SECRET: the task file declares no such env or secret")
    assert "EPOCHS, HF_TOKEN, MODEL, WANDB_API_KEY" in problem


@pytest.mark.parametrize(
    "value, says",
    [
        (12, "must be a string"),
        (True, "must be a string"),
        ("x" * (envvalues.MAX_ENV_VALUE_CHARS + 1), f"at most {envvalues.MAX_ENV_VALUE_CHARS} characters"),
        ("two\nlines", "one line"),
        ("abc", "at least 4 characters"),  # a secret this short would be shown by redacted()
        ('it\'s "both"', "not both"),
    ],
)
def test_a_value_that_is_not_one_line_of_bounded_text_is_a_400_naming_it(fake, owner, value, says):  # noqa: F811
    resp = client_for(owner).post(
        "/api/v1/jobs/preview/", launch_body(owner, {**GIVEN, "HF_TOKEN": value}), format="json"
    )
    assert resp.status_code == 400
    [problem] = resp.json()["env"]
    assert problem.startswith("HF_TOKEN: ") and says in problem


def test_values_without_a_task_file_are_refused(fake, owner):  # noqa: F811
    body = {**launch_body(owner, {"HF_TOKEN": TOKEN}, task=""), "train_command": "train.py"}
    resp = client_for(owner).post("/api/v1/jobs/preview/", body, format="json")
    assert resp.status_code == 400 and "there is no task file" in resp.json()["env"][0]


def test_the_confirmation_binds_the_values(fake, owner):  # noqa: F811
    client = client_for(owner)
    body = launch_body(owner, GIVEN)
    preview = client.post("/api/v1/jobs/preview/", body, format="json").json()
    other = {**body, "env": {**GIVEN, "HF_TOKEN": "hf_another_token"}}
    made = client.post("/api/v1/jobs/", {**other, "confirmation": preview["confirmation"]}, format="json")
    assert made.status_code == 400 and "confirmation" in made.json()
    assert not Job.objects.exists()


def test_a_multipart_launch_takes_the_values_as_env_dot_name_fields(fake, owner):  # noqa: F811
    client = client_for(owner)
    body = launch_body(owner)
    fields = {**body, **{f"env.{k}": v for k, v in GIVEN.items()}}
    preview = client.post("/api/v1/jobs/preview/", fields, format="multipart")
    assert preview.status_code == 200, preview.content
    assert preview.json()["env"] == sorted(GIVEN)


def test_the_nodes_get_the_values_from_the_rendezvous_and_the_node_script_holds_none(fake, owner):  # noqa: F811
    _, _, made = launched(owner)
    job = Job.objects.get(pk=made["id"])
    launch.launch_job(job)
    job.refresh_from_db()
    node = APIClient()
    node.credentials(HTTP_AUTHORIZATION=f"Bearer {jobs.derived_token(job)}")
    answer = node.get(f"/api/v1/jobs/{job.pk}/rendezvous/", {"instance_id": job.instance_ids[0]})
    assert answer.status_code == 200, answer.content
    env = answer.json()["env"]
    assert (env["HF_TOKEN"], env["WANDB_API_KEY"], env["MODEL"], env["EPOCHS"]) == (
        TOKEN,
        WANDB,
        "llama-3 8b",
        "3",
    )
    script = user_data(fake, job.instance_ids[0])
    assert TOKEN not in script and WANDB not in script


# --- writing the values into the file ---------------------------------------------------


def test_each_value_is_written_on_its_own_line_in_place_of_what_the_file_says():
    text = "name: t\nenvs:\n  A: null\n  B: ~\n  C:\n  D: keep  # note\nsecrets: {S: null}\nrun: x\n"
    out = envvalues.with_values(text, {"A": "a b", "B": "it's", "C": "", "D": "new", "S": "s3cr3t"})
    assert out == (
        "name: t\nenvs:\n  A: 'a b'\n  B: \"it's\"\n  C: ''\n  D: 'new'  # note\n"
        "secrets: {S: 's3cr3t'}\nrun: x\n"
    )


def test_a_secret_stands_verbatim_in_the_file_so_the_shown_file_hides_it():
    for value in ("p@ss 'word'", 'p@ss "word"', "tab\\n not a break"):
        out = envvalues.with_values("secrets: {S: null}\nrun: x\n", {"S": value})
        assert value in out and value not in taskfile.redacted(out)


def test_a_value_written_as_a_block_in_the_file_is_refused_naming_its_line():
    text = "envs:\n  A: |\n    one\n    two\nrun: x\n"
    with pytest.raises(
        envvalues.EnvValueError, match="A: written over several lines in the file \\(line 2\\)"
    ):
        envvalues.with_values(text, {"A": "v"})


def test_a_name_written_without_a_colon_of_its_own_is_refused_not_guessed():
    with pytest.raises(envvalues.EnvValueError, match="A: written without a value \\(line 1\\)"):
        envvalues.with_values("envs: {A, B: 1}\nrun: x\n", {"A": "v"})


def test_a_value_with_a_lone_surrogate_or_a_control_character_is_refused():
    for value in ("\ud800x", "nul\x00", "bell\x07"):
        with pytest.raises(envvalues.EnvValueError, match="one line of text"):
            envvalues.check_values({"A": value})


def test_a_file_with_errors_is_left_to_the_launch_to_report():
    with pytest.raises(taskfile.TaskFileError):
        envvalues.with_values("envs: {A: null}\nnum_nodes: 0\nrun: x\n", {"A": "v"})


def test_a_value_given_at_launch_replaces_a_redacted_one_of_a_file_as_shown():
    shown = taskfile.redacted("envs:\n  HF_TOKEN: hf_abcdefgh\nrun: python train.py\n")
    given = envvalues.with_values(shown, {"HF_TOKEN": "hf_given_at_launch"})
    assert jobs.clean_task(given).envs["HF_TOKEN"] == "hf_given_at_launch"


# --- manage.py launch --env ---------------------------------------------------------------


def command_args(owner, tmp_path, *env: str) -> list[str]:  # noqa: F811
    path = tmp_path / "fine-tune.yaml"
    path.write_text(TASK)
    plan = plan_of(owner, option())
    args = ["--plan", str(plan.pk), "--task", str(path), "--yes", "--no-prechecks", "--user", owner.username]
    return args + [w for e in env for w in ("--env", e)]


def test_manage_py_launch_takes_env_name_value_and_never_prints_a_value(fake, owner, tmp_path, capsys):  # noqa: F811
    words = [f"HF_TOKEN={TOKEN}", f"WANDB_API_KEY={WANDB}", "MODEL=llama=3", "EPOCHS=5"]
    call_command("launch", *command_args(owner, tmp_path, *words))
    out = capsys.readouterr().out
    assert "env given at launch: EPOCHS, HF_TOKEN, MODEL, WANDB_API_KEY" in out
    assert TOKEN not in out and WANDB not in out
    spec = taskfile.parse_task(Job.objects.get().task)
    assert (spec.envs["HF_TOKEN"], spec.envs["MODEL"], spec.envs["EPOCHS"]) == (TOKEN, "llama=3", "5")
    assert spec.secret_values == {"WANDB_API_KEY": WANDB}


def test_manage_py_launch_env_name_alone_takes_this_shells_value(fake, owner, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    call_command("launch", *command_args(owner, tmp_path, "HF_TOKEN", f"WANDB_API_KEY={WANDB}", "MODEL=m"))
    assert taskfile.parse_task(Job.objects.get().task).envs["HF_TOKEN"] == TOKEN


def test_manage_py_launch_names_what_is_missing_or_undeclared_and_launches_nothing(fake, owner, tmp_path):  # noqa: F811
    with pytest.raises(CommandError, match="MODEL, WANDB_API_KEY must be given at launch: --env NAME=VALUE"):
        call_command("launch", *command_args(owner, tmp_path, f"HF_TOKEN={TOKEN}"))
    with pytest.raises(CommandError, match="--env: NOPE: the task file declares no such env or secret"):
        call_command(
            "launch", *command_args(owner, tmp_path, *[f"{k}={v}" for k, v in GIVEN.items()], "NOPE=1")
        )
    with pytest.raises(CommandError, match="--env UNSET_HERE: not set in this shell's environment"):
        call_command("launch", *command_args(owner, tmp_path, "UNSET_HERE"))
    assert not Job.objects.exists()
