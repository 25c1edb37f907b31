"""The comm profile: ``all_reduce`` time over a geometric ladder of message sizes.

Ranks are started in one of three ways:

* local spawn (default): ``ranks_per_node = world_size / nnodes`` processes on this host,
  started with the ``spawn`` method; with ``--nnodes K --node-rank J --master-addr A`` each
  node runs the same command and its processes take global ranks ``J*ranks_per_node + i``;
* ``--rank R``: this process is exactly rank R (launched by some other tool);
* under ``torchrun`` (``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` set): ``env://`` rendezvous.

NCCL: one process per GPU, ``torch.cuda.set_device(local_rank)`` before the process group
is made (and ``device_id`` passed, so NCCL binds to that GPU at once).

Timing, per size: a few untimed warm-up collectives, then for each repeat a barrier, a
device synchronize, and one timed ``all_reduce`` (CUDA events around it on the current
stream for NCCL - the collective's stream waits on, and is waited on by, that stream;
``perf_counter`` for gloo, whose CPU collectives are synchronous). After the repeats every
rank's times are gathered and the per-repeat maximum over ranks is kept: the collective is
done when its slowest rank is done. Barrier exit skew therefore shows up in the times, as it
does in real training.
"""

from __future__ import annotations

import logging
import os
import socket
import statistics
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from profiler.agent import SCHEMA_VERSION
from profiler.agent.environment import cpu_model, environment, utc_now_iso
from profiler.agent.output import write_profile
from profiler.agent.posting import RetryPolicy
from profiler.agent.run_events import EventPoster, NullEventPoster, SharedSeq
from profiler.agent.stats import summarize
from profiler.agent.units import geometric_sizes

log = logging.getLogger("profiler.agent.comm")

BACKENDS = ("gloo", "nccl")
# Default ladders: gloo on a CPU host is slow and has few cores to spare; NCCL on GPUs
# is fast enough to go to 1 GiB in seconds.
DEFAULT_SIZES = {"gloo": (1024, 64 * 1024**2), "nccl": (1024, 1024**3)}
DEFAULT_REPEATS = {"gloo": 10, "nccl": 20}
DEFAULT_WARMUP = {"gloo": 2, "nccl": 5}
DTYPE_BYTES = 4  # float32 buffers


class CommError(RuntimeError):
    """The comm profile cannot be taken (bad layout, missing GPUs, a rank failed)."""


@dataclass
class CommOptions:
    world_size: int
    out: str
    backend: str = "gloo"
    min_size: int | None = None
    max_size: int | None = None
    factor: int = 2
    repeats: int | None = None
    warmup: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    rank: int | None = None
    nnodes: int = 1
    node_rank: int = 0
    timeout_s: float = 600.0
    report_to: str | None = None
    token: str | None = None
    report_retry: RetryPolicy | None = None
    log_level: int = logging.INFO

    def resolved(self) -> CommOptions:
        out = CommOptions(**{**self.__dict__})
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}")
        low, high = DEFAULT_SIZES[self.backend]
        out.min_size = self.min_size or low
        out.max_size = self.max_size or high
        out.repeats = self.repeats or DEFAULT_REPEATS[self.backend]
        out.warmup = DEFAULT_WARMUP[self.backend] if self.warmup is None else self.warmup
        if self.world_size < 1 or self.nnodes < 1:
            raise ValueError("--world-size and --nnodes must be >= 1")
        if self.world_size % self.nnodes:
            raise ValueError(f"--world-size {self.world_size} is not a multiple of --nnodes {self.nnodes}")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"--node-rank must be in [0, {self.nnodes - 1}]")
        if self.rank is not None and not 0 <= self.rank < self.world_size:
            raise ValueError(f"--rank must be in [0, {self.world_size - 1}]")
        if self.nnodes > 1 and not self.master_addr:
            raise ValueError("--nnodes > 1 needs --master-addr (the address of node 0)")
        if out.min_size > out.max_size:
            raise ValueError("the smallest message size is larger than the largest")
        if out.repeats < 1 or out.warmup < 0:
            raise ValueError("--repeats must be >= 1 and --warmup >= 0")
        return out

    @property
    def ranks_per_node(self) -> int:
        return self.world_size // self.nnodes

    def sizes(self) -> list[int]:
        """The message ladder, rounded to whole float32 elements."""
        assert self.min_size is not None and self.max_size is not None
        rounded = [
            max(DTYPE_BYTES, size // DTYPE_BYTES * DTYPE_BYTES)
            for size in geometric_sizes(self.min_size, self.max_size, self.factor)
        ]
        return sorted(set(rounded))


def bandwidth_gbps(size_bytes: int, time_ms: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in gigabits/s; busbw = algbw * 2(n-1)/n, the nccl-tests all_reduce rule."""
    if time_ms <= 0:
        return 0.0, 0.0
    algbw = size_bytes * 8 / (time_ms / 1000.0) / 1e9
    return algbw, algbw * 2 * (world_size - 1) / world_size


def free_port(host: str = "127.0.0.1") -> int:
    # The port is free now; another process could take it before rank 0 binds it, which is
    # unlikely enough on a profiling host to accept.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _torchrun_env() -> bool:
    return all(
        key in os.environ for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    )


# -- one rank ----------------------------------------------------------------------------


@dataclass
class RankSetup:
    rank: int
    local_rank: int
    init_method: str


class _Collective:
    """One rank's view: device, buffers, timing of a single all_reduce."""

    def __init__(self, options: CommOptions, setup: RankSetup) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.options, self.setup = torch, dist, options, setup
        if options.backend == "nccl":
            if not torch.cuda.is_available() or torch.cuda.device_count() <= setup.local_rank:
                raise CommError(
                    f"nccl rank {setup.rank} needs GPU {setup.local_rank}, "
                    f"but {torch.cuda.device_count() if torch.cuda.is_available() else 0} GPU(s) are visible"
                )
            self.device = torch.device("cuda", setup.local_rank)
            torch.cuda.set_device(self.device)  # before the process group: NCCL binds to it
        else:
            self.device = torch.device("cpu")
        kwargs: dict[str, Any] = {}
        if self.device.type == "cuda":
            kwargs["device_id"] = self.device
        dist.init_process_group(
            options.backend,
            init_method=setup.init_method,
            rank=setup.rank,
            world_size=options.world_size,
            timeout=timedelta(seconds=options.timeout_s),
            **kwargs,
        )

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def timed_all_reduce(self, buffer: Any) -> tuple[float, float | None]:
        """(wall ms, CPU share): the share is the process's CPU time (all threads, user + system)
        over the wall time, for CPU collectives only. It says how much of an all-reduce needs a
        core and how much is waiting on the link: on a CPU cluster only the waiting part can
        overlap the backward pass (see planner.simulator, Contention.from_cpu_share)."""
        torch, dist = self.torch, self.dist
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dist.all_reduce(buffer)
            end.record()
            end.synchronize()
            return start.elapsed_time(end), None
        began, cpu_began = time.perf_counter(), time.process_time()
        dist.all_reduce(buffer)
        wall_s, cpu_s = time.perf_counter() - began, time.process_time() - cpu_began
        return wall_s * 1000.0, (cpu_s / wall_s if wall_s > 0 else None)

    def max_over_ranks(self, times_ms: list[float]) -> list[float]:
        torch, dist = self.torch, self.dist
        mine = torch.tensor(times_ms, dtype=torch.float64, device=self.device)
        gathered = [torch.empty_like(mine) for _ in range(self.options.world_size)]
        dist.all_gather(gathered, mine)
        worst: list[float] = torch.stack(gathered).max(dim=0).values.cpu().tolist()
        return worst

    def hosts(self) -> list[str]:
        names: list[Any] = [None] * self.options.world_size
        self.dist.all_gather_object(names, socket.gethostname())
        return [str(name) for name in names]

    def close(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()


def _first_contact(coll: _Collective, rounds: int = 10) -> None:
    """A few tiny collectives before anything is timed: the first ones pay for connection
    setup (NCCL communicator and channels, gloo pairs), which belongs to no message size."""
    tiny = coll.torch.zeros(1, dtype=coll.torch.float32, device=coll.device)
    for _ in range(rounds):
        coll.dist.all_reduce(tiny)
    coll.dist.barrier()
    coll.sync()


def _measure_size(
    coll: _Collective, size: int, reporter: NullEventPoster, progress: dict[str, Any]
) -> dict[str, Any]:
    options = coll.options
    torch = coll.torch
    buffer = torch.zeros(size // DTYPE_BYTES, dtype=torch.float32, device=coll.device)
    for _ in range(options.warmup or 0):
        coll.dist.all_reduce(buffer)
    coll.sync()
    times: list[float] = []
    shares: list[float] = []
    for i in range(options.repeats or 1):
        # The hold covers the barrier too: if rank 0 waited for a post after the barrier,
        # the other ranks would spend that wait inside their timed all_reduce.
        with reporter.hold():
            coll.dist.barrier()
            coll.sync()
            wall_ms, share = coll.timed_all_reduce(buffer)
        times.append(wall_ms)
        if share is not None:
            shares.append(share)
        progress["done"] += size
        reporter.progress(
            phase="comm",
            size_bytes=size,
            iteration=i,
            time_ms=round(times[-1], 6),
            fraction=round(progress["done"] / progress["total"], 4),
        )
    worst = coll.max_over_ranks(times)
    stats = summarize(worst)
    algbw, busbw = bandwidth_gbps(size, stats["median_ms"], options.world_size)
    log.info("all_reduce %d bytes: median %.4f ms, busbw %.3f Gb/s", size, stats["median_ms"], busbw)
    out = {"size_bytes": size, **stats, "algbw_gbps": algbw, "busbw_gbps": busbw}
    if shares and len(shares) == len(times):
        # The busiest rank's median: the ranks run the same algorithm, one may do more of the
        # reductions or sit on the slower core.
        out["cpu_share"] = round(statistics.median(coll.max_over_ranks(shares)), 4)
    return out


def _document(coll: _Collective, samples: list[dict[str, Any]], hosts: list[str]) -> dict[str, Any]:
    options = coll.options
    device: dict[str, Any] = {"type": coll.device.type, "name": cpu_model()}
    if coll.device.type == "cuda":
        device["name"] = coll.torch.cuda.get_device_name(coll.device)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "comm",
        "created_at": utc_now_iso(),
        "backend": options.backend,
        "world_size": options.world_size,
        "nodes": options.nnodes,
        "ranks_per_node": options.ranks_per_node,
        "op": "all_reduce",
        "dtype": "float32",
        "repeats": options.repeats,
        "warmup": options.warmup,
        "device": device,
        "hosts": hosts,
        "environment": environment(),
        "samples": samples,
    }


def _make_event_poster(options: CommOptions, seq_value: Any | None) -> NullEventPoster:
    if not options.report_to:
        return NullEventPoster()
    seq = SharedSeq(seq_value) if seq_value is not None else None
    return EventPoster(options.report_to, options.token, seq=seq, retry=options.report_retry)


def run_rank(
    options: CommOptions, setup: RankSetup, seq_value: Any | None = None, report_errors: bool = True
) -> dict[str, Any] | None:
    """Run the benchmark as one rank; global rank 0 writes the file and returns the profile.

    ``report_errors=False`` when a parent process reports failures instead (local spawn:
    a rank other than 0 can fail too, and only the parent sees that).
    """
    from profiler.agent.schema import validate_profile

    is_root = setup.rank == 0
    reporter = _make_event_poster(options, seq_value) if is_root else NullEventPoster()
    coll: _Collective | None = None
    try:
        coll = _Collective(options, setup)
        sizes = options.sizes()
        _first_contact(coll)
        progress = {"done": 0, "total": sum(sizes) * (options.repeats or 1)}
        samples = []
        for size in sizes:
            sample = _measure_size(coll, size, reporter, progress)
            samples.append(sample)
            reporter.sample(
                phase="comm",
                size_bytes=size,
                sample=sample,
                fraction=round(progress["done"] / progress["total"], 4),
            )
        hosts = coll.hosts()
        if not is_root:
            return None
        doc = _document(coll, samples, hosts)
        write_profile(doc, options.out)  # the file first: a dead server must not cost it
        validate_profile(doc)
        reporter.result(doc)
        return doc
    except Exception as exc:
        if is_root and report_errors:
            reporter.error(f"comm profile failed on rank 0: {exc}")
        raise
    finally:
        if coll is not None:
            coll.close()
        reporter.close()


def _spawned_rank(local_rank: int, options: CommOptions, master: str, seq_value: Any | None) -> None:
    rank = options.node_rank * options.ranks_per_node + local_rank
    # Every rank logs the same numbers; only rank 0's are worth reading.
    level = options.log_level if rank == 0 else max(options.log_level, logging.WARNING)
    logging.basicConfig(level=level, format=f"%(asctime)s rank {rank} %(message)s")
    run_rank(options, RankSetup(rank, local_rank, master), seq_value, report_errors=False)


def run_comm(options: CommOptions) -> dict[str, Any] | None:
    """Run the comm profile as configured; returns the profile on the node that wrote it."""
    options = options.resolved()
    if options.rank is None and _torchrun_env():
        return _run_torchrun(options)
    if options.rank is not None:
        addr = options.master_addr or "127.0.0.1"
        port = options.master_port or 29500
        local = int(os.environ.get("LOCAL_RANK", options.rank % options.ranks_per_node))
        return run_rank(options, RankSetup(options.rank, local, f"tcp://{addr}:{port}"))
    return _spawn_local(options)


def _run_torchrun(options: CommOptions) -> dict[str, Any] | None:
    world = int(os.environ["WORLD_SIZE"])
    if world != options.world_size:
        raise CommError(f"--world-size {options.world_size} but torchrun's WORLD_SIZE is {world}")
    setup = RankSetup(int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), "env://")
    return run_rank(options, setup)


def _spawn_local(options: CommOptions) -> dict[str, Any] | None:
    import json

    import torch.multiprocessing as mp

    if options.nnodes == 1:
        addr = options.master_addr or "127.0.0.1"
        port = options.master_port or free_port()
        if addr in ("127.0.0.1", "localhost"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # a one-host group stays on loopback
    else:
        addr, port = options.master_addr or "", options.master_port or 29500
    ctx = mp.get_context("spawn")
    seq_value = ctx.Value("q", 0)  # one seq for the rank-0 child and, on failure, this process
    try:
        mp.start_processes(
            _spawned_rank,
            args=(options, f"tcp://{addr}:{port}", seq_value),
            nprocs=options.ranks_per_node,
            join=True,
            start_method="spawn",
        )
    except Exception as exc:
        if options.report_to and options.node_rank == 0:
            reporter = EventPoster(
                options.report_to, options.token, seq=SharedSeq(seq_value), retry=options.report_retry
            )
            reporter.error(f"comm profile failed: {_last_line(exc)}")
            reporter.close(timeout_s=60)
        raise CommError(f"a rank failed: {_last_line(exc)}") from exc
    if options.node_rank != 0:
        return None
    with open(options.out) as handle:
        doc: dict[str, Any] = json.load(handle)
    return doc


def _last_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
