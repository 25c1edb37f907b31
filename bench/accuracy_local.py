"""End-to-end accuracy of Srifty's DDP prediction on this machine (CPU, gloo, 2 processes).

For each model and batch size one *block* of interleaved measurements: ``--rounds`` rounds of
(compute profile, comm profile, no-op-comm DDP run, DDP run), then a last compute and comm
profile — this VM's speed moves by 10–25 % over seconds, so both sides of the comparison sample
the same spells and are pooled over the block:

1. profile compute with the agent (``python -m profiler.agent compute``), one thread per process,
   **two profiler processes at once** — a 2-rank DDP job keeps both cores busy, so a profile
   taken alone on an idle machine would be optimistic (shared L3 cache, memory bandwidth);
   their per-iteration samples, at every round boundary, are pooled into the compute model of
   both simulated ranks (a linear drift of the machine's speed cancels);
2. profile gloo all-reduce with 2 ranks (``python -m profiler.agent comm``) over the range of the
   model's bucket sizes, on loopback and, when network namespaces work here, over a veth pair
   shaped by ``tc tbf`` — also at every round boundary, pooled;
3. (in step 2) the agent also measures each all-reduce's CPU share, process CPU time over wall
   time: on a CPU the gloo threads and the backward pass share the cores (here one rank per
   core, no spare one), so only the part of an all-reduce that waits on the link overlaps the
   backward; the CPU-bound part slows it (``Contention.from_comm_profile``). Over the shaped
   link the measured share holds; on loopback the wait is for the peer's CPU, busy with its own
   backward in training, so the whole all-reduce counts as CPU work (``same_host``);
4. measure DDP's own overhead: a DDP run whose all-reduces are replaced by a no-op comm hook
   (``--noop-comm``), minus the compute profile, per batch size — gradient copies into and out
   of the buckets, reducer hooks, the per-forward buffer broadcast; no communication is
   involved — and the training loop's own per-iteration noise: the spread of those no-op runs
   beyond the spread the simulator gives them;
5. predict the 2-rank DDP iteration with :mod:`planner.simulator` (comm model fitted on step 2,
   each bucket's all-reduce drawn from the measured times of the nearest profiled size — gloo's
   small messages take ~0.4 ms or ~3–5 ms here, two modes — contention from step 3, overhead
   from step 4 charged after the last all-reduce; the phases of a rank drawn with the
   correlation their profile shows; the run-to-run drift between the model's repeated compute
   profiles, :func:`planner.perf.compute.run_spread`, and the loop noise of step 4 widen the
   predicted p90);
6. run real ``DistributedDataParallel`` training (``bench/_ddp_train.py``, gloo, 2 processes,
   ``torch.set_num_threads(1)``) once per round and compare the pooled per-iteration periods with
   the prediction; the spread of the rounds' medians shows the machine's own noise floor.

Prints: model, batch, link, predicted p50 ms, measured median ms, |error| %, share of measured
iterations at or below the predicted p90; then median and max error.  ``--workdir`` keeps the
profiles and runs; ``--reuse`` re-predicts from them without measuring again; ``--phases`` adds
the per-phase medians of every profile process and DDP rank (where an error comes from).

Run as root (namespaces, priority): ``.venv/bin/python bench/accuracy_local.py`` — 12 to 26 minutes
with 3 rounds, as fast or slow as the VM is that day (703–1549 s measured; ``--rounds 2``: ~2/3).
Measured processes run at ``--nice -10`` in their own scheduler autogroup, which shields them
from other work on the machine without starving it; the load average is printed. They keep
freed memory (``MALLOC_ENV``), which removes this VM's host-fault noise.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.hardware import Cluster  # noqa: E402
from planner.perf.comm import (  # noqa: E402
    CommModel,
    CommQuery,
    fit_link_from_profile,
    observations_from_profile,
    time_ratios,
)
from planner.perf.compute import ComputeModel, fit_compute_model, run_spread  # noqa: E402
from planner.profiles import (  # noqa: E402
    CommProfile,
    load_comm_profile,
    load_compute_profile,
    merge_comm_profiles,
    merge_compute_profiles,
)
from planner.simulator import (  # noqa: E402
    Z90,
    CommTime,
    Contention,
    SimulationResult,
    WorkerLoad,
    simulate_iteration,
)
from profiler.agent.comm import free_port  # noqa: E402

PY = sys.executable
NS = ("srbench_a", "srbench_b")
VETH = ("srbench_va", "srbench_vb")
ADDR = ("10.200.0.1", "10.200.0.2")


@dataclass(frozen=True)
class Case:
    name: str
    spec: str
    shape: str
    batches: tuple[int, ...]
    slow_batches: tuple[int, ...] = ()  # batch sizes also run over the shaped link


CASES = (
    Case("tinycnn", "examples.tiny_model:build", "3,32,32", (16, 64), (64,)),
    Case("resnet18", "torchvision:resnet18", "3,32,32", (8, 32), (32,)),
    Case("alexnet", "torchvision:alexnet", "3,64,64", (8, 32)),
    Case("transformer", "examples.tiny_model:build_transformer", "32,64", (16, 64), (16,)),
)


@dataclass(frozen=True)
class Row:
    """One line of the table: a (model, batch, link) block, its prediction and its measurement."""

    model: str
    batch: int
    link: str
    sizes: list[int]  # bucket bytes
    compute: float  # predicted fwd + bwd + opt per rank, ms
    overhead: float  # DDP's own work, ms
    comm: float  # predicted all-reduces alone, summed, ms
    sim: SimulationResult
    measured: float  # median DDP period, every round pooled, ms
    cover: float  # share of measured periods at or below the predicted p90
    rounds: int
    spread: float | None  # the rounds' medians: (largest - smallest) / mean
    drift: float
    noise: float

    @property
    def error(self) -> float:
        return 100 * abs(self.sim.iteration_ms_p50 - self.measured) / self.measured


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
MALLOC_ENV = {
    "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=17179869184"
}


def niced(cmd: list[str]) -> list[str]:
    return ["nice", "-n", str(NICE), *cmd] if NICE else cmd


def spawn(cmd: list[str], env: dict) -> subprocess.Popen:
    """Start a measured process in its own session; with the kernel's autogroup scheduling
    (``/proc/sys/kernel/sched_autogroup_enabled``) a plain ``nice`` only ranks processes inside
    one session, so the new session's autogroup gets the niceness too."""
    proc = subprocess.Popen(
        niced(cmd),
        env={**os.environ, **MALLOC_ENV, **env},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
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
        ["ip", "netns", "add", NS[0]],
        ["ip", "netns", "add", NS[1]],
        [
            "ip",
            "link",
            "add",
            VETH[0],
            "netns",
            NS[0],
            "type",
            "veth",
            "peer",
            "name",
            VETH[1],
            "netns",
            NS[1],
        ],
    ]
    for i in (0, 1):
        steps += [
            ["ip", "-n", NS[i], "addr", "add", f"{ADDR[i]}/24", "dev", VETH[i]],
            ["ip", "-n", NS[i], "link", "set", "lo", "up"],
            ["ip", "-n", NS[i], "link", "set", VETH[i], "up"],
            [
                "tc",
                "-n",
                NS[i],
                "qdisc",
                "add",
                "dev",
                VETH[i],
                "root",
                "tbf",
                "rate",
                f"{rate_mbit}mbit",
                "burst",
                "256kb",
                "latency",
                "200ms",
            ],
        ]
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


def profile_compute(
    case: Case, work: Path, iters: int, batches: tuple[int, ...] = (), tag: str = ""
) -> list[Path]:
    outs = [work / f"compute_{case.name}{tag}_{i}.json" for i in (0, 1)]
    batch_list = ",".join(str(b) for b in batches or case.batches)
    cmds = [
        [
            PY,
            "-m",
            "profiler.agent",
            "compute",
            "--model",
            case.spec,
            "--input-shape",
            case.shape,
            "--batch-sizes",
            batch_list,
            "--device",
            "cpu",
            "--threads",
            "1",
            "--num-classes",
            "10",
            "--iters",
            str(iters),
            "--warmup",
            "3",
            "--min-iters",
            str(iters),
            "--max-seconds-per-size",
            "60",
            "--out",
            str(o),
            "-q",
        ]
        for o in outs
    ]
    run_parallel(cmds, envs=[{"OMP_NUM_THREADS": "1"}] * 2)
    return outs


def size_arg(n: int) -> str:
    return f"{max(1, n // 1024)}KB"


def profile_comm(work: Path, name: str, shaped: bool, lo: int, hi: int, repeats: int) -> Path:
    """Agent comm profile over [lo, hi] bytes (factor 2), on loopback or across the namespaces."""
    out = work / f"comm_{name}.json"
    base = [
        PY,
        "-m",
        "profiler.agent",
        "comm",
        "--world-size",
        "2",
        "--backend",
        "gloo",
        "--sizes",
        f"{size_arg(lo)}..{size_arg(hi)}",
        "--repeats",
        str(repeats),
        "--warmup",
        "2",
        "-q",
    ]
    if not shaped:
        run([*base, "--out", str(out)], env={"OMP_NUM_THREADS": "1"})
        return out
    cmds = [
        in_ns(
            NS[r],
            [
                *base,
                "--rank",
                str(r),
                "--master-addr",
                ADDR[0],
                "--master-port",
                "29710",
                "--out",
                str(out if r == 0 else work / f"comm_{name}_rank1.json"),
            ],
        )
        for r in (0, 1)
    ]
    envs = [{"GLOO_SOCKET_IFNAME": VETH[r], "OMP_NUM_THREADS": "1"} for r in (0, 1)]
    run_parallel(cmds, envs=envs)
    return out


def run_ddp(
    case: Case, batch: int, work: Path, link: str, iters: int, tag: str = "", noop: bool = False
) -> Path:
    outs = [work / f"ddp_{case.name}_{batch}_{link}{tag}_{r}.json" for r in (0, 1)]
    shaped = link != "loopback"
    port = 29720 if shaped else free_port()
    master = ADDR[0] if shaped else "127.0.0.1"
    cmds, envs = [], []
    for r in (0, 1):
        cmd = [
            PY,
            str(ROOT / "bench/_ddp_train.py"),
            "--model",
            case.spec,
            "--input-shape",
            case.shape,
            "--batch",
            str(batch),
            "--iters",
            str(iters),
            "--warmup",
            "3",
            "--threads",
            "1",
            "--rank",
            str(r),
            "--world-size",
            "2",
            "--master-addr",
            master,
            "--master-port",
            str(port),
            "--out",
            str(outs[r]),
            *(["--noop-comm"] if noop else []),
        ]
        cmds.append(in_ns(NS[r], cmd) if shaped else cmd)
        envs.append({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": VETH[r] if shaped else "lo"})
    run_parallel(cmds, envs=envs, timeout=600)
    return outs[0]


# --------------------------------------------------------------------------- prediction


def comm_model_for(profile: CommProfile) -> tuple[CommModel, Cluster]:
    gbps, alpha = fit_link_from_profile(profile)
    cluster = Cluster(nodes=1, gpus_per_node=2, intra_node_gbps=gbps, alpha_us=alpha, device="cpu")
    return CommModel.fit(observations_from_profile(profile, cluster)), cluster


def comm_times(
    model: CommModel, cluster: Cluster, sizes: list[int], link: str, profile: CommProfile
) -> list[CommTime]:
    """Per bucket: the comm model's p50/p90 and the profile's measured time distribution at the
    nearest size (bootstrapped by the simulator: gloo's small messages are two-mode here)."""
    preds = model.predict_many([CommQuery.from_cluster(s, cluster) for s in sizes])
    return [
        CommTime(p.p50_ms, p.p90_ms, link, time_ratios(profile, s)) for p, s in zip(preds, sizes, strict=True)
    ]


def predict(
    models: list[ComputeModel],
    batch: int,
    comm: list[CommTime],
    contention: list[Contention],
    overhead_ms: float,
    drift: float = 0.0,
    noise: float = 0.0,
) -> SimulationResult:
    loads = [
        WorkerLoad(m.predict(batch), m.buckets(batch), batch, m.device, tail_ms=overhead_ms) for m in models
    ]
    return simulate_iteration(
        loads, comm, samples=400, seed=0, contention=contention, run_spread=drift, iteration_spread=noise
    )


def ddp_overhead(work: Path, case: Case, batch: int) -> float:
    """DDP's own per-iteration work (ms) at ``batch``: the block's no-op-comm DDP period (every
    round pooled) minus its pooled compute profile; at least 0.

    It copies gradients into and out of the buckets and runs the reducer hooks (scaling with the
    parameter bytes), and its ranks run in step — the buffer broadcast of every forward couples
    them — where the profiler processes do not, which slows the compute with the batch (measured
    here: tinycnn 9 → 19 ms, resnet18 31 → 47 ms, alexnet 101 → 118 ms from the small to the
    large batch; the transformer, without buffers, 0). So it is measured per batch size, in the
    same rounds as the runs it is charged to, which samples the same spells of the machine."""
    noop = [t for run_ in ddp_rounds(work, case, batch, "loopback", noop=True) for t in run_]
    return max(0.0, statistics.median(noop) - model_for(work, case, batch).predict(batch).total)


def upper_spread(times: list[float]) -> float:
    """``ln(p90 / p50) / 1.2816``: the relative spread of the upper tail (what a p90 covers)."""
    return max(0.0, math.log(float(numpy.quantile(times, 0.9)) / float(numpy.quantile(times, 0.5))) / Z90)


def ddp_noise(work: Path, case: Case, overheads: dict[int, float]) -> float:
    """The training loop's own per-iteration noise (``iteration_spread`` of the simulator): the
    upper-tail spread of the no-op-comm DDP runs, each round relative to its own median (the
    drift between rounds is ``run_spread``'s), beyond the spread the simulator gives the same
    no-op run (compute profile plus overhead, no communication, no drift)::

        s_it² = mean over batch sizes of (s_no-op² − s_sim²),  at least 0

    Measured here: no-op runs spread 0.09–0.16, the simulation of them 0.04–0.13."""
    diffs = []
    for b in case.batches:
        rounds = ddp_rounds(work, case, b, "loopback", noop=True)
        measured = upper_spread([t / statistics.median(r) for r in rounds for t in r])
        model = model_for(work, case, b)
        loads = [WorkerLoad(model.predict(b), model.buckets(b), b, model.device, tail_ms=overheads[b])] * 2
        sim = simulate_iteration(loads, [0.0] * len(loads[0].buckets), samples=2000, seed=1)
        diffs.append(measured**2 - (math.log(sim.iteration_ms_p90 / sim.iteration_ms_p50) / Z90) ** 2)
    return math.sqrt(max(statistics.fmean(diffs), 0.0))


def bucket_sizes(model: ComputeModel) -> list[int]:
    return sorted({b.size_bytes for batch in model.batch_sizes for b in model.buckets(batch)})


def pooled(paths: list[Path]) -> ComputeModel:
    # Simultaneous and repeated profiles are pooled: which process ran slower is transient
    # (other load, core placement), not a property of a DDP rank; both ranks share the model.
    # Aligned (unless --no-drift): their differences are run-to-run drift, not iteration noise.
    return fit_compute_model(merge_compute_profiles([load_compute_profile(p) for p in paths], align=ALIGN))


def block_tag(batch: int, link: str) -> str:
    return f"_b{batch}_{link}"


def model_for(work: Path, case: Case, batch: int, link: str = "loopback") -> ComputeModel:
    """Every compute profile of this batch's block pooled: one before each round of DDP runs and
    one after the last, so the profiles sample the machine's drift over the block as the runs
    do (a linear drift cancels exactly; spells of a few seconds average out over the rounds)."""
    paths = sorted(work.glob(f"compute_{case.name}{block_tag(batch, link)}_r*_[01].json"))
    if not paths:
        raise FileNotFoundError(f"no compute profiles of {case.name} batch {batch} ({link}) in {work}")
    return pooled(paths)


def comm_profile_for(work: Path, case: Case, batch: int, link: str) -> CommProfile:
    """The block's comm profiles (one per round boundary, as the compute profiles), pooled."""
    paths = [
        p
        for p in sorted(work.glob(f"comm_{case.name}{block_tag(batch, link)}_r*.json"))
        if not p.name.endswith("_rank1.json")
    ]
    if not paths:
        raise FileNotFoundError(f"no comm profiles of {case.name} batch {batch} ({link}) in {work}")
    return merge_comm_profiles([load_comm_profile(p) for p in paths])


def ddp_rounds(work: Path, case: Case, batch: int, link: str, noop: bool = False) -> list[list[float]]:
    """Rank 0's iteration periods (ms) of each round's DDP run, real or no-op comm, in order."""
    kind = "_noop" if noop else ""
    paths = sorted(
        work.glob(f"ddp_{case.name}_{batch}_{link}{kind}_r*_0.json"),
        key=lambda p: int(p.name.rsplit("_r", 1)[1].split("_")[0]),
    )
    return [json.loads(p.read_text())["periods_ms"] for p in paths]


def round_spread(rounds: list[list[float]]) -> float | None:
    """(largest - smallest) / mean of the rounds' median periods: the same DDP run, a few seconds
    apart, on this machine — the noise floor any prediction is compared against."""
    if len(rounds) < 2:
        return None
    meds = [statistics.median(r) for r in rounds]
    return (max(meds) - min(meds)) / statistics.fmean(meds)


def case_drift(work: Path, case: Case) -> float:
    """Run-to-run spread of this model's speed here: every compute profile of the case (two
    processes at once, at every round boundary of every block;
    :func:`planner.perf.compute.run_spread`)."""
    return run_spread([load_compute_profile(p) for p in sorted(work.glob(f"compute_{case.name}*_[01].json"))])


def measure_block(
    case: Case,
    batch: int,
    link: str,
    work: Path,
    args: argparse.Namespace,
    *,
    lo: int,
    hi: int,
    comm_repeats: int,
    ddp_iters: int,
    noop: bool,
) -> None:
    """One batch size on one link, interleaved: ``--rounds`` rounds of (compute profile, comm
    profile, [no-op-comm DDP run,] DDP run), then a last compute and comm profile.

    This VM's speed moves by ±10–25 % over 5–10 s windows (two busy processes, 5 s medians of
    one model ranging 170–236 ms) and by more in spells; a single profile and a single run a
    minute apart differ by that much whatever the model. Interleaving samples the same spells
    for both sides of the comparison, and every measurement is used (an earlier version
    re-measured a whole block when its profiles disagreed: most blocks needed 2–3 tries, and
    the discarded tries were data)."""
    shaped = link != "loopback"

    def boundary(k: int) -> None:
        profile_compute(case, work, args.profile_iters, (batch,), f"{block_tag(batch, link)}_r{k}")
        profile_comm(work, f"{case.name}{block_tag(batch, link)}_r{k}", shaped, lo, hi, comm_repeats)

    for k in range(args.rounds):
        boundary(k)
        if noop:
            run_ddp(case, batch, work, link, ddp_iters, tag=f"_noop_r{k}", noop=True)
        run_ddp(case, batch, work, link, ddp_iters, tag=f"_r{k}")
    boundary(args.rounds)


def comm_size_range(work: Path, case: Case) -> tuple[int, int]:
    """Bytes the comm profiles cover: half the smallest to twice the largest bucket of the case's
    first profile (every batch size)."""
    sizes = bucket_sizes(pooled(sorted(work.glob(f"compute_{case.name}_[01].json"))))
    return sizes[0] // 2, sizes[-1] * 2


def measure_case(case: Case, work: Path, args: argparse.Namespace) -> None:
    """Profile and train one model on loopback: a first profile of every batch size gives the
    bucket layout (the comm profiles' size range), then one interleaved block per batch size."""
    profile_compute(case, work, args.profile_iters)
    lo, hi = comm_size_range(work, case)
    for b in case.batches:
        measure_block(
            case,
            b,
            "loopback",
            work,
            args,
            lo=lo,
            hi=hi,
            comm_repeats=args.comm_repeats,
            ddp_iters=args.ddp_iters,
            noop=True,
        )


def measure_shaped(case: Case, work: Path, args: argparse.Namespace) -> None:
    lo, hi = comm_size_range(work, case)
    for b in case.slow_batches:
        measure_block(
            case,
            b,
            "shaped",
            work,
            args,
            lo=lo,
            hi=hi,
            comm_repeats=max(4, args.comm_repeats // 2),
            ddp_iters=max(8, args.ddp_iters // 2),
            noop=False,
        )


def print_phases(work: Path, cases: list[Case]) -> None:
    """Where the time goes: per-phase medians of both profiler processes at every round boundary
    and of both DDP ranks in every round (no-op comm hook, real); the raw view behind the table."""
    print("\nper-phase medians, ms (forward / backward / optimizer, then the iteration period of DDP runs)")

    def fmt(v: list[float]) -> str:
        return " / ".join(f"{x:6.1f}" for x in v)

    for case in cases:
        blocks = [(b, "loopback") for b in case.batches] + [(b, "shaped") for b in case.slow_batches]
        for b, link in blocks:
            print(f"{case.name:12} {b:>4}  {link}")
            for k in itertools.count():
                prof = []
                for i in (0, 1):
                    path = work / f"compute_{case.name}{block_tag(b, link)}_r{k}_{i}.json"
                    if path.exists():
                        smp = load_compute_profile(path).sample_for(b)
                        prof.append(
                            fmt([smp.phases[p].median_ms for p in ("forward", "backward", "optimizer")])
                        )
                if not prof:
                    break
                print(f"{'':19}profile r{k}      " + "  |  ".join(prof))
                for kind in ("_noop", ""):
                    ranks = []
                    for r in (0, 1):
                        path = work / f"ddp_{case.name}_{b}_{link}{kind}_r{k}_{r}.json"
                        if path.exists():
                            d = json.loads(path.read_text())
                            ph = d["phases_ms"]
                            ranks.append(
                                fmt([statistics.median(x[i] for x in ph) for i in range(3)])
                                + f"  period {statistics.median(d['periods_ms']):6.1f}"
                            )
                    if ranks:
                        print(f"{'':19}{'ddp no-op' if kind else 'ddp':9} r{k}    " + "  |  ".join(ranks))


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
    p.add_argument(
        "--phases",
        action="store_true",
        help="also print per-phase medians (fwd/bwd/opt ms) of each profile process and each DDP rank",
    )
    p.add_argument(
        "--no-drift",
        dest="drift",
        action="store_false",
        help="pool repeated profiles as they are (their differences count as iteration noise) "
        "instead of modelling them as run-to-run drift in the predicted p90",
    )
    p.add_argument(
        "--no-loop-noise",
        dest="loop_noise",
        action="store_false",
        help="leave the training loop's own per-iteration noise (measured on the no-op-comm DDP runs) "
        "out of the predicted p90",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds per block: (compute profile, comm profile, DDP runs) repeated, then a last profile",
    )
    p.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="hold simultaneous measured processes (profilers, DDP ranks) one per CPU",
    )
    p.add_argument(
        "--default-malloc",
        action="store_true",
        help="let glibc return freed memory to the system (see MALLOC_ENV: noisy on VMs with page reporting)",
    )
    p.add_argument(
        "--nice",
        type=int,
        default=-10,
        help="niceness of measured processes (negative needs root): shields them from other load",
    )
    args = p.parse_args()
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    return args


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
    load_before: tuple[float, ...] = os.getloadavg()
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
        load_after: tuple[float, ...] = os.getloadavg()
        (work / "meta.json").write_text(
            json.dumps(
                {
                    "skip_reason": skip_reason,
                    "link": link_name,
                    "load": [load_before[0], load_after[0]],
                    "seconds": measured_s,
                    "pin": PIN,
                    "malloc_env": MALLOC_ENV,
                    "rounds": args.rounds,
                }
            )
        )
    else:
        meta = json.loads((work / "meta.json").read_text()) if (work / "meta.json").exists() else {}
        skip_reason, link_name = meta.get("skip_reason"), meta.get("link", link_name)
        (lb, la), measured_s = meta.get("load", [float("nan")] * 2), meta.get("seconds", float("nan"))
        load_before, load_after = (lb,), (la,)

    rows = []
    for case in cases:
        runs = [(b, "loopback") for b in case.batches]
        runs += [
            (b, "shaped")
            for b in case.slow_batches
            if not skip_reason and any(work.glob(f"ddp_{case.name}_{b}_shaped_r*_0.json"))
        ]
        # per batch size, from the loopback block's no-op runs (a shaped block has none: DDP's
        # own work does not depend on the link)
        overheads = {b: ddp_overhead(work, case, b) for b in case.batches}
        drift = case_drift(work, case) if args.drift else 0.0
        noise = ddp_noise(work, case, overheads) if args.loop_noise else 0.0
        for batch, link in runs:
            model = model_for(work, case, batch, link)
            sizes = [bk.size_bytes for bk in model.buckets(batch)]
            comm_profile = comm_profile_for(work, case, batch, link)
            comm_model, cluster = comm_model_for(comm_profile)
            label = "loopback" if link == "loopback" else link_name
            comm = comm_times(comm_model, cluster, sizes, label, comm_profile)
            contention = Contention.from_comm_profile(comm_profile, sizes, same_host=link == "loopback")
            sim = predict([model, model], batch, comm, contention, overheads[batch], drift, noise)
            rounds = ddp_rounds(work, case, batch, link)
            measured = [t for r in rounds for t in r]
            med = statistics.median(measured)
            rows.append(
                Row(
                    case.name,
                    batch,
                    label,
                    sizes,
                    model.predict(batch).total,
                    overheads[batch],
                    sum(c.p50_ms for c in comm),
                    sim,
                    med,
                    sum(t <= sim.iteration_ms_p90 for t in measured) / len(measured),
                    len(rounds),
                    round_spread(rounds),
                    drift,
                    noise,
                )
            )

    print(
        f"\nSrifty local accuracy bench: 2 ranks, gloo, 1 thread per rank, {os.cpu_count()} CPUs; "
        f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; measured at nice {NICE}, "
        f"took {measured_s:.0f} s{' (re-predicted from stored measurements)' if args.reuse else ''}"
    )
    if skip_reason:
        print(f"shaped-link cases SKIPPED: network namespaces unavailable here ({skip_reason})")
    print(
        f"{'model':12} {'batch':>5} {'link':17} {'buckets':>7} {'MiB':>6} {'compute':>8} {'ddp ovh':>7} {'comm':>8} "
        f"{'pred p50':>9} {'pred p90':>9} {'measured':>9} {'|err| %':>7} {'p90 cover':>9} {'rounds':>6} {'spread %':>8}"
        f" {'drift %':>7} {'noise %':>7}  bottleneck"
    )
    for r in rows:
        spread = f"{100 * r.spread:>8.1f}" if r.spread is not None else f"{'':>8}"
        print(
            f"{r.model:12} {r.batch:>5} {r.link:17} {len(r.sizes):>7} {sum(r.sizes) / 2**20:>6.1f} {r.compute:>8.1f} "
            f"{r.overhead:>7.1f} {r.comm:>8.1f} {r.sim.iteration_ms_p50:>9.1f} {r.sim.iteration_ms_p90:>9.1f} "
            f"{r.measured:>9.1f} {r.error:>7.1f} {r.cover:>8.0%} {r.rounds:>6} {spread} {100 * r.drift:>7.1f} "
            f"{100 * r.noise:>7.1f}  {r.sim.bottleneck}"
        )
    errs = [r.error for r in rows]
    spreads = [100 * r.spread for r in rows if r.spread is not None]
    print(
        f"median |error| {statistics.median(errs):.1f} %   max |error| {max(errs):.1f} %   "
        f"mean p90 coverage {statistics.fmean(r.cover for r in rows):.0%}   "
        f"(targets: median <= 5 %, max <= 12 %, coverage >= 85 %)"
    )
    if spreads:
        print(
            f"noise floor: within a block, the rounds' median DDP periods (same run, seconds apart) spread by "
            f"median {statistics.median(spreads):.1f} %, max {max(spreads):.1f} % (largest - smallest, over their mean)"
        )
    print(
        "compute = predicted fwd+bwd+opt per rank (pooled profiles); ddp ovh = DDP's own overhead at this batch "
        "size (no-op comm hook runs minus compute), charged after the last all-reduce; comm = predicted sum of "
        "bucket all-reduces alone; all ms; measured = median period of every round's DDP run pooled; spread = "
        "noise floor above; drift = run-to-run spread of the model's compute profiles (every round boundary, two "
        "processes each), in the predicted p90 unless --no-drift; noise = the training loop's own per-iteration "
        "spread (no-op runs beyond their simulation), in the predicted p90 unless --no-loop-noise"
    )
    if args.phases:
        print_phases(work, cases)
    if not args.reuse:
        write_validated(errs)
    return 0


def write_validated(errs: list[float]) -> None:
    """The plan page's "measured" error: this bench's median and p90 |error| (in %)."""
    import datetime

    path = ROOT / "planner/data/validated_errors.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    ordered = sorted(errs)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
    doc["measured"] = {
        "median_pct": round(statistics.median(errs), 1),
        "p90_pct": round(p90, 1),
        "max_pct": round(max(errs), 1),
        "n": len(errs),
        "bench": "bench/accuracy_local.py",
        "measured_at": datetime.date.today().isoformat(),
    }
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    raise SystemExit(main())
