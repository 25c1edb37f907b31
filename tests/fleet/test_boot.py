"""The generated cloud-init scripts: checked as text, by ``bash -n``, and by running them in real
bash against fake ``shutdown``/``curl``/``python3``/``sleep`` commands (paths moved to tmp)."""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
from email import message_from_string
from pathlib import Path

import pytest

from fleet.boot import (
    MAX_USER_DATA_BYTES,
    check_size,
    comm_cluster_user_data,
    profiling_user_data,
    task_user_data,
    with_time_limit,
)

SERVER = "https://srifty.example.com"
EVIL = "tok'; rm -rf / #"


def profiling(**kw) -> str:
    args = {
        "server_url": SERVER,
        "run_id": 42,
        "token": "tok-1",
        "agent_args": ["--kind", "compute"],
        "max_minutes": 30,
    }
    return profiling_user_data(**{**args, **kw})


def task(**kw) -> str:
    """A task job's node script (``launcher.options.user_data`` builds it for every job)."""
    args = {
        "server_url": SERVER,
        "job_id": 7,
        "token": "tok-7",
        "setup": 'echo "setup" >> "$FAKE_LOG/steps"',
        "run": 'echo "run $NODE_RANK" >> "$FAKE_LOG/steps"',
        "max_minutes": 120,
        "agent_url": f"{SERVER}/api/v1/jobs/7/agent.tar.gz",
    }
    return task_user_data(**{**args, **kw})


def comm_cluster(**kw) -> str:
    args = {
        "server_url": SERVER,
        "run_id": 9,
        "token": "tok-9",
        "nnodes": 2,
        "gpus_per_node": 1,
        "agent_args": ["comm"],
        "max_minutes": 30,
    }
    return comm_cluster_user_data(**{**args, **kw})


def bash_syntax(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, timeout=10)


# --- As text ----------------------------------------------------------------------------------


@pytest.mark.parametrize("build", [profiling, task, comm_cluster], ids=["profiling", "task", "comm_cluster"])
def test_the_time_limit_guard_is_the_first_command_after_the_shebang(build):
    lines = build(max_minutes=17).splitlines()
    assert lines[0] == "#!/bin/bash"
    assert lines[1].startswith("shutdown -h +17 ")
    assert lines[2] == "set -euo pipefail"


@pytest.mark.parametrize("build", [profiling, task, comm_cluster], ids=["profiling", "task", "comm_cluster"])
def test_an_exit_trap_always_powers_the_vm_off(build):
    script = build()
    trap = next(line for line in script.splitlines() if line.startswith("trap ") and line.endswith(" EXIT"))
    assert "shutdown -h now" in trap
    assert script.index(trap) < script.index("curl ")  # armed before anything can fail


@pytest.mark.parametrize("build", [profiling, task, comm_cluster], ids=["profiling", "task", "comm_cluster"])
def test_generated_scripts_pass_bash_syntax_check(build):
    for variant in (build(), build(token=EVIL), build(max_minutes=1)):
        result = bash_syntax(variant)
        assert result.returncode == 0, result.stderr


def test_profiling_script_fetches_the_agent_and_reports_to_the_run():
    script = profiling(repo_tarball_url=f"{SERVER}/media/repo.tgz")
    assert "SRIFTY_SERVER=https://srifty.example.com" in script
    assert "SRIFTY_EVENTS_URL=https://srifty.example.com/api/v1/profiling-runs/42/events/" in script
    assert '"$SRIFTY_SERVER/api/v1/agent.tar.gz" -o' in script
    assert '-H "Authorization: Bearer $SRIFTY_TOKEN"' in script
    assert (
        '-m profiler.agent "${AGENT_ARGS[@]}" --report-to "$SRIFTY_EVENTS_URL" --token="$SRIFTY_TOKEN"'
        in script
    )
    assert "pip install -q torch torchvision requests" in script
    assert "/opt/pytorch/bin/python3" in script  # the DLAMI's torch is tried first


def test_interpolated_values_are_shell_quoted():
    script = profiling(token=EVIL, agent_args=["--model", "x; reboot", "$(id)"])
    assert f"SRIFTY_TOKEN={shlex.quote(EVIL)}" in script
    assert "AGENT_ARGS=(--model 'x; reboot' '$(id)')" in script
    assert EVIL not in script.replace(shlex.quote(EVIL), "")  # never unquoted anywhere


def test_no_aws_credentials_in_user_data(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-key")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    for script in (profiling(), task(), comm_cluster()):
        assert "very-secret-key" not in script and "AKIA" not in script
        assert "AWS_" not in script


def test_aws_credentials_are_refused_as_a_clusters_env():
    with pytest.raises(ValueError, match="AWS_SECRET_ACCESS_KEY"):
        comm_cluster(env={"AWS_SECRET_ACCESS_KEY": "x"})


def test_bad_env_names_and_values_are_refused_or_quoted():
    with pytest.raises(ValueError, match="not a valid environment variable"):
        comm_cluster(env={"A;B": "1"})
    assert "export NOTE='a b; c'" in comm_cluster(env={"NOTE": "a b; c"})


def test_a_task_node_polls_the_server_rendezvous_with_imdsv2():
    script = task()
    assert "/api/v1/jobs/$SRIFTY_JOB_ID/rendezvous/?instance_id=$INSTANCE_ID" in script
    assert "X-aws-ec2-metadata-token-ttl-seconds" in script  # IMDSv2 (HttpTokens=required)
    for name in ("SRIFTY_SERVER", "SRIFTY_JOB_ID", "SRIFTY_TOKEN"):
        assert f"export {name}=" in script


@pytest.mark.parametrize(
    "kw",
    [
        {"run": " "},
        {"max_minutes": 0},
        {"max_minutes": 2.5},
        {"server_url": "ftp://x"},
        {"token": "a\x00b"},
    ],
)
def test_invalid_task_arguments_are_refused(kw):
    with pytest.raises(ValueError):
        task(**kw)


def test_with_time_limit_inserts_the_guard_into_a_shell_script_once():
    script = with_time_limit("#!/bin/sh\necho hi\n", 9)
    assert script == "#!/bin/sh\nshutdown -h +9\necho hi\n"
    assert with_time_limit(script, 9) == script
    assert with_time_limit("", 9) == "#!/bin/bash\nshutdown -h +9\n"
    assert with_time_limit(profiling(max_minutes=30), 30) == profiling(max_minutes=30)


@pytest.mark.parametrize(
    ("user_data", "part_type"),
    [
        ("#cloud-config\npackages: [htop]\n", "text/cloud-config"),
        ("#!/usr/bin/env python3\nprint(1)\n", "text/x-shellscript"),
    ],
)
def test_with_time_limit_wraps_other_user_data_in_multipart(user_data, part_type):
    message = message_from_string(with_time_limit(user_data, 5))
    guard, original = message.get_payload()
    assert guard.get_content_type() == "text/x-shellscript"
    assert guard.get_payload() == "#!/bin/bash\nshutdown -h +5\n"
    assert original.get_content_type() == part_type
    assert original.get_payload() == user_data


def test_user_data_over_16_kib_is_refused():
    with pytest.raises(ValueError, match="16384"):
        check_size("x" * (MAX_USER_DATA_BYTES + 1))
    with pytest.raises(ValueError):
        profiling(agent_args=["x" * MAX_USER_DATA_BYTES])


# --- Running them in real bash ------------------------------------------------------------------

FAKE_CURL = """#!{python}
import json, os, pathlib, shutil, sys
args = sys.argv[1:]
log = pathlib.Path(os.environ["FAKE_LOG"])
with open(log / "curl.log", "a") as f:
    f.write(json.dumps(args) + "\\n")
url = next(a for a in args if a.startswith("http"))
out = args[args.index("-o") + 1] if "-o" in args else None
if url.endswith("/latest/api/token"):
    print("imds-token", end="")
elif url.endswith("/meta-data/instance-id"):
    print("i-0abc", end="")
elif url.endswith("/agent.tar.gz"):
    shutil.copy(os.environ["FAKE_AGENT_TGZ"], out)
elif "/repo.tgz" in url or "/workdir.tar.gz" in url:
    shutil.copy(os.environ["FAKE_REPO_TGZ"], out)
elif "/rendezvous/" in url:
    answers = json.loads(os.environ["FAKE_RDZV"])
    counter = log / "rdzv.n"
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    code, body = answers[min(n, len(answers) - 1)]
    pathlib.Path(out).write_text(body)
    print(code, end="")
else:
    sys.exit(22)
"""

FAKE_PYTHON = """#!/bin/bash
if [ "$1" = "-c" ] && [ "$2" = "import torch" ]; then exit 0; fi
exec {python} "$@"
"""

FAKE_AGENT = """import json, os, sys
state = {"argv": sys.argv[1:], "cwd": os.getcwd(), "files": sorted(os.listdir("."))}
open(os.environ["FAKE_LOG"] + "/agent.json", "w").write(json.dumps(state))
sys.exit(int(os.environ.get("FAKE_AGENT_RC", "0")))
"""


class Sandbox:
    def __init__(self, tmp: Path):
        self.tmp, self.log, self.bin, self.root = tmp, tmp / "log", tmp / "bin", tmp / "root"
        for d in (self.log, self.bin, self.root / "var" / "log"):
            d.mkdir(parents=True)
        fakes = {
            "curl": FAKE_CURL.format(python=sys.executable),
            "python3": FAKE_PYTHON.format(python=sys.executable),
            "shutdown": '#!/bin/bash\necho "$*" >> "$FAKE_LOG/shutdown.log"\n',
            "sleep": "#!/bin/bash\nexit 0\n",
        }
        for name, body in fakes.items():
            (self.bin / name).write_text(body)
            (self.bin / name).chmod(0o755)
        self.agent_tgz, self.repo_tgz = tmp / "agent.tgz", tmp / "repo.tgz"
        for path, name, text in [
            (self.agent_tgz, "profiler/agent/__main__.py", FAKE_AGENT),
            (self.repo_tgz, "model.py", "MODEL = 1\n"),
        ]:
            with tarfile.open(path, "w:gz") as tar:
                info = tarfile.TarInfo(name)
                info.size = len(text.encode())
                tar.addfile(info, io.BytesIO(text.encode()))

    def run(self, script: str, **env) -> subprocess.CompletedProcess:
        script = script.replace("/opt/srifty", f"{self.root}/opt/srifty").replace(
            "/var/log/", f"{self.root}/var/log/"
        )
        path = self.tmp / "user-data.sh"
        path.write_text(script)
        base = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(self.tmp),
            "FAKE_LOG": str(self.log),
            "FAKE_AGENT_TGZ": str(self.agent_tgz),
            "FAKE_REPO_TGZ": str(self.repo_tgz),
        }
        return subprocess.run(
            ["bash", str(path)], env={**base, **env}, capture_output=True, text=True, timeout=60
        )

    def shutdowns(self) -> list[str]:
        file = self.log / "shutdown.log"
        return file.read_text().splitlines() if file.exists() else []

    def json(self, name: str) -> dict | None:
        file = self.log / name
        return json.loads(file.read_text()) if file.exists() else None

    def curls(self) -> list[list[str]]:
        file = self.log / "curl.log"
        return [json.loads(line) for line in file.read_text().splitlines()] if file.exists() else []


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    if os.name != "posix":
        pytest.skip("needs bash")
    return Sandbox(tmp_path)


def test_profiling_script_runs_the_agent_with_its_arguments_then_powers_off(sandbox):
    canary = sandbox.tmp / "pwned"
    token = f"{EVIL} $(touch {canary})"
    result = sandbox.run(profiling(token=token, agent_args=["--kind", "compute", "a b"]))
    assert result.returncode == 0, result.stdout + result.stderr
    agent = sandbox.json("agent.json")
    assert agent["argv"] == [
        "--kind",
        "compute",
        "a b",
        "--report-to",
        f"{SERVER}/api/v1/profiling-runs/42/events/",
        f"--token={token}",
    ]
    assert agent["cwd"] == f"{sandbox.root}/opt/srifty/work"
    assert not canary.exists()  # the token stayed a string
    assert sandbox.shutdowns() == ["-h +30", "-h now"]
    (fetch,) = [c for c in sandbox.curls() if f"{SERVER}/api/v1/agent.tar.gz" in c]
    assert fetch[fetch.index("-H") + 1] == f"Authorization: Bearer {token}"
    assert "srifty: profiling run 42" in (sandbox.root / "var/log/srifty-profile.log").read_text()


@pytest.mark.parametrize(
    ("url", "authorized"),
    [(f"{SERVER}/media/repo.tgz", True), ("https://b.s3.amazonaws.com/repo.tgz?X-Amz-Signature=abc", False)],
)
def test_the_repo_tarball_is_unpacked_for_the_agent_and_only_srifty_gets_the_token(sandbox, url, authorized):
    result = sandbox.run(profiling(repo_tarball_url=url))
    assert result.returncode == 0, result.stdout + result.stderr
    assert sandbox.json("agent.json")["files"] == ["model.py"]
    (fetch,) = [c for c in sandbox.curls() if url in c]
    assert ("Authorization: Bearer tok-1" in fetch) is authorized


def test_profiling_script_powers_off_when_the_agent_fails(sandbox):
    result = sandbox.run(profiling(), FAKE_AGENT_RC="3")
    assert result.returncode == 3
    assert sandbox.shutdowns() == ["-h +30", "-h now"]


def test_a_task_node_gives_up_and_powers_off_when_the_server_refuses(sandbox):
    result = sandbox.run(task(agent_url=None), FAKE_RDZV=json.dumps([[410, ""]]))
    assert result.returncode == 1
    assert "rendezvous refused (HTTP 410)" in result.stdout
    assert not (sandbox.log / "steps").exists()
    assert sandbox.shutdowns() == ["-h +120", "-h now"]


def test_a_task_node_powers_off_when_its_run_fails(sandbox):
    answers = [[200, json.dumps({"env": {"MASTER_ADDR": "10.0.1.5", "NODE_RANK": "0"}})]]
    result = sandbox.run(task(agent_url=None, run="exit 7"), FAKE_RDZV=json.dumps(answers))
    assert result.returncode == 7
    assert (sandbox.log / "steps").read_text().splitlines() == ["setup"]
    assert sandbox.shutdowns() == ["-h +120", "-h now"]


def test_a_cluster_node_ignores_an_injected_master_address(sandbox):
    """The master-discovery block (``_RENDEZVOUS``) takes only a host-like address."""
    answers = [
        [200, json.dumps({"master_addr": "$(reboot)", "node_rank": 0})],
        [200, json.dumps({"master_addr": "10.0.0.9", "node_rank": 0})],
    ]
    result = sandbox.run(comm_cluster(), FAKE_RDZV=json.dumps(answers))
    assert result.returncode == 0, result.stdout + result.stderr
    argv = sandbox.json("agent.json")["argv"]
    assert argv[argv.index("--master-addr") + 1] == "10.0.0.9"
    assert argv[argv.index("--node-rank") + 1] == "0"
    assert sandbox.shutdowns() == ["-h +30", "-h now"]


def test_a_presigned_workdir_archive_is_fetched_without_the_job_token(sandbox):
    """The workdir and the agent package share one fetch: only Srifty's own URLs get the token."""
    url = "https://b.s3.amazonaws.com/workdir.tar.gz?X-Amz-Signature=abc"
    answers = [[200, json.dumps({"env": {"MASTER_ADDR": "10.0.1.23", "NODE_RANK": "0", "NNODES": "1"}})]]
    result = sandbox.run(
        task(run='cat model.py >> "$FAKE_LOG/steps"', workdir_url=url), FAKE_RDZV=json.dumps(answers)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (sandbox.log / "steps").read_text().splitlines() == ["setup", "MODEL = 1"]
    (fetch,) = [c for c in sandbox.curls() if url in c]
    assert not any("Authorization" in a for a in fetch)
    (agent,) = [c for c in sandbox.curls() if any(a.endswith("/agent.tar.gz") for a in c)]
    assert "Authorization: Bearer tok-7" in agent


def test_a_task_node_fetches_its_workdir_gets_its_environment_runs_setup_then_run(sandbox):
    """``task_user_data`` (every task job's node): the workdir archive comes from Srifty with the
    job token, the node's environment from the rendezvous answer (exported as given, values
    never run), then setup and run with bash in the workdir; the VM powers off after."""
    env = {
        "MASTER_ADDR": "10.0.1.23",
        "NODE_RANK": "1",
        "NNODES": "2",
        "ODD": "$(touch pwned)",
        "bad name": "x",
    }
    answers = [[202, ""], [200, json.dumps({"env": {"MASTER_ADDR": ""}})], [200, json.dumps({"env": env})]]
    script = task_user_data(
        SERVER,
        7,
        "tok-7",
        setup='echo "setup" >> "$FAKE_LOG/steps"',
        run='echo "run $NODE_RANK/$NNODES $MASTER_ADDR $ODD $(cat model.py)" >> "$FAKE_LOG/steps"',
        max_minutes=30,
        workdir_url=f"{SERVER}/api/v1/jobs/7/workdir.tar.gz",
    )
    result = sandbox.run(script, FAKE_RDZV=json.dumps(answers))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (sandbox.log / "steps").read_text().splitlines() == [
        "setup",
        "run 1/2 10.0.1.23 $(touch pwned) MODEL = 1",
    ]
    assert not list(sandbox.root.rglob("pwned")) and not (sandbox.tmp / "pwned").exists()
    fetch = next(c for c in sandbox.curls() if any(a.endswith("/workdir.tar.gz") for a in c))
    assert "Authorization: Bearer tok-7" in fetch
    assert len([c for c in sandbox.curls() if any("/rendezvous/" in a for a in c)]) == 3
    assert sandbox.shutdowns() == ["-h +30", "-h now"]


FAKE_SPOTWATCH = """import json, os, sys
print("fake spotwatch up", flush=True)
state = {"argv": sys.argv, "cwd": os.getcwd(), "pythonpath": os.environ.get("PYTHONPATH", ""),
         "env": {k: v for k, v in os.environ.items() if k in ("SRIFTY_SERVER", "SRIFTY_JOB_ID", "SRIFTY_TOKEN")}}
open(os.environ["FAKE_LOG"] + "/spotwatch.json", "w").write(json.dumps(state))
"""


def test_a_task_script_passes_bash_syntax_check_and_starts_the_spot_watcher_before_setup():
    for script in (task(), task(token=EVIL, setup="", agent_url=None)):
        result = bash_syntax(script)
        assert result.returncode == 0, result.stderr
    script = task()
    start = script.index("-m profiler.agent.spotwatch")
    assert script.index('srifty_fetch "$SRIFTY_REPO_URL"') < start < script.index('echo "srifty: setup"')
    assert ">> /opt/srifty/spotwatch.log 2>&1 &)" in script


def test_a_task_node_starts_the_spot_watcher_from_the_agent_package_then_still_runs(sandbox):
    """The watcher is launched in the background from the unpacked agent package, with the job's
    server, id and token and its output in /opt/srifty/spotwatch.log; setup and run go on."""
    import time

    agent_tgz = sandbox.tmp / "agent-with-spotwatch.tgz"
    with tarfile.open(agent_tgz, "w:gz") as tar:
        for name, text in [
            ("profiler/__init__.py", ""),
            ("profiler/agent/__init__.py", ""),
            ("profiler/agent/spotwatch.py", FAKE_SPOTWATCH),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    answers = [[200, json.dumps({"env": {"MASTER_ADDR": "10.0.1.23", "NODE_RANK": "1"}})]]
    result = sandbox.run(task(), FAKE_RDZV=json.dumps(answers), FAKE_AGENT_TGZ=str(agent_tgz))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (sandbox.log / "steps").read_text().splitlines() == ["setup", "run 1"]
    assert "srifty: spot watcher started" in result.stdout
    deadline = time.monotonic() + 20  # it runs in the background: give it time to start
    while sandbox.json("spotwatch.json") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    watcher = sandbox.json("spotwatch.json")
    work = f"{sandbox.root}/opt/srifty/work"
    assert watcher is not None, "the spot watcher never started"
    assert watcher["argv"][0] == f"{work}/profiler/agent/spotwatch.py"
    assert watcher["cwd"] == work and watcher["pythonpath"] == work
    assert watcher["env"] == {"SRIFTY_SERVER": SERVER, "SRIFTY_JOB_ID": "7", "SRIFTY_TOKEN": "tok-7"}
    log = sandbox.root / "opt/srifty/spotwatch.log"
    while (
        "fake spotwatch up" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert "fake spotwatch up" in log.read_text()
    (fetch,) = [c for c in sandbox.curls() if f"{SERVER}/api/v1/jobs/7/agent.tar.gz" in c]
    assert "Authorization: Bearer tok-7" in fetch


def test_a_task_node_without_the_agent_package_runs_without_a_watcher(sandbox):
    answers = [[200, json.dumps({"env": {"MASTER_ADDR": "10.0.1.23", "NODE_RANK": "0"}})]]
    result = sandbox.run(task(agent_url=None), FAKE_RDZV=json.dumps(answers))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (sandbox.log / "steps").read_text().splitlines() == ["setup", "run 0"]
    assert "spot watcher" not in result.stdout
    assert not (sandbox.root / "opt/srifty/spotwatch.log").exists()
