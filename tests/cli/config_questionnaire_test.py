"""`accel config` (the questionnaire), `accel config update` and `accel config default`, end to end.

Usage: python3 config_questionnaire_test.py ACCEL [--accelerate]

Drives the questionnaire through a pseudo-terminal, answering each prompt once it has appeared (a
timeout, never a blind sleep), and checks the files written through `accel config show`.

With --accelerate it checks the same files with Python Accelerate's own loader as well
(accelerate_reads.py, run by the Python that ACCEL_TEST_ACCELERATE_PYTHON names), and the reverse:
files written by Accelerate's `accelerate config default` and by its questionnaire load in `accel`
with the same values. Without that Python it exits 77 (ctest's skip) saying why.

Python standard library only.
"""

import json
import os
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import termios
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 30  # seconds for one prompt to appear; Accelerate's first one imports torch
SKIP = 77

ACCEL = None
ACCELERATE_PYTHON = None


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def clean_env(home):
    """The test's environment: the default file under `home`, no ACCELERATE_* settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCELERATE_", "ACCEL_")) and k not in ("HF_HOME", "XDG_CACHE_HOME")}
    env["HF_HOME"] = home
    env["CUDA_VISIBLE_DEVICES"] = ""  # Accelerate's `config default` would count GPUs
    return env


class Terminal:
    """A program on a pseudo-terminal: wait for text, type lines."""

    def __init__(self, argv, env):
        self.master, self.slave = os.openpty()
        self.proc = subprocess.Popen(argv, stdin=self.slave, stdout=self.slave, stderr=self.slave,
                                     env=env, close_fds=True, start_new_session=True)
        self.pending = b""
        self.transcript = b""

    def _read(self, deadline):
        ready, _, _ = select.select([self.master], [], [], max(0.0, deadline - time.time()))
        if not ready:
            return None
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: nothing left to read and the program has exited
            data = b""
        if not data and self.proc.poll() is None:
            return None
        self.pending += data
        self.transcript += data
        return data

    def expect(self, text, timeout=TIMEOUT):
        """Waits until `text` has been printed and consumes the output up to its end."""
        wanted = text.encode()
        deadline = time.time() + timeout
        while wanted not in self.pending:
            if time.time() > deadline:
                raise Failure(f"timed out waiting for {text!r}; output so far:\n{self.text()}")
            data = self._read(deadline)
            if data == b"" and wanted not in self.pending:
                raise Failure(f"the program ended before printing {text!r}; output:\n{self.text()}")
        self.pending = self.pending[self.pending.index(wanted) + len(wanted):]

    def type(self, line):
        os.write(self.master, line.encode() + b"\n")

    def answer(self, prompt, line):
        self.expect(prompt)
        self.type(line)

    def end_of_input(self):
        os.write(self.master, b"\x04")  # ^D at the start of a line: the program reads end of file

    def is_raw(self):
        return not termios.tcgetattr(self.slave)[3] & termios.ICANON

    def wait_raw(self, timeout=TIMEOUT):
        """Waits until the program has put the terminal in raw mode (a key-driven menu reads)."""
        deadline = time.time() + timeout
        while not self.is_raw():
            if time.time() > deadline:
                raise Failure(f"the terminal never went raw; output so far:\n{self.text()}")
            time.sleep(0.01)

    def finish(self, timeout=TIMEOUT):
        """Closes our end of the terminal once the program exits; returns its exit status."""
        deadline = time.time() + timeout
        os.close(self.slave)
        self.slave = None
        while self._read(deadline) not in (b"",):
            if time.time() > deadline:
                self.proc.kill()
                raise Failure(f"the program did not exit; output:\n{self.text()}")
        code = self.proc.wait(timeout=max(1.0, deadline - time.time()))
        os.close(self.master)
        return code

    def text(self):
        return self.transcript.decode(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.slave, self.master):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


def run(argv, env, stdin_text=None):
    return subprocess.run(argv, env=env, input=stdin_text, capture_output=True, text=True,
                          timeout=120)


def show(path, env):
    """`accel config show --config_file path` as {key: value text}, quotes removed."""
    r = run([ACCEL, "config", "show", "--config_file", path], env)
    check(r.returncode == 0, f"accel config show {path} failed:\n{r.stdout}{r.stderr}")
    values = {}
    for line in r.stdout.splitlines():
        if line.startswith("#"):
            continue
        key, _, rest = line.partition(": ")
        value = rest.split("  #", 1)[0].strip()
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1].replace("''", "'")
        values[key] = value
    return values


def expect_values(path, env, expected):
    got = show(path, env)
    wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
    check(not wrong, f"{path}: (accel read, expected) differ: {wrong}")


def file_keys(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("{"):
        return list(json.loads(text))
    return [line.split(":", 1)[0] for line in text.splitlines() if line and line[0].isalpha()]


# ---- Accelerate's side -----------------------------------------------------------------------------


def accelerate_reads(path, env):
    r = run([ACCELERATE_PYTHON, os.path.join(HERE, "accelerate_reads.py"), path], env)
    check(r.returncode == 0, f"Accelerate refuses {path}:\n{r.stderr}")
    return json.loads(r.stdout)


def as_accel_text(value):
    """An Accelerate field's value as `accel config show` prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return None
    if isinstance(value, dict) and value:  # a section, as accel reads it back: flow YAML
        return "{" + ", ".join(f"{k}: {as_accel_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def same_in_both(path, env):
    """Every key of the file reads the same in Accelerate and in accel; types are Accelerate's."""
    theirs = accelerate_reads(path, env)
    ours = show(path, env)
    fields, types = theirs["fields"], theirs["types"]
    check(types["distributed_type"] == "DistributedType",
          f"{path}: Accelerate read distributed_type as {types['distributed_type']} "
          f"({fields['distributed_type']!r}), not DistributedType")
    for key in ("num_processes", "num_machines", "machine_rank"):
        check(types[key] == "int", f"{path}: Accelerate read {key} as {types[key]}")
    check(types["mixed_precision"] == "str", f"{path}: mixed_precision is {types['mixed_precision']}")
    for key in file_keys(path):
        theirs_text = as_accel_text(fields[key])
        if key == "downcast_bf16" and fields[key] == "no":  # Accelerate's questionnaire writes 'no'
            theirs_text = "false"
        check(theirs_text == ours[key],
              f"{path}: {key} reads {fields[key]!r} in Accelerate, {ours[key]!r} in accel")
    return fields


# ---- driving `accel config` ---------------------------------------------------------------------------

ENV_PROMPT = "Enter for 0 (This machine): "
TYPE_PROMPT = "Enter for 0 (No distributed training): "
MP_PROMPT = "Enter for 0 (no): "
MACHINES = "How many different machines will you use"
RANK = "What is the rank of this machine?"
IP = "What is the IP address of the machine that will host the main process? "
PORT = "What is the port you will use to communicate with the main process? "
SAME_NETWORK = "Are all the machines on the same local network?"
RDZV = "What rendezvous backend will you use?"
DEBUG = "Should distributed operations be checked while running for errors?"
CPU_ONLY = "Do you want to run your training on CPU only"
MPIRUN = "Do you want accelerate to launch mpirun? [yes/NO]: "
DYNAMO = "Do you wish to optimize your script with torch dynamo?[yes/NO]:"
DEEPSPEED = "Do you want to use DeepSpeed? [yes/NO]: "
DEEPSPEED_JSON = "Do you want to specify a json file to a DeepSpeed config? [yes/NO]: "
DEEPSPEED_ACCUMULATION = "How many gradient accumulation steps you're passing in your script? [1]: "
DEEPSPEED_CLIPPING = "Do you want to use gradient clipping? [yes/NO]: "
DEEPSPEED_16BIT = "Do you want to save 16-bit model weights when using ZeRO Stage-3? [yes/NO]: "
DEEPSPEED_ZERO_INIT = "Do you want to enable `deepspeed.zero.Init` when using ZeRO Stage-3"
DEEPSPEED_MOE = "Do you want to enable Mixture-of-Experts training (MoE)? [yes/NO]: "
FSDP = "Do you want to use FullyShardedDataParallel? [yes/NO]: "
MEGATRON = "Do you want to use Megatron-LM ? [yes/NO]: "
FSDP_OFFLOAD = "Do you want to offload parameters and gradients to CPU? [yes/NO]: "
FSDP_NO_SPLIT = "Do you want to use the model's `_no_split_modules` to wrap."
FSDP_CLASSES = "Specify the comma-separated list of transformer layer class names"
FSDP_FORWARD_PREFETCH = "Do you want to enable FSDP's forward prefetch policy? [yes/NO]: "
FSDP_ORIG_PARAMS = "Do you want to enable FSDP's `use_orig_params` feature? [YES/no]: "
FSDP_RAM_EFFICIENT = "Do you want to enable CPU RAM efficient model loading?"
FSDP_SYNC = "Do you want each individually wrapped FSDP unit to broadcast module parameters"
FSDP_CHECKPOINTING = "Do you want to enable FSDP activation checkpointing? [yes/NO]: "
CPU_PROCESSES = "How many processes should be used for distributed training? [1]:"
GPU_PROCESSES = "How many GPU(s) should be used for distributed training? [1]:"
GPU_IDS = "What GPU(s) (by id) should be used for training on this machine"
NUMA = "Would you like to enable numa efficiency?"


def questionnaire(env, steps, config_file=None):
    """Runs `accel config`, answering (prompt, answer) steps in order; returns (code, transcript)."""
    argv = [ACCEL, "config"] + (["--config_file", config_file] if config_file else [])
    t = Terminal(argv, env)
    try:
        for prompt, answer in steps:
            t.answer(prompt, answer)
        return t.finish(), t.text()
    finally:
        t.close()


SINGLE_CPU = [(ENV_PROMPT, ""), (TYPE_PROMPT, ""), (CPU_ONLY, "yes"), (DYNAMO, ""),
              (DEEPSPEED, ""), (MP_PROMPT, "")]

# What Accelerate's own questionnaire writes for SINGLE_CPU, less the ipex_config: {ipex: false}
# section of Accelerate 0.2x-1.12 (libaccel has no IPEX question, and current Accelerate has none).
SINGLE_CPU_FILE = """compute_environment: LOCAL_MACHINE
debug: false
distributed_type: 'NO'
downcast_bf16: 'no'
enable_cpu_affinity: false
machine_rank: 0
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 1
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
"""


class Tests:
    def __init__(self, accelerate):
        self.accelerate = accelerate
        self.dir = tempfile.mkdtemp(prefix="accel-config-test-")
        self.files = {}  # name -> (path, env) for the Accelerate checks

    def home(self, name):
        return os.path.join(self.dir, name)

    # -- the questionnaire --

    def test_single_process_cpu_default_location(self):
        env = clean_env(self.home("single"))
        code, out = questionnaire(env, SINGLE_CPU)
        path = os.path.join(self.home("single"), "accelerate", "default_config.yaml")
        check(code == 0, f"exit {code}:\n{out}")
        check(f"accelerate configuration saved at {path}" in out, out)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        check(text == SINGLE_CPU_FILE, f"the file is not what Accelerate writes:\n{text}")
        expect_values(path, env, {"distributed_type": "NO", "use_cpu": "true", "num_processes": "1",
                                  "num_machines": "1", "mixed_precision": "no", "debug": "false"})
        self.files["single_cpu"] = (path, env)

    def test_multi_cpu_four_processes_on_two_machines(self):
        env = clean_env(self.home("multi"))
        path = os.path.join(self.home("multi"), "new", "dir", "multi.yaml")
        code, out = questionnaire(env, [
            (ENV_PROMPT, "0"), (TYPE_PROMPT, "multi-CPU"), (MACHINES, "2"), (RANK, "1"),
            (IP, "10.1.2.3"), (PORT, "29555"), (SAME_NETWORK, ""), (DEBUG, "yes"), (MPIRUN, ""),
            (DYNAMO, "no"), (DEEPSPEED, ""), (FSDP, ""), (CPU_PROCESSES, "4"),
            (MP_PROMPT, "fp16")], path)
        check(code == 0, f"exit {code}:\n{out}")
        expect_values(path, env, {
            "distributed_type": "MULTI_CPU", "num_processes": "4", "num_machines": "2",
            "machine_rank": "1", "main_process_ip": "10.1.2.3", "main_process_port": "29555",
            "same_network": "true", "rdzv_backend": "static", "debug": "true", "use_cpu": "true",
            "mixed_precision": "fp16"})
        self.files["multi_cpu"] = (path, env)

    def test_bf16_on_gpus(self):
        env = clean_env(self.home("bf16"))
        path = os.path.join(self.home("bf16"), "bf16.yaml")
        code, out = questionnaire(env, [
            (ENV_PROMPT, ""), (TYPE_PROMPT, "No distributed training"), (CPU_ONLY, "no"),
            (DYNAMO, ""), (DEEPSPEED, "n"), (GPU_IDS, " 0, 1 "), (NUMA, ""), (MP_PROMPT, "bf16")],
            path)
        check(code == 0, f"exit {code}:\n{out}")
        expect_values(path, env, {"distributed_type": "NO", "mixed_precision": "bf16",
                                  "use_cpu": "false", "gpu_ids": "0,1", "num_processes": "1"})
        self.files["bf16"] = (path, env)

    def test_multi_gpu_refuses_one_process_on_one_machine(self):
        env = clean_env(self.home("mgpu"))
        path = os.path.join(self.home("mgpu"), "mgpu.yaml")
        t = Terminal([ACCEL, "config", "--config_file", path], env)
        try:
            for prompt, line in [(ENV_PROMPT, ""), (TYPE_PROMPT, "2"), (MACHINES, ""), (DEBUG, ""),
                                 (DYNAMO, ""), (DEEPSPEED, ""), (FSDP, "")]:
                t.answer(prompt, line)
            t.answer(MEGATRON, "")
            t.answer(GPU_PROCESSES, "1")
            t.answer("multi-GPU with one GPU on one machine is not distributed", "2")
            t.answer(GPU_IDS, "all")
            t.answer(NUMA, "yes")
            t.answer("NUMA affinity pinning is not supported by libaccel", "no")
            t.answer(MP_PROMPT, "1")
            code = t.finish()
        finally:
            t.close()
        check(code == 0, f"exit {code}:\n{t.text()}")
        expect_values(path, env, {"distributed_type": "MULTI_GPU", "num_processes": "2",
                                  "gpu_ids": "all", "use_cpu": "false", "mixed_precision": "fp16",
                                  "enable_cpu_affinity": "false"})
        self.files["multi_gpu"] = (path, env)

    def test_deepspeed_stages_offered_on_cpus(self):
        """ZeRO stages 0-3 on a multi-CPU machine (Accelerate offers DeepSpeed on GPUs only); what
        libaccel lacks is refused with why, and the section is written as Accelerate writes it."""
        env = clean_env(self.home("deepspeed"))
        path = os.path.join(self.home("deepspeed"), "deepspeed.yaml")
        t = Terminal([ACCEL, "config", "--config_file", path], env)
        try:
            for prompt, line in [(ENV_PROMPT, ""), (TYPE_PROMPT, "multi-CPU"), (MACHINES, ""),
                                 (DEBUG, ""), (MPIRUN, ""), (DYNAMO, ""), (DEEPSPEED, "yes"),
                                 (DEEPSPEED_JSON, "yes"),
                                 ("DeepSpeed's JSON files are not read by libaccel", "no"),
                                 ("Enter for 2 (2): ", "4"),
                                 ("'4' is not one of the choices", "3"),
                                 ("Where to offload optimizer states?", "cpu"),
                                 ("offloading to the CPU is not supported by libaccel", "none"),
                                 ("Where to offload parameters?", ""),
                                 (DEEPSPEED_ACCUMULATION, "2"), (DEEPSPEED_CLIPPING, "yes"),
                                 ("call accel_clip_grad_norm before the optimizer step", "no"),
                                 (DEEPSPEED_16BIT, "yes"),
                                 ("writes the parameters in their own dtype", "no"),
                                 (DEEPSPEED_ZERO_INIT, "yes"),
                                 ("each rank builds the whole model", "no"), (DEEPSPEED_MOE, ""),
                                 (CPU_PROCESSES, "2"), (MP_PROMPT, "")]:
                t.answer(prompt, line)
            code = t.finish()
        finally:
            t.close()
        check(code == 0, f"exit {code}:\n{t.text()}")
        check(FSDP not in t.text() and GPU_IDS not in t.text(), t.text())
        section = ("{gradient_accumulation_steps: 2, offload_optimizer_device: none, "
                   "offload_param_device: none, zero3_init_flag: false, "
                   "zero3_save_16bit_model: false, zero_stage: 3}")
        expect_values(path, env, {"distributed_type": "DEEPSPEED", "num_processes": "2",
                                  "use_cpu": "true", "deepspeed_config": section})
        with open(path, encoding="utf-8") as f:
            text = f.read()
        check("deepspeed_config:\n  gradient_accumulation_steps: 2\n  offload_optimizer_device: "
              "none\n  offload_param_device: none\n  zero3_init_flag: false\n  "
              "zero3_save_16bit_model: false\n  zero_stage: 3\ndistributed_type: DEEPSPEED\n"
              in text, text)
        # Rewritten as JSON (`accel config update` of a .json file): numbers and booleans as
        # Accelerate's JSON has them, and it reads back the same.
        json_path = os.path.join(self.home("deepspeed"), "deepspeed.json")
        shutil.copy(path, json_path)
        r = run([ACCEL, "config", "update", "--config_file", json_path], env)
        check(r.returncode == 0, r.stdout + r.stderr)
        with open(json_path, encoding="utf-8") as f:
            written = json.load(f)
        check(written["deepspeed_config"] == {
            "gradient_accumulation_steps": 2, "offload_optimizer_device": "none",
            "offload_param_device": "none", "zero3_init_flag": False,
            "zero3_save_16bit_model": False, "zero_stage": 3}, written)
        expect_values(json_path, env, {"deepspeed_config": section})
        self.files["deepspeed"] = (path, env)

    def test_fsdp_offered_on_cpus(self):
        """FSDP's questions in Accelerate's order on a multi-CPU machine (Accelerate asks them on
        GPUs only); what libaccel lacks is refused with why, and the section is what Accelerate
        writes for the same answers; libaccel runs the file as stage 3."""
        env = clean_env(self.home("fsdp"))
        path = os.path.join(self.home("fsdp"), "fsdp.yaml")
        t = Terminal([ACCEL, "config", "--config_file", path], env)
        try:
            for prompt, line in [(ENV_PROMPT, ""), (TYPE_PROMPT, "multi-CPU"), (MACHINES, ""),
                                 (DEBUG, ""), (MPIRUN, ""), (DYNAMO, ""), (DEEPSPEED, ""),
                                 (FSDP, "yes"), ("Enter for 0 (FULL_SHARD): ", "HYBRID_SHARD"),
                                 ("hybrid sharding (within a machine, replicated across) is not "
                                  "supported by libaccel", "0"),
                                 (FSDP_OFFLOAD, "yes"), ("CPU offload is not supported", "no"),
                                 ("Enter for 0 (TRANSFORMER_BASED_WRAP): ", ""),
                                 (FSDP_NO_SPLIT, "yes"), ("name the classes to wrap", "no"),
                                 (FSDP_CLASSES, ""), ("Please enter one or more class names", "Linear"),
                                 ("Enter for 0 (BACKWARD_PRE): ", "NO_PREFETCH"),
                                 ("Enter for 2 (SHARDED_STATE_DICT): ", "FULL_STATE_DICT"),
                                 (FSDP_FORWARD_PREFETCH, "yes"), (FSDP_ORIG_PARAMS, ""),
                                 (FSDP_RAM_EFFICIENT, "no"), (FSDP_SYNC, ""),
                                 (FSDP_CHECKPOINTING, "yes"),
                                 ("activation checkpointing is not supported by libaccel", "no"),
                                 (CPU_PROCESSES, "2"), (MP_PROMPT, "")]:
                t.answer(prompt, line)
            code = t.finish()
        finally:
            t.close()
        check(code == 0, f"exit {code}:\n{t.text()}")
        check(MEGATRON not in t.text() and GPU_IDS not in t.text(), t.text())
        section = ("{fsdp_activation_checkpointing: false, fsdp_auto_wrap_policy: "
                   "TRANSFORMER_BASED_WRAP, fsdp_backward_prefetch: NO_PREFETCH, "
                   "fsdp_cpu_ram_efficient_loading: false, fsdp_forward_prefetch: true, "
                   "fsdp_offload_params: false, fsdp_sharding_strategy: FULL_SHARD, "
                   "fsdp_state_dict_type: FULL_STATE_DICT, fsdp_sync_module_states: true, "
                   "fsdp_transformer_layer_cls_to_wrap: Linear, fsdp_use_orig_params: true}")
        expect_values(path, env, {"distributed_type": "FSDP", "num_processes": "2",
                                  "use_cpu": "true", "fsdp_config": section})
        r = run([ACCEL, "test", "--config_file", path], env)
        check(r.returncode == 0 and "FSDP" in r.stdout + r.stderr, r.stdout + r.stderr)
        self.files["fsdp"] = (path, env)

    def test_bad_answers_are_explained_and_asked_again(self):
        env = clean_env(self.home("bad"))
        path = os.path.join(self.home("bad"), "bad.yaml")
        t = Terminal([ACCEL, "config", "--config_file", path], env)
        try:
            t.answer(ENV_PROMPT, "aws")
            t.answer("Amazon SageMaker is not supported by libaccel; choose another.", "0")
            t.answer(TYPE_PROMPT, "7")
            t.answer("'7' is not one of the choices", "TPU")
            t.answer("TPUs are not supported by libaccel", "MULTI_XPU")
            t.answer("multi-XPU is not supported by libaccel", "Multi-Cpu")
            t.answer(MACHINES, "two")
            t.answer("Please enter an integer from 1 to", "2")
            t.answer(RANK, "5")
            t.answer("Please enter an integer from 0 to 1.", "0")
            t.answer(IP, "")
            t.answer("Please enter the address of machine 0", "host-a")
            t.answer(PORT, "70000")
            t.answer("Please enter an integer from 1 to 65535.", "29500")
            t.answer(SAME_NETWORK, "maybe")
            t.answer("Please enter yes or no.", "no")
            t.answer(RDZV, "c10d")
            t.answer("'c10d' is not supported by libaccel; supported: static", "static")
            t.answer(DEBUG, "")
            t.answer(MPIRUN, "yes")
            t.answer("use accel launch; only 'no' can be chosen here.", "no")
            t.answer(DYNAMO, "YES")
            t.answer("torch.compile (dynamo) does not exist in LibTorch's C++ API", "NO")
            t.answer(DEEPSPEED, "")
            t.answer(FSDP, "")
            t.answer(CPU_PROCESSES, "3")
            t.answer("must divide by the number of machines (2)", "6")
            t.answer(MP_PROMPT, "fp8")
            t.answer("fp8 is not supported by libaccel; choose another.", "2")
            code = t.finish()
        finally:
            t.close()
        check(code == 0, f"exit {code}:\n{t.text()}")
        expect_values(path, env, {
            "distributed_type": "MULTI_CPU", "num_machines": "2", "machine_rank": "0",
            "main_process_ip": "host-a", "main_process_port": "29500", "same_network": "false",
            "rdzv_backend": "static", "num_processes": "6", "mixed_precision": "bf16"})
        self.files["after_bad_answers"] = (path, env)

    def test_end_of_input_midway_writes_nothing(self):
        env = clean_env(self.home("eof"))
        os.makedirs(self.home("eof"))
        existing = os.path.join(self.home("eof"), "existing.yaml")
        with open(existing, "w", encoding="utf-8") as f:
            f.write("distributed_type: MULTI_CPU\nnum_processes: 2\n")
        fresh = os.path.join(self.home("eof"), "fresh.yaml")
        for path in (existing, fresh):
            t = Terminal([ACCEL, "config", "--config_file", path], env)
            try:
                t.answer(ENV_PROMPT, "")
                t.answer(TYPE_PROMPT, "1")
                t.expect(MACHINES)
                t.end_of_input()
                t.expect("standard input ended before the questionnaire was complete; "
                         "nothing was written")
                code = t.finish()
            finally:
                t.close()
            check(code == 1, f"exit {code} after end of input:\n{t.text()}")
        with open(existing, encoding="utf-8") as f:
            check(f.read() == "distributed_type: MULTI_CPU\nnum_processes: 2\n",
                  "the existing file changed")
        check(not os.path.exists(fresh), "a file was written after end of input")
        check(sorted(os.listdir(self.home("eof"))) == ["existing.yaml"],
              f"left behind: {os.listdir(self.home('eof'))}")

    def test_answers_through_a_pipe(self):
        env = clean_env(self.home("pipe"))
        path = os.path.join(self.home("pipe"), "pipe.yaml")
        r = run([ACCEL, "config", "--config_file", path], env, "\n\nyes\nno\nno\n2\n")
        check(r.returncode == 0, f"exit {r.returncode}:\n{r.stdout}{r.stderr}")
        # Answers read from a pipe are echoed, so that the transcript reads like a session.
        check("[yes/NO]:yes\n" in r.stdout, r.stdout)
        expect_values(path, env, {"distributed_type": "NO", "use_cpu": "true",
                                  "mixed_precision": "bf16"})
        r = run([ACCEL, "config", "--config_file", path + ".2"], env, "\n\nyes\n")
        check(r.returncode == 1 and "nothing was written" in r.stderr, r.stdout + r.stderr)
        check(not os.path.exists(path + ".2"), "written after end of input")

    def test_overwrites_in_place_keeping_the_mode(self):
        env = clean_env(self.home("over"))
        os.makedirs(self.home("over"))
        path = os.path.join(self.home("over"), "c.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write("distributed_type: MULTI_CPU\n")
        os.chmod(path, 0o640)
        link = os.path.join(self.home("over"), "link.yaml")
        os.symlink("c.yaml", link)
        code, out = questionnaire(env, SINGLE_CPU, link)
        check(code == 0, f"exit {code}:\n{out}")
        check("(replacing the previous file)" in out, out)
        check(os.path.islink(link), "the symbolic link was replaced by a file")
        with open(path, encoding="utf-8") as f:
            check(f.read() == SINGLE_CPU_FILE, "the link's target was not rewritten")
        check(stat.S_IMODE(os.stat(path).st_mode) == 0o640, "the file's mode changed")

    # -- config update and config default --

    def test_update_fills_missing_keys_and_keeps_values(self):
        env = clean_env(self.home("update"))
        os.makedirs(self.home("update"))
        path = os.path.join(self.home("update"), "u.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write("distributed_type: MULTI_CPU\nnum_processes: 2\nfp16: true\n"
                    "gradient_accumulation_steps: 4\ndeepspeed_config: {}\n")
        r = run([ACCEL, "config", "update", "--config_file", path], env)
        check(r.returncode == 0, r.stdout + r.stderr)
        check(f"Successfully updated the configuration file at {path}." in r.stdout, r.stdout)
        check("Added with their default values: compute_environment, debug" in r.stdout, r.stdout)
        check("gradient_accumulation_steps" in r.stdout, "libaccel's own key not reported")
        keys = file_keys(path)
        for key in ("compute_environment", "debug", "distributed_type", "downcast_bf16",
                    "enable_cpu_affinity", "machine_rank", "main_training_function",
                    "mixed_precision", "num_machines", "num_processes", "rdzv_backend",
                    "same_network", "tpu_use_cluster", "tpu_use_sudo", "use_cpu",
                    "gradient_accumulation_steps"):
            check(key in keys, f"{key} missing after update: {keys}")
        check("fp16" not in keys and "deepspeed_config" not in keys, f"kept: {keys}")
        check(keys == sorted(keys), f"keys not sorted: {keys}")
        expect_values(path, env, {"distributed_type": "MULTI_CPU", "num_processes": "2",
                                  "mixed_precision": "fp16", "gradient_accumulation_steps": "4",
                                  "debug": "false", "compute_environment": "LOCAL_MACHINE"})
        with open(path, encoding="utf-8") as f:
            first = f.read()
        r = run([ACCEL, "config", "update", "--config_file", path], env)
        with open(path, encoding="utf-8") as f:
            check(r.returncode == 0 and f.read() == first, "a second update changed the file")

        # Accelerate-only keys: what Accelerate reads before and after must not change.
        plain = os.path.join(self.home("update"), "accelerate_keys.yaml")
        with open(plain, "w", encoding="utf-8") as f:
            f.write("distributed_type: MULTI_CPU\nnum_processes: 4\nsame_network: true\n"
                    "mixed_precision: bf16\nuse_cpu: true\n")
        shutil.copy(plain, plain + ".before.yaml")
        r = run([ACCEL, "config", "update", "--config_file", plain], env)
        check(r.returncode == 0 and "libaccel's own keys" not in r.stdout, r.stdout + r.stderr)
        self.files["update_before"] = (plain + ".before.yaml", env)
        self.files["update_after"] = (plain, env)

    def test_update_default_location_and_json(self):
        env = clean_env(self.home("update_default"))
        r = run([ACCEL, "config", "update"], env)
        default = os.path.join(self.home("update_default"), "accelerate", "default_config.yaml")
        check(r.returncode == 1 and f"no configuration file at '{default}'" in r.stderr,
              r.stdout + r.stderr)
        os.makedirs(os.path.dirname(default))
        with open(default, "w", encoding="utf-8") as f:
            f.write('{"distributed_type": "NO", "mixed_precision": "fp16"}\n')
        r = run([ACCEL, "config", "update"], env)
        check(r.returncode == 0, r.stdout + r.stderr)
        # A .yaml path is written as YAML, as Accelerate's update does.
        expect_values(default, env, {"distributed_type": "NO", "mixed_precision": "fp16",
                                     "num_processes": "1"})
        js = os.path.join(self.home("update_default"), "c.json")
        with open(js, "w", encoding="utf-8") as f:
            f.write("distributed_type: MULTI_CPU\nnum_processes: 2\n")
        r = run([ACCEL, "config", "update", "--config_file", js], env)
        check(r.returncode == 0, r.stdout + r.stderr)
        with open(js, encoding="utf-8") as f:
            data = json.load(f)
        check(data["distributed_type"] == "MULTI_CPU" and data["num_processes"] == 2
              and data["debug"] is False, f"JSON written: {data}")
        self.files["update_json"] = (js, env)

    def test_update_refuses_unknown_keys(self):
        env = clean_env(self.home("unknown"))
        os.makedirs(self.home("unknown"))
        path = os.path.join(self.home("unknown"), "u.yaml")
        text = "distributed_type: MULTI_CPU\nnum_procesess: 2\n"
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        r = run([ACCEL, "config", "update", "--config_file", path], env)
        check(r.returncode == 1 and "unknown configuration key 'num_procesess'" in r.stderr
              and "did you mean 'num_processes'" in r.stderr, r.stdout + r.stderr)
        with open(path, encoding="utf-8") as f:
            check(f.read() == text, "the file changed")
        check(os.listdir(self.home("unknown")) == ["u.yaml"], "left a temporary file behind")

    def test_config_default(self):
        env = clean_env(self.home("default"))
        path = os.path.join(self.home("default"), "d.yaml")
        r = run([ACCEL, "config", "default", "--config_file", path, "--mixed_precision", "bf16"],
                env)
        check(r.returncode == 0, r.stdout + r.stderr)
        expect_values(path, env, {"distributed_type": "NO", "mixed_precision": "bf16",
                                  "use_cpu": "true", "num_processes": "1"})
        r = run([ACCEL, "config", "default", "--config_file", path], env)
        check(r.returncode == 1 and "exists already" in r.stderr, r.stdout + r.stderr)
        js = os.path.join(self.home("default"), "d.json")
        r = run([ACCEL, "config", "default", "--config_file", js, "--num_processes", "2"], env)
        check(r.returncode == 0, r.stdout + r.stderr)
        with open(js, encoding="utf-8") as f:
            check(json.load(f)["distributed_type"] == "MULTI_CPU", "JSON default")
        self.files["default"] = (path, env)
        self.files["default_json"] = (js, env)

    # -- Python Accelerate reads what accel writes, and the reverse --

    def accelerate_tests(self):
        return [self.test_accelerate_reads_our_files, self.test_update_keeps_accelerate_values,
                self.test_accel_reads_accelerate_default, self.test_same_answers_same_file]

    def test_accelerate_reads_our_files(self):
        for name, (path, env) in sorted(self.files.items()):
            if name == "update_before":
                continue
            fields = same_in_both(path, env)
            print(f"    Accelerate reads {name} ({os.path.basename(path)}): distributed_type="
                  f"{fields['distributed_type']}, num_processes={fields['num_processes']}, "
                  f"mixed_precision={fields['mixed_precision']}")

    def test_update_keeps_accelerate_values(self):
        before = accelerate_reads(*self.files["update_before"])["fields"]
        after = accelerate_reads(*self.files["update_after"])["fields"]
        changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
        check(not changed, f"accel config update changed what Accelerate reads: {changed}")

    def test_accel_reads_accelerate_default(self):
        env = clean_env(self.home("acc_default"))
        for mp in ("no", "bf16"):
            path = os.path.join(self.home("acc_default"), f"default_{mp}.yaml")
            r = run([ACCELERATE_PYTHON, "-m", "accelerate.commands.accelerate_cli", "config",
                     "default", "--config_file", path, "--mixed_precision", mp], env)
            check(r.returncode == 0 and os.path.exists(path), r.stdout + r.stderr)
            same_in_both(path, env)
            # And `accel config update` keeps what Accelerate reads from it.
            before = accelerate_reads(path, env)["fields"]
            r = run([ACCEL, "config", "update", "--config_file", path], env)
            check(r.returncode == 0, r.stdout + r.stderr)
            after = accelerate_reads(path, env)["fields"]
            changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
            check(not changed, f"update changed Accelerate's reading of its default: {changed}")

    def test_same_answers_same_file(self):
        """Accelerate's questionnaire and ours, given the same answers, write the same file."""
        env = clean_env(self.home("same"))
        os.makedirs(self.home("same"))
        theirs = os.path.join(self.home("same"), "theirs.yaml")
        ours = os.path.join(self.home("same"), "ours.yaml")
        # Accelerate's menus read keys in raw mode: a digit moves the selection, Enter (\r) takes it.
        t = Terminal([ACCELERATE_PYTHON, "-m", "accelerate.commands.accelerate_cli", "config",
                      "--config_file", theirs], env)

        def menu(prompt, index):
            t.expect(prompt)
            t.expect("\x1b[?25l")  # the menu is drawn and hides the cursor, then reads keys
            t.wait_raw()
            if index:
                os.write(t.master, str(index).encode())
                t.expect("\x1b[32m")  # the choice redrawn, selected: the key was read
                t.wait_raw()
            os.write(t.master, b"\r")

        try:
            menu("In which compute environment are you running?", 0)
            menu("Which type of machine are you using?", 0)
            t.answer(CPU_ONLY, "no")
            t.answer(DYNAMO, "no")
            t.answer(DEEPSPEED, "no")
            t.answer(GPU_IDS, "0")
            t.answer(NUMA, "no")
            menu("Do you wish to use mixed precision?", 2)
            t.expect("accelerate configuration saved at")
            code = t.finish()
        finally:
            t.close()
        check(code == 0, f"Accelerate's questionnaire: exit {code}:\n{t.text()}")
        code, out = questionnaire(env, [
            (ENV_PROMPT, ""), (TYPE_PROMPT, ""), (CPU_ONLY, "no"), (DYNAMO, "no"),
            (DEEPSPEED, "no"), (GPU_IDS, "0"), (NUMA, "no"), (MP_PROMPT, "2")], ours)
        check(code == 0, f"exit {code}:\n{out}")
        with open(theirs, encoding="utf-8") as f:
            theirs_text = f.read()
        with open(ours, encoding="utf-8") as f:
            ours_text = f.read()
        check(theirs_text == ours_text,
              f"Accelerate wrote:\n{theirs_text}\naccel wrote:\n{ours_text}")
        same_in_both(theirs, env)


def main():
    global ACCEL, ACCELERATE_PYTHON
    args = sys.argv[1:]
    with_accelerate = "--accelerate" in args
    args = [a for a in args if a != "--accelerate"]
    if len(args) != 1:
        sys.exit("usage: config_questionnaire_test.py ACCEL [--accelerate]")
    ACCEL = os.path.abspath(args[0])
    if with_accelerate:
        ACCELERATE_PYTHON = os.environ.get("ACCEL_TEST_ACCELERATE_PYTHON", "")
        if not ACCELERATE_PYTHON:
            print("SKIP: ACCEL_TEST_ACCELERATE_PYTHON is not set (a Python with Accelerate; "
                  "see tools/setup.sh)")
            return SKIP
        if not os.access(ACCELERATE_PYTHON, os.X_OK):
            print(f"SKIP: {ACCELERATE_PYTHON} does not exist (tools/setup.sh makes it when PyPI "
                  "can be reached)")
            return SKIP
        probe = subprocess.run([ACCELERATE_PYTHON, "-c", "import accelerate; "
                                "print(accelerate.__version__)"], capture_output=True, text=True)
        if probe.returncode != 0:
            print(f"SKIP: {ACCELERATE_PYTHON} cannot import accelerate:\n{probe.stderr}")
            return SKIP
        print(f"Python Accelerate {probe.stdout.strip()} ({ACCELERATE_PYTHON})")
    else:
        print("Python Accelerate's loader: not used here (cli.accelerate_roundtrip runs this file "
              "with --accelerate)")

    tests = Tests(with_accelerate)
    cases = [getattr(tests, name) for name in sorted(dir(tests))
             if name.startswith("test_") and name not in
             ("test_accelerate_reads_our_files", "test_update_keeps_accelerate_values",
              "test_accel_reads_accelerate_default", "test_same_answers_same_file")]
    if with_accelerate:
        cases += tests.accelerate_tests()
    passed = failed = 0
    try:
        for case in cases:
            try:
                case()
                passed += 1
                print(f"PASS {case.__name__}")
            except Exception as e:  # a Failure, or a bug in the test or the program
                failed += 1
                detail = str(e) if isinstance(e, Failure) else traceback.format_exc()
                print(f"FAIL {case.__name__}: {detail}")
            sys.stdout.flush()
    finally:
        if failed == 0:
            shutil.rmtree(tests.dir, ignore_errors=True)
        else:
            print(f"files kept in {tests.dir}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
