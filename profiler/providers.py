"""Where a profiling agent runs: this machine (a subprocess) or an EC2 instance.

Both providers share one small interface (start / poll / stop). Neither stores the agent's
token: it is handed to the agent at start and only its hash stays in the database.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from profiler.models import ProfilingRun, Provider, RunKind

log = logging.getLogger(__name__)


@dataclass
class Poll:
    alive: bool
    detail: str = ""


def agent_args(run: ProfilingRun, out: str) -> list[str]:
    """The agent's command line (after ``python -m profiler.agent``) for this run."""
    if run.kind == RunKind.COMPUTE:
        args = [
            "compute",
            "--model",
            run.model_spec,
            "--input-shape",
            run.input_shape,
            "--batch-sizes",
            run.batch_sizes,
            "--device",
            run.device,
            "--precision",
            run.precision,
            "--iters",
            str(run.iters),
        ]
        if run.max_memory:
            args += ["--max-memory", run.max_memory]
    else:
        args = ["comm", "--world-size", str(run.world_size), "--backend", run.backend]
        if run.is_cluster:  # node rank and master address are added on each node (rendezvous)
            args += ["--nnodes", str(run.nodes)]
        if run.sizes:
            args += ["--sizes", run.sizes]
    return [*args, "--out", out]


def events_url(run: ProfilingRun) -> str:
    return f"{settings.SITE_URL.rstrip('/')}/api/v1/profiling-runs/{run.pk}/events/"


def run_dir() -> Path:
    path = Path(settings.DATA_DIR) / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


class LocalProvider:
    """Runs the agent as a subprocess of this machine, in its own session so that it survives
    a restart of the worker that started it and can be stopped as a whole process group."""

    def launch_key(self, run: ProfilingRun) -> None:
        """A local agent gets a fresh random token each start (nothing outlives a restart)."""
        return None

    def paths(self, run: ProfilingRun) -> tuple[Path, Path]:
        return run_dir() / f"run-{run.pk}.json", run_dir() / f"run-{run.pk}.log"

    def command(self, run: ProfilingRun, token: str | None) -> list[str]:
        """Without a token the agent only writes its file (``manage.py profile_model``)."""
        out, _ = self.paths(run)
        # The token itself goes in the environment (spawn), never on the command line, which
        # every local user can read in ps or /proc/*/cmdline.
        report = ["--report-to", events_url(run)] if token else []
        return [sys.executable, "-m", "profiler.agent", *agent_args(run, str(out)), *report]

    def start(self, run: ProfilingRun, token: str | None) -> int:
        return self.spawn(run, token).pid

    def spawn(self, run: ProfilingRun, token: str | None) -> subprocess.Popen:
        out, logfile = self.paths(run)
        out.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": str(settings.BASE_DIR), "PYTHONUNBUFFERED": "1"}
        env.pop("SRIFTY_TOKEN", None)
        if token:
            env["SRIFTY_TOKEN"] = token  # the agent reads it when --token is not given
        with open(logfile, "ab") as log_fh:
            return subprocess.Popen(
                self.command(run, token),
                cwd=settings.BASE_DIR,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def poll(self, run: ProfilingRun) -> Poll:
        if not run.pid:
            return Poll(False, "no process was started")
        _reap(run.pid)
        if not _is_our_agent(run.pid, self.paths(run)[0]):
            return Poll(False, "agent process exited")
        return Poll(True)

    def cleanup(self, run: ProfilingRun) -> bool:
        return True  # nothing outlives a local agent

    def stop(self, run: ProfilingRun, grace_s: float = 5.0) -> None:
        if not run.pid or not _is_our_agent(run.pid, self.paths(run)[0]):
            return
        try:
            os.killpg(run.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and _is_our_agent(run.pid, self.paths(run)[0]):
                _reap(run.pid)
                time.sleep(0.1)
            if _is_our_agent(run.pid, self.paths(run)[0]):
                os.killpg(run.pid, signal.SIGKILL)
            _reap(run.pid)
        except ProcessLookupError:
            pass

    def result_file(self, run: ProfilingRun) -> dict | None:
        """The agent writes its file before posting: after a lost post it is still there."""
        out, _ = self.paths(run)
        try:
            return json.loads(out.read_text())
        except (OSError, ValueError):
            return None

    def log_tail(self, run: ProfilingRun, limit: int = 4000) -> str:
        _, logfile = self.paths(run)
        try:
            return logfile.read_bytes()[-limit:].decode(errors="replace")
        except OSError:
            return ""


def _reap(pid: int) -> None:
    """Collect our own exited child so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _is_our_agent(pid: int, out: Path) -> bool:
    """True while ``pid`` is alive and still our agent (PIDs are reused after exit)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    if "\nState:\tZ" in status:
        return False
    return "profiler.agent" in cmdline and str(out) in cmdline


class EC2Provider:
    """Runs the agent on an EC2 instance that installs it from this server and reports back.

    The instance is tagged ``srifty:run-id``, shuts itself down (and so terminates) at the end
    of the user-data script or at the run's hard deadline, whichever is first.
    """

    def launch_key(self, run: ProfilingRun) -> str:
        """The EC2 ClientToken: a retried start finds the same instance, so it gets the same token."""
        return run.launch_token or f"srifty-run-{run.pk}"

    def start(self, run: ProfilingRun, token: str) -> list[str]:
        from django.utils import timezone

        from cloud import ec2
        from fleet import boot

        minutes = max(1, int((run.deadline_at - timezone.now()).total_seconds() // 60))
        if run.is_cluster:
            return self.start_cluster(run, token, minutes)
        script = boot.profiling_user_data(
            server_url=settings.SITE_URL,
            run_id=run.pk,
            token=token,
            agent_args=agent_args(run, "/tmp/srifty-profile.json"),
            max_minutes=minutes,
        )
        spec = ec2.LaunchSpec(
            region=run.region,
            instance_type=run.instance_type,
            count=1,
            market=run.market,
            user_data=script,
            tags={"srifty:run-id": str(run.pk), "Name": f"srifty-profile-{run.pk}"},
            max_minutes=minutes,
            client_token=self.launch_key(run),
        )
        return ec2.launch(spec)

    def start_cluster(self, run: ProfilingRun, token: str, minutes: int) -> list[str]:
        """N nodes in one cluster placement group, EFA where the type has it (``fleet.network``).
        The group is created first and named after the run, so ``stop`` deletes it whatever
        happens after this line."""
        from catalog.models import InstanceType
        from cloud import ec2
        from fleet import boot, network

        nodes = run.nodes
        if nodes is None:
            raise ValueError(f"run {run.pk} is not a cluster run (no node count)")
        itype = InstanceType.objects.select_related("accelerator").get(name=run.instance_type)
        ec2.create_placement_group(run.region, run.placement_group)
        script = boot.comm_cluster_user_data(
            server_url=settings.SITE_URL,
            run_id=run.pk,
            token=token,
            nnodes=nodes,
            gpus_per_node=network.gpus_per_node(itype),
            agent_args=agent_args(run, "/tmp/srifty-profile.json"),
            max_minutes=minutes,
            env=network.nccl_env(itype),
        )
        spec = ec2.LaunchSpec(
            region=run.region,
            instance_type=run.instance_type,
            count=nodes,
            market=run.market,
            user_data=script,
            max_minutes=minutes,
            client_token=self.launch_key(run),
            tags={"srifty:run-id": str(run.pk), "Name": f"srifty-profile-{run.pk}"},
            image_id=ec2.default_image(run.region, itype.arch),
            placement_group=run.placement_group,
            efa_interfaces=network.efa_interfaces(itype),
            subnet_id=network.subnet_for(run.region, run.instance_type),
            security_group_ids=tuple(getattr(settings, "JOB_SECURITY_GROUP_IDS", ()) or ()),
            key_name=getattr(settings, "JOB_KEY_NAME", None) or None,
        )
        return ec2.launch(spec)

    def poll(self, run: ProfilingRun) -> Poll:
        """Alive while the instance runs; a cluster only while every node does (one lost node
        stalls NCCL on all the others until its timeout, at the price of all of them)."""
        from cloud import ec2

        if not run.instance_ids:
            return Poll(False, "no instance was launched")
        states = ec2.describe(run.region, run.instance_ids)
        live = [s for s in states if s.state in ("pending", "running")]
        gone = [s for s in states if s.state not in ("pending", "running")]
        if not live or (run.is_cluster and gone):
            return Poll(False, "instance stopped: " + ", ".join(f"{s.id} {s.state}" for s in gone or states))
        return Poll(True)

    def stop(self, run: ProfilingRun) -> None:
        """Terminate the run's instances: the recorded ones and any tagged with the run, since a
        launch whose answer was lost started an instance whose ID we never heard."""
        from cloud import ec2

        ids = set(run.instance_ids or [])
        if run.region:
            ids |= {s.id for s in ec2.find_managed(run.region, {"srifty:run-id": str(run.pk)})}
        if ids:
            ec2.terminate(run.region, sorted(ids))

    def cleanup(self, run: ProfilingRun) -> bool:
        """Delete the cluster's placement group; False while terminating nodes still hold it."""
        from cloud import ec2

        if not run.placement_group or not run.region:
            return True
        try:
            ec2.delete_placement_group(run.region, run.placement_group)
        except ec2.CloudError as exc:
            log.info("placement group %s not deleted yet: %s", run.placement_group, exc)
            return False
        return True

    def result_file(self, run: ProfilingRun) -> dict | None:
        return None

    def log_tail(self, run: ProfilingRun, limit: int = 4000) -> str:
        return ""


def for_run(run: ProfilingRun) -> LocalProvider | EC2Provider:
    return EC2Provider() if run.provider == Provider.EC2 else LocalProvider()
