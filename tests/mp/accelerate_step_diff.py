"""libaccel's step helpers against Accelerate's and torch's own code (the test venv's Accelerate
1.15.0 on Debian's torch 1.13):

- find_executable_batch_size: for starts and memory limits, the sizes Accelerate's decorator tries
  when a try above the limit raises its CUDA out-of-memory RuntimeError, and what it returns or
  raises, against accel::Accelerator::find_executable_batch_size in one process;
- the profiler: for torch.profiler schedules (wait, warmup, active, repeat, skip_first) over a
  number of steps, how many times torch.profiler.profile calls on_trace_ready, against libaccel's
  profiler's completed windows (Accelerate's ProfileKwargs builds exactly that torch schedule).

    python3 accelerate_step_diff.py STEP_TOOLS_PROGRAM   (exits 77 when no Python has Accelerate)
"""
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tracker_readers import SKIPPED, python_with  # noqa: E402

ACCELERATE_SIDE = r'''
import sys, warnings
import torch, torch.profiler as P
from accelerate.utils import find_executable_batch_size
warnings.simplefilter("ignore")
mode = sys.argv[1]
for line in sys.stdin:
    if not line.strip():
        continue
    if mode == "sizes":
        start, limit = map(int, line.split())
        tried = []
        def attempt(batch_size):
            tried.append(batch_size)
            if batch_size > limit:
                raise RuntimeError("CUDA out of memory.")
            return batch_size
        try:
            result = "-> %d" % find_executable_batch_size(attempt, starting_batch_size=start)()
        except RuntimeError as e:
            result = "-> error " + str(e)
        print("tried" + "".join(" %d" % t for t in tried), result)
    else:
        wait, warmup, active, repeat, skip, steps = map(int, line.split())
        count = [0]
        def ready(prof):
            count[0] += 1
        schedule = P.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat,
                              skip_first=skip)
        with P.profile(activities=[P.ProfilerActivity.CPU], schedule=schedule,
                       on_trace_ready=ready) as prof:
            for _ in range(steps):
                prof.step()
                torch.ones(3).sum()
        print(count[0])
'''


def size_cases():
    return [(start, limit) for start in (0, 1, 2, 5, 8, 9, 10, 64, 100, 128, 1000)
            for limit in (0, 1, 7, 8, 9, 50, 127, 128, 2000)]


def schedule_cases():
    rng = random.Random(50)
    cases = [(1, 1, 2, 1, 0, 100), (2, 2, 2, 2, 0, 100), (0, 1, 3, 3, 1, 100),
             (3, 2, 1, 1, 2, 100), (1, 0, 1, 5, 0, 100)]  # Accelerate's test_profile_kwargs
    while len(cases) < 120:
        cases.append((rng.randint(0, 3), rng.randint(0, 2), rng.randint(1, 3), rng.randint(0, 3),
                      rng.randint(0, 3), rng.choice([0, 1, 2, 5, 9, 17, 30])))
    return cases


def run(command, lines):
    text = "".join(" ".join(map(str, c)) + "\n" for c in lines)
    out = subprocess.run(command, input=text, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    if out.returncode != 0:
        sys.exit(f"{command[0]} failed ({out.returncode}):\n{out.stderr}")
    return [l for l in out.stdout.splitlines() if l.startswith("tried") or l.isdigit()]


def compare(name, cases, ours, theirs):
    bad = [(c, o, t) for c, o, t in zip(cases, ours, theirs) if o.replace("ACCEL_ERR_OUT_OF_MEMORY: ", "") != t]
    if len(ours) != len(cases) or len(theirs) != len(cases):
        bad.append(("counts", len(ours), len(theirs)))
    for c, o, t in bad[:10]:
        print(f"{name} {c}:\n  libaccel:   {o}\n  Accelerate: {t}")
    print(f"{name}: {len(cases) - len(bad)} of {len(cases)} equal")
    return not bad


def main():
    program = sys.argv[1]
    python = python_with(["accelerate"])
    if python is None:
        return SKIPPED
    version = subprocess.run([python, "-c", "import accelerate; print(accelerate.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    print(f"Python Accelerate {version} ({python})")
    ok = True
    for mode, cases in (("sizes", size_cases()), ("windows", schedule_cases())):
        ours = run(["env", "-u", "WORLD_SIZE", "-u", "RANK", program, mode], cases)
        theirs = run([python, "-c", ACCELERATE_SIDE, mode], cases)
        ok = compare(mode, cases, ours, theirs) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
