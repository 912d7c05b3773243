"""The PyTorch side of bench/zero_memory.c: the same MLP (LAYERS square linear layers of WIDTH and
a 10-class head), AdamW, batch 8 per rank of synthetic data, under DistributedDataParallel over
Gloo, with torch.optim.AdamW ("ddp") or ZeroRedundancyOptimizer(AdamW) ("zero1"). Started by
`accel launch` or torch.distributed.run (the same variables). Prints one JSON line per rank, in
zero_memory.c's form.

    accel launch -n 2 /usr/bin/python3 bench/zero_memory_ref.py ddp|zero1 [--steps 4]
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

BATCH = 8


def status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return -1.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("optimizer", choices=["ddp", "zero1"])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--width", type=int, default=2896)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234)
    before = status_mb("VmRSS")
    layers = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.width, args.width), nn.ReLU()]
    model = DistributedDataParallel(nn.Sequential(*layers, nn.Linear(args.width, 10)))
    params = sum(p.numel() for p in model.parameters())
    if args.optimizer == "zero1":
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(17 + rank)
    x = torch.rand(BATCH, args.width, generator=g) - 0.5
    y = torch.randint(0, 10, (BATCH,), generator=g)
    start = 0.0
    for i in range(-1, args.steps):
        if i == 0:
            start = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    rate = args.steps * BATCH / (time.perf_counter() - start)
    print("BENCH " + json.dumps({
        "rank": rank, "params": params, "steps": args.steps, "batch": BATCH,
        "rss_before_mb": round(before, 1), "peak_mb": round(status_mb("VmHWM"), 1),
        "samples_per_s": round(rate, 2)}) + "\n", end="", flush=True)  # one write: ranks share the pipe
    dist.barrier()
    os._exit(0)  # as bench/train_ref.py: no slow teardown of the process group


if __name__ == "__main__":
    main()
