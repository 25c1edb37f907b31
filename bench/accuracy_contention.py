"""One rank of a CPU contention measurement: how much an all-reduce and a compute thread slow
each other when they share the cores (bench helper for ``bench/accuracy_local.py``).

DDP on CPUs runs the backward pass on the main thread while gloo all-reduces finished buckets
on its own thread, in the same process.  This helper reproduces that structure: a compute
thread (single-threaded ``torch.mm`` of 256×256 fp32, which releases the GIL) runs next to
timed ``all_reduce`` calls on the main thread, in every rank at once, so all cores are busy as
in DDP.  Per message size it records

* ``alone_ms``  — all-reduce time with the compute thread paused (what a comm profile measures),
* ``loaded_ms`` — all-reduce time while the compute thread runs,
* ``compute_speed`` — compute-thread rate during the loaded all-reduces over its rate with
  the main thread idle (all ranks computing, nobody communicating).

Writes JSON to ``--out``.  The matmul is a stand-in for a backward pass; a convolution or a
memory-bound layer would contend for caches differently.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from datetime import timedelta
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--sizes", required=True, help="comma-separated message sizes in bytes")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master_addr}:{args.master_port}",
                            rank=args.rank, world_size=args.world_size, timeout=timedelta(seconds=300))
    running, stop = threading.Event(), threading.Event()
    count = [0]
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def compute() -> None:
        torch.set_num_threads(1)  # per thread: a new thread would otherwise use every core
        while not stop.is_set():
            if running.wait(timeout=0.05):
                torch.mm(a, b)
                count[0] += 1

    worker = threading.Thread(target=compute, daemon=True)
    worker.start()
    tiny = torch.zeros(1)
    for _ in range(5):
        dist.all_reduce(tiny)

    def compute_rate(seconds: float) -> float:
        running.set()
        dist.barrier()
        c0, t0 = count[0], time.perf_counter()
        time.sleep(seconds)
        return (count[0] - c0) / (time.perf_counter() - t0)

    base_rate = statistics.median(compute_rate(0.5) for _ in range(3))
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        buf = torch.zeros(max(size // 4, 1))
        running.clear()
        time.sleep(0.01)
        dist.all_reduce(buf)
        alone = []
        for _ in range(args.repeats):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            alone.append((time.perf_counter() - t0) * 1e3)
        running.set()
        loaded, ops, spent = [], 0, 0.0
        for _ in range(args.repeats):
            dist.barrier()
            c0, t0 = count[0], time.perf_counter()
            dist.all_reduce(buf)
            t1, c1 = time.perf_counter(), count[0]
            loaded.append((t1 - t0) * 1e3)
            ops, spent = ops + (c1 - c0), spent + (t1 - t0)
        results.append({"size_bytes": size, "alone_ms": statistics.median(alone),
                        "loaded_ms": statistics.median(loaded),
                        "compute_speed": min(1.0, ops / spent / base_rate) if spent > 0 and base_rate > 0 else 1.0})
    stop.set()
    running.set()
    worker.join(timeout=5)
    Path(args.out).write_text(json.dumps({"rank": args.rank, "base_rate_per_s": base_rate, "samples": results}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
