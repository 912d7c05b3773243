#!/usr/bin/env python3
"""minilm_embed.py MINILM_CPP MODEL_DIR FORTUNES_DIR CATEGORY...: the C++ example's `embed` output for
every entry of the named fortune files (one entry per line, its newlines made spaces) against
sentence-transformers' own encode of the same lines with the same model folder: every line's cosine
similarity must be at least 0.9999. Runs in the venv that tools/setup.sh gives sentence-transformers
(ACCEL_TEST_ACCELERATE_PYTHON); exits 77 (skipped) when that venv or the model folder is missing."""
import os
import subprocess
import sys
import tempfile


def entries(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    out = []
    for entry in text.split("\n%\n"):
        entry = entry.strip("\n").replace("\n", " ")
        if entry and entry != "%":
            out.append(entry)
    return out


def reference(python, model_dir, lines_file):
    code = r"""
import sys, warnings
warnings.filterwarnings("ignore")
import torch
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(sys.argv[1], device="cpu")
lines = open(sys.argv[2], encoding="utf-8").read().split("\n")[:-1]
e = model.encode(lines, convert_to_tensor=True, batch_size=32)
for row in e.tolist():
    print(" ".join(repr(v) for v in row))
"""
    run = subprocess.run([python, "-c", code, model_dir, lines_file], capture_output=True,
                         text=True)
    if run.returncode != 0:
        sys.exit(f"sentence-transformers failed:\n{run.stderr[-3000:]}")
    return [[float(v) for v in line.split()] for line in run.stdout.splitlines()]


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    na = sum(x * x for x in a) ** 0.5
    nb = sum(y * y for y in b) ** 0.5
    return dot / (na * nb)


def main():
    program, model_dir, fortunes, *categories = sys.argv[1:]
    python = os.environ.get("ACCEL_TEST_ACCELERATE_PYTHON", "")
    if not os.path.isfile(os.path.join(model_dir, "model.safetensors")):
        print(f"skipped: no MiniLM model folder at {model_dir} (tools/fetch_minilm.sh)")
        return 77
    probe = subprocess.run([python, "-c", "import sentence_transformers"], capture_output=True) \
        if python else None
    if probe is None or probe.returncode != 0:
        print("skipped: no sentence-transformers in the test venv (tools/setup.sh installs it)")
        return 77
    lines = [e for c in categories for e in entries(os.path.join(fortunes, c))]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", delete=False) as f:
        f.write("".join(line + "\n" for line in lines))
    try:
        ours_run = subprocess.run([program, "embed", model_dir, f.name], capture_output=True,
                                  text=True)
        if ours_run.returncode != 0:
            sys.exit(f"{program} embed failed:\n{ours_run.stderr}")
        ours = [[float(v) for v in line.split()] for line in ours_run.stdout.splitlines()]
        theirs = reference(python, model_dir, f.name)
    finally:
        os.unlink(f.name)
    if len(ours) != len(lines) or len(theirs) != len(lines):
        sys.exit(f"{len(lines)} lines, {len(ours)} embeddings from us, {len(theirs)} from them")
    if any(len(row) != 384 for row in ours):
        sys.exit("an embedding of ours does not have 384 numbers")
    sims = [cosine(a, b) for a, b in zip(ours, theirs)]
    worst = min(range(len(sims)), key=lambda i: sims[i])
    print(f"{len(lines)} entries of {', '.join(categories)}: lowest cosine {sims[worst]:.9f} "
          f"(line {worst + 1}), mean {sum(sims) / len(sims):.9f}")
    if sims[worst] < 0.9999:
        sys.exit(f"line {worst + 1} differs: cosine {sims[worst]}: {lines[worst][:200]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
