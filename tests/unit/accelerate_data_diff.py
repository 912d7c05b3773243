"""libaccel's data rules against Accelerate's own code (the test venv's Accelerate 1.15.0).

For random dataset lengths, batch sizes, split_batches, even_batches and drop_last, on 1, 2, 3 and
4 processes: the batches each process gets from a map-style dataset (BatchSamplerShard; on one
process the loader prepare_data_loader returns, which keeps its own sampler), from a stream under
both semantics (IterableDatasetShard, and the DataLoaderDispatcher with dispatch_batches). And
split_between_processes over the whole grid: every length 0..17 on every world, a list, a tensor
and a dictionary of both, with and without padding. Accelerate runs for real: one process per rank,
over Gloo, through prepare_data_loader and PartialState. libaccel's answers come from data_probe
(the same functions the dataloader uses; it prints indices, so a dictionary's answer is the list's
and the tensor's, one per key, as Accelerate splits each value alone).

    python3 accelerate_data_diff.py DATA_PROBE     (exits 77 when no Python has Accelerate)

Accelerate 1.15.0 runs on Debian's torch 1.13 with torch.cpu.device_count and torch.cpu.set_device
supplied in each worker, and a plain barrier where its wait_for_everyone passes device_ids (see
worker()).

Known and intended differences: split_batches with batch_size 1 on several processes is an error
in libaccel (Accelerate's dispatcher accepts it and gives every rank an empty batch at every full
step; its other loaders reject it as libaccel does; not generated); a dispatching loader over an
empty stream gives an empty epoch where Accelerate raises "Batch does not contain any data" (not
generated); a rank with no batch of a dispatched stream gets an empty epoch where Accelerate's
dispatcher fails with TypeError (NO_BATCH_BUG, compared as empty); an empty input split with
padding gives every rank nothing where Accelerate raises IndexError (EMPTY_PAD_RAISES, compared as
empty).
"""
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time


def cases(world):
    rng = random.Random(29 + world)
    out = []
    for _ in range(120):
        n, bs = rng.randint(0, 40), rng.randint(1, 6)
        split, drop, dispatch = (rng.random() < 0.3), (rng.random() < 0.3), (rng.random() < 0.5)
        if dispatch and n == 0:
            n = 1
        if split and bs == 1:  # see the module's docstring
            bs = 2 * world
        out.append(["stream", n, bs, world, int(split), int(drop), int(dispatch)])
    for _ in range(80):
        n, bs = rng.randint(1, 30), rng.randint(1, 6)
        out.append(["shard", n, bs, world, int(rng.random() < 0.3), int(rng.random() < 0.7),
                    int(rng.random() < 0.3)])
    for n in range(0, SPLIT_MAX_N + 1):
        for pad in (0, 1):
            out.append(["split", n, world, pad])
    return out


# The split grid (issue 50): every n from 0 to 17 on every world.
SPLIT_MAX_N = 17
WORLDS = (1, 2, 3, 4)


# Accelerate's dispatcher (dispatch_batches) fails with TypeError when a stream gives a rank no batch
# at all (drop_last with less than one global batch, or a short stream): it broadcasts None. libaccel
# gives that rank an empty epoch. (1.2.1's DataLoaderShard failed the same way with
# UnboundLocalError; 1.15 gives an empty epoch there, as libaccel does, and is compared as is.)
NO_BATCH_BUG = "(TypeError: the dispatcher broadcast no batch)"

# Accelerate raises IndexError when an empty input is split with apply_padding (it pads with
# inputs[-1]); libaccel gives every rank nothing, padded or not. Compared as empty.
EMPTY_PAD_RAISES = "(IndexError: empty input padded)"


def join(batches):
    return "|".join(b if isinstance(b, str) else " ".join(str(i) for i in b) for b in batches)


def accelerate_rank(case, rank, world, state):
    """What Accelerate gives this rank, as data_probe writes it."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler
    from accelerate.data_loader import BatchSamplerShard, prepare_data_loader

    kind = case[0]
    try:
        if kind == "shard" and world == 1:
            # On one process prepare_data_loader keeps the loader's own batch sampler: compare
            # that (BatchSamplerShard alone would complete the last batch from the epoch's start,
            # which Accelerate never does on one process).
            _, n, bs, _, split, even, drop = case
            dl = DataLoader(list(range(n)), batch_size=bs, drop_last=bool(drop))
            prepared = prepare_data_loader(dl, device=torch.device("cpu"), num_processes=1,
                                           process_index=0, split_batches=bool(split),
                                           put_on_device=True, even_batches=bool(even))
            return join(b.tolist() for b in prepared)
        if kind == "shard":
            _, n, bs, _, split, even, drop = case
            sampler = BatchSampler(SequentialSampler(range(n)), bs, bool(drop))
            return join(BatchSamplerShard(sampler, world, rank, split_batches=bool(split),
                                          even_batches=bool(even)))
        if kind == "stream":
            _, n, bs, _, split, drop, dispatch = case

            class Stream(IterableDataset):
                def __iter__(self):
                    return iter(range(n))

            dl = DataLoader(Stream(), batch_size=bs, drop_last=bool(drop))
            prepared = prepare_data_loader(dl, device=torch.device("cpu"), num_processes=world,
                                           process_index=rank, split_batches=bool(split),
                                           put_on_device=True, dispatch_batches=bool(dispatch))
            try:
                return join(("None" if b is None else b.tolist()) for b in prepared)
            except TypeError:
                if not dispatch:
                    raise
                return NO_BATCH_BUG
        _, n, _, pad = case
        try:
            with state.split_between_processes(list(range(n)), apply_padding=bool(pad)) as part:
                items = list(part)
        except IndexError:
            if n == 0 and pad:  # every rank raises here, before any collective: see above
                return EMPTY_PAD_RAISES
            raise
        with state.split_between_processes(torch.arange(n), apply_padding=bool(pad)) as part:
            rows = part.tolist()
        # A dictionary is split per key, each value as it would be alone.
        both = {"list": list(range(n)), "tensor": torch.arange(n)}
        with state.split_between_processes(both, apply_padding=bool(pad)) as part:
            by_key = [list(part["list"]), part["tensor"].tolist()]
        return join([items, rows] + by_key)
    except (ValueError, IndexError, RuntimeError):
        return "error"


def worker(cases_path, out_path):
    import torch
    from accelerate import PartialState

    # Accelerate (1.2.1 and 1.15.0 alike) calls torch.cpu.device_count() and torch.cpu.set_device()
    # for a MULTI_CPU job; Debian's torch 1.13 (the venv's) predates both. Newer torch answers 1
    # and does nothing.
    if not hasattr(torch.cpu, "device_count"):
        torch.cpu.device_count = lambda: 1
    if not hasattr(torch.cpu, "set_device"):
        torch.cpu.set_device = lambda device: None
    # Accelerate 1.15's wait_for_everyone passes device_ids to barrier, which torch 1.13 refuses
    # for Gloo: a plain barrier there (the worker ends with one).
    if int(torch.__version__.split(".")[0]) < 2:
        plain_barrier = torch.distributed.barrier
        torch.distributed.barrier = lambda *args, device_ids=None, **kwargs: plain_barrier(*args, **kwargs)

    state = PartialState(cpu=True)
    with open(cases_path) as f:
        all_cases = json.load(f)
    results = [accelerate_rank(c, state.process_index, state.num_processes, state) for c in all_cases]
    state.wait_for_everyone()
    with open(out_path, "w") as f:
        json.dump(results, f)


def run_accelerate(python, world, all_cases, tmp):
    # The port is picked, released, then bound by torch's store: a test running beside this one
    # may take it in between, and rank 0 then aborts. Another port is tried before failing.
    for attempt in range(3):
        try:
            return run_accelerate_once(python, world, all_cases, tmp)
        except RuntimeError as e:
            print(f"{e}; attempt {attempt + 1} of 3", file=sys.stderr)
    sys.exit(f"Accelerate on {world} processes failed 3 times")


def run_accelerate_once(python, world, all_cases, tmp):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cases_path = os.path.join(tmp, f"cases{world}.json")
    with open(cases_path, "w") as f:
        json.dump(all_cases, f)
    procs, outs = [], []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1", HF_HOME=os.path.join(tmp, "hf"))
        outs.append(os.path.join(tmp, f"out{world}_{rank}.json"))
        procs.append(subprocess.Popen([python, __file__, "--worker", cases_path, outs[-1]], env=env))
    # A rank that fails leaves the others waiting for it at the store: stop them.
    deadline = time.monotonic() + 240
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if any(p.returncode not in (None, 0) for p in procs):
            break
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    failed = [p.returncode for p in procs if p.returncode != 0]
    if failed:
        raise RuntimeError(f"an Accelerate rank of {world} failed (exit codes {failed})")
    per_rank = []
    for path in outs:
        with open(path) as f:
            per_rank.append(json.load(f))
    return per_rank


def run_probe(probe, all_cases):
    text = "".join(" ".join(str(x) for x in c) + "\n" for c in all_cases)
    out = subprocess.run([probe], input=text, capture_output=True, text=True, check=True).stdout
    blocks = [b for b in out.split("--\n") if b.strip() or b == ""][: len(all_cases)]
    answers = []
    for block in blocks:
        lines = [l for l in block.split("\n") if l]
        answers.append([l.split(": ", 1)[1] if ": " in l else "" for l in lines])
    return answers


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return 0
    probe = sys.argv[1]
    python = os.environ.get("ACCEL_TEST_ACCELERATE_PYTHON", sys.executable)
    probe_version = subprocess.run([python, "-c", "import accelerate; print(accelerate.__version__)"],
                                   capture_output=True, text=True)
    if probe_version.returncode != 0:
        print(f"skipped: {python} cannot import accelerate (tools/setup.sh makes build/accelerate-venv)")
        return 77
    print(f"Python Accelerate {probe_version.stdout.strip()} ({python})")
    counts = {}  # kind -> [cases, pairs, differ, Accelerate's failures compared as empty]
    failures = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for world in WORLDS:
            all_cases = cases(world)
            theirs = run_accelerate(python, world, all_cases, tmp)
            ours = run_probe(probe, all_cases)
            for i, case in enumerate(all_cases):
                count = counts.setdefault(case[0], [0, 0, 0, 0])
                count[0] += 1
                for rank in range(world):
                    count[1] += 1
                    mine = ours[i][rank] if rank < len(ours[i]) else "(missing)"
                    if case[0] == "split" and mine != "error":
                        # data_probe prints indices: a dictionary's keys get the list's and the
                        # tensor's answers, in that order (see accelerate_rank).
                        mine = mine + "|" + mine
                    expected = theirs[rank][i]
                    if expected == NO_BATCH_BUG:
                        expected, count[3] = "", count[3] + 1
                    elif expected == EMPTY_PAD_RAISES:
                        expected, count[3] = "|||", count[3] + 1
                    if expected != mine:
                        failures += 1
                        count[2] += 1
                        if failures <= 20:
                            print(f"{case} rank {rank}: Accelerate {theirs[rank][i]!r}, libaccel {mine!r}")
    for kind, (n_cases, pairs, differ, raised) in sorted(counts.items()):
        print(f"{kind}: {n_cases} cases, {pairs} (case, rank) pairs, {differ} differ "
              f"({raised} where Accelerate fails, compared as empty)")
    print(f"{sum(c[1] for c in counts.values())} (case, rank) pairs compared on worlds "
          f"{', '.join(map(str, WORLDS))}, {failures} differ ({time.monotonic() - started:.1f} s)")
    return 1 if failures else 0

if __name__ == "__main__":
    sys.exit(main())
