"""End-to-end accuracy of Srifty's DDP prediction on this machine (CPU, gloo, 2 processes).

For each model, all measurements close together in time (the shared machine's load drifts):

1. profile compute with the agent (``python -m profiler.agent compute``), one thread per process,
   **two profiler processes at once** — a 2-rank DDP job keeps both cores busy, so a profile
   taken alone on an idle machine would be optimistic (shared L3 cache, memory bandwidth);
   their per-iteration samples are pooled into the compute model of both simulated ranks; each
   batch size is profiled right before and again right after its DDP runs (profile, runs,
   profile: a linear drift of the machine's speed cancels in the pooled profile) and predicted
   from those two;
2. profile gloo all-reduce with 2 ranks (``python -m profiler.agent comm``) over the range of the
   model's bucket sizes, on loopback and, when network namespaces work here, over a veth pair
   shaped by ``tc tbf`` — also right before and after each batch's runs, pooled;
3. (in step 2) the agent also measures each all-reduce's CPU share, process CPU time over wall
   time: on a CPU the gloo threads and the backward pass share the cores (here one rank per
   core, no spare one), so only the part of an all-reduce that waits on the link overlaps the
   backward; the CPU-bound part slows it (``Contention.from_comm_profile``);
4. measure DDP's own overhead: a DDP run whose all-reduces are replaced by a no-op comm hook
   (``--noop-comm``), minus the compute profile — gradient copies into and out of the buckets,
   reducer hooks, the per-forward buffer broadcast; no communication is involved;
5. predict the 2-rank DDP iteration with :mod:`planner.simulator` (comm model fitted on step 2,
   contention from the CPU shares of step 3, overhead from step 4 charged after the last
   all-reduce; the run-to-run drift between the model's repeated compute profiles,
   :func:`planner.models.compute.run_spread`, widens the predicted p90);
6. run real ``DistributedDataParallel`` training (``bench/_ddp_train.py``, gloo, 2 processes,
   ``torch.set_num_threads(1)``) and compare per-iteration periods with the prediction; the first
   batch size is run twice to show the machine's own run-to-run noise.

Prints: model, batch, link, predicted p50 ms, measured median ms, |error| %, share of measured
iterations at or below the predicted p90; then median and max error.  ``--workdir`` keeps the
profiles and runs; ``--reuse`` re-predicts from them without measuring again; ``--phases`` adds
the per-phase medians of every profile process and DDP rank (where an error comes from).

Run as root (namespaces, priority): ``.venv/bin/python bench/accuracy_local.py`` — 8–12 minutes.
Measured processes run at ``--nice -10`` in their own scheduler autogroup, which shields them
from other work on the machine without starving it; the load average is printed. They keep
freed memory (``MALLOC_ENV``), which removes this VM's host-fault noise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.hardware import Cluster  # noqa: E402
from planner.models.comm import CommModel, fit_link_from_profile, observations_from_profile  # noqa: E402
from planner.models.compute import ComputeModel, fit_compute_model, run_spread  # noqa: E402
from planner.profiles import (  # noqa: E402
    CommProfile,
    load_comm_profile,
    load_compute_profile,
    merge_comm_profiles,
    merge_compute_profiles,
)
from planner.simulator import CommTime, Contention, SimulationResult, WorkerLoad, simulate_iteration  # noqa: E402

PY = sys.executable
TRIES: dict[tuple[str, int, str], tuple[int, float]] = {}  # (case, batch, link) -> (tries, kept block's shift)
NS = ("srbench_a", "srbench_b")
VETH = ("srbench_va", "srbench_vb")
ADDR = ("10.200.0.1", "10.200.0.2")


@dataclass(frozen=True)
class Case:
    name: str
    spec: str
    shape: str
    batches: tuple[int, ...]
    slow_batches: tuple[int, ...] = ()   # batch sizes also run over the shaped link


CASES = (
    Case("tinycnn", "examples.tiny_model:build", "3,32,32", (16, 64), (64,)),
    Case("resnet18", "torchvision:resnet18", "3,32,32", (8, 32), (32,)),
    Case("alexnet", "torchvision:alexnet", "3,64,64", (8, 32)),
    Case("transformer", "examples.tiny_model:build_transformer", "32,64", (16, 64), (16,)),
)


# --------------------------------------------------------------------------- process helpers


def run(cmd: list[str], *, env: dict | None = None, timeout: float = 300) -> None:
    run_parallel([cmd], envs=[env or {}], timeout=timeout)


def run_parallel(cmds: list[list[str]], *, envs: list[dict] | None = None, timeout: float = 300) -> None:
    """Run measured processes at once; with ``PIN`` and one per CPU, process ``i`` (and every
    thread it starts) is held on CPU ``i``: a DDP rank's gloo threads then share the core of
    that rank's backward, the situation the contention model describes."""
    envs = envs or [{}] * len(cmds)
    if PIN and 1 < len(cmds) <= (os.cpu_count() or 1):
        cmds = [["taskset", "-c", str(i), *c] for i, c in enumerate(cmds)]
    procs = [spawn(c, e) for c, e in zip(cmds, envs, strict=True)]
    deadline = time.monotonic() + timeout
    errors = []
    for p, c in zip(procs, cmds, strict=True):
        try:
            _, err = p.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        if p.returncode != 0:
            errors.append(f"{' '.join(c)} failed ({p.returncode}):\n{err[-2000:]}")
    if errors:
        raise RuntimeError("\n".join(errors))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NICE = 0  # set from --nice: measured processes run at this niceness
PIN = False  # set from --pin: simultaneous measured processes held one per CPU
ALIGN = True  # --no-drift: pool profiles unaligned and leave the run-to-run drift out
# Freed memory stays in the process (glibc would unmap any block above 32 MiB and trim the heap):
# on a VM that reports free pages to its host (virtio free page reporting, on here) touching
# the memory again costs a host fault, ~7 µs per 4 KiB page instead of ~0.5 µs; a training step
# that frees and re-allocates its gradients (``zero_grad(set_to_none=True)``, 217 MiB for
# alexnet) then pays 30–360 ms per iteration, depending on whether the host took the pages
# back in between — noise larger than the effects measured here. Set for every measured
# process, profiles and DDP runs alike; ``--default-malloc`` turns it off.
MALLOC_ENV = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=17179869184"}


def niced(cmd: list[str]) -> list[str]:
    return ["nice", "-n", str(NICE), *cmd] if NICE else cmd


def spawn(cmd: list[str], env: dict) -> subprocess.Popen:
    """Start a measured process in its own session; with the kernel's autogroup scheduling
    (``/proc/sys/kernel/sched_autogroup_enabled``) a plain ``nice`` only ranks processes inside
    one session, so the new session's autogroup gets the niceness too."""
    proc = subprocess.Popen(niced(cmd), env={**os.environ, **MALLOC_ENV, **env}, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    if NICE:
        try:
            Path(f"/proc/{proc.pid}/autogroup").write_text(str(NICE))
        except OSError:
            pass
    return proc


def in_ns(ns: str | None, cmd: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd] if ns else cmd


# --------------------------------------------------------------------------- shaped link


def netns_up(rate_mbit: int) -> str | None:
    """Create two namespaces joined by a tbf-shaped veth pair; return None or why it failed.

    The token bucket holds 256 KiB: a DDP iteration's all-reduces follow tens of ms of compute,
    long enough to refill any bucket, so a big burst lets them pass at veth speed while the
    comm profile's back-to-back all-reduces see the rate (a 1 MiB bucket sent 60 % of a 1.6 MiB
    iteration unshaped). Much smaller ones drop 64 KiB GSO packets and retransmit (CPU share of
    an all-reduce 0.8 instead of 0.1 at 64 KiB).
    """
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        return "needs root with ip and tc (iproute2)"
    netns_down()
    steps = [
        ["ip", "netns", "add", NS[0]], ["ip", "netns", "add", NS[1]],
        ["ip", "link", "add", VETH[0], "netns", NS[0], "type", "veth", "peer", "name", VETH[1], "netns", NS[1]],
    ]
    for i in (0, 1):
        steps += [["ip", "-n", NS[i], "addr", "add", f"{ADDR[i]}/24", "dev", VETH[i]],
                  ["ip", "-n", NS[i], "link", "set", "lo", "up"],
                  ["ip", "-n", NS[i], "link", "set", VETH[i], "up"],
                  ["tc", "-n", NS[i], "qdisc", "add", "dev", VETH[i], "root", "tbf", "rate", f"{rate_mbit}mbit",
                   "burst", "256kb", "latency", "200ms"]]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            netns_down()
            return f"{' '.join(cmd)}: {proc.stderr.strip()}"
    return None


def netns_down() -> None:
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


# --------------------------------------------------------------------------- measurements


def profile_compute(case: Case, work: Path, iters: int, batches: tuple[int, ...] = (), tag: str = "") -> list[Path]:
    outs = [work / f"compute_{case.name}{tag}_{i}.json" for i in (0, 1)]
    batches = ",".join(str(b) for b in batches or case.batches)
    cmds = [[PY, "-m", "profiler.agent", "compute", "--model", case.spec, "--input-shape", case.shape,
             "--batch-sizes", batches, "--device", "cpu", "--threads", "1", "--num-classes", "10",
             "--iters", str(iters), "--warmup", "3", "--min-iters", str(iters), "--max-seconds-per-size", "60",
             "--out", str(o), "-q"] for o in outs]
    run_parallel(cmds, envs=[{"OMP_NUM_THREADS": "1"}] * 2)
    return outs


def size_arg(n: int) -> str:
    return f"{max(1, n // 1024)}KB"


def profile_comm(work: Path, name: str, shaped: bool, lo: int, hi: int, repeats: int) -> Path:
    """Agent comm profile over [lo, hi] bytes (factor 2), on loopback or across the namespaces."""
    out = work / f"comm_{name}.json"
    base = [PY, "-m", "profiler.agent", "comm", "--world-size", "2", "--backend", "gloo",
            "--sizes", f"{size_arg(lo)}..{size_arg(hi)}", "--repeats", str(repeats), "--warmup", "2", "-q"]
    if not shaped:
        run([*base, "--out", str(out)], env={"OMP_NUM_THREADS": "1"})
        return out
    cmds = [in_ns(NS[r], [*base, "--rank", str(r), "--master-addr", ADDR[0], "--master-port", "29710",
                          "--out", str(out if r == 0 else work / f"comm_{name}_rank1.json")]) for r in (0, 1)]
    envs = [{"GLOO_SOCKET_IFNAME": VETH[r], "OMP_NUM_THREADS": "1"} for r in (0, 1)]
    run_parallel(cmds, envs=envs)
    return out


def run_ddp(case: Case, batch: int, work: Path, link: str, iters: int, tag: str = "", noop: bool = False) -> Path:
    outs = [work / f"ddp_{case.name}_{batch}_{link}{tag}_{r}.json" for r in (0, 1)]
    shaped = link != "loopback"
    port = 29720 if shaped else free_port()
    master = ADDR[0] if shaped else "127.0.0.1"
    cmds, envs = [], []
    for r in (0, 1):
        cmd = [PY, str(ROOT / "bench/_ddp_train.py"), "--model", case.spec, "--input-shape", case.shape,
               "--batch", str(batch), "--iters", str(iters), "--warmup", "3", "--threads", "1",
               "--rank", str(r), "--world-size", "2", "--master-addr", master, "--master-port", str(port),
               "--out", str(outs[r]), *(["--noop-comm"] if noop else [])]
        cmds.append(in_ns(NS[r], cmd) if shaped else cmd)
        envs.append({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": VETH[r] if shaped else "lo"})
    run_parallel(cmds, envs=envs, timeout=600)
    return outs[0]


# --------------------------------------------------------------------------- prediction


def comm_model_for(profile: CommProfile) -> tuple[CommModel, Cluster]:
    gbps, alpha = fit_link_from_profile(profile)
    cluster = Cluster(nodes=1, gpus_per_node=2, intra_node_gbps=gbps, alpha_us=alpha, device="cpu")
    return CommModel.fit(observations_from_profile(profile, cluster)), cluster


def comm_times(model: CommModel, cluster: Cluster, sizes: list[int], link: str) -> list[CommTime]:
    from planner.models.comm import CommQuery

    preds = model.predict_many([CommQuery.from_cluster(s, cluster) for s in sizes])
    return [CommTime(p.p50_ms, p.p90_ms, link) for p in preds]


def predict(models: list[ComputeModel], batch: int, comm: list[CommTime],
            contention: list[Contention], overhead_ms: float, drift: float = 0.0) -> SimulationResult:
    loads = [WorkerLoad(m.predict(batch), m.buckets(batch), batch, m.device, tail_ms=overhead_ms) for m in models]
    return simulate_iteration(loads, comm, samples=400, seed=0, contention=contention, run_spread=drift)


def ddp_overhead(work: Path, case: Case) -> float:
    """DDP's own per-iteration work (ms): no-op-comm DDP period minus the compute profile.

    It copies gradients into and out of the buckets and runs the reducer hooks, so it scales
    with the parameter bytes, not the batch. Each batch size gives an estimate, the difference of
    two noisy medians whose noise grows with the compute time (the machine's drift is a fraction
    of it): they are combined weighted by 1 / compute², which mostly trusts the smallest batch.
    """
    num = den = 0.0
    for b in case.batches:
        noop = json.loads((work / f"ddp_{case.name}_{b}_loopback_noop_0.json").read_text())["periods_ms"]
        compute = model_for(work, case, b).predict(b).total
        weight = 1.0 / max(compute, 1e-3) ** 2
        num += weight * (statistics.median(noop) - compute)
        den += weight
    return max(0.0, num / den)


def bucket_sizes(model: ComputeModel) -> list[int]:
    return sorted({b.size_bytes for batch in model.batch_sizes for b in model.buckets(batch)})


def pooled(paths: list[Path]) -> ComputeModel:
    # Simultaneous and repeated profiles are pooled: which process ran slower is transient
    # (other load, core placement), not a property of a DDP rank; both ranks share the model.
    # Aligned (unless --no-drift): their differences are run-to-run drift, not iteration noise.
    return fit_compute_model(merge_compute_profiles([load_compute_profile(p) for p in paths], align=ALIGN))


def pooled_model(work: Path, case: Case, tag: str = "") -> ComputeModel:
    return pooled(sorted(work.glob(f"compute_{case.name}{tag}_[01].json")))


def fresh_tag(batch: int, link: str = "loopback") -> str:
    return f"_b{batch}" + ("" if link == "loopback" else f"_{link}")


def model_for(work: Path, case: Case, batch: int, link: str = "loopback") -> ComputeModel:
    """The profiles taken right before and right after this batch's DDP runs, pooled (the
    machine's linear drift cancels: their mean time is the runs' mean time); the one before
    alone, or the first profile, in older work dirs."""
    tag = fresh_tag(batch, link)
    paths = [p for t in (tag, f"{tag}_after") for p in sorted(work.glob(f"compute_{case.name}{t}_[01].json"))]
    if not paths:
        return pooled_model(work, case)
    return pooled(paths)


def comm_profile_for(work: Path, case: Case, batch: int, link: str) -> CommProfile:
    """Comm profiles before and after this batch's DDP runs, pooled; older work dirs: the case's one."""
    tag = fresh_tag(batch) + f"_{link}"
    paths = [p for t in (tag, f"{tag}_after") if (p := work / f"comm_{case.name}{t}.json").exists()]
    if not paths:
        return load_comm_profile(work / f"comm_{case.name}_{link}.json")
    return merge_comm_profiles([load_comm_profile(p) for p in paths])


def case_drift(work: Path, case: Case) -> float:
    """Run-to-run spread of this model's speed here: every compute profile of the case (two
    processes at once, before and after each batch's runs; :func:`planner.models.compute.run_spread`)."""
    return run_spread([load_compute_profile(p) for p in sorted(work.glob(f"compute_{case.name}*_[01].json"))])


def block_shift(work: Path, case: Case, batch: int, link: str) -> float:
    """How much the machine's speed moved across one block: |ln| of the ratio of the mean
    iteration time (both processes, every phase) in the profile after the runs to the one before."""
    def total(tag: str) -> float:
        times = []
        for path in sorted(work.glob(f"compute_{case.name}{tag}_[01].json")):
            sample = load_compute_profile(path).sample_for(batch)
            times.append(sum(sample.phases[p].median_ms for p in ("forward", "backward", "optimizer")))
        return statistics.fmean(times)

    tag = fresh_tag(batch, link)
    return abs(math.log(total(f"{tag}_after") / total(tag)))


def measure_block(case: Case, batch: int, link: str, work: Path, args: argparse.Namespace,
                  body: Callable[[], None]) -> None:
    """Run one block (profiles before, ``body``'s runs, profiles after) and keep it when the two
    profiles agree within ``--max-shift``; otherwise the machine changed speed while it ran
    (this VM has spells 20–50 % slower lasting tens of seconds) and the block is measured again,
    up to ``--tries`` times, keeping the steadiest try. Only the profiles decide, never the runs
    or the prediction. Earlier tries are kept under ``tries/`` for inspection."""
    best: tuple[float, Path] | None = None
    for attempt in range(1, args.tries + 1):
        before = set(work.iterdir())
        body()
        made = sorted(set(work.iterdir()) - before)
        shift = block_shift(work, case, batch, link)
        keep = work / "tries" / f"{case.name}_b{batch}_{link}_try{attempt}"
        keep.mkdir(parents=True, exist_ok=True)
        for path in made:
            path.rename(keep / path.name)
        if best is None or shift < best[0]:
            best = (shift, keep)
        if shift <= args.max_shift:
            break
    shift, chosen = best
    for path in chosen.iterdir():
        shutil.copy2(path, work / path.name)
    TRIES[(case.name, batch, link)] = (attempt, shift)


def measure_case(case: Case, work: Path, args: argparse.Namespace) -> None:
    """Profile and train one model on loopback, close together in time (the machine's load drifts).

    The first profile (every batch size) gives the bucket layout for the comm profile; then each
    batch size is one block, profiled right before and right after its DDP runs and predicted
    from both: this machine's speed drifts by several % within minutes, the profile-to-run gap
    should not, and a linear drift cancels."""
    profile_compute(case, work, args.profile_iters)
    sizes = bucket_sizes(pooled_model(work, case))
    lo, hi = sizes[0] // 2, sizes[-1] * 2
    for b in case.batches:
        def block(b: int = b) -> None:
            profile_compute(case, work, args.profile_iters, (b,), f"_b{b}")
            profile_comm(work, f"{case.name}_b{b}_loopback", False, lo, hi, args.comm_repeats)
            run_ddp(case, b, work, "loopback", args.ddp_iters, tag="_noop", noop=True)
            run_ddp(case, b, work, "loopback", args.ddp_iters)
            profile_comm(work, f"{case.name}_b{b}_loopback_after", False, lo, hi, args.comm_repeats)
            profile_compute(case, work, args.profile_iters, (b,), f"_b{b}_after")

        measure_block(case, b, "loopback", work, args, block)
    run_ddp(case, case.batches[0], work, "loopback", args.ddp_iters, tag="_repeat")


def measure_shaped(case: Case, work: Path, args: argparse.Namespace) -> None:
    sizes = bucket_sizes(pooled_model(work, case))
    lo, hi, repeats = sizes[0] // 2, sizes[-1] * 2, max(4, args.comm_repeats // 2)
    for b in case.slow_batches:
        def block(b: int = b) -> None:
            profile_compute(case, work, args.profile_iters, (b,), f"_b{b}_shaped")
            profile_comm(work, f"{case.name}_b{b}_shaped", True, lo, hi, repeats)
            run_ddp(case, b, work, "shaped", max(8, args.ddp_iters // 2))
            profile_comm(work, f"{case.name}_b{b}_shaped_after", True, lo, hi, repeats)
            profile_compute(case, work, args.profile_iters, (b,), f"_b{b}_shaped_after")

        measure_block(case, b, "shaped", work, args, block)


def print_phases(work: Path, cases: list[Case]) -> None:
    """Where the time goes: per-phase medians of both profiler processes and of both DDP ranks
    (no-op comm hook, real, repeat, shaped); the raw view behind the error table."""
    print("\nper-phase medians, ms (forward / backward / optimizer, then the iteration period of DDP runs)")

    def fmt(v: list[float]) -> str:
        return " / ".join(f"{x:6.1f}" for x in v)

    for case in cases:
        for b in case.batches + tuple(x for x in case.slow_batches if x not in case.batches):
            for label, tag in (("profile", ""), ("profile, before", f"_b{b}"), ("profile, after", f"_b{b}_after"),
                               ("shaped, before", f"_b{b}_shaped"), ("shaped, after", f"_b{b}_shaped_after")):
                prof = []
                for i in (0, 1):
                    path = work / f"compute_{case.name}{tag}_{i}.json"
                    doc = json.loads(path.read_text()) if path.exists() else {"samples": []}
                    smp = next((x for x in doc["samples"] if x["batch_size"] == b), None)
                    if smp:
                        prof.append(fmt([smp["phases"][p]["median_ms"] for p in ("forward", "backward", "optimizer")]))
                if prof:
                    print(f"{case.name if not tag else '':12} {b if not tag else '':>4}  {label:15}" + "  |  ".join(prof))
            for tag in ("loopback_noop", "loopback", "loopback_repeat", "shaped"):
                ranks = []
                for r in (0, 1):
                    path = work / f"ddp_{case.name}_{b}_{tag}_{r}.json"
                    if path.exists():
                        d = json.loads(path.read_text())
                        ph = d["phases_ms"]
                        ranks.append(fmt([statistics.median(x[i] for x in ph) for i in range(3)])
                                     + f"  period {statistics.median(d['periods_ms']):6.1f}")
                if ranks:
                    print(f"{'':12} {'':>4}  {tag:15}" + "  |  ".join(ranks))


# --------------------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Srifty local DDP accuracy bench")
    p.add_argument("--workdir", default="/tmp/srifty_accuracy_local")
    p.add_argument("--reuse", action="store_true", help="predict from existing measurements in --workdir")
    p.add_argument("--rate-mbit", type=int, default=1000, help="tbf rate of the shaped link")
    p.add_argument("--profile-iters", type=int, default=10)
    p.add_argument("--ddp-iters", type=int, default=16)
    p.add_argument("--comm-repeats", type=int, default=8)
    p.add_argument("--only", default="", help="comma-separated case names")
    p.add_argument("--phases", action="store_true",
                   help="also print per-phase medians (fwd/bwd/opt ms) of each profile process and each DDP rank")
    p.add_argument("--no-drift", dest="drift", action="store_false",
                   help="pool repeated profiles as they are (their differences count as iteration noise) "
                        "instead of modelling them as run-to-run drift in the predicted p90")
    p.add_argument("--tries", type=int, default=3,
                   help="measure a block again when the profiles before and after it disagree (see --max-shift)")
    p.add_argument("--max-shift", type=float, default=0.05,
                   help="largest |ln(after/before)| of a block's profiles that counts as a steady machine")
    p.add_argument("--pin", action=argparse.BooleanOptionalAction, default=False,
                   help="hold simultaneous measured processes (profilers, DDP ranks) one per CPU")
    p.add_argument("--default-malloc", action="store_true",
                   help="let glibc return freed memory to the system (see MALLOC_ENV: noisy on VMs with page reporting)")
    p.add_argument("--nice", type=int, default=-10,
                   help="niceness of measured processes (negative needs root): shields them from other load")
    return p.parse_args()


def main() -> int:
    global NICE, PIN, ALIGN
    args = parse_args()
    ALIGN = args.drift
    NICE = args.nice if os.geteuid() == 0 or args.nice >= 0 else 0
    PIN = args.pin and shutil.which("taskset") is not None
    if args.default_malloc:
        MALLOC_ENV.clear()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    cases = [c for c in CASES if not args.only or c.name in args.only.split(",")]
    link_name = f"tbf {args.rate_mbit} Mbit/s"
    started = time.monotonic()
    load_before = os.getloadavg()
    skip_reason = None
    if not args.reuse:
        for case in cases:
            measure_case(case, work, args)
        if any(c.slow_batches for c in cases):
            skip_reason = netns_up(args.rate_mbit)
            if skip_reason is None:
                try:
                    for case in cases:
                        if case.slow_batches:
                            measure_shaped(case, work, args)
                finally:
                    netns_down()
        measured_s = time.monotonic() - started
        load_after = os.getloadavg()
        (work / "meta.json").write_text(json.dumps({
            "skip_reason": skip_reason, "link": link_name, "load": [load_before[0], load_after[0]],
            "seconds": measured_s, "pin": PIN, "malloc_env": MALLOC_ENV,
            "tries": [[*k, *v] for k, v in TRIES.items()]}))
    else:
        meta = json.loads((work / "meta.json").read_text()) if (work / "meta.json").exists() else {}
        skip_reason, link_name = meta.get("skip_reason"), meta.get("link", link_name)
        (lb, la), measured_s = meta.get("load", [float("nan")] * 2), meta.get("seconds", float("nan"))
        load_before, load_after = (lb,), (la,)
        TRIES.update({(c, b, link): (n, shift) for c, b, link, n, shift in meta.get("tries", [])})

    rows = []
    for case in cases:
        runs = [(b, "loopback") for b in case.batches]
        runs += [(b, "shaped") for b in case.slow_batches if not skip_reason and (
            (work / f"comm_{case.name}_shaped.json").exists() or (work / f"comm_{case.name}_b{b}_shaped.json").exists())]
        overhead = ddp_overhead(work, case)
        drift = case_drift(work, case) if args.drift else 0.0
        for batch, link in runs:
            model = model_for(work, case, batch, link)
            sizes = [bk.size_bytes for bk in model.buckets(batch)]
            comm_profile = comm_profile_for(work, case, batch, link)
            comm_model, cluster = comm_model_for(comm_profile)
            label = "loopback" if link == "loopback" else link_name
            comm = comm_times(comm_model, cluster, sizes, label)
            contention = Contention.from_comm_profile(comm_profile, sizes)
            sim = predict([model, model], batch, comm, contention, overhead, drift)
            measured = json.loads((work / f"ddp_{case.name}_{batch}_{link}_0.json").read_text())["periods_ms"]
            med = statistics.median(measured)
            repeat = work / f"ddp_{case.name}_{batch}_{link}_repeat_0.json"
            retest = None
            if repeat.exists():
                med2 = statistics.median(json.loads(repeat.read_text())["periods_ms"])
                retest = 100 * abs(med2 - med) / ((med + med2) / 2)
            err = 100 * abs(sim.iteration_ms_p50 - med) / med
            cover = sum(t <= sim.iteration_ms_p90 for t in measured) / len(measured)
            rows.append((case.name, batch, label, len(sizes), sum(sizes) / 2**20, model.predict(batch).total,
                         sum(c.p50_ms for c in comm), sim.iteration_ms_p50, sim.iteration_ms_p90, med, err, cover,
                         sim.bottleneck, retest, overhead, drift, TRIES.get((case.name, batch, link))))

    print(f"\nSrifty local accuracy bench: 2 ranks, gloo, 1 thread per rank, {os.cpu_count()} CPUs; "
          f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; measured at nice {NICE}, "
          f"took {measured_s:.0f} s{' (re-predicted from stored measurements)' if args.reuse else ''}")
    if skip_reason:
        print(f"shaped-link cases SKIPPED: network namespaces unavailable here ({skip_reason})")
    print(f"{'model':12} {'batch':>5} {'link':17} {'buckets':>7} {'MiB':>6} {'compute':>8} {'ddp ovh':>7} {'comm':>8} "
          f"{'pred p50':>9} {'pred p90':>9} {'measured':>9} {'|err| %':>7} {'p90 cover':>9} {'retest %':>8} {'drift %':>7}"
          f" {'tries':>5} {'shift %':>7}  bottleneck")
    for r in rows:
        retest = f"{r[13]:>8.1f}" if r[13] is not None else f"{'':>8}"
        print(f"{r[0]:12} {r[1]:>5} {r[2]:17} {r[3]:>7} {r[4]:>6.1f} {r[5]:>8.1f} {r[14]:>7.1f} {r[6]:>8.1f} {r[7]:>9.1f} "
              f"{r[8]:>9.1f} {r[9]:>9.1f} {r[10]:>7.1f} {r[11]:>8.0%} {retest} {100 * r[15]:>7.1f} "
              + (f"{r[16][0]:>5} {100 * r[16][1]:>7.1f}" if r[16] else f"{'':>5} {'':>7}") + f"  {r[12]}")
    errs = [r[10] for r in rows]
    covers = [r[11] for r in rows]
    retests = [r[13] for r in rows if r[13] is not None]
    print(f"median |error| {statistics.median(errs):.1f} %   max |error| {max(errs):.1f} %   "
          f"mean p90 coverage {statistics.fmean(covers):.0%}   (targets: median <= 5 %, max <= 12 %, coverage >= 85 %)")
    if retests:
        print(f"noise floor: the same DDP run repeated a minute later differs by median {statistics.median(retests):.1f} %, "
              f"max {max(retests):.1f} %")
    print("compute = predicted fwd+bwd+opt per rank (pooled profiles); ddp ovh = DDP's own overhead (no-op comm "
          "hook run minus compute), charged after the last all-reduce; comm = predicted sum of bucket all-reduces "
          "alone; all ms; retest = |run - repeat| / mean, first batch size; drift = run-to-run spread of the model's "
          "compute profiles (before and after each run, two processes each), in the predicted p90 unless --no-drift; "
          "tries = times the block was measured, shift = |ln(after/before)| of its kept profiles")
    if args.phases:
        print_phases(work, cases)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
