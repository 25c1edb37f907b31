"""A tiny but real DistributedDataParallel training (gloo, CPU) that reports to Srifty.

Run under torchrun, which sets RANK/WORLD_SIZE/MASTER_ADDR; the job's SRIFTY_SERVER,
SRIFTY_JOB_ID and SRIFTY_TOKEN come from the environment, exactly as on a launched node::

    SRIFTY_SERVER=http://127.0.0.1:8000 SRIFTY_JOB_ID=1 SRIFTY_TOKEN=... \\
      python -m torch.distributed.run --standalone --nproc-per-node 2 tests/browser/ddp_train.py

Each rank times its iterations with ``Reporter.timer`` and posts them in small batches, so the
job page's chart fills in while training runs. Prints one JSON line per rank; exits 1 when a
report was not accepted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--input-shape", default="3,16,16")
    p.add_argument("--pause-s", type=float, default=0.1, help="idle time between iterations (untimed)")
    p.add_argument(
        "--input-wait-s",
        type=float,
        default=0.0,
        help="time each timed iteration waits for its batch (an input-bound loader)",
    )
    args = p.parse_args(argv)

    import torch
    import torch.distributed as dist
    import torch.nn.functional as fn

    from examples.tiny_model import build
    from profiler.agent.report import Reporter

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(rank)
    shape = tuple(int(x) for x in args.input_shape.split(","))
    model = torch.nn.parallel.DistributedDataParallel(build(num_classes=10, input_shape=shape))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, *shape)
    y = torch.randint(0, 10, (args.batch,))

    reporter = Reporter.from_env(batch_size=5, flush_interval_s=0.5)
    if not isinstance(reporter, Reporter):
        print("SRIFTY_SERVER / SRIFTY_JOB_ID / SRIFTY_TOKEN are not set", file=sys.stderr)
        return 2
    for i in range(1, args.iters + 1):
        with reporter.timer(samples=args.batch, iteration=i):
            time.sleep(args.input_wait_s)  # the batch is late: the step waits for its loader
            opt.zero_grad(set_to_none=True)
            fn.cross_entropy(model(x), y).backward()
            opt.step()
        time.sleep(args.pause_s)
    flushed = reporter.flush(timeout_s=30)
    reporter.close()
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"rank": rank, "sent": reporter.sent, "dropped": reporter.dropped, "flushed": flushed}))
    return 0 if flushed and reporter.sent == args.iters and not reporter.dropped else 1


if __name__ == "__main__":
    sys.exit(main())
