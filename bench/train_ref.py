"""The PyTorch reference of bench/train_bench.c: the same models, data, optimizer and step count.

One process is a plain training loop; with WORLD_SIZE > 1 (set by torch.distributed.run or by
`accel launch`, which exports the same variables) the model is wrapped in DistributedDataParallel
over Gloo. Prints one JSON line per rank, in the same form as train_bench.c.

The data path is the fastest plain PyTorch one (the whole uint8 training set as one tensor, a
shuffled index per epoch, this rank's slice of it), so the library is compared with a loop a
careful user would write, not with DataLoader's per-sample collation.
"""

import argparse
import gzip
import json
import os
import resource
import sys
import time

MAIN_WALL = time.time()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, images):
        x = images.float().div(255.0).sub(0.2860).div(0.3530).flatten(1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class Cnn(nn.Module):
    """The CNN of PyTorch's MNIST example, as in examples/c/train_fashion_mnist.c."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, images):
        x = images.float().div(255.0).sub(0.2860).div(0.3530).unsqueeze(1)
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = F.dropout(x, 0.25, self.training)
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = F.dropout(x, 0.5, self.training)
        return self.fc2(x)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    return torch.from_numpy(data.copy())


def mapped_blas():
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line[line.find("/") :].strip() if "/" in line else ""
            if "libblas" in path or "libopenblas" in path:
                return path
    return "unknown"


def resident_split():
    """The resident set at the end: anonymous, file-backed (shared libraries) and shmem, in KiB."""
    split = {}
    with open("/proc/self/status") as status:
        for line in status:
            for key in ("RssAnon", "RssFile", "RssShmem"):
                if line.startswith(key + ":"):
                    split[key] = int(line.split()[1])
    # Proportional: a page shared by N processes counts 1/N in each (the other ranks, the launcher,
    # any process mapping the same libraries or files).
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            for key in ("Pss", "Pss_Anon", "Pss_File", "Pss_Shmem"):
                if line.startswith(key + ":"):
                    split[key] = int(line.split()[1])
    return split


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(1234)
    init_wall = time.time()

    model = Mlp() if args.model == "mlp" else Cnn()
    images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"))
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    ready_wall = time.time()

    batch = args.batch_size
    per_rank = len(images) // world // batch * batch
    generator = torch.Generator().manual_seed(42)
    step, epoch_order, cursor = 0, None, per_rank
    first_step_wall, start = 0.0, 0.0
    while step < args.warmup + args.steps:
        if cursor + batch > per_rank:
            # One shuffle for all ranks (same generator), this rank's interleaved share of it.
            epoch_order = torch.randperm(len(images), generator=generator)[rank::world][:per_rank]
            cursor = 0
        index = epoch_order[cursor : cursor + batch]
        cursor += batch
        loss = F.cross_entropy(model(images[index]), labels[index].long())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        if step == 1:
            first_step_wall = time.time()
        if step == args.warmup:
            start = time.monotonic()
    elapsed = time.monotonic() - start

    report = {
        "impl": "pytorch",
        "model": args.model,
        "rank": rank,
        "world": world,
        "threads": args.threads,
        "steps": args.steps,
        "batch": batch,
        "samples_per_s": args.steps * batch * world / elapsed,
        "main_wall": MAIN_WALL,
        "init_wall": init_wall,
        "ready_wall": ready_wall,
        "first_step_wall": first_step_wall,
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "blas": mapped_blas(),
    }
    split = resident_split()
    report["rss_anon_kb"] = split.get("RssAnon", -1)
    report["rss_file_kb"] = split.get("RssFile", -1)
    report["rss_shmem_kb"] = split.get("RssShmem", -1)
    for key in ("Pss", "Pss_Anon", "Pss_File", "Pss_Shmem"):
        report[key.lower() + "_kb"] = split.get(key, -1)
    # One write call: under PYTHONUNBUFFERED print() writes the newline separately, and the two
    # ranks' lines could interleave on the shared pipe.
    sys.stdout.write("BENCH " + json.dumps(report) + "\n")
    sys.stdout.flush()
    if world > 1:
        # Gloo's threads can hang a DDP process at interpreter exit: meet, then leave at once.
        dist.barrier()
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
