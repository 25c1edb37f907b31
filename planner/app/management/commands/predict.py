"""``manage.py predict``: the predicted DDP iteration time, for local workers or a catalog cluster.

    predict --profile r18.json [--comm comm.json] --workers 2 [--per-worker-batch 32] [--link network] --json
    predict --profile r18_a.json --profile r18_b.json --comm c_a.json --comm c_b.json --workers 2

Repeated ``--profile`` (``--comm``) files are pooled; profiles repeated at different times also
give the run-to-run drift that widens the predicted p90 (``run_spread`` in the output).
    predict --model torchvision:resnet50 --instance p4d.24xlarge --nodes 2 --per-worker-batch 64 --json
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Predict DDP iteration time (p50/p90), throughput and the breakdown."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--profile",
            action="append",
            help="compute profile JSON (local prediction); repeat to pool repeated profiles",
        )
        parser.add_argument(
            "--comm", action="append", help="comm profile JSON measured on the same machine; repeat to pool"
        )
        parser.add_argument("--workers", type=int, default=2, help="local worker processes")
        parser.add_argument(
            "--link",
            choices=("loopback", "network"),
            default="loopback",
            help="how the local workers' all-reduces travel, as in the comm profile: loopback "
            "(this host's memory: every all-reduce is CPU work, whatever share the profile "
            "measured) or network (a real or shaped link: only the measured CPU share "
            "competes with the backward)",
        )
        parser.add_argument("--model", help="model spec (catalog cluster prediction)")
        parser.add_argument("--input-shape", default="3,224,224")
        parser.add_argument("--precision", default="amp")
        parser.add_argument("--instance", help="instance type, e.g. p4d.24xlarge")
        parser.add_argument("--nodes", type=int, default=1)
        parser.add_argument("--per-worker-batch", type=int, help="default: the largest profiled batch")
        parser.add_argument(
            "--accumulation-steps",
            type=int,
            default=1,
            help="gradient accumulation: micro-steps per optimizer step (the all-reduce runs once per k)",
        )
        parser.add_argument("--samples", type=int, default=2000, help="Monte-Carlo draws")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **o: Any) -> None:
        if o["profile"] and o["model"]:
            raise CommandError(
                "give --profile (local workers) or --model with --instance (catalog), not both"
            )
        if o["profile"]:
            out = self._local(o)
        elif o["model"] and o["instance"]:
            out = self._catalog(o)
        else:
            raise CommandError("give --profile FILE, or --model SPEC --instance TYPE")
        if o["json"]:
            self.stdout.write(json.dumps(out, indent=2, default=str))
        else:
            low = f"p10 {out['iteration_ms_p10']:.2f} ms, " if "iteration_ms_p10" in out else ""
            self.stdout.write(
                f"{out['target']}: iteration {low}p50 {out['iteration_ms_p50']:.2f} ms, p90 {out['iteration_ms_p90']:.2f} ms, "
                f"{out['throughput_samples_s']:.1f} samples/s, bottleneck {out['bottleneck']} ({out['source']})"
            )
            if out.get("support"):
                self.stdout.write(f"  {out['support']}")

    def _local(self, o: dict[str, Any]) -> dict[str, Any]:
        from planner.hardware import Cluster
        from planner.perf.comm import CommModel, fit_link_from_profile, observations_from_profile
        from planner.perf.compute import ComputeRangeError, fit_compute_model, run_spread
        from planner.profiles import (
            ProfileError,
            load_comm_profile,
            load_compute_profile,
            merge_comm_profiles,
            merge_compute_profiles,
        )
        from planner.simulator import CommTime, Contention, ContentionSpec, cluster_comm_fn, simulate_ddp

        if o["workers"] < 1:
            raise CommandError("--workers must be >= 1")
        try:
            profiles = [load_compute_profile(p) for p in o["profile"]]
            profile = merge_compute_profiles(profiles, align=True)  # their differences: run_spread
            comm_profile = (
                merge_comm_profiles([load_comm_profile(p) for p in o["comm"]]) if o["comm"] else None
            )
        except (OSError, ProfileError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        drift = run_spread(profiles)
        model = fit_compute_model(profile)
        batch = o["per_worker_batch"] or profile.batch_sizes[-1]
        if o["workers"] > 1 and comm_profile is None:
            raise CommandError("--comm is needed for more than one worker")
        if comm_profile is not None:
            gbps, alpha = fit_link_from_profile(comm_profile)
            cluster = Cluster(
                nodes=1,
                gpus_per_node=o["workers"],
                intra_node_gbps=gbps,
                alpha_us=alpha,
                device=profile.device.name,
            )
            comm_model = CommModel.fit(observations_from_profile(comm_profile, cluster))
            # the profile's measured distribution at each size is bootstrapped (two-mode on gloo)
            comm_fn = cluster_comm_fn(comm_model, cluster, profile=comm_profile, label=o["link"])
        else:

            def comm_fn(size: int) -> CommTime:
                return CommTime(0.0, 0.0)

        # On CPUs gloo's all-reduce competes with backward for the same cores: over loopback as
        # CPU-bound (the peer it waits for computes too), over a network by the CPU share the comm
        # profile measured per size; CPU-bound (share 1) for a profile without shares.
        contention: ContentionSpec = None
        try:
            if profile.device.type == "cpu" and o["workers"] > 1 and comm_profile is not None:
                if any(s.cpu_share is not None for s in comm_profile.samples):
                    sizes = [b.size_bytes for b in model.buckets(batch)]
                    contention = Contention.from_comm_profile(
                        comm_profile, sizes, same_host=o["link"] == "loopback"
                    )
                else:
                    contention = Contention.from_cpu_share(1.0)
            sim = simulate_ddp(
                model,
                [batch] * o["workers"],
                comm_fn,
                samples=o["samples"],
                contention=contention,
                run_spread=drift,
            )
        except ComputeRangeError as exc:
            raise CommandError(str(exc)) from exc
        return {
            "target": f"{o['workers']} local workers on {profile.device.name}",
            "source": model.source,
            "run_spread": drift,
            **dataclasses.asdict(sim),
        }

    def _catalog(self, o: dict[str, Any]) -> dict[str, Any]:
        from catalog.models import InstanceType
        from planner.app import service
        from planner.offers import Candidate, family_of
        from planner.oracle import Oracle
        from planner.validated import iteration_band

        t = (
            InstanceType.objects.ddp_capable()
            .filter(name=o["instance"])
            .select_related("accelerator")
            .first()
        )
        if t is None:
            raise CommandError(f"{o['instance']!r} is not a CUDA GPU instance type in the catalog")
        if o["nodes"] < 1:
            raise CommandError("--nodes must be >= 1")
        if not 1 <= o["accumulation_steps"] <= 1024:
            raise CommandError("--accumulation-steps must be 1 to 1024")
        shape = tuple(int(x) for x in o["input_shape"].split(","))
        try:
            wl = service.workload(
                o["model"], shape, o["precision"], allow_code=True
            )  # the operator's command
        except service.PlanInputError as exc:
            raise CommandError(str(exc)) from exc
        wl = dataclasses.replace(wl, accumulation_steps=o["accumulation_steps"])
        oracle = Oracle(
            wl,
            service.transfer_model(),
            service.gpu_specs(),
            service.comm_model(),
            samples=o["samples"],
            model_errors=service.model_errors(),  # the plan rows' p10-p90 carries the same
        )
        gpus = int(t.gpu_count)
        batch = o["per_worker_batch"] or max(1, oracle.max_batch(t.accelerator.name) // 2)
        cand = Candidate(
            t.name,
            family_of(t.name),
            "",
            "on-demand",
            None,
            0.0,
            gpus,
            t.accelerator.name,
            t.vcpus,
            t.link_gbps or 0.0,
            t.efa_supported,
        )
        est = oracle(((cand, o["nodes"]),), batch * gpus * o["nodes"])
        if est is None:
            raise CommandError(
                f"batch {batch} does not fit on {t.accelerator.name} "
                f"(max {oracle.max_batch(t.accelerator.name)} per GPU)"
            )
        phases = oracle.phases(t.accelerator.name, batch)
        if phases is None:  # est is not None: the batch fits, so the phases are predicted
            raise CommandError(f"no phase times for batch {batch} on {t.accelerator.name}")
        comm = oracle.comm_source(((cand, o["nodes"]),))
        p10, p50, p90 = iteration_band(est.iter_time_s, est.iter_time_p90_s, est.model_error)
        err = est.model_error
        return {
            "target": f"{o['nodes']}x {t.name} ({o['nodes'] * gpus} GPUs)",
            "source": phases.source,
            "per_worker_batch": batch,
            # p10/p50/p90 with the validated model error of the prediction's source, as a plan row
            "iteration_ms_p10": p10 * 1e3,
            "iteration_ms_p50": p50 * 1e3,
            "iteration_ms_p90": p90 * 1e3,
            "simulator_ms_p50": est.iter_time_s * 1e3,
            "simulator_ms_p90": est.iter_time_p90_s * 1e3,
            "model_error": err.as_dict() if err is not None else {"validated": False},
            "support": oracle.transfer.support(t.accelerator.name, wl.precision)
            if hasattr(oracle.transfer, "support")
            else "",
            "throughput_samples_s": est.throughput_sps,
            "bottleneck": est.bottleneck,
            "phases_ms": {
                "forward": phases.forward,
                "backward": phases.backward,
                "optimizer": phases.optimizer,
            },
            "max_batch_per_gpu": oracle.max_batch(t.accelerator.name),
            "comm": {"source": comm.source, "near_points": comm.near_points, "detail": comm.detail},
        }
