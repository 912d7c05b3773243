#!/usr/bin/env python3
"""libaccel programs under the engines clusters run, as they are: torchrun (static and standalone
rendezvous, --max_restarts), Open MPI's mpirun, SLURM's srun, a Kubernetes training operator's
variables, two machines in two network namespaces (and their checkpoints with save_on_each_node,
each machine seeing its own directory), and accel launch's own elastic restart.

    cluster_suite.py SCENARIO --build BUILD_DIR --source SOURCE_DIR

Each scenario runs the collectives example (its printed results checked) and a short data-parallel
training run (mp_program equiv: 2 ranks x 32 samples must match 1 process x 64), or says why it
cannot run here and exits 77 (ctest's skip). Python 3 standard library only.
"""

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SKIP = 77
DEBIAN_PYTHON = "/usr/bin/python3"  # the one with Debian's python3-torch (torchrun)


class Failure(Exception):
    pass


def check(cond, what, output=""):
    if not cond:
        raise Failure(what + ("\n--- output ---\n" + output[-6000:] if output else ""))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def clean_env(extra=None):
    """This environment without any engine's variables (the test may run under one itself)."""
    env = {k: v for k, v in os.environ.items()
           if not re.match(r"^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_"
                           r"|TORCHELASTIC_|ACCEL_|ACCELERATE_|OMPI_|PMI_|PMIX_|MPI_|MV2_|SLURM_"
                           r"|PET_|GLOO_)", k)}
    env["HF_HOME"] = "/nonexistent-hf-home"  # no user's default config file
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra or {})
    return env


def run(argv, env=None, timeout=240, **kw):
    t0 = time.monotonic()
    try:
        r = subprocess.run(argv, env=env if env is not None else clean_env(), timeout=timeout,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        if isinstance(out, bytes):
            out = out.decode(errors="replace")
        raise Failure("%s hung: no exit within %d s\n%s" % (" ".join(argv), timeout, out[-6000:]))
    r.seconds = time.monotonic() - t0
    return r


def params_of(output):
    out = {}
    for line in output.splitlines():
        m = re.search(r"param (\S+) (.*)$", line)
        if m:
            out[m.group(1)] = [float(v) for v in m.group(2).split()]
    return out


COLLECTIVES_EXPECTED = [
    "gather                   shape [4] values 0 1 10 11",
    "reduce sum of rank+1     shape [] values 3",
    "reduce mean of rank+1    shape [] values 1.5",
    "broadcast from last rank shape [3] values 3.5 4.5 5.5",
    '"hello from rank 1"',
]


class Suite:
    def __init__(self, args):
        self.build = os.path.abspath(args.build)
        self.source = os.path.abspath(args.source)
        self.cli = os.path.join(self.build, "bin", "accel")
        self.mp = os.path.join(self.build, "bin", "mp_program")
        self.collectives = os.path.join(self.build, "bin", "collectives")
        self.fault = os.path.join(self.build, "bin", "fault_program")
        self.torchrun = [DEBIAN_PYTHON, os.path.join(self.source, "bench", "torchrun.py")]
        self.seed = args.seed
        self._reference = None

    # -- what every engine must run ------------------------------------------------------------

    def check_collectives(self, output, where):
        for line in COLLECTIVES_EXPECTED:
            check(line in output, "%s: the collectives example did not print %r" % (where, line),
                  output)
        print("  %s: collectives example: every result as expected" % where)

    def reference(self):
        if self._reference is None:
            r = run([self.mp, "equiv", "64"])
            check(r.returncode == 0, "1 x 64 reference run failed", r.stdout)
            self._reference = params_of(r.stdout)
            check(len(self._reference) == 4, "reference printed no parameters", r.stdout)
        return self._reference

    def check_equivalence(self, output, where):
        ref = self.reference()
        got = params_of(output)
        check(set(got) == set(ref), "%s: parameters %s, expected %s" % (where, sorted(got),
                                                                         sorted(ref)), output)
        worst = 0.0
        for name, values in ref.items():
            check(len(got[name]) == len(values), "%s: %s has %d values" % (where, name,
                                                                          len(got[name])))
            scale = max(1e-6, max(abs(v) for v in values))
            worst = max(worst, max(abs(a - b) for a, b in zip(values, got[name])) / scale)
        check(worst < 1e-5, "%s: 2 x 32 differs from 1 x 64 by %.3g (relative)" % (where, worst),
              output)
        print("  %s: training 2 x 32 == 1 x 64 (worst relative difference %.2g)" % (where, worst))

    def debug_lines(self, output):
        return [l for l in output.splitlines() if re.search(r"INFO( \[rank \d+/\d+\])?: rank \d+ of \d+ \(", l)]

    # -- torchrun --------------------------------------------------------------------------------

    def torchrun_available(self):
        if not os.path.exists(DEBIAN_PYTHON):
            return "no %s" % DEBIAN_PYTHON
        r = run([DEBIAN_PYTHON, "-c", "import torch.distributed.run"], timeout=120)
        if r.returncode != 0:
            return "Debian's python3-torch (torchrun) does not import: " + r.stdout.strip()[-300:]
        return None

    def libtorch_major(self):
        """The major version of the LibTorch this build of libaccel runs on (from `accel env`)."""
        out = run([self.cli, "env"]).stdout
        m = re.search(r"LibTorch version: (\d+)\.", out)
        check(m is not None, "accel env printed no LibTorch version", out)
        return int(m.group(1))

    def torch_of_torchrun(self):
        return run([DEBIAN_PYTHON, "-c", "import torch; print(torch.__version__)"]).stdout.strip()

    def agent_store_mismatch(self):
        """Why torchrun's agent store cannot serve this libaccel, or None. torchrun's static
        rendezvous shares the store its agent hosts; a LibTorch 2.x client validates a server
        first, which torch 1.13's (Debian's torchrun) does not answer."""
        torch = self.torch_of_torchrun()
        if self.libtorch_major() >= 2 and torch.startswith("1."):
            return ("libaccel runs on LibTorch 2.x and torchrun on torch %s: the agent's store "
                    "cannot serve a 2.x client (it needs a torchrun of torch 2.x)" % torch)
        return None

    def torchrun_argv(self, mode, program, extra=()):
        port = free_port()
        head = self.torchrun + ["--nproc_per_node", "2"]
        if mode == "standalone":
            head += ["--standalone"]
        elif mode == "c10d":  # the elastic rendezvous, as on a multi-node cluster
            head += ["--nnodes", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                     "127.0.0.1:%d" % port, "--rdzv_id", "accel-test-%d" % port]
        else:  # torchrun's default: a static rendezvous whose agent hosts the store
            head += ["--nnodes", "1", "--master_addr", "127.0.0.1", "--master_port", str(port)]
        return head + list(extra) + ["--no_python"] + program

    def scenario_torchrun(self, mode):
        reason = self.torchrun_available()
        if reason:
            return reason
        mismatch = self.agent_store_mismatch() if mode == "static" else None
        if mismatch:
            # What a user with that mix sees: a clear refusal within the rendezvous timeout.
            env = clean_env({"ACCEL_RENDEZVOUS_TIMEOUT": "10"})
            r = run(self.torchrun_argv(mode, [self.collectives]), env)
            check(r.returncode != 0, "torchrun %s: a 2.x client on a 1.x store succeeded?" % mode,
                  r.stdout)
            check("whose store client first validates the server" in r.stdout and
                  "torchrun of torch 2.x" in r.stdout,
                  "torchrun %s: the store mismatch is not explained" % mode, r.stdout)
            print("  torchrun %s: %s; refused with the explanation" % (mode, mismatch))
            return None
        env = clean_env({"ACCELERATE_DEBUG_MODE": "true"})
        r = run(self.torchrun_argv(mode, [self.collectives]), env)
        check(r.returncode == 0, "torchrun %s: the collectives example failed" % mode, r.stdout)
        self.check_collectives(r.stdout, "torchrun " + mode)
        lines = self.debug_lines(r.stdout)
        check(len(lines) == 2, "torchrun %s: expected 2 debug lines" % mode, r.stdout)
        hosted = [("hosted by the launcher" in l) for l in lines]
        # torch 1.13: the static rendezvous shares its agent's store (every rank a client); the
        # c10d rendezvous (--standalone's too) does not: rank 0 hosts the workers' store.
        check(all(hosted) if mode == "static" else not any(hosted),
              "torchrun %s: ranks joined the wrong store" % mode, "\n".join(lines))
        check(all("(torchrun)" in l and "local rank" in l and "from torchrun" in l
                  for l in lines), "torchrun %s: place not read from torchrun" % mode,
              "\n".join(lines))
        r = run(self.torchrun_argv(mode, [self.mp, "equiv", "32"]))
        check(r.returncode == 0, "torchrun %s: training failed" % mode, r.stdout)
        self.check_equivalence(r.stdout, "torchrun " + mode)

    def scenario_torchrun_static(self):
        return self.scenario_torchrun("static")

    def scenario_torchrun_standalone(self):
        return self.scenario_torchrun("standalone")

    def scenario_torchrun_c10d(self):
        return self.scenario_torchrun("c10d")

    # -- restarts: torchrun's and accel launch's -------------------------------------------------

    def restart_run(self, launcher_argv, project, kill_step):
        """Runs fault_program's training under a launcher that restarts; SIGKILLs rank 1 once,
        when it reaches `kill_step` in the first attempt. Returns (checksum line, output)."""
        env = clean_env()
        proc = subprocess.Popen(launcher_argv + [self.fault, "train", str(self.steps), "2",
                                                 project, "3"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        lines, killed = [], threading.Event()
        pids = {}

        def reader():
            for line in proc.stdout:
                lines.append(line)
                m = re.search(r"pid=(\d+) rank=(\d+) ready", line)
                if m:
                    pids[int(m.group(2))] = int(m.group(1))
                if (not killed.is_set() and re.search(r"\br1 step %d$" % kill_step, line.strip())
                        and 1 in pids):
                    os.kill(pids[1], signal.SIGKILL)
                    killed.set()
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise Failure("the restarted job hung\n" + "".join(lines)[-6000:])
        t.join(10)
        out = "".join(lines)
        check(killed.is_set(), "rank 1 never reached step %d to be killed" % kill_step, out)
        check(proc.returncode == 0, "the job did not finish after its restart (exit %d)"
              % proc.returncode, out)
        sums = re.findall(r"r0 checksum ([0-9a-f]{16})", out)
        check(len(sums) == 1, "expected one final checksum from rank 0", out)
        return sums[0], out

    def uninterrupted_checksum(self, project):
        r = run([self.cli, "launch", "-n", "2", self.fault, "train", str(self.steps), "2",
                 project, "3"])
        check(r.returncode == 0, "the uninterrupted run failed", r.stdout)
        sums = re.findall(r"r0 checksum ([0-9a-f]{16})", r.stdout)
        check(len(sums) == 1, "the uninterrupted run printed no checksum", r.stdout)
        return sums[0]

    steps = 10

    def restart_scenario(self, launcher_argv, name):
        rng = random.Random(self.seed)
        # After the first checkpoint (saved every 2 steps), so that there is one to resume from.
        kill_step = rng.randrange(3, self.steps)
        with tempfile.TemporaryDirectory(prefix="accel-restart-") as d:
            want = self.uninterrupted_checksum(os.path.join(d, "ref"))
            got, out = self.restart_run(launcher_argv, os.path.join(d, "job"), kill_step)
            check("loading" in out and "loaded step=" in out,
                  "%s: the restarted attempt did not resume from a checkpoint" % name, out)
            resumed = re.findall(r"r0 loaded step=(\d+)", out)
            check(got == want, "%s: after the kill at step %d the parameters differ from the "
                  "uninterrupted run's (%s != %s)" % (name, kill_step, got, want), out)
            print("  %s: rank 1 SIGKILLed at step %d; restarted, resumed at step %s; final "
                  "parameters bitwise equal to the uninterrupted run's (checksum %s)"
                  % (name, kill_step, ",".join(resumed), got))

    def scenario_torchrun_max_restarts(self):
        reason = self.torchrun_available() or self.agent_store_mismatch()
        if reason:
            return reason
        argv = self.torchrun + ["--nproc_per_node", "2", "--nnodes", "1", "--master_addr",
                                "127.0.0.1", "--master_port", str(free_port()),
                                "--max_restarts", "1", "--no_python"]
        self.restart_scenario(argv, "torchrun --max_restarts 1")

    def scenario_elastic_restart(self):
        argv = [self.cli, "launch", "-n", "2", "--max_restarts", "2"]
        self.restart_scenario(argv, "accel launch --max_restarts 2")

    # -- MPI -----------------------------------------------------------------------------------

    def mpirun_argv(self, extra=()):
        return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2",
                "-x", "MASTER_PORT=%d" % free_port()] + list(extra)

    def scenario_mpirun(self):
        if not shutil_which("mpirun"):
            return "Open MPI's mpirun is not installed (Debian's openmpi-bin)"
        env = clean_env()
        r = run(self.mpirun_argv(["-x", "ACCELERATE_DEBUG_MODE=true", self.collectives]), env)
        check(r.returncode == 0, "mpirun: the collectives example failed", r.stdout)
        self.check_collectives(r.stdout, "mpirun -n 2")
        lines = self.debug_lines(r.stdout)
        check(len(lines) == 2 and all("Open MPI" in l and "shared memory" in l for l in lines),
              "mpirun: place not read from Open MPI", r.stdout)
        r = run(self.mpirun_argv([self.mp, "equiv", "32"]), env)
        check(r.returncode == 0, "mpirun: training failed", r.stdout)
        self.check_equivalence(r.stdout, "mpirun -n 2")
        # Two launchers that disagree: a WORLD_SIZE exported by hand next to mpirun's own count.
        r = run(self.mpirun_argv(["-x", "WORLD_SIZE=4", self.collectives]), env, timeout=60)
        check(r.returncode != 0 and "two launchers disagree" in r.stdout
              and "OMPI_COMM_WORLD_SIZE=2" in r.stdout,
              "mpirun with WORLD_SIZE=4: expected a clear disagreement error", r.stdout)
        print("  mpirun -n 2 -x WORLD_SIZE=4: %s" % first_error(r.stdout))

    # -- SLURM ---------------------------------------------------------------------------------

    def scenario_srun(self):
        import slurm_fixture
        reason = slurm_fixture.why_unavailable()
        if reason:
            return "SLURM cannot run here: " + reason
        with slurm_fixture.SlurmCluster() as slurm:
            print("  SLURM up in %.1f s" % slurm.startup_seconds)
            base = clean_env()
            env = dict(base, SLURM_CONF=slurm.env["SLURM_CONF"], ACCELERATE_DEBUG_MODE="true")
            r = slurm.srun(["-n", "2", self.collectives], env=env, timeout=240)
            out = r.stdout + (r.stderr or "")
            check(r.returncode == 0, "srun -n 2: the collectives example failed", out)
            self.check_collectives(out, "srun -n 2")
            lines = self.debug_lines(out)
            check(len(lines) == 2 and all("SLURM's srun" in l for l in lines),
                  "srun: place not read from SLURM", out)
            env.pop("ACCELERATE_DEBUG_MODE")
            r = slurm.srun(["-n", "2", self.mp, "equiv", "32"], env=env, timeout=240)
            out = r.stdout + (r.stderr or "")
            check(r.returncode == 0, "srun -n 2: training failed", out)
            self.check_equivalence(out, "srun -n 2")
            # One launcher task per node, as Accelerate's SLURM example runs it.
            r = slurm.srun(["-N", "1", "-n", "1", self.cli, "launch", "-n", "2",
                            self.collectives], env=env, timeout=240)
            out = r.stdout + (r.stderr or "")
            check(r.returncode == 0, "srun accel launch: failed", out)
            self.check_collectives(out, "srun -n 1 accel launch -n 2")
            # Two launcher tasks on one node would each start every rank: refused.
            r = slurm.srun(["-N", "1", "-n", "2", self.cli, "launch", "-n", "2",
                            self.collectives], env=env, timeout=120)
            out = r.stdout + (r.stderr or "")
            check(r.returncode != 0 and "one task per node" in out,
                  "srun -n 2 accel launch: expected a clear error", out)
            print("  srun -n 2 accel launch: %s" % first_error(out))

    # -- Kubernetes ------------------------------------------------------------------------------

    def scenario_kubernetes(self):
        port = free_port()
        # Trainer v2 sets only PET_ variables: accel launch runs in the container.
        env = clean_env({"PET_NNODES": "1", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "0",
                         "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port),
                         "ACCELERATE_DEBUG_MODE": "true"})
        r = run([self.cli, "launch", self.collectives], env)
        check(r.returncode == 0, "accel launch from PET_ variables failed", r.stdout)
        self.check_collectives(r.stdout, "PET_ variables (Trainer v2)")
        check(all(":%d " % port in l for l in self.debug_lines(r.stdout)),
              "PET_MASTER_PORT was not used", r.stdout)
        r = run([self.cli, "launch", self.mp, "equiv", "32"], clean_env(
            {k: v for k, v in env.items() if k.startswith("PET_")}))
        check(r.returncode == 0, "training from PET_ variables failed", r.stdout)
        self.check_equivalence(r.stdout, "PET_ variables (Trainer v2)")
        # PyTorchJob v1 with one process per pod: RANK and WORLD_SIZE but no LOCAL_*: the census
        # finds which ranks share a machine (here, both: shared memory, one thread each of 2 CPUs).
        port = free_port()
        procs = []
        for rank in (0, 1):
            e = clean_env({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                           "WORLD_SIZE": "2", "RANK": str(rank), "PET_NNODES": "2",
                           "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": str(rank),
                           "ACCELERATE_DEBUG_MODE": "true"})
            e.pop("OMP_NUM_THREADS")
            procs.append(subprocess.Popen([self.mp, "equiv", "32"], env=e, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outs = [p.communicate(timeout=240)[0] for p in procs]
        for rank, (p, out) in enumerate(zip(procs, outs)):
            check(p.returncode == 0, "PyTorchJob-style rank %d failed" % rank, out)
            lines = self.debug_lines(out)
            check(len(lines) == 1 and "local rank %d of 2 (found by the census)" % rank in lines[0]
                  and "shared memory" in lines[0], "rank %d: machine share not found" % rank,
                  out)
            cpus = len(os.sched_getaffinity(0))
            check(" %d threads" % max(1, cpus // 2) in lines[0],
                  "rank %d: threads not sized by the census" % rank, out)
        self.check_equivalence(outs[0], "PyTorchJob v1 (RANK, WORLD_SIZE only)")
        print("  census: %s" % self.debug_lines(outs[1])[0].strip())

    # -- two machines ----------------------------------------------------------------------------

    def launch_two_machines(self, net, program, env_of, timeout=240, nproc=2, wrap=None,
                            on_listen=None):
        """accel launch on each namespace (machine i's environment from env_of(i); nproc processes
        in all; wrap(i, argv), when given, the command line machine i runs; on_listen(i, addr,
        port, store_port), when given, is called as soon as machine i's job listens on a new
        (addr, port)); returns the processes' return codes, outputs, and the (address, port) each
        machine's job processes listened on while it ran."""
        from stranger_suite import job_pids, listening
        port = free_port()
        procs = []
        for i in (0, 1):
            argv = [self.cli, "launch", "--num_machines", "2", "--machine_rank", str(i),
                    "--main_process_ip", net.addr[0], "--main_process_port", str(port),
                    "-n", str(nproc)] + program
            if wrap:
                argv = wrap(i, argv)
            procs.append(net.popen(i, argv, env=env_of(i), text=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT))
        outs = [[], []]
        readers = [threading.Thread(target=lambda i=i: outs[i].extend(procs[i].stdout))
                   for i in (0, 1)]
        for r in readers:
            r.start()
        seen = [set(), set()]
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            for i, p in enumerate(procs):
                if p.poll() is None:
                    now = listening(job_pids(p.pid))
                    if on_listen:
                        for addr, lport in now - seen[i]:
                            on_listen(i, addr, lport, port)
                    seen[i] |= now
            time.sleep(0.02 if on_listen else 0.05)
        if any(p.poll() is None for p in procs):
            for q in procs:
                q.kill()
            raise Failure("two machines: %s hung" % " ".join(program))
        for r in readers:
            r.join()
        return [p.returncode for p in procs], ["".join(o) for o in outs], seen

    def strangers_across_machines(self, net, token):
        """A stranger on machine 1's network at every port machine 0's job listens on, while
        machine 1's rank is late to connect (late_peer.so): each attempt closed within a second
        and named in machine 0's log; the job's parameters bitwise those of the run left alone."""
        program = [os.path.join(self.build, "bin", "guarded_program")]
        suite = os.path.join(self.source, "tests", "security", "stranger_suite.py")
        base = {"ACCEL_JOB_TOKEN": token, "ACCEL_RENDEZVOUS_TIMEOUT": "60"}
        codes, outs, _ = self.launch_two_machines(net, program, lambda i: clean_env(base))
        alone = re.search(r"steps \d+ params [0-9a-f]+", "\n".join(outs))
        check(all(c == 0 for c in codes) and alone, "two machines: guarded_program failed",
              "\n".join(outs))
        late = dict(base, LD_PRELOAD=os.path.join(self.build, "lib", "late_peer.so"),
                    LATE_PEER_SECONDS="3")
        attackers = []

        def on_listen(i, addr, port, store_port):
            if i != 0:
                return
            argv = [sys.executable, suite, "--attack", "%s:%d" % (addr, port)]
            if port == store_port:
                argv.append("--store")
            attackers.append((port == store_port, net.popen(
                1, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))

        codes, outs, seen = self.launch_two_machines(
            net, program, lambda i: clean_env(late if i == 1 else base), on_listen=on_listen)
        both = "\n".join(outs)
        check(all(c == 0 for c in codes), "two machines with a stranger: the job failed", both)
        got = re.search(r"steps \d+ params [0-9a-f]+", both)
        check(got and got.group(0) == alone.group(0),
              "two machines with a stranger: '%s', alone '%s'" % (got and got.group(0),
                                                                  alone.group(0)), both)
        check(any(not is_store for is_store, _ in attackers),
              "two machines: machine 0's collectives listener was never seen", both)
        bad = []
        for is_store, a in attackers:
            text = a.communicate(timeout=60)[0]
            for line in text.splitlines():
                r = json.loads(line)
                if r["kind"] == "torch TCPStore client":
                    if r["closed"] == "served":
                        bad.append("%s served a TCPStore client" % r["port"])
                    continue
                logged = r["local"] is not None and re.search(
                    r"refused a connection from %s:%d: " % (re.escape(net.addr[1]), r["local"]),
                    outs[0])
                where = "store" if is_store else "collectives"
                print("    %s :%d %-36s closed after %s s%s" % (
                    where, r["port"], r["kind"], r["closed"] if r["closed"] is None else
                    "%.2f" % r["closed"], ", logged" if logged else ""))
                if r["closed"] is None or r["closed"] > 1.0 or not logged:
                    bad.append("%s %s: closed %s, logged %s" % (where, r["kind"], r["closed"],
                                                              bool(logged)))
        check(not bad, "two machines: strangers not refused within 1 s and named: %s" % bad,
              both)
        print("  strangers from machine 1 at machine 0's %d ports: every attempt refused within "
              "1 s and named; the job bitwise as alone" % len(attackers))

    def scenario_netns(self):
        import netns_fixture
        sys.path.insert(0, os.path.join(self.source, "tests", "security"))
        reason = netns_fixture.why_unavailable()
        if reason:
            return "network namespaces cannot be made here: " + reason
        token = "netns-%d" % random.getrandbits(48)
        with netns_fixture.NetnsPair() as net:
            for what, program, with_token in (("collectives", [self.collectives], False),
                                              ("training", [self.mp, "equiv", "32"], True)):
                extra = {"ACCELERATE_DEBUG_MODE": "true", "ACCEL_RENDEZVOUS_TIMEOUT": "60"}
                if with_token:
                    extra["ACCEL_JOB_TOKEN"] = token
                codes, outs, seen = self.launch_two_machines(net, program,
                                                             lambda i: clean_env(extra))
                both = "\n".join(outs)
                for i, code in enumerate(codes):
                    check(code == 0, "machine %d: %s failed" % (i, what), both)
                lines = self.debug_lines(both)
                check(len(lines) == 2 and all("all-reduce over tcp" in l and "local rank 0 of 1"
                                              in l for l in lines),
                      "two machines: shared memory must be off, one rank per machine", both)
                # Nothing listens on every interface: machine 0's store and its collectives
                # listener on the address that faces the peer.
                for i in (0, 1):
                    wide = [(a, p) for a, p in seen[i] if a in ("0.0.0.0", "::")]
                    check(not wide and all(a == net.addr[i] for a, _ in seen[i]),
                          "machine %d listened on %s (expected %s only)" % (
                              i, sorted(seen[i]), net.addr[i]), both)
                    print("  %s: machine %d listened on %s" % (
                        what, i, ", ".join("%s:%d" % x for x in sorted(seen[i]))))
                if with_token:
                    check("job token from ACCEL_JOB_TOKEN" in both,
                          "two machines: the token was not used", both)
                else:
                    check("accel launch: no ACCEL_JOB_TOKEN" in outs[0] and
                          "WARNING: rank 0: no ACCEL_JOB_TOKEN" in outs[0],
                          "two machines without a token: no warning on machine 0", both)
                if what == "collectives":
                    self.check_collectives(outs[0], "two namespaces over a veth pair")
                else:
                    self.check_equivalence(both, "two namespaces over a veth pair")
            self.strangers_across_machines(net, token)
            # Machines given different tokens: machine 1's ranks are refused by the store, say
            # why, and machine 0's census names the machine that never joined.
            codes, outs, _ = self.launch_two_machines(
                net, [self.collectives], lambda i: clean_env(
                    {"ACCEL_JOB_TOKEN": token + str(i), "ACCEL_RENDEZVOUS_TIMEOUT": "10"}))
            both = "\n".join(outs)
            check(codes[0] != 0 and codes[1] != 0, "different tokens: the job ran?", both)
            check("refused this rank's proof of the job token" in outs[1],
                  "different tokens: machine 1 did not say why it was refused", both)
            check("refused a connection from %s" % net.addr[1] in outs[0] and
                  "proof of the job token is wrong" in outs[0],
                  "different tokens: machine 0's store did not log the refusals", both)
            check("no rank of machine 1" in outs[0],
                  "different tokens: machine 0 did not name the machine that never joined", both)
            print("  different tokens: refused and named on both machines")

    # -- save_on_each_node: a checkpoint on each of two machines that share no directory --------

    def each_node_run(self, net, mounts, mode_args, extra, expect_ok=True, program=None):
        """each_node_program on two machines x 2 ranks; machine i sees the host directory
        mounts[i] at self.node_dir (a bind mount in its own mount namespace: `ip netns exec`
        gives each command one). Returns the outputs, both machines' lines together."""
        def wrap(i, argv):
            return ["sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh",
                    mounts[i], self.node_dir] + argv
        env = clean_env(dict({"ACCEL_RENDEZVOUS_TIMEOUT": "60", "ACCEL_JOB_TOKEN": self.token},
                             **extra))
        codes, outs, _ = self.launch_two_machines(
            net, [program or os.path.join(self.build, "bin", "each_node_program")] + mode_args,
            lambda i: env, nproc=4, wrap=wrap)
        both = "\n".join(outs)
        if expect_ok:
            for i, code in enumerate(codes):
                check(code == 0, "machine %d: each_node_program %s failed" % (i, mode_args[0]),
                      both)
        else:
            check(all(c != 0 for c in codes), "each_node_program %s succeeded on a machine"
                  % mode_args[0], both)
        return both

    @staticmethod
    def sums_of(output, what):
        found = dict((int(r), h) for r, h in re.findall(r"r(\d) %s ([0-9a-f]{16})" % what,
                                                          output))
        check(sorted(found) == [0, 1, 2, 3], "expected '%s' from ranks 0-3" % what, output)
        return found

    @staticmethod
    def check_copy(path, want_ranks, optimizer_files, machine_ranks, output):
        """A committed copy: its manifest lists exactly what is there (sizes, CRC-32), the model,
        the optimizer files expected and the random states of want_ranks only."""
        import json
        import zlib
        listing = sorted(os.listdir(path)) if os.path.isdir(path) else []
        check("manifest.json" in listing, "%s: no manifest.json (holds %s)" % (path, listing),
              output)
        with open(os.path.join(path, "manifest.json")) as f:
            m = json.load(f)
        check(m.get("machine_ranks") == machine_ranks,
              "%s: machine_ranks %r, expected %r" % (path, m.get("machine_ranks"), machine_ranks))
        listed = sorted(e["path"] for e in m["files"])
        check(listed == sorted(set(listing) - {"manifest.json"}),
              "%s: the manifest lists %s, the directory holds %s" % (path, listed, listing))
        for e in m["files"]:
            with open(os.path.join(path, e["path"]), "rb") as f:
                data = f.read()
            check(len(data) == e["size"] and zlib.crc32(data) == e["crc32"],
                  "%s/%s does not match the manifest" % (path, e["path"]))
        rng = sorted(n for n in listing if n.startswith("random_states_"))
        check(rng == ["random_states_%d.safetensors" % r for r in want_ranks],
              "%s: random states %s, expected ranks %s" % (path, rng, want_ranks))
        for name in ["model_0.safetensors", "optimizer_0.json"] + optimizer_files:
            check(name in listing, "%s: %s is missing (holds %s)" % (path, name, listing))
        check(not [n for n in listing if n.startswith("optimizer_0.rank_")
                   and n not in optimizer_files],
              "%s: unexpected optimizer parts in %s" % (path, listing))
        return listing

    def each_node_case(self, net, root, name, extra, optimizer_files):
        """Saves after 5 steps on two machines with no shared directory, checks each machine's
        copy, resumes on both and compares with an uninterrupted run, bitwise."""
        mounts = [os.path.join(root, name, "machine%d" % i) for i in (0, 1)]
        for d in mounts:
            os.makedirs(d)
        on = dict(extra, ACCEL_SAVE_ON_EACH_NODE="true")
        ref = self.sums_of(self.each_node_run(net, mounts, ["train", "8"], on), "sum")
        check(len(set(ref.values())) == 1, "%s: the ranks' parameters differ" % name)
        out = self.each_node_run(net, mounts, ["save", self.node_dir + "/ckpt",
                                               self.node_dir + "/model", "5"], on)
        saved = self.sums_of(out, "sum")
        for i, ranks in ((0, [0, 1]), (1, [2, 3])):
            listing = self.check_copy(os.path.join(mounts[i], "ckpt"), ranks, optimizer_files,
                                      ranks, out)
            model = os.path.join(mounts[i], "model", "model.safetensors")
            check(os.path.isfile(model), "%s: machine %d has no %s" % (name, i, model), out)
            left = [n for n in os.listdir(mounts[i]) if ".partial" in n]
            check(not left, "%s: machine %d kept %s" % (name, i, left), out)
            print("  %s: machine %d's copy: %s" % (name, i, " ".join(listing)))
        out = self.each_node_run(net, mounts, ["resume", self.node_dir + "/ckpt", "3"], on)
        check(self.sums_of(out, "loaded") == saved,
              "%s: parameters after load_state differ from the saved ones" % name, out)
        check(self.sums_of(out, "sum") == ref, "%s: the resumed run's parameters differ from "
              "the uninterrupted run's" % name, out)
        print("  %s: load_state on both machines: parameters bitwise equal to the saved ones; "
              "3 more steps bitwise equal to an uninterrupted run (%s)" % (name, ref[0]))
        return mounts

    def each_node_refusals(self, net, root, mounts):
        """Machine-local copies loaded where they do not belong: on the other machine (whose
        ranks' random states they lack), and two machines' copies of different saves."""
        on = {"ACCEL_SAVE_ON_EACH_NODE": "true"}
        out = self.each_node_run(net, mounts[::-1], ["resume", self.node_dir + "/ckpt", "0"], on,
                                 expect_ok=False)
        check("is a machine-local copy (save_on_each_node) with the random states of rank(s) 2, "
              "3 only, and this process is rank 0" in out,
              "machines swapped: load_state did not say whose copy it is", out)
        print("  machines' copies swapped: every rank fails, naming the ranks each copy holds")
        other = [os.path.join(root, "other", "machine%d" % i) for i in (0, 1)]
        for d in other:
            os.makedirs(d)
        self.each_node_run(net, other, ["save", self.node_dir + "/ckpt", self.node_dir + "/model",
                                        "4"], on)
        out = self.each_node_run(net, [mounts[0], other[1]],
                                 ["resume", self.node_dir + "/ckpt", "0"], on, expect_ok=False)
        check("is not the same save on every rank" in out and "of step 5" in out and
              "of step 4" in out, "copies of two saves: load_state did not refuse them", out)
        print("  machine 0's copy of one save, machine 1's of another: every rank fails")

    def each_node_automatic(self, net, root):
        """accel_save_state(NULL) with automatic naming and total_limit 2 (fault_program train,
        saving every 2 steps), each machine numbering and pruning its own copies; a second run
        resumes from the newest on both machines, bitwise as an uninterrupted run."""
        env = {"ACCEL_SAVE_ON_EACH_NODE": "true", "ACCEL_TOTAL_LIMIT": "2"}
        runs = {}
        for name, steps in (("ref", "6"), ("job", "4"), ("job", "6")):
            mounts = [os.path.join(root, "auto-" + name, "machine%d" % i) for i in (0, 1)]
            for d in mounts:
                os.makedirs(d, exist_ok=True)
            out = self.each_node_run(net, mounts, ["train", steps, "2", self.node_dir + "/project",
                                                   "0", "mixed", "mlp16"], env, program=self.fault)
            runs[name] = (out, mounts)
        sums = [re.findall(r"r\d checksum ([0-9a-f]{16})", runs[n][0]) for n in ("ref", "job")]
        check(len(sums[0]) == 4 and len(set(sums[0])) == 1 and sums[1] == sums[0],
              "automatic naming: the resumed run differs from the uninterrupted one",
              runs["job"][0])
        check(len(re.findall(r"r\d loaded step=4", runs["job"][0])) == 4,
              "automatic naming: not every rank resumed from step 4", runs["job"][0])
        for i, m in enumerate(runs["job"][1]):
            held = sorted(os.listdir(os.path.join(m, "project", "checkpoints")))
            check(held == ["checkpoint_1", "checkpoint_2"],
                  "automatic naming: machine %d holds %s" % (i, held), runs["job"][0])
        print("  automatic naming, total_limit 2: each machine keeps checkpoint_1, checkpoint_2; "
              "the resumed run is bitwise the uninterrupted one (%s)" % sums[0][0])

    def scenario_save_on_each_node(self):
        import netns_fixture
        sys.path.insert(0, os.path.join(self.source, "tests", "security"))
        reason = netns_fixture.why_unavailable()
        if reason:
            return "network namespaces cannot be made here: " + reason
        with tempfile.TemporaryDirectory(prefix="accel-each-node-") as root:
            self.node_dir = os.path.join(root, "node")  # where each machine sees its own disk
            self.token = "each-node-%d" % random.getrandbits(48)
            os.makedirs(self.node_dir)
            with netns_fixture.NetnsPair() as net:
                ddp = self.each_node_case(net, root, "ddp", {}, ["optimizer_0.safetensors"])
                self.each_node_refusals(net, root, ddp)
                self.each_node_automatic(net, root)
                # ZeRO 2 (FSDP, FULL_STATE_DICT): the ranks' optimizer parts travel over the
                # communicator, merged into one file in every machine's copy.
                self.each_node_case(net, root, "zero2_full", {
                    "ACCELERATE_USE_FSDP": "true", "FSDP_SHARDING_STRATEGY": "SHARD_GRAD_OP",
                    "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"}, ["optimizer_0.safetensors"])
                # ZeRO 2 (DeepSpeed: one optimizer file per rank): every rank's part in every
                # machine's copy.
                self.each_node_case(net, root, "zero2_parts", {
                    "ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"},
                    ["optimizer_0.rank_%d.safetensors" % r for r in range(4)])
                self.each_node_shared_and_off(net, root)

    def each_node_shared_and_off(self, net, root):
        # One directory both machines share, the setting on: one complete copy, written once.
        shared = os.path.join(root, "shared")
        os.makedirs(shared)
        on = {"ACCEL_SAVE_ON_EACH_NODE": "true"}
        out = self.each_node_run(net, [shared, shared], ["save", self.node_dir + "/ckpt",
                                                         self.node_dir + "/model", "5"], on)
        saved = self.sums_of(out, "sum")
        self.check_copy(os.path.join(shared, "ckpt"), [0, 1, 2, 3], ["optimizer_0.safetensors"],
                        None, out)
        out = self.each_node_run(net, [shared, shared], ["resume", self.node_dir + "/ckpt",
                                                         "0"], on)
        check(self.sums_of(out, "loaded") == saved, "shared directory: load_state differs", out)
        print("  shared directory, save_on_each_node on: one complete copy; it loads")
        # The setting off, no shared directory: accel_save_model writes on machine 0 only, and
        # save_state fails on every rank, saying why, leaving nothing behind.
        mounts = [os.path.join(root, "off", "machine%d" % i) for i in (0, 1)]
        for d in mounts:
            os.makedirs(d)
        self.each_node_run(net, mounts, ["model", self.node_dir + "/model", "2"], {})
        held = [sorted(os.listdir(m)) for m in mounts]
        check(held == [["model"], []] and os.listdir(os.path.join(mounts[0], "model")) ==
              ["model.safetensors"], "save_on_each_node off: the machines hold %s" % held)
        out = self.each_node_run(net, mounts, ["save", self.node_dir + "/ckpt",
                                               self.node_dir + "/model2", "2"], {},
                                 expect_ok=False)
        check("not visible to rank 2" in out and "save_on_each_node" in out,
              "save_on_each_node off: the failed save_state did not say why", out)
        held = [sorted(os.listdir(m)) for m in mounts]
        check(held == [["model"], []], "save_on_each_node off: the failed save left %s" % held,
              out)
        why = [l for l in out.splitlines() if "not visible to rank 2" in l]
        print("  save_on_each_node off: save_model on machine 0 only; save_state without a "
              "shared directory fails on every rank: %s" % why[0].strip()[:400])

    # -- bad input -------------------------------------------------------------------------------

    def expect_error(self, argv, env, words, limit, what):
        r = run(argv, env, timeout=limit + 30)
        for w in words:
            check(r.returncode != 0 and w in r.stdout, "%s: expected a failure saying %r" %
                  (what, w), r.stdout)
        check(r.seconds < limit, "%s: took %.1f s (limit %.1f s)" % (what, r.seconds, limit),
              r.stdout)
        print("  %s (%.1f s): %s" % (what, r.seconds, first_error(r.stdout)))

    def scenario_bad_input(self):
        slurm = {"SLURM_STEP_ID": "0", "SLURM_JOB_ID": "7", "SLURM_LOCALID": "0",
                 "SLURM_NODEID": "0"}
        self.expect_error([self.collectives], clean_env(dict(
            slurm, SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_TASKS_PER_NODE="1(x2)",
            SLURM_JOB_NODELIST="node[01-02")), ["SLURM_JOB_NODELIST", "never closed", "srun"],
            10, "a host list that does not parse")
        self.expect_error([self.collectives], clean_env(dict(
            slurm, SLURM_PROCID="2", SLURM_NTASKS="2")), ["SLURM_PROCID='2'", "0 to 1"], 10,
            "a rank variable out of range")
        self.expect_error([self.collectives], clean_env(dict(
            slurm, SLURM_PROCID="0", SLURM_NTASKS="4", SLURM_TASKS_PER_NODE="2(x3)")),
            ["disagree", "SLURM_TASKS_PER_NODE"], 10, "SLURM counts that disagree")
        self.expect_error([self.collectives], clean_env({
            "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "WORLD_SIZE": "3"}),
            ["two launchers disagree", "WORLD_SIZE='3'"], 10, "two launchers disagreeing")
        self.expect_error([self.cli, "launch", "--nnodes", "2", "--num_machines", "3", "-n", "6",
                           self.collectives], clean_env(), ["--nnodes 2", "--num_machines 3"], 10,
                          "two launch options disagreeing")
        # Machine 1 never starts: machine 0's ranks fail at the rendezvous deadline, naming it.
        timeout = 4
        self.expect_error([self.cli, "launch", "--num_machines", "2", "--machine_rank", "0",
                           "--main_process_ip", "127.0.0.1", "--main_process_port",
                           str(free_port()), "-n", "4", self.collectives],
                          clean_env({"ACCEL_RENDEZVOUS_TIMEOUT": str(timeout)}),
                          ["missing ranks 2, 3", "machine 1 (ranks 2-3)"], timeout + 6,
                          "a machine that never joins")
        # Machine 0's MASTER_ADDR is not an address of this machine (NAT, a service address):
        # rank 0 will not listen on every interface unasked, and says how to ask.
        self.expect_error([self.collectives], clean_env({
            "RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "192.0.2.1",
            "MASTER_PORT": str(free_port())}),
            ["not an address of this machine", "ACCEL_LISTEN_ADDRESS"], 10,
            "a MASTER_ADDR that is not this machine's")
        # Two spellings of the token at once.
        self.expect_error([self.collectives], clean_env({
            "RANK": "0", "WORLD_SIZE": "2", "ACCEL_JOB_TOKEN": "a",
            "ACCEL_JOB_TOKEN_FILE": "/nonexistent"}),
            ["both ACCEL_JOB_TOKEN and ACCEL_JOB_TOKEN_FILE"], 10, "two token variables")


def shutil_which(name):
    import shutil
    return shutil.which(name)


def first_error(output):
    for line in output.splitlines():
        if "failed" in line or "error" in line.lower() or "accel launch:" in line:
            return line.strip()[:400]
    return output.strip().splitlines()[-1][:400] if output.strip() else ""


SCENARIOS = ["torchrun_static", "torchrun_standalone", "torchrun_c10d", "torchrun_max_restarts", "elastic_restart",
             "mpirun", "srun", "kubernetes", "netns", "save_on_each_node", "bad_input"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=SCENARIOS + ["all"])
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--seed", type=int, default=None,
                    help="picks the step at which a rank is killed (default: a random seed, "
                    "printed so that a failure can be replayed)")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    print("seed %d" % args.seed)
    suite = Suite(args)
    names = SCENARIOS if args.scenario == "all" else [args.scenario]
    skipped = failed = 0
    for name in names:
        print("%s:" % name, flush=True)
        t0 = time.monotonic()
        try:
            reason = getattr(suite, "scenario_" + name)()
        except Failure as e:
            print("  FAILED: %s" % e, flush=True)
            failed += 1
            continue
        if reason:
            print("  SKIPPED: %s" % reason, flush=True)
            skipped += 1
        else:
            print("  passed in %.1f s" % (time.monotonic() - t0), flush=True)
    if failed:
        return 1
    return SKIP if skipped == len(names) else 0


if __name__ == "__main__":
    sys.exit(main())
