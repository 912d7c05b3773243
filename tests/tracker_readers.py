"""What the tests that read the trackers' files back share: the Python of tools/setup.sh's venv
(ACCEL_TEST_ACCELERATE_PYTHON, which has tensorboard, accelerate and yaml; the scripts run again
under it), TensorBoard's own reader, and float32 rounding (TensorBoard keeps scalars as float32)."""
import math
import os
import struct
import subprocess

SKIPPED = 77  # ctest's SKIP_RETURN_CODE for these tests


def python_with(modules):
    """The venv's Python when it imports every module named; None after saying why."""
    python = os.environ.get("ACCEL_TEST_ACCELERATE_PYTHON", "")
    probe = "import " + ", ".join(modules)
    if python and subprocess.run([python, "-c", probe], capture_output=True).returncode == 0:
        return python
    print("skipped: no Python with %s (ACCEL_TEST_ACCELERATE_PYTHON=%r; tools/setup.sh makes it)"
          % (", ".join(modules), python))
    return None


def rerun(python, script, flag, args):
    """Runs `script` again under `python` (python_with's) with the environment variable `flag`
    set, the child's cue; its exit code."""
    env = dict(os.environ, **{flag: "1"})
    return subprocess.run([python, script] + list(args), env=env).returncode


def accumulator(path):
    """TensorBoard's EventAccumulator over `path` (a run directory or an event file), every event
    kept, loaded."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(path, size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
    acc.Reload()
    return acc


def f32(x):
    """`x` rounded to float32, as TensorBoard stores a scalar (beyond float32's range: an
    infinity; struct refuses exactly the values that round to one)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)
