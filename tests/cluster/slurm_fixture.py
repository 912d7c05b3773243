#!/usr/bin/env python3
"""A private, single-host SLURM cluster for one test: munged, slurmctld and slurmd of our own.

    from slurm_fixture import SlurmCluster, why_unavailable

    reason = why_unavailable()          # None, or one line saying why it cannot run here
    if reason:
        skip(reason)
    with SlurmCluster() as slurm:       # or SlurmCluster(workdir) to keep the files under workdir
        r = slurm.srun(["-n", "2", "env"], timeout=60)
        subprocess.run(["srun", ...], env=slurm.env)   # slurm.env: os.environ + SLURM_CONF etc.

Everything lives in one fresh temporary directory (munge key, socket, seed; slurm.conf, state,
spool, pid and log files) and the ports are picked free for every cluster, so nothing is shared
with a system-wide munge (/etc/munge, /run/munge) or slurm (/etc/slurm), with another cluster of
this module running beside it, or with the leftovers of a run that was killed half-way (their
processes are found by an environment marker and ended when their owner is gone, their
directories removed).

The daemons run in the foreground (munged -F, slurmctld -D, slurmd -D) as our children, their
stdout and stderr in log files; leaving the `with` block cancels every job, stops slurmd,
slurmctld and then munged (SIGTERM, SIGKILL after a deadline), ends anything still carrying the
marker (slurmstepd, tasks), checks that nothing is left and removes the directory.

Run as a script it is a self-test: bring-up, `srun -n 2 env`, `srun -N 1 -n 1 env`, teardown,
timings; exit 0 when all went as expected, 77 when the cluster cannot run here, 1 otherwise.

Python 3 standard library only; needs root and the Debian packages slurm-wlm (slurmctld, slurmd,
srun, sinfo, squeue, scancel, scontrol) and munge (munged).
"""

import argparse
import ctypes
import functools
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

MARKER = "LIBACCEL_SLURM_FIXTURE"  # env var on every process of ours: the cluster's directory
DIR_PREFIX = "libaccel-slurm-"
OWNER_FILE = "owner"  # "<pid> <starttime>" of the process that made the directory
BINARIES = ("munged", "slurmctld", "slurmd", "srun", "sinfo", "squeue", "scancel", "scontrol")
SUN_PATH_MAX = 107  # sockaddr_un.sun_path less the terminating NUL
STOP_DEADLINE = 10.0  # seconds between SIGTERM and SIGKILL


class ClusterError(RuntimeError):
    """The cluster could not be brought up or torn down cleanly."""


# ------------------------------------------------------------------------------------------------
# Processes
# ------------------------------------------------------------------------------------------------


def _proc_start_time(pid):
    """Field 22 of /proc/PID/stat (clock ticks since boot), or None if there is no such pid."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()[19]


def _owner_alive(directory):
    """Whether the process that made `directory` (its OWNER_FILE) still runs.

    A directory without a readable owner file counts as dead, except one younger than a minute
    (it may be being made right now)."""
    try:
        with open(os.path.join(directory, OWNER_FILE)) as f:
            pid_s, start = f.read().split()
        return _proc_start_time(int(pid_s)) == start
    except (OSError, ValueError):
        try:
            return time.time() - os.stat(directory).st_mtime < 60
        except OSError:
            return False


def _environ(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def _comm(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return "?"


def _marked_processes():
    """{pid: marker value} of every process carrying MARKER in its initial environment."""
    key = MARKER.encode() + b"="
    own = os.getpid()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == own:
            continue
        for item in _environ(int(name)):
            if item.startswith(key):
                found[int(name)] = item[len(key):].decode("utf-8", "replace")
                break
    return found


def _gone(pid):
    """Whether `pid` has exited (no such process, or a zombie)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode("ascii", "replace")
        return data[data.rindex(")") + 2] == "Z"
    except (OSError, ValueError):
        return True


def _kill_pids(pids, deadline=STOP_DEADLINE):
    """SIGTERM `pids`, SIGKILL those still alive after `deadline` s; returns those that outlive it.

    Zombies count as gone (their parent reaps them); our own children are reaped here."""
    pids = set(pids)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for sig_deadline, sig in ((deadline, signal.SIGKILL), (5.0, None)):
        end = time.monotonic() + sig_deadline
        while True:
            for pid in list(pids):
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                if _gone(pid):
                    pids.discard(pid)
            if not pids or time.monotonic() > end:
                break
            time.sleep(0.05)
        if not pids or sig is None:
            break
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    return pids


def cleanup_stale(base=None):
    """End the processes and remove the directories of clusters whose owner process is gone.

    `base` is where those directories are looked for (default: the system temporary directory).
    Returns a list of lines saying what was done."""
    done = []
    stale_dirs = set()
    by_dir = {}
    for pid, directory in _marked_processes().items():
        by_dir.setdefault(directory, []).append(pid)
    for directory, pids in sorted(by_dir.items()):
        if _owner_alive(directory):
            continue
        left = _kill_pids(pids, deadline=3.0)
        done.append("ended %d stale process(es) of %s%s" % (
            len(pids), directory, " (%d would not die)" % len(left) if left else ""))
        stale_dirs.add(directory)
    base = base or tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    for name in names:
        if name.startswith(DIR_PREFIX) and not _owner_alive(os.path.join(base, name)):
            stale_dirs.add(os.path.join(base, name))
    for directory in sorted(stale_dirs):
        if os.path.basename(directory).startswith(DIR_PREFIX) and os.path.isdir(directory):
            shutil.rmtree(directory, ignore_errors=True)
            done.append("removed stale directory %s" % directory)
    return done


_libc = None


def _set_pdeathsig():
    """preexec_fn: the daemon gets SIGTERM if the thread that started it dies (a killed test)."""
    if _libc is not None:
        _libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


# ------------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------------


def short_hostname():
    return socket.gethostname().split(".")[0]


def node_hardware():
    """CPUs, Sockets, CoresPerSocket, ThreadsPerCore as slurmd sees them (`slurmd -C`).

    When slurmd -C fails or reports more CPUs than this process may run on (a container with a
    cpuset), the CPUs of sched_getaffinity, one socket, one thread per core."""
    try:
        out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=20,
                             env=_clean_environ()).stdout
        fields = dict(m.groups() for m in re.finditer(r"(\w+)=(\S+)", out))
        hw = {k: int(fields[k]) for k in ("CPUs", "CoresPerSocket", "ThreadsPerCore")}
        hw["Sockets"] = int(fields.get("SocketsPerBoard", 1)) * int(fields.get("Boards", 1))
    except (OSError, subprocess.SubprocessError, KeyError, ValueError):
        hw = None
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = os.cpu_count() or 1
    if (hw and hw["CPUs"] == hw["Sockets"] * hw["CoresPerSocket"] * hw["ThreadsPerCore"]
            and hw["CPUs"] <= allowed):
        return hw
    # No slurmd -C, or a container restricted to fewer CPUs than the machine has.
    return {"CPUs": allowed, "Sockets": 1, "CoresPerSocket": allowed, "ThreadsPerCore": 1}


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def _port_free(port):
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((addr, port))
        except OSError as e:
            if family == socket.AF_INET6 and e.errno in (97, 99):  # no IPv6 here
                continue
            return False
        finally:
            s.close()
    return True


def free_ports(n, taken=()):
    """`n` distinct TCP ports, bindable now on every address, outside the ephemeral range.

    Outside it so that no outgoing connection of another process takes one before the daemon
    binds it; chosen at random so that concurrent clusters rarely try the same ones."""
    lo, hi = _ephemeral_range()
    ranges = [(r0, r1) for r0, r1 in ((10000, lo - 1), (hi + 1, 65535)) if r1 - r0 > 100]
    if not ranges:
        ranges = [(lo, hi)]
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    ports = []
    for _ in range(2000):
        r0, r1 = rng.choice(ranges)
        p = rng.randint(r0, r1)
        if p not in ports and p not in taken and _port_free(p):
            ports.append(p)
            if len(ports) == n:
                return ports
    raise ClusterError("no %d free TCP ports found" % n)


def _clean_environ(extra=None):
    """os.environ without any SLURM_* variable (a test may itself run inside a SLURM job)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SRUN_", "SBATCH_", "SALLOC_", "SQUEUE_", "SINFO_"))
           and k != MARKER}
    env.update(extra or {})
    return env


SLURM_CONF_TEMPLATE = """\
# Generated by tests/cluster/slurm_fixture.py for one test; removed with its directory.
ClusterName={cluster}
SlurmctldHost={host}({addr})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={d}/plugstack.conf
TmpFS={d}/tmpfs
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=30
MessageTimeout=10
SlurmdTimeout=60
SlurmctldTimeout=60
NodeName={host} NodeAddr={addr} NodeHostname={host} CPUs={cpus} Sockets={sockets} \
CoresPerSocket={cores} ThreadsPerCore={threads} State=UNKNOWN
PartitionName={partition} Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


# ------------------------------------------------------------------------------------------------
# The cluster
# ------------------------------------------------------------------------------------------------


class SlurmCluster:
    """`with SlurmCluster(workdir=None) as slurm:` a private one-node cluster on this host.

    workdir:  where the cluster's temporary directory is made (default: the system temporary
              directory; a directory whose socket paths would be too long is replaced by it).
    cpus:     CPUs of the node (default: what slurmd -C reports; more than the machine has is
              accepted thanks to SlurmdParameters=config_overrides, handy to run more tasks).
    timeout:  seconds to wait for the node to be idle.
    keep:     leave the directory in place after teardown (its path is printed to stderr).
    extra_conf: lines appended to slurm.conf.

    Attributes once up: env, conf, dir, host, partition, ports, startup_seconds; after exit
    teardown_seconds. Methods: srun(), run() (any slurm command), log_tails()."""

    def __init__(self, workdir=None, cpus=None, timeout=30.0, keep=False, extra_conf="",
                 partition="debug"):
        self.workdir = workdir
        self.cpus = cpus
        self.timeout = timeout
        self.keep = keep
        self.extra_conf = extra_conf
        self.partition = partition
        self.dir = None
        self.conf = None
        self.env = None
        self.host = short_hostname()
        self.addr = "127.0.0.1"
        self.ports = {}
        self.procs = {}  # name -> Popen, in start order
        self.logs = {}  # name -> path
        self.startup_seconds = None
        self.teardown_seconds = None
        self.stale_cleanup = []

    # -- bring-up ---------------------------------------------------------------------------

    def __enter__(self):
        t0 = time.monotonic()
        try:
            self._start()
        except BaseException:
            self._stop(quiet=True)
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _make_dir(self):
        base = self.workdir or tempfile.gettempdir()
        self.stale_cleanup = cleanup_stale(base)
        # The longest socket: <dir>/spool/<host>_<jobid>.<stepid> (slurmstepd), and munge's.
        longest = len("/spool/%s_4294967294.4294967294" % self.host) + 24
        if len(os.path.abspath(base)) + len(DIR_PREFIX) + 8 + longest > SUN_PATH_MAX:
            base = tempfile.gettempdir()
        os.makedirs(base, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix=DIR_PREFIX, dir=base)
        # munged wants every directory above its socket to be executable by all.
        os.chmod(self.dir, 0o755)
        with open(os.path.join(self.dir, OWNER_FILE), "w") as f:
            f.write("%d %s\n" % (os.getpid(), _proc_start_time(os.getpid())))
        for sub, mode in (("munge", 0o700), ("munge-socket", 0o755), ("state", 0o700),
                          ("spool", 0o755), ("run", 0o755), ("log", 0o755), ("tmpfs", 0o1777)):
            os.mkdir(os.path.join(self.dir, sub))
            os.chmod(os.path.join(self.dir, sub), mode)

    def _start(self):
        missing = [b for b in BINARIES if not shutil.which(b)]
        if missing:
            raise ClusterError("missing binaries: %s" % " ".join(missing))
        self._make_dir()
        d = self.dir
        munge_socket = os.path.join(d, "munge-socket", "munge.socket")
        key = os.path.join(d, "munge", "munge.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))

        hw = node_hardware()
        if self.cpus:
            hw = {"CPUs": self.cpus, "Sockets": 1, "CoresPerSocket": self.cpus,
                  "ThreadsPerCore": 1}
        ctld_port, slurmd_port = free_ports(2)
        self.ports = {"slurmctld": ctld_port, "slurmd": slurmd_port}
        self.conf = os.path.join(d, "slurm.conf")
        text = SLURM_CONF_TEMPLATE.format(
            cluster="libaccel", host=self.host, addr=self.addr, ctld_port=ctld_port,
            slurmd_port=slurmd_port, munge_socket=munge_socket, d=d, cpus=hw["CPUs"],
            sockets=hw["Sockets"], cores=hw["CoresPerSocket"], threads=hw["ThreadsPerCore"],
            partition=self.partition)
        if self.extra_conf:
            text += self.extra_conf.rstrip("\n") + "\n"
        with open(self.conf, "w") as f:
            f.write(text)
        with open(os.path.join(d, "plugstack.conf"), "w") as f:
            f.write("# no SPANK plugins (the system's /etc/slurm/plugstack.conf is not read)\n")

        self.env = _clean_environ({"SLURM_CONF": self.conf, MARKER: d})
        self._spawn("munged", ["munged", "-F", "--key-file=" + key, "--socket=" + munge_socket,
                               "--pid-file=" + os.path.join(d, "run", "munged.pid"),
                               "--log-file=" + os.path.join(d, "log", "munged.log"),
                               "--seed-file=" + os.path.join(d, "munge", "munged.seed"),
                               "--num-threads=2"])
        self._wait_for(lambda: os.path.exists(munge_socket), "munged to create its socket", 10)
        self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", self.conf])
        self._spawn("slurmd", ["slurmd", "-D", "-f", self.conf, "-N", self.host])
        self._wait_for(self._node_idle, "node %s to be idle in sinfo" % self.host, self.timeout)

    def _spawn(self, name, argv):
        global _libc
        log = os.path.join(self.dir, "log", name + ".out")
        self.logs[name] = log
        preexec = None
        if threading.current_thread() is threading.main_thread():
            if _libc is None:
                try:
                    _libc = ctypes.CDLL(None, use_errno=True)
                except OSError:
                    pass
            preexec = _set_pdeathsig
        with open(log, "ab") as out:
            self.procs[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=self.env, cwd=self.dir, start_new_session=True, preexec_fn=preexec)

    def _node_idle(self):
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=self.env,
                           capture_output=True, text=True, timeout=15)
        self._last_sinfo = (r.stdout + r.stderr).strip()
        return r.returncode == 0 and ("%s idle" % self.host) in r.stdout.splitlines()

    def _wait_for(self, condition, what, timeout):
        self._last_sinfo = ""
        end = time.monotonic() + timeout
        while True:
            dead = [(n, p.returncode) for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise ClusterError("%s exited with status %s while waiting for %s\n%s" % (
                    dead[0][0], dead[0][1], what, self.log_tails()))
            try:
                if condition():
                    return
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() > end:
                raise ClusterError("timed out after %.0f s waiting for %s (last sinfo: %r)\n%s"
                                   % (timeout, what, self._last_sinfo, self.log_tails()))
            time.sleep(0.2)

    def log_tails(self, lines=15):
        """The last lines of every daemon's log, for error messages."""
        parts = []
        for name in ("munged", "slurmctld", "slurmd"):
            # slurmctld -D and slurmd -D write their log file and, the same lines, stderr (.out);
            # what they print before the log file is opened (bad slurm.conf) is on stderr only.
            path = os.path.join(self.dir or "", "log", name + ".log")
            if name == "munged" or not os.path.isfile(path) or os.path.getsize(path) == 0:
                path = os.path.join(self.dir or "", "log", name + ".out")
            try:
                with open(path, "rb") as f:
                    tail = f.read()[-8192:].decode("utf-8", "replace").splitlines()[-lines:]
            except OSError:
                continue
            if tail:
                parts.append("--- %s (last %d lines)\n%s" % (path, len(tail), "\n".join(tail)))
        return "\n".join(parts) or "(no daemon logs)"

    # -- use --------------------------------------------------------------------------------

    def _env(self, env):
        merged = dict(self.env)
        merged.update(env or {})
        merged["SLURM_CONF"] = self.conf
        merged[MARKER] = self.dir
        return merged

    def run(self, argv, env=None, timeout=60, **kw):
        """Any slurm client command (sinfo, squeue, scontrol, ...) against this cluster."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        return subprocess.run(argv, env=self._env(env), timeout=timeout, **kw)

    def srun(self, args, env=None, timeout=120, check=False, input=None, **kw):
        """`srun ARGS` against this cluster; returns a CompletedProcess (text stdout/stderr).

        env: variables added to (overriding) slurm.env; SLURM_CONF and the marker are kept.
        On timeout srun gets SIGTERM (it forwards it to the tasks), then SIGKILL 10 s later,
        every job of the cluster is cancelled, and subprocess.TimeoutExpired is raised with
        the output so far."""
        argv = ["srun"] + list(args)
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("text", True)
        if input is not None:
            kw["stdin"] = subprocess.PIPE
        with subprocess.Popen(argv, env=self._env(env), **kw) as p:
            try:
                out, err = p.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGTERM)
                try:
                    out, err = p.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    out, err = p.communicate()
                self.cancel_all()
                raise subprocess.TimeoutExpired(argv, timeout, out, err)
        r = subprocess.CompletedProcess(argv, p.returncode, out, err)
        if check:
            r.check_returncode()
        return r

    def job_ids(self):
        r = self.run(["squeue", "-h", "-o", "%A"], timeout=15)
        return [x for x in r.stdout.split() if x.isdigit()]

    def cancel_all(self, wait=10.0):
        """scancel every job of this cluster, wait up to `wait` s for the queue to empty.

        Returns the job ids still listed (empty when all are gone)."""
        try:
            ids = self.job_ids()
            if ids:
                self.run(["scancel", "--quiet"] + ids, timeout=15)
            end = time.monotonic() + wait
            while ids and time.monotonic() < end:
                time.sleep(0.2)
                ids = [i for i in self.job_ids() if i in ids]
            return ids
        except (OSError, subprocess.SubprocessError):
            return ["?"]

    # -- teardown ---------------------------------------------------------------------------

    def __exit__(self, exc_type, exc, tb):
        t0 = time.monotonic()
        problems = self._stop(quiet=exc_type is not None)
        self.teardown_seconds = time.monotonic() - t0
        if problems and exc_type is None:
            raise ClusterError("teardown: " + "; ".join(problems))
        return False

    def _stop(self, quiet=False):
        """Stop everything; returns a list of problems (processes that would not die)."""
        problems = []
        ctld = self.procs.get("slurmctld")
        if ctld is not None and ctld.poll() is None and self.procs["slurmd"].poll() is None:
            left = self.cancel_all(wait=5.0)
            if left:
                problems.append("jobs %s still listed after scancel" % ",".join(left))
        for name in ("slurmd", "slurmctld"):
            p = self.procs.get(name)
            if p is not None and _kill_pids([p.pid]):
                problems.append("%s (pid %d) survived SIGKILL" % (name, p.pid))
        # slurmstepd and tasks: carry the marker (from slurmd's environment or srun's).
        if self.dir:
            others = [pid for pid, d in _marked_processes().items()
                      if d == self.dir and pid != getattr(self.procs.get("munged"), "pid", -1)]
            if others:
                if not quiet:
                    problems.append("still running after slurmd stopped (ended): %s" % "; ".join(
                        "%d %s" % (pid, _comm(pid)) for pid in others))
                _kill_pids(others)
        p = self.procs.get("munged")
        if p is not None and _kill_pids([p.pid]):
            problems.append("munged (pid %d) survived SIGKILL" % p.pid)
        for p in self.procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.dir:
            left = [pid for pid, d in _marked_processes().items()
                    if d == self.dir and not _gone(pid)]
            if left:
                problems.append("left running: %s" % "; ".join(
                    "%d %s" % (pid, _comm(pid)) for pid in left))
            if self.keep or (problems and not quiet):
                sys.stderr.write("slurm_fixture: kept %s\n" % self.dir)
            else:
                shutil.rmtree(self.dir, ignore_errors=True)
        return problems


# ------------------------------------------------------------------------------------------------
# Availability
# ------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def why_unavailable(probe=True):
    """None when a SlurmCluster can run here, else one line saying why not.

    Checks root, Linux, the binaries, and (probe=True) brings a cluster up and down once; the
    answer is cached for the process."""
    if not sys.platform.startswith("linux"):
        return "SLURM fixture needs Linux"
    if os.geteuid() != 0:
        return "SLURM fixture needs root (SlurmUser=root, slurmd launches tasks as root)"
    missing = [b for b in BINARIES if not shutil.which(b)]
    if missing:
        return "missing binaries: %s (Debian packages slurm-wlm and munge)" % " ".join(missing)
    if not probe:
        return None
    try:
        with SlurmCluster(timeout=30) as slurm:
            r = slurm.srun(["-n", "1", "true"], timeout=60)
            if r.returncode != 0:
                return "srun -n 1 true failed with status %d: %s" % (
                    r.returncode, " | ".join(r.stderr.strip().splitlines()[-3:]))
    except Exception as e:  # noqa: BLE001 - any failure means "cannot run here"
        lines = str(e).strip().splitlines()
        causes = [x.strip() for x in lines[1:] if re.search(r"\b(fatal|error)\b", x, re.I)
                  and "state file" not in x and "Trying backup" not in x]
        detail = " | ".join(lines[:1] + causes[-2:])
        return "private SLURM cluster did not come up here: %s" % (detail or type(e).__name__)
    return None


# ------------------------------------------------------------------------------------------------
# Self-test
# ------------------------------------------------------------------------------------------------

SHOWN = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_NODELIST",
         "SLURM_JOB_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
         "SLURM_JOB_ID", "SLURM_NNODES", "SLURM_STEP_ID")


def _tasks_env(stdout):
    """Split `srun -l env` output ("N: VAR=value") into {task: {var: value}}."""
    tasks = {}
    for line in stdout.splitlines():
        m = re.match(r"^\s*(\d+): ([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
        if m:
            tasks.setdefault(int(m.group(1)), {})[m.group(2)] = m.group(3)
    return tasks


def _self_test(args):
    failures = []

    def expect(cond, what):
        print("  %s %s" % ("ok  " if cond else "FAIL", what))
        if not cond:
            failures.append(what)

    reason = why_unavailable(probe=False)
    if reason:
        print("unavailable: %s" % reason)
        return 77
    for i in range(args.repeat):
        print("== run %d/%d" % (i + 1, args.repeat))
        with SlurmCluster(workdir=args.workdir, keep=args.keep) as slurm:
            for line in slurm.stale_cleanup:
                print("  stale: %s" % line)
            print("  dir %s, host %s, ports %s, up in %.2f s" % (
                slurm.dir, slurm.host, slurm.ports, slurm.startup_seconds))
            print("  sinfo: %s" % slurm.run(["sinfo", "-h", "-o", "%P %a %D %T %c %N"])
                  .stdout.strip())
            for srun_args, ntasks in ((["-n", "2"], 2), (["-N", "1", "-n", "1"], 1)):
                t0 = time.monotonic()
                r = slurm.srun(srun_args + ["-l", "env"], timeout=60)
                dt = time.monotonic() - t0
                print("  srun %s -l env: status %d in %.2f s" % (" ".join(srun_args),
                                                                 r.returncode, dt))
                if r.stderr.strip():
                    print("    stderr: %s" % r.stderr.strip().replace("\n", "\n    stderr: "))
                tasks = _tasks_env(r.stdout)
                for t in sorted(tasks):
                    print("    task %d: %s" % (t, " ".join(
                        "%s=%s" % (k, tasks[t].get(k, "<unset>")) for k in SHOWN)))
                expect(r.returncode == 0, "srun %s exits 0" % " ".join(srun_args))
                expect(sorted(tasks) == list(range(ntasks)), "%d tasks" % ntasks)
                expect(sorted(v.get("SLURM_PROCID") for v in tasks.values())
                       == [str(k) for k in range(ntasks)], "SLURM_PROCID 0..%d" % (ntasks - 1))
                expect(all(v.get("SLURM_NTASKS") == str(ntasks) for v in tasks.values()),
                       "SLURM_NTASKS=%d" % ntasks)
                expect(all(v.get("SLURM_CONF") == slurm.conf for v in tasks.values()),
                       "tasks see our SLURM_CONF")
            ctld_pid = slurm.procs["slurmctld"].pid
        print("  teardown %.2f s" % slurm.teardown_seconds)
        left = [pid for pid, d in _marked_processes().items() if d == slurm.dir]
        expect(not left, "no process of ours left (%s)" % left)
        expect(_gone(ctld_pid), "slurmctld pid %d gone" % ctld_pid)
        expect(args.keep or not os.path.exists(slurm.dir), "directory removed")
    print("self-test: %s" % ("FAILED: " + "; ".join(failures) if failures else "passed"))
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="bring-up/teardown cycles")
    ap.add_argument("--workdir", help="where to make the cluster's directory")
    ap.add_argument("--keep", action="store_true", help="keep the directory")
    ap.add_argument("--why", action="store_true", help="print why_unavailable() (probing)")
    args = ap.parse_args()
    if args.why:
        print(why_unavailable() or "available")
        return 0
    return _self_test(args)


if __name__ == "__main__":
    sys.exit(main())
