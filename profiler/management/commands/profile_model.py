"""``manage.py profile_model --local --model SPEC --input-shape 3,64,64 [...]``: profile now.

Runs the agent on this machine as a subprocess, waits for it, stores the run and its samples
like a run started from the dashboard, and prints a summary. Exit code 1 when it fails.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from profiler import actions
from profiler.models import Provider, RunKind
from profiler.providers import LocalProvider
from profiler.serializers import ProfilingRunSerializer
from srifty_web.commands import owner_for_command


class Command(BaseCommand):
    help = "Profile a model (compute) or AllReduce (comm) on this machine and store the run."

    def add_arguments(self, parser):
        parser.add_argument("--local", action="store_true", help="Run the agent here (the only mode for now)")
        parser.add_argument("--kind", choices=["compute", "comm"], default="compute")
        parser.add_argument("--model", default="", help="torchvision:NAME or package.module:factory")
        parser.add_argument("--input-shape", default="3,224,224")
        parser.add_argument("--batch-sizes", default="auto")
        parser.add_argument("--device", default="cpu")
        parser.add_argument("--precision", default="fp32")
        parser.add_argument("--iters", type=int, default=5)
        parser.add_argument("--max-memory", default="2GB")
        parser.add_argument("--world-size", type=int, default=2)
        parser.add_argument("--backend", default="gloo")
        parser.add_argument("--sizes", default="")
        parser.add_argument("--max-minutes", type=int, default=30)
        parser.add_argument("--user", default=None, help="Owner (default: the first superuser)")
        parser.add_argument("--json", action="store_true", help="Print the stored profile as JSON")

    def handle(self, *args, **o):
        if not o["local"]:
            raise CommandError(
                "only --local is supported from the shell; start EC2 runs from the dashboard or API"
            )
        owner = owner_for_command(o["user"])
        fields = {
            "kind": o["kind"],
            "model_spec": o["model"],
            "input_shape": o["input_shape"],
            "batch_sizes": o["batch_sizes"],
            "device": o["device"],
            "precision": o["precision"],
            "iters": o["iters"],
            "max_memory": o["max_memory"],
            "world_size": o["world_size"],
            "backend": o["backend"],
            "sizes": o["sizes"],
            "provider": Provider.LOCAL,
            "max_minutes": o["max_minutes"],
        }
        if o["kind"] == RunKind.COMM:
            fields.update(model_spec="", input_shape="")
        # The operator runs this command: a local agent may run the operator's own model code.
        checked = ProfilingRunSerializer(data=fields, context={"allow_local_code": True})
        if not checked.is_valid():
            raise CommandError(
                "; ".join(
                    f"--{k.replace('_', '-')}: {' '.join(map(str, v))}" for k, v in checked.errors.items()
                )
            )
        run = actions.create_run(owner, start=False, **checked.validated_data)
        provider = LocalProvider()
        self.stderr.write(f"run {run.pk}: profiling on this machine ...")
        proc = provider.spawn(run, token=None)
        actions.mark_starting(run, pid=proc.pid)
        try:
            code = proc.wait(timeout=o["max_minutes"] * 60)
        except Exception as exc:
            provider.stop(run)
            actions.fail_run(run, f"stopped at its hard time limit: {exc}")
            raise CommandError(f"run {run.pk} timed out") from exc
        profile = provider.result_file(run)
        if code != 0 or profile is None:
            actions.fail_run(run, f"agent exited with {code}\n{provider.log_tail(run)}")
            raise CommandError(
                f"run {run.pk} failed (agent exit code {code}):\n{provider.log_tail(run, 1500)}"
            )
        try:
            run = actions.complete_run(run, profile)
        except actions.BadProfile as exc:
            actions.fail_run(run, str(exc))
            raise CommandError(f"run {run.pk}: {exc}") from exc
        if o["json"]:
            self.stdout.write(json.dumps(run.profile, indent=2))
        else:
            self.stdout.write(self.style.SUCCESS(self._summary(run)))

    def _summary(self, run) -> str:
        if run.kind == RunKind.COMPUTE:
            lines = [
                f"run {run.pk} succeeded: {run.model_spec}, max batch {run.profile.get('max_batch_size')}"
            ]
            for s in run.profile["samples"]:
                ph = s["phases"]
                lines.append(
                    f"  batch {s['batch_size']:>5}: fwd {ph['forward']['median_ms']:.2f} ms, "
                    f"bwd {ph['backward']['median_ms']:.2f} ms, opt {ph['optimizer']['median_ms']:.2f} ms, "
                    f"{len(s.get('buckets', []))} buckets"
                )
        else:
            lines = [f"run {run.pk} succeeded: all_reduce, {run.world_size} ranks, {run.backend}"]
            for s in run.profile["samples"]:
                lines.append(
                    f"  {s['size_bytes']:>10} B: {s['median_ms']:.3f} ms (cv {s['cv']:.2f}), "
                    f"busbw {s['busbw_gbps']:.2f} Gb/s"
                )
        return "\n".join(lines)
