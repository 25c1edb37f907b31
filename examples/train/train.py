"""A small DDP training script for examples/task.yaml: resumes from the newest checkpoint.

torchrun sets RANK/WORLD_SIZE/LOCAL_RANK; Srifty sets SRIFTY_BATCH_PER_NODE (the plan's batch)
and SRIFTY_CHECKPOINT_DIR (a local folder the node agent syncs with the task's S3 prefix).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-per-node", type=int, default=64)
    ap.add_argument("--checkpoint-dir", default=os.environ.get("SRIFTY_CHECKPOINT_DIR", "checkpoints"))
    ap.add_argument("--steps", type=int, default=int(os.environ.get("STEPS", "1000")))
    ap.add_argument("--checkpoint-every", type=int, default=100)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    per_gpu = max(1, args.batch_per_node // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    model = torchvision.models.resnet50().to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    ckdir = Path(args.checkpoint_dir)
    ckdir.mkdir(parents=True, exist_ok=True)
    step = 0
    found = sorted(ckdir.glob("step-*.pt"))
    if found:  # resume after a spot interruption
        state = torch.load(found[-1], map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
    while step < args.steps:
        x = torch.randn(per_gpu, 3, 224, 224, device=device)  # synthetic data: replace with your loader
        y = torch.randint(0, 1000, (per_gpu,), device=device)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % args.checkpoint_every == 0 and dist.get_rank() == 0:
            torch.save(
                {"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                ckdir / f"step-{step:08d}.pt",
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
