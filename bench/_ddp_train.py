"""One rank of a real DistributedDataParallel training run, timed per iteration (bench helper).

Same model, synthetic data, loss and optimizer as the profiling agent's compute profile
(``profiler.agent``): random ``randn`` inputs, random class labels, cross-entropy,
``SGD(lr=0.01, momentum=0.9)``, ``zero_grad(set_to_none=True)``.  DDP keeps its defaults
(25 MiB buckets, 1 MiB first bucket, buffers broadcast every forward).

With ``--noop-comm`` the bucket all-reduces are replaced by a hook that returns at once, which
leaves DDP's own work (gradient copies into and out of the buckets, hooks, the per-forward
buffer broadcast) — the framework overhead a plain compute profile does not contain.

The measured quantity is the iteration *period* on rank 0: the time between the ends of two
consecutive optimizer steps, which is what the simulator predicts.  Writes JSON to ``--out``.

    python bench/_ddp_train.py --model torchvision:resnet18 --input-shape 3,32,32 --batch 16 \
        --rank 0 --world-size 2 --master-addr 127.0.0.1 --master-port 29600 --out r0.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--input-shape", required=True)
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument(
        "--noop-comm",
        action="store_true",
        help="replace every bucket all-reduce by a no-op comm hook: DDP's own overhead only",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as fn

    from workload.specs import load_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.rank)
    shape = tuple(int(x) for x in args.input_shape.split(","))
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{args.master_addr}:{args.master_port}",
        rank=args.rank,
        world_size=args.world_size,
        timeout=timedelta(seconds=120),
    )
    model = torch.nn.parallel.DistributedDataParallel(
        load_model(args.model, args.num_classes, shape, allow_code=True)
    )
    if args.noop_comm:

        def noop(_state, bucket):  # noqa: ANN001 - DDP inspects real (non-string) annotations, so none
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        model.register_comm_hook(None, noop)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, *shape)
    y = torch.randint(0, args.num_classes, (args.batch,))

    def step() -> tuple[float, float, float, float]:
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        out = model(x)
        loss = fn.cross_entropy(out.float(), y) if out.dim() == 2 else out.float().pow(2).mean()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        return t0, t1, t2, t3

    for _ in range(args.warmup):
        step()
    dist.barrier()
    ends, phases = [time.perf_counter()], []
    for _ in range(args.iters):
        t0, t1, t2, t3 = step()
        ends.append(t3)
        phases.append([(t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3])
    periods = [(b - a) * 1e3 for a, b in zip(ends, ends[1:], strict=False)]
    Path(args.out).write_text(
        json.dumps(
            {
                "rank": args.rank,
                "model": args.model,
                "batch": args.batch,
                "threads": args.threads,
                "periods_ms": periods,
                "phases_ms": phases,
                "pid": os.getpid(),
            }
        )
    )
    dist.barrier()  # the peer has finished its last collective too
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Skip interpreter teardown: now and then a gloo/DDP thread still joinable at exit aborts the
    # process ("terminate called without an active exception") after its results were written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
