"""cloud-init user-data (bash) for the VMs Srifty launches: a profiling node
(``profiling_user_data``), a comm-profiling cluster's node (``comm_cluster_user_data``) and a
training job's node (``task_user_data``). Pure functions: no AWS, no ORM.

Every script has the same safety frame:

* The first line after the shebang schedules ``shutdown -h +N``: the VM powers off after the
  run's hard time limit even if the Srifty server is gone. Instances are launched with
  ``InstanceInitiatedShutdownBehavior=terminate`` (see ``cloud.ec2``), so powering off
  *terminates* them and billing stops.
* ``set -euo pipefail`` and ``trap ... EXIT`` running ``shutdown -h now``: the VM goes away as
  soon as the work ends, whether it succeeded or failed (a failing command ends the script).
* Every interpolated value is assigned once, near the top, through ``shlex.quote``; the body only
  uses the shell variables, always double-quoted. A token like ``'; rm -rf /`` stays a string.
* No AWS credentials, ever: the VM authenticates to Srifty with the run/job token only (sent as
  ``Authorization: Bearer``, like the agent's posters, ``profiler.agent.posting``). Whatever the VM itself needs
  from AWS comes from its instance profile. Anyone who can read the instance's user-data
  (IMDS on the VM, ``ec2:DescribeInstanceAttribute``) can read the token, so tokens must be
  scoped to one run/job and expire with it.

cloud-init runs the script once, as root, late in boot, with its output in
``/var/log/cloud-init-output.log`` and on the serial console (``cloud.ec2.console_output``).
EC2 caps user-data at 16 KiB; ``check_size`` enforces it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

# The time-limit guard and EC2's size limit live with the launch code (cloud.userdata).
from cloud.userdata import MAX_USER_DATA_BYTES as MAX_USER_DATA_BYTES
from cloud.userdata import check_size as check_size
from cloud.userdata import shutdown_guard as shutdown_guard
from cloud.userdata import with_time_limit as with_time_limit

RENDEZVOUS_PORT = 29500
JOB_RENDEZVOUS_URL = "$SRIFTY_SERVER/api/v1/jobs/$SRIFTY_JOB_ID/rendezvous/"
RUN_RENDEZVOUS_URL = "$SRIFTY_SERVER/api/v1/profiling-runs/$SRIFTY_RUN_ID/rendezvous/"
LINGER_S = 900  # how long a comm cluster's worker node waits for the run to end after its sweep
RENDEZVOUS_WAIT_S = 1200  # how long workers poll the server for the master's address

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Never ship these to a VM, not even if a caller passes them in ``env``.
_FORBIDDEN_ENV = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"}

# Python interpreters that already have torch on AWS Deep Learning AMIs, newest layout first:
# DLAMI "OSS Nvidia Driver ... PyTorch" (venv in /opt/pytorch), older conda DLAMIs, then PATH.
_TORCH_PYTHONS = (
    "/opt/pytorch/bin/python3",
    "/opt/conda/envs/pytorch/bin/python3",
    "/opt/conda/bin/python3",
)

_FIND_PYTHON = """\
# A Python with torch: the Deep Learning AMI's own environment if there is one, else a fresh venv.
PY=""
for cand in {candidates} "$(command -v python3 || true)"; do
  if [ -n "$cand" ] && [ -x "$cand" ] && "$cand" -c 'import torch' >/dev/null 2>&1; then
    PY="$cand"
    break
  fi
done
if [ -z "$PY" ]; then
  echo "srifty: no Python with torch found; creating a venv"
  if command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -q
    apt-get -o DPkg::Lock::Timeout=600 install -yq python3-venv python3-pip curl
  elif command -v dnf >/dev/null 2>&1; then
    dnf install -yq python3 python3-pip
  fi
  python3 -m venv /opt/srifty/venv
  /opt/srifty/venv/bin/pip install -q --upgrade pip
  /opt/srifty/venv/bin/pip install -q torch torchvision requests
  PY=/opt/srifty/venv/bin/python
fi
echo "srifty: using $PY"
"""

# ``srifty_fetch URL FILE``: download a gzip tarball to FILE and unpack it into the work
# directory; what the repo (or agent package) and the task's workdir archive both do.
_FETCH_FUNCTION = """\
srifty_fetch() {
  # Send the token only to the Srifty server: a presigned S3 URL rejects a second auth method.
  # ${A[@]+"${A[@]}"}: bash < 4.4 (Amazon Linux 2) calls an empty array unbound under set -u.
  local auth=()
  case "$1" in
    "$SRIFTY_SERVER"/*) auth=(-H "Authorization: Bearer $SRIFTY_TOKEN") ;;
  esac
  curl -fsSL --retry 5 --retry-connrefused --retry-delay 5 ${auth[@]+"${auth[@]}"} "$1" -o "$2"
  tar -xzf "$2" -C /opt/srifty/work
}
"""

_FETCH_REPO = """\
if [ -n "$SRIFTY_REPO_URL" ]; then srifty_fetch "$SRIFTY_REPO_URL" /opt/srifty/repo.tgz; fi
"""


def _q(value: object) -> str:
    text = str(value)
    if "\x00" in text:  # bash cannot hold a NUL in a variable: it would cut or shift the script
        raise ValueError(f"a user-data value contains a NUL byte: {text[:40]!r}")
    return shlex.quote(text)


def _int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, not {value!r}")
    return value


def _server(server_url: str) -> str:
    if not re.match(r"^https?://[^\s/]+", server_url or ""):
        raise ValueError(f"server_url must be an http(s) URL, not {server_url!r}")
    return server_url.rstrip("/")


def _checked_env(env: Mapping[str, object] | None) -> dict[str, object]:
    """``env`` for ``export`` lines: plain names only, and never AWS credentials."""
    env = dict(env or {})
    for name in env:
        if not _ENV_NAME_RE.match(name):
            raise ValueError(f"{name!r} is not a valid environment variable name")
        if name.upper() in _FORBIDDEN_ENV:
            raise ValueError(f"refusing to put {name} into user-data: VMs get AWS access from their role")
    return env


def _header(max_minutes: int, log_name: str) -> list[str]:
    return [
        "#!/bin/bash",
        f"{shutdown_guard(max_minutes)}  # hard time limit, enforced by the VM itself",
        "set -euo pipefail",
        # EXIT also fires after a failing command (set -e) and, via the second trap, on signals.
        "trap 'rc=$?; echo \"srifty: script ended (exit $rc); shutting down\"; shutdown -h now' EXIT",
        "trap 'exit 143' TERM INT HUP",
        f"exec > >(tee -a /var/log/{log_name}) 2>&1",
        "umask 077",
        "mkdir -p /opt/srifty/work",
    ]


def profiling_user_data(
    server_url: str,
    run_id: object,
    token: str,
    agent_args: Sequence[str],
    max_minutes: int,
    repo_tarball_url: str | None = None,
) -> str:
    """Script that fetches the profiler agent from Srifty, runs it once, and powers the VM off.

    The agent comes from ``GET {server}/api/v1/agent.tar.gz`` (a tarball whose root holds
    ``profiler/agent``) and runs as ``python -m profiler.agent {agent_args} --report-to
    {server}/api/v1/profiling-runs/{run_id}/events/ --token {token}``. ``repo_tarball_url`` (the
    user's model code) is unpacked into the agent's working directory, ``/opt/srifty/work``.
    """
    server = _server(server_url)
    events = f"{server}/api/v1/profiling-runs/{run_id}/events/"
    lines = _header(max_minutes, "srifty-profile.log")
    lines += [
        f"SRIFTY_SERVER={_q(server)}",
        f"SRIFTY_RUN_ID={_q(run_id)}",
        f"SRIFTY_TOKEN={_q(token)}",
        f"SRIFTY_EVENTS_URL={_q(events)}",
        f"SRIFTY_REPO_URL={_q(repo_tarball_url or '')}",
        f"AGENT_ARGS=({' '.join(_q(a) for a in agent_args)})",
        "",
        _FIND_PYTHON.format(candidates=" ".join(_TORCH_PYTHONS)),
        "mkdir -p /opt/srifty/agent",
        'curl -fsSL --retry 5 --retry-connrefused --retry-delay 5 -H "Authorization: Bearer $SRIFTY_TOKEN" \\',
        '  "$SRIFTY_SERVER/api/v1/agent.tar.gz" -o /opt/srifty/agent.tgz',
        "tar -xzf /opt/srifty/agent.tgz -C /opt/srifty/agent",
        _FETCH_FUNCTION,
        _FETCH_REPO,
        "cd /opt/srifty/work",
        'export PYTHONPATH="/opt/srifty/agent:/opt/srifty/work${PYTHONPATH:+:$PYTHONPATH}"',
        'echo "srifty: profiling run $SRIFTY_RUN_ID"',
        '"$PY" -m profiler.agent "${AGENT_ARGS[@]}" --report-to "$SRIFTY_EVENTS_URL" --token="$SRIFTY_TOKEN"',
    ]
    return check_size("\n".join(lines) + "\n")


# Master discovery, for every multi-node script here: each node, rank 0 included, polls
# ``GET {server}/.../rendezvous/?instance_id={its instance id}`` (a job's or a profiling run's;
# the server's side is ``fleet.rendezvous.decide``)
# with its token until the server answers 200 (here ``{"master_addr": "10.0.1.23", "node_rank":
# 1}``; a task node gets its whole environment instead); 202 (or 200 without an address) means
# "not yet, poll again"; 400/401/403/404/410 mean "stop" (the script fails and the VM powers off).
# The server knows every node's private IP as soon as ``run_instances`` returns
# (``cloud.ec2.describe``), so it picks rank 0 and answers at once. This needs no instance
# profile, no extra IAM permissions on the VM and no ordering between launches, and lets one
# script serve all nodes. Rejected: rank 0 reading its IP from IMDS (works only for rank 0);
# workers describing instances by tag (``ec2:DescribeInstances`` on every VM); launching rank 0
# first and baking its IP into the workers' scripts (serialises the launch).
_RENDEZVOUS = """\
# Master discovery: ask the Srifty server for rank 0's private IP (the run's rendezvous URL).
IMDS_TOKEN=$(curl -fsS --retry 5 -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 300" http://169.254.169.254/latest/api/token)
INSTANCE_ID=$(curl -fsS --retry 5 -H "X-aws-ec2-metadata-token: $IMDS_TOKEN" http://169.254.169.254/latest/meta-data/instance-id)
RDZV_DEADLINE=$(( $(date +%s) + {wait_s} ))
MASTER_ADDR=""
while [ -z "$MASTER_ADDR" ]; do
  CODE=$(curl -sS -o /opt/srifty/rendezvous.json -w '%{{http_code}}' -H "Authorization: Bearer $SRIFTY_TOKEN" \\
    "{url}?instance_id=$INSTANCE_ID" || true)
  case "$CODE" in
    200)
      read -r MASTER_ADDR SERVER_NODE_RANK < <("$PY" - /opt/srifty/rendezvous.json <<'PYEOF'
import json, re, sys
data = json.load(open(sys.argv[1]))
addr = str(data.get("master_addr") or "")
rank = data.get("node_rank")
ok = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.:-]*", addr)
print(addr if ok else "-", rank if isinstance(rank, int) and rank >= 0 else "-")
PYEOF
      ) || true
      if [ "${{MASTER_ADDR:--}}" = "-" ]; then MASTER_ADDR=""; fi ;;
    400|401|403|404|410)
      echo "srifty: rendezvous refused (HTTP $CODE); giving up"
      exit 1 ;;
  esac
  if [ -z "$MASTER_ADDR" ]; then
    if [ "$(date +%s)" -ge "$RDZV_DEADLINE" ]; then
      echo "srifty: no master address after {wait_s}s; giving up"
      exit 1
    fi
    sleep 5
  fi
done
if [ -z "$NODE_RANK" ] && [ "${{SERVER_NODE_RANK:--}}" != "-" ]; then NODE_RANK="$SERVER_NODE_RANK"; fi
"""


_LINGER = """\
# A worker's sweep ends when rank 0's does, but rank 0 still has to post the curves: powering
# off now would look like a lost node and fail the run. Wait until the server says the run has
# ended (its token stops working: 401/410), at most {linger_s}s.
if [ "$NODE_RANK" != "0" ]; then
  LINGER_DEADLINE=$(( $(date +%s) + {linger_s} ))
  while [ "$(date +%s)" -lt "$LINGER_DEADLINE" ]; do
    CODE=$(curl -sS -o /dev/null -w '%{{http_code}}' -H "Authorization: Bearer $SRIFTY_TOKEN" \\
      "$SRIFTY_RDZV_URL?instance_id=$INSTANCE_ID" || true)
    case "$CODE" in
      200|202|000|429|5*) sleep 10 ;;
      *) break ;;
    esac
  done
fi
"""


def comm_cluster_user_data(
    server_url: str,
    run_id: object,
    token: str,
    nnodes: int,
    gpus_per_node: int,
    agent_args: Sequence[str],
    max_minutes: int,
    env: Mapping[str, object] | None = None,
    master_port: int = RENDEZVOUS_PORT,
    linger_s: int = LINGER_S,
) -> str:
    """Script for one node of an EC2 comm-profiling cluster: the same script on every node.

    It fetches the agent (as ``profiling_user_data`` does), learns its node rank and rank 0's
    private IP from ``GET {server}/api/v1/profiling-runs/{run_id}/rendezvous/?instance_id=...``
    (the rendezvous protocol above ``_RENDEZVOUS``: 200 go, 202 wait, 4xx stop), exports the
    torchrun-style ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``NNODES`` and ``NODE_RANK``
    and runs ``python -m profiler.agent {agent_args} --node-rank R --master-addr A --master-port P
    --report-to {events} --token ...``: the agent starts one process per GPU with global rank
    ``R·gpus_per_node + local rank`` (as torchrun numbers them) and global rank 0 posts the curves.
    ``env`` (NCCL / libfabric settings) is exported first; AWS credential names are refused.
    A worker (R > 0) then waits for the run to end (``linger_s`` at most) before powering off.
    """
    server = _server(server_url)
    _int("nnodes", nnodes, 2)
    _int("gpus_per_node", gpus_per_node)
    _int("linger_s", linger_s, 0)
    if _int("master_port", master_port) > 65535:
        raise ValueError(f"master_port must be a TCP port, not {master_port!r}")
    env = _checked_env(env)
    lines = _header(max_minutes, "srifty-profile.log")
    lines += [f"export {name}={_q(value)}" for name, value in env.items()]
    lines += [
        f"SRIFTY_SERVER={_q(server)}",
        f"SRIFTY_RUN_ID={_q(run_id)}",
        f"SRIFTY_TOKEN={_q(token)}",
        f"SRIFTY_EVENTS_URL={_q(f'{server}/api/v1/profiling-runs/{run_id}/events/')}",
        f'SRIFTY_RDZV_URL="{RUN_RENDEZVOUS_URL}"',
        f"SRIFTY_NNODES={_q(nnodes)}",
        f"GPUS_PER_NODE={_q(gpus_per_node)}",
        'NODE_RANK=""',
        f"MASTER_PORT={_q(master_port)}",
        f"AGENT_ARGS=({' '.join(_q(a) for a in agent_args)})",
        "",
        _FIND_PYTHON.format(candidates=" ".join(_TORCH_PYTHONS)),
        "mkdir -p /opt/srifty/agent",
        'curl -fsSL --retry 5 --retry-connrefused --retry-delay 5 -H "Authorization: Bearer $SRIFTY_TOKEN" \\',
        '  "$SRIFTY_SERVER/api/v1/agent.tar.gz" -o /opt/srifty/agent.tgz',
        "tar -xzf /opt/srifty/agent.tgz -C /opt/srifty/agent",
        _RENDEZVOUS.format(wait_s=RENDEZVOUS_WAIT_S, url="$SRIFTY_RDZV_URL"),
        'if [ -z "$NODE_RANK" ]; then echo "srifty: the server named no node rank; giving up"; exit 1; fi',
        'export MASTER_ADDR MASTER_PORT NODE_RANK NNODES="$SRIFTY_NNODES"',
        "export WORLD_SIZE=$(( SRIFTY_NNODES * GPUS_PER_NODE ))",
        "cd /opt/srifty/work",
        'export PYTHONPATH="/opt/srifty/agent:/opt/srifty/work${PYTHONPATH:+:$PYTHONPATH}"',
        'echo "srifty: comm run $SRIFTY_RUN_ID node $NODE_RANK of $SRIFTY_NNODES, master $MASTER_ADDR:$MASTER_PORT"',
        '"$PY" -m profiler.agent "${AGENT_ARGS[@]}" --node-rank "$NODE_RANK" --master-addr "$MASTER_ADDR" \\',
        '  --master-port "$MASTER_PORT" --report-to "$SRIFTY_EVENTS_URL" --token="$SRIFTY_TOKEN"',
        _LINGER.format(linger_s=linger_s),
    ]
    return check_size("\n".join(lines) + "\n")


_TASK_RENDEZVOUS = """\
# The node's environment comes from the server (launcher.taskfile.node_env, the one place it is
# made): MASTER_ADDR, MASTER_PORT, NODE_RANK, NNODES, NPROC_PER_NODE, the plan's per-node batch,
# the SKYPILOT_* variables, the network settings of the type and the task's envs. 200 go,
# 202 wait, 4xx stop (see the comment above _RENDEZVOUS).
IMDS_TOKEN=$(curl -fsS --retry 5 -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 300" http://169.254.169.254/latest/api/token)
INSTANCE_ID=$(curl -fsS --retry 5 -H "X-aws-ec2-metadata-token: $IMDS_TOKEN" http://169.254.169.254/latest/meta-data/instance-id)
RDZV_DEADLINE=$(( $(date +%s) + {wait_s} ))
while :; do
  CODE=$(curl -sS -o /opt/srifty/rendezvous.json -w '%{{http_code}}' -H "Authorization: Bearer $SRIFTY_TOKEN" \\
    "{url}?instance_id=$INSTANCE_ID" || true)
  case "$CODE" in
    200)
      if "$PY" - /opt/srifty/rendezvous.json > /opt/srifty/node.env <<'PYEOF'
import json, re, shlex, sys
env = json.load(open(sys.argv[1])).get("env") or {{}}
if not env.get("MASTER_ADDR"):
    sys.exit(1)
for name, value in sorted(env.items()):
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        print("export %s=%s" % (name, shlex.quote(str(value))))
PYEOF
      then break; fi ;;
    400|401|403|404|410)
      echo "srifty: rendezvous refused (HTTP $CODE); giving up"
      exit 1 ;;
  esac
  if [ "$(date +%s)" -ge "$RDZV_DEADLINE" ]; then
    echo "srifty: no rendezvous answer after {wait_s}s; giving up"
    exit 1
  fi
  sleep 5
done
# shellcheck disable=SC1091
. /opt/srifty/node.env
"""

_FETCH_WORKDIR = """\
# The task's workdir: an archive (served by Srifty with the job token, or a presigned S3 URL)
# or a git repository at a ref.
if [ -n "$SRIFTY_WORKDIR_URL" ]; then
  srifty_fetch "$SRIFTY_WORKDIR_URL" /opt/srifty/workdir.tgz
elif [ -n "$SRIFTY_GIT_URL" ]; then
  command -v git >/dev/null 2>&1 || { apt-get -o DPkg::Lock::Timeout=600 install -yq git || dnf install -yq git; }
  git clone --quiet "$SRIFTY_GIT_URL" /opt/srifty/work/.clone
  git -C /opt/srifty/work/.clone checkout --quiet "$SRIFTY_GIT_REF"
  cp -a /opt/srifty/work/.clone/. /opt/srifty/work/ && rm -rf /opt/srifty/work/.clone
fi
"""


# The spot watcher (profiler.agent.spotwatch, from the agent package just unpacked) posts the
# 2-minute interruption notice to Srifty. Its own process, so a busy training cannot delay it;
# started before the workdir, rendezvous and setup, which can take minutes; it ends at once where
# IMDS calls the instance on-demand. (Comments here, not in the script: user-data is capped.)
_START_SPOTWATCH = """\
if [ -f /opt/srifty/work/profiler/agent/spotwatch.py ]; then
  (cd /opt/srifty/work && PYTHONPATH=/opt/srifty/work nohup "$PY" -m profiler.agent.spotwatch \
    < /dev/null >> /opt/srifty/spotwatch.log 2>&1 &)
  echo "srifty: spot watcher started (log: /opt/srifty/spotwatch.log)"
fi
"""


def task_user_data(
    server_url: str,
    job_id: object,
    token: str,
    setup: str,
    run: str,
    max_minutes: int,
    *,
    workdir_url: str | None = None,
    git_url: str | None = None,
    git_ref: str = "HEAD",
    agent_url: str | None = None,
) -> str:
    """Script for one node of a task job (``launcher.taskfile``), the same on every node.

    It finds a Python with torch (the Deep Learning AMI's; its ``torchrun`` goes first on
    ``PATH``), fetches the profiler package (``agent_url``: ``profiler.agent.report`` for the
    training callback) into ``/opt/srifty/work`` and starts the spot watcher from it in the
    background (``python -m profiler.agent.spotwatch``, log ``/opt/srifty/spotwatch.log``: it
    posts the spot interruption notice with the job token, and exits at once on an instance IMDS
    calls on-demand), fetches the task's workdir into ``/opt/srifty/work`` (``workdir_url``: an
    archive, Srifty's own URL gets the job token; or ``git_url`` at ``git_ref``), asks the
    server for the node's environment (rendezvous: it answers once every node's private IP is
    known, with ``launcher.taskfile.node_env``), runs ``setup`` once per node (a marker file
    keeps a rebooted node from running it again) and then ``run``, both with ``bash`` in the
    workdir. ``SRIFTY_SERVER``, ``SRIFTY_JOB_ID`` and ``SRIFTY_TOKEN`` are exported for
    ``Reporter.from_env``. The VM powers off when ``run`` ends, and at ``max_minutes`` at the
    latest.
    """
    server = _server(server_url)
    if not run.strip():
        raise ValueError("run is empty")
    lines = _header(max_minutes, "srifty-train.log")
    lines += [
        f"export SRIFTY_SERVER={_q(server)}",
        f"export SRIFTY_JOB_ID={_q(job_id)}",
        f"export SRIFTY_TOKEN={_q(token)}",
        f"SRIFTY_REPO_URL={_q(agent_url or '')}",
        f"SRIFTY_WORKDIR_URL={_q(workdir_url or '')}",
        f"SRIFTY_GIT_URL={_q(git_url or '')}",
        f"SRIFTY_GIT_REF={_q(git_ref)}",
        f"SRIFTY_SETUP={_q(setup)}",
        f"SRIFTY_RUN={_q(run)}",
        "",
        _FIND_PYTHON.format(candidates=" ".join(_TORCH_PYTHONS)),
        'export PATH="$(dirname "$PY"):$PATH"  # torchrun and python of the torch environment',
        _FETCH_FUNCTION,
        _FETCH_REPO,
        _START_SPOTWATCH,
        _FETCH_WORKDIR,
        _TASK_RENDEZVOUS.format(wait_s=RENDEZVOUS_WAIT_S, url=JOB_RENDEZVOUS_URL),
        "cd /opt/srifty/work",
        'export PYTHONPATH="/opt/srifty/work${PYTHONPATH:+:$PYTHONPATH}"',
        'if [ -n "${SRIFTY_CHECKPOINT_DIR:-}" ]; then mkdir -p "$SRIFTY_CHECKPOINT_DIR"; fi',
        'echo "srifty: job $SRIFTY_JOB_ID node ${NODE_RANK:-?} of ${NNODES:-?}, master $MASTER_ADDR:${MASTER_PORT:-?}"',
        'if [ -n "$SRIFTY_SETUP" ] && [ ! -f /opt/srifty/setup.done ]; then',
        '  echo "srifty: setup"',
        '  bash -euo pipefail -c "$SRIFTY_SETUP"',
        "  touch /opt/srifty/setup.done",
        "fi",
        'echo "srifty: run"',
        'bash -euo pipefail -c "$SRIFTY_RUN"',
    ]
    return check_size("\n".join(lines) + "\n")
