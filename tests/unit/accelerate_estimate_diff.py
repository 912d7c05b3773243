"""`accel estimate-memory` against Accelerate 1.15's own `accelerate estimate-memory` (the test
venv's, on Debian's torch 1.13): 50 random models (stacks of Linear, Embedding, LayerNorm and
BatchNorm1d, nested containers, blocks named as no-split classes, parameters of the root),
Accelerate's table printed by its estimate_command itself, with its create_empty_model replaced
by one returning the model (built in float32, as Accelerate builds it; the Hub is not reached),
and ours from the model's state_dict saved with safetensors: floating tensors stored as
fp32/fp16/bf16 at random, some files' data section overwritten with garbage, and some models of
GB to TB built empty (on the meta device) whose files hold the header alone. The printed tables
must be equal, character for character.

    python3 accelerate_estimate_diff.py ACCEL_CLI     (exits 77 when no Python has Accelerate)
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tracker_readers import SKIPPED, python_with  # noqa: E402

ACCELERATE_SIDE = r'''
import argparse, contextlib, io, json, os, random, struct, sys, warnings, logging
import torch, torch.nn as nn
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
from safetensors.torch import save_file
import accelerate.commands.estimate as estimate

class Block(nn.Module):
    """A no-split class: kept whole as one layer by Accelerate (and by --no-split 'blocks\.\d+')."""
    def __init__(self, rng, scale, dev):
        super().__init__()
        w, h = rng.randint(1, 96) * scale, rng.randint(1, 128) * scale
        self.norm = nn.LayerNorm(w, device=dev)
        self.fc1 = nn.Linear(w, h, device=dev)
        self.fc2 = nn.Linear(h, w, device=dev)

class Holder(nn.Module):
    pass

def layer(rng, scale, dev):
    k = rng.random()
    if k < 0.4:
        return nn.Linear(rng.randint(1, 96) * scale, rng.randint(1, 96) * scale, bias=rng.random() < 0.7, device=dev)
    if k < 0.6:
        return nn.Embedding(rng.randint(1, 300) * scale, rng.randint(1, 48) * scale, device=dev)
    if k < 0.8:
        return nn.LayerNorm(rng.randint(1, 200) * scale, device=dev)
    if k < 0.9:
        return nn.BatchNorm1d(rng.randint(1, 100) * scale, device=dev)  # int64 num_batches_tracked
    return nn.ReLU()

def model(rng, scale, dev):
    m = Holder()
    if rng.random() < 0.3:
        m.register_parameter("scale", nn.Parameter(torch.zeros(rng.randint(1, 500) * scale, device=dev)))
    if rng.random() < 0.2:
        m.register_buffer("position_ids", torch.zeros(1, rng.randint(1, 600), dtype=torch.int64, device=dev))
    m.embed = layer(rng, scale, dev)
    if rng.random() < 0.5:
        m.blocks = nn.ModuleList([Block(rng, scale, dev) for _ in range(rng.randint(1, 4))])
        m._no_split_modules = ["Block"] if rng.random() < 0.6 else None
    stack = nn.Sequential(*[layer(rng, scale, dev) for _ in range(rng.randint(1, 5))])
    if rng.random() < 0.4:
        stack = nn.Sequential(stack, nn.Sequential(*[layer(rng, scale, dev) for _ in range(rng.randint(1, 3))]))
    m.stack = stack
    m.head = layer(rng, scale, dev)
    return m

def header_only(path, tensors):
    """A safetensors file cut after its header: what a header fetched alone looks like."""
    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}
    header, offset = {}, 0
    for name, t in tensors.items():
        size = t.numel() * t.element_size()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"\x00" * 3)

def stored(rng, t):
    if not t.is_floating_point():
        return t
    return t.to(rng.choice([torch.float32, torch.float16, torch.bfloat16]))

def table(m, path, dtypes):
    estimate.create_empty_model = lambda *a, **k: m
    args = argparse.Namespace(model_name=path, library_name=None, dtypes=dtypes, trust_remote_code=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        estimate.estimate_command(args)
    return out.getvalue()

def main(workdir):
    rng = random.Random(51)
    cases = []
    for i in range(50):
        big = i % 5 == 4  # GB to TB: built empty, the file holds the header alone
        scale = rng.choice([64, 512, 4096]) if big else rng.choice([1, 1, 2, 8])
        # Accelerate's init_empty_weights creates each parameter before moving it to meta, too
        # much for TB: the modules' own device="meta" gives the same empty model.
        m = model(rng, scale, "meta" if big else "cpu")
        sd = {k: stored(rng, v) for k, v in m.state_dict().items()}
        path = os.path.join(workdir, "model_%d.safetensors" % i)
        if big:
            header_only(path, sd)
        else:
            save_file({k: v.contiguous() for k, v in sd.items()}, path)
            if i % 3 == 0:  # the data section overwritten with garbage, the header intact
                with open(path, "r+b") as f:
                    n = struct.unpack("<Q", f.read(8))[0]
                    f.seek(8 + n)
                    f.write(os.urandom(os.path.getsize(path) - 8 - n))
        dtypes = rng.sample(["float32", "float16", "int8", "int4"], rng.randint(1, 4))
        if rng.random() < 0.3:
            dtypes = ["float32", "float16", "int8", "int4"]
        no_split = "blocks\\.\\d+" if getattr(m, "_no_split_modules", None) else ""
        cases.append({"path": path, "dtypes": dtypes, "no_split": no_split,
                      "expected": table(m, path, dtypes)})
    json.dump(cases, sys.stdout)

main(sys.argv[1])
'''


def main():
    accel = sys.argv[1]
    python = python_with(["accelerate", "torch", "safetensors"])
    if not python:
        return SKIPPED
    version = subprocess.run([python, "-c", "import accelerate; print(accelerate.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as work:
        made = subprocess.run([python, "-c", ACCELERATE_SIDE, work], capture_output=True, text=True,
                              env=dict(os.environ, HF_HUB_OFFLINE="1"))
        if made.returncode != 0:
            sys.exit(f"the Accelerate side failed:\n{made.stderr}")
        cases = json.loads(made.stdout)
        failures = 0
        for c in cases:
            cmd = [accel, "estimate-memory", c["path"], "--dtypes"] + c["dtypes"]
            if c["no_split"]:
                cmd += ["--no-split", c["no_split"]]
            ours = subprocess.run(cmd, capture_output=True, text=True)
            if ours.returncode != 0 or ours.stdout != c["expected"]:
                failures += 1
                print("MISMATCH %s\n%s\nAccelerate %s:\n%s\naccel:\n%s%s" % (
                    " ".join(cmd), "-" * 40, version, c["expected"], ours.stdout, ours.stderr))
    big = sum(1 for i in range(len(cases)) if i % 5 == 4)
    print(f"{len(cases) - failures} of {len(cases)} tables equal Accelerate {version}'s "
          f"({big} of models up to TB from headers alone, the rest of files with real or garbage data)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
