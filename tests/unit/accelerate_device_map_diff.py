"""libaccel's infer_auto_device_map (src/bigmodel/device_map.cpp) against Accelerate's own (the test
venv's Accelerate 1.15.0 on Debian's torch 1.13): Accelerate's test cases from its
tests/test_modeling_utils.py, then random module trees (nested containers of Linear and
BatchNorm1d layers, tied weights, no_split classes, GPUs, cpu, disk, fallback_allocation). Each
tree is described to device_map_probe as JSON (every module's own parameters, children and
buffers, in order, with each tensor's bytes and identity); the maps are compared as dictionaries.

    python3 accelerate_device_map_diff.py DEVICE_MAP_PROBE     (exits 77 when no Python has Accelerate)

Random trees give every module a name of its own ("n17"): Accelerate tells which tied parameters
concern a module by a substring test, so a module "1" also claims "11.weight", and such trees make
Accelerate fail with IndexError; libaccel follows the same rule (a test case below shows it), and
fails there with an error that says so.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tracker_readers import SKIPPED, python_with  # noqa: E402

ACCELERATE_SIDE = r'''
import json, random, sys, warnings, logging
import torch, torch.nn as nn
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
_orig = nn.Module.named_parameters
def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
    # torch 1.13 has no remove_duplicate; Accelerate 1.15's find_tied_parameters needs it.
    if remove_duplicate:
        yield from _orig(self, prefix=prefix, recurse=recurse)
        return
    mods = self.named_modules(prefix=prefix, remove_duplicate=False) if recurse else [(prefix, self)]
    for mp, m in mods:
        for k, v in m._parameters.items():
            if v is not None:
                yield (mp + ("." if mp else "") + k, v)
nn.Module.named_parameters = named_parameters
from accelerate.utils import infer_auto_device_map

class ModelForTest(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1 = nn.Linear(3, 4)
        self.batchnorm = nn.BatchNorm1d(4)
        self.linear2 = nn.Linear(4, 5)

class LinearWithSubmodule(nn.Linear):
    def __init__(self, i, o):
        super().__init__(i, o)
        self.weight_submodule = nn.Module()
        self.weight_submodule.parameter = self.weight

class Holder(nn.Module):
    pass

def describe(m, ids):
    def key(t):
        return ids.setdefault(id(t), len(ids))
    return {"class": type(m).__name__,
            "params": [[n, p.numel() * p.element_size(), key(p)] for n, p in m._parameters.items() if p is not None],
            "buffers": [[n, b.numel() * b.element_size(), key(b)] for n, b in m._buffers.items() if b is not None],
            "children": [[n, describe(c, ids)] for n, c in m._modules.items() if c is not None]}

def seq(**kw):
    m = nn.Sequential()
    for k, v in kw.items():
        m.add_module(k, v)
    return m

def accelerate_cases():
    M = ModelForTest
    out = []
    out.append((M(), {0: 200, 1: 200}, [], False))
    out.append((M(), {0: 200, 1: 172, 2: 200}, [], False))
    m = M(); m.linear1.weight = m.linear2.weight
    out.append((m, {0: 200, 1: 200}, [], False))
    out.append((nn.Sequential(M(), M(), M()), {0: 500, 1: 500}, [], False))
    out.append((nn.Sequential(M(), M(), M()), {0: 500, 1: 500}, ["ModelForTest"], False))
    m = seq(layer1=M(), layer2=M(), layer3=M()); m.layer3.linear2.weight = m.layer1.linear2.weight
    out.append((m, {0: 400, 1: 500}, [], False))
    m = seq(layer1=M(), layer2=M(), layer3=M()); m.layer3.linear2.weight = m.layer1.linear2.weight
    m.layer2.linear2.weight = m.layer1.linear2.weight
    out.append((m, {0: 400, 1: 500}, [], False))
    m = seq(layer1=M(), layer2=M(), layer3=M()); m.layer3.linear2.weight = m.layer1.linear2.weight
    m.layer2.linear2.weight = m.layer1.linear2.weight; m.layer2.linear1.weight = m.layer1.linear1.weight
    out.append((m, {0: 400, 1: 500}, [], False))
    m = seq(linear1=nn.Linear(4, 4), linear2=nn.Linear(6, 6), linear3=nn.Linear(4, 4), linear4=nn.Linear(6, 6))
    m.linear3.weight = m.linear1.weight; m.linear3.bias = m.linear1.bias
    out.append((m, {0: 250, 1: 400}, [], False))
    m = Holder(); m.compute = LinearWithSubmodule(3, 8)
    out.append((m, {0: 4, "cpu": 96000}, [], False))
    for mm, extra in ((M(), False), (M(), True)):
        mm.linear1.register_buffer("test_buffer1", torch.zeros(10, 2))
        mm.batchnorm.register_buffer("test_buffer2", torch.zeros(10, 3))
        mm.linear2.register_buffer("test_buffer3", torch.zeros(10, 3))
        if extra:
            mm.linear3 = nn.Linear(4, 5); mm.linear3.register_buffer("test_buffer4", torch.zeros(10, 2))
            out.append((mm, {0: 400, 1: 400, "cpu": 10**9}, [], False))
            out.append((mm, {0: 400, 1: 200, "cpu": 10**9}, [], False))
        else:
            out.append((mm, {0: 400, "cpu": 10**9}, [], False))
    inner = lambda: seq(module=seq(linear1=nn.Linear(10, 4), linear2=nn.Linear(4, 4), linear3=nn.Linear(4, 8)))
    out.append((inner(), {0: 256}, [], False))
    out.append((inner(), {0: 256}, [], True))
    out.append((seq(module=seq(l1=nn.Linear(10, 10), l2=nn.Linear(10, 10), l3=nn.Linear(10, 10))), {0: 30}, [], True))
    m = seq(linear1=nn.Linear(10, 10), linear2=nn.Linear(10, 10)); m.linear2.weight = m.linear1.weight
    out.append((m, {0: 600}, [], True))
    m = seq(linear1=nn.Linear(10, 10), batchnorm=nn.BatchNorm1d(10), linear2=nn.Linear(10, 10))
    for n in ("linear1", "batchnorm", "linear2"):
        getattr(m, n).register_buffer("buf", torch.zeros(5))
    out.append((m, {0: 678}, [], True))
    out.append((M(), {0: 300, 1: 300}, ["Linear"], False))
    m = nn.Sequential(*[nn.Linear(4, 4) for _ in range(11)]); m[10].weight = m[1].weight
    out.append((m, {0: 400, "cpu": 10000}, [], False))  # Accelerate's substring quirk: IndexError
    return out

def random_tree(rng, counter, depth, layers):
    def name():
        counter[0] += 1
        return "n%d" % counter[0]
    if depth == 0 or rng.random() < 0.35:
        kind = rng.random()
        if kind < 0.6:
            lin = nn.Linear(rng.randint(1, 12), rng.randint(1, 12), bias=rng.random() < 0.8)
            layers.append(lin)
            return lin
        if kind < 0.8:
            return nn.BatchNorm1d(rng.randint(1, 8))
        h = Holder()
        h.register_parameter(name(), nn.Parameter(torch.zeros(rng.randint(1, 30))))
        return h
    m = rng.choice([Holder, nn.Sequential])()
    if rng.random() < 0.3:
        m.register_parameter(name(), nn.Parameter(torch.zeros(rng.randint(1, 20))))
    for _ in range(rng.randint(1, 4)):
        m.add_module(name(), random_tree(rng, counter, depth - 1, layers))
    if rng.random() < 0.2:
        m.register_buffer(name(), torch.zeros(rng.randint(1, 10)))
    return m

def random_cases(count):
    rng = random.Random(51)
    out = []
    while len(out) < count:
        layers = []
        root = random_tree(rng, [0], rng.randint(1, 4), layers)
        if not isinstance(root, nn.Module) or not list(root.parameters()):
            continue
        for _ in range(rng.choice([0, 0, 1, 2])):
            a, b = rng.sample(layers, 2) if len(layers) >= 2 else (None, None)
            if a is not None and a.weight.shape == b.weight.shape:
                b.weight = a.weight
            elif a is not None:
                twin = nn.Linear(a.in_features, a.out_features)
                twin.weight = a.weight
                holder = Holder(); holder.add_module("n%d" % (10**6 + len(out)), twin)
                root.add_module("n%d" % (2 * 10**6 + len(out)), holder)
        total = sum(p.numel() * 4 for p in root.parameters())
        devices = rng.choice([[0], [0, 1], [0, "cpu"], ["cpu"], [0, 1, "cpu"], [0, 2], [1, "cpu"]])
        max_memory = {d: rng.randint(0, max(1, total)) for d in devices}
        classes = ["Linear", "BatchNorm1d", "Holder", "Sequential"]
        no_split = rng.sample(classes, rng.choice([0, 0, 1, 2]))
        out.append((root, max_memory, no_split, rng.random() < 0.3))
    return out

which = sys.argv[1]
cases = accelerate_cases() if which == "accelerate" else random_cases(int(which))
for model, max_memory, no_split, fallback in cases:
    case = {"tree": describe(model, {}), "max_memory": {str(k): v for k, v in max_memory.items()},
            "no_split": no_split, "fallback": fallback}
    try:
        result = infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=no_split,
                                       fallback_allocation=fallback)
        expected = {k: str(v) for k, v in result.items()}
    except Exception as e:
        expected = {"error": type(e).__name__}
    print(json.dumps({"case": case, "expected": expected}))
'''


def main():
    probe = sys.argv[1]
    python = python_with(["accelerate", "torch"])
    if python is None:
        return SKIPPED
    version = subprocess.run([python, "-c", "import accelerate; print(accelerate.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    print(f"Python Accelerate {version} ({python})")
    ok = True
    for which in ("accelerate", "600"):
        made = subprocess.run([python, "-c", ACCELERATE_SIDE, which], capture_output=True, text=True,
                              timeout=600, env=dict(os.environ, PYTHONHASHSEED="0"))
        if made.returncode != 0:
            sys.exit(f"the Accelerate side failed:\n{made.stderr}")
        rows = [json.loads(l) for l in made.stdout.splitlines() if l.startswith("{")]
        ours = subprocess.run([probe], input="".join(json.dumps(r["case"]) + "\n" for r in rows),
                              capture_output=True, text=True, timeout=300)
        if ours.returncode != 0:
            sys.exit(f"{probe} failed:\n{ours.stderr}")
        answers = [json.loads(l) for l in ours.stdout.splitlines()]
        bad = 0
        for i, (row, got) in enumerate(zip(rows, answers)):
            want = row["expected"]
            same = ("error" in want and "error" in got) or want == got
            if not same:
                bad += 1
                if bad <= 5:
                    print(f"{which} case {i}:\n  case: {json.dumps(row['case'])}\n  Accelerate: {want}\n  libaccel:   {got}")
        errors = sum("error" in r["expected"] for r in rows)
        print(f"{which}: {len(rows) - bad} of {len(rows)} equal ({errors} where both fail)")
        ok = ok and bad == 0 and len(answers) == len(rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
