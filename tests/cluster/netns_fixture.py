#!/usr/bin/env python3
"""Two Linux network namespaces joined by a veth pair, for tests of real two-host networking.

    from netns_fixture import NetnsPair, why_unavailable

    reason = why_unavailable()          # None, or one line saying why it cannot run here
    if reason:
        skip(reason)
    with NetnsPair() as net:
        server = net.popen(1, ["prog", "--listen", net.addr[1]])
        net.run(0, ["prog", "--connect", net.addr[1]], timeout=30)

Namespace i is named net.name[i] (libaccel-<pid>-<n>-<i>), holds `lo` (up) and one end of the
veth pair, net.ifname[i], with address net.addr[i] in net.subnet (10.231.X.0/24, X chosen so
that the host routes nothing there). The veth is created inside the namespaces, never in the
host's. net.popen(i, argv, **kw) / net.run(i, argv, **kw) are subprocess.Popen / subprocess.run
of `ip netns exec NAME argv...` (the pid is the program's: ip execs it).

The hostname is the same in both namespaces (the UTS namespace is not touched) and, through
/etc/hosts, usually resolves to an address that does not exist or is loopback inside them;
NetnsPair(hosts=True) writes /etc/netns/NAME/hosts, which `ip netns exec` bind-mounts over
/etc/hosts, so that inside namespace i the hostname resolves to net.addr[i] (and the peer
names "<hostname>-peer"); the files are removed on exit.

Leaving the `with` block kills everything still inside the namespaces (`ip netns pids`: SIGTERM,
SIGKILL after a deadline), deletes them (with them the veth) and checks that no process or file
descriptor keeps either namespace alive. Namespaces left by a killed run (owner pid gone) are
removed by the next NetnsPair.

Run as a script it is a self-test: TCP across the veth, loopback isolation, hostname resolution
inside a namespace, cleanup; exit 0 when all went as expected, 77 when it cannot run here.

Python 3 standard library only; needs root and iproute2 (`ip`), a kernel with network
namespaces and veth.
"""

import argparse
import functools
import itertools
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

NS_PREFIX = "libaccel-"
NS_RE = re.compile(r"^libaccel-(\d+)-(\d+)-([01])$")
SUBNET_FMT = "10.231.%d"
STOP_DEADLINE = 5.0
_counter = itertools.count()


class NetnsError(RuntimeError):
    """The namespaces could not be made or removed cleanly."""


def _ip(*args, check=True, timeout=20):
    r = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise NetnsError("ip %s: status %d: %s" % (" ".join(args), r.returncode,
                                                   (r.stderr or r.stdout).strip()))
    return r


def list_netns():
    """Names of the named network namespaces (`ip netns list`)."""
    r = _ip("netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def netns_pids(name):
    """Pids of the processes inside namespace `name` (`ip netns pids`), zombies excluded."""
    r = _ip("netns", "pids", name, check=False)
    return [int(x) for x in r.stdout.split() if x.isdigit()]


def _pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode("ascii", "replace")
        return data[data.rindex(")") + 2] != "Z"
    except (OSError, ValueError):
        return False


def _kill_pids(pids, deadline=STOP_DEADLINE):
    """SIGTERM, then SIGKILL after `deadline` s; returns the pids still alive at the end."""
    pids = set(pids)
    for sig, wait in ((signal.SIGTERM, deadline), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait
        while pids and time.monotonic() < end:
            for pid in list(pids):
                try:
                    os.waitpid(pid, os.WNOHANG)  # our own children: reap them
                except ChildProcessError:
                    pass
                if not _pid_alive(pid):
                    pids.discard(pid)
            if pids:
                time.sleep(0.05)
        if not pids:
            break
    return pids


def _ns_holders(ident):
    """'pid (how)' of every process inside the namespace `ident` ((st_dev, st_ino) of its nsfs
    file) or holding an open file descriptor on it (either keeps it, and its veth, alive)."""
    holders = []
    own = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            st = os.stat("/proc/%s/ns/net" % name)
            if int(name) != own and (st.st_dev, st.st_ino) == ident:
                holders.append("%s (inside)" % name)
                continue
            for fd in os.listdir("/proc/%s/fd" % name):
                try:
                    st = os.stat("/proc/%s/fd/%s" % (name, fd))
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) == ident:
                    holders.append("%s (fd %s)" % (name, fd))
                    break
        except OSError:
            continue
    return holders


def _delete_netns(name):
    """Kill what runs inside `name`, delete it and its /etc/netns/NAME; returns problems."""
    problems = []
    left = _kill_pids(netns_pids(name))
    if left:
        problems.append("%s: pids %s survived SIGKILL" % (name, sorted(left)))
    r = _ip("netns", "delete", name, check=False)
    if r.returncode != 0 and name in list_netns():
        problems.append("ip netns delete %s: %s" % (name, r.stderr.strip()))
    etc = os.path.join("/etc/netns", name)
    if os.path.isdir(etc):
        shutil.rmtree(etc, ignore_errors=True)
    try:
        os.rmdir("/etc/netns")  # only if empty: it did not exist before our first hosts=True
    except OSError:
        pass
    return problems


def cleanup_stale():
    """Delete the namespaces of NetnsPairs whose owner process is gone; returns what was done."""
    done = []
    for name in list_netns():
        m = NS_RE.match(name)
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            problems = _delete_netns(name)
            done.append("deleted stale namespace %s%s" % (
                name, " (%s)" % "; ".join(problems) if problems else ""))
    return done


def _host_links():
    """Names of the links of the host's network namespace."""
    out = _ip("-o", "link", "show", check=False).stdout
    return {m.group(1) for m in re.finditer(r"^\d+:\s+([^:@\s]+)", out, re.M)}


def _host_ipv4_networks():
    """(network, prefixlen) of every IPv4 route and address in the host's namespace."""
    nets = []
    out = _ip("-4", "route", "show", "table", "all", check=False).stdout
    out += _ip("-4", "-o", "addr", "show", check=False).stdout
    for m in re.finditer(r"(?:^|\s)(\d+\.\d+\.\d+\.\d+)(?:/(\d+))?", out):
        nets.append((m.group(1), int(m.group(2) or 32)))
    return nets


def _overlaps(a, alen, b, blen):
    def num(s):
        return int.from_bytes(socket.inet_aton(s), "big")

    plen = min(alen, blen)
    mask = ((1 << 32) - 1) ^ ((1 << (32 - plen)) - 1) if plen else 0
    return (num(a) & mask) == (num(b) & mask)


def pick_subnet():
    """'10.231.X' with 10.231.X.0/24 not routed nor addressed on the host (default route aside)."""
    taken = [(n, p) for n, p in _host_ipv4_networks() if p > 0]
    xs = list(range(256))
    random.Random(os.getpid() ^ time.monotonic_ns()).shuffle(xs)
    for x in xs:
        base = SUBNET_FMT % x
        if not any(_overlaps(base + ".0", 24, n, p) for n, p in taken):
            return base
    raise NetnsError("every 10.231.X.0/24 overlaps a host route")


class NetnsPair:
    """`with NetnsPair() as net:` two network namespaces joined by a veth pair.

    hosts:  write /etc/netns/NAME/hosts so that the hostname resolves, inside namespace i,
            to addr[i] (and "<hostname>-peer" to the other one).
    mtu:    the veth's MTU (default: the kernel's, 1500).

    Attributes: name[i], addr[i], ifname[i], subnet ("10.231.X"), prefixlen, hostname;
    setup_seconds and teardown_seconds once measured."""

    def __init__(self, hosts=False, mtu=None):
        self.hosts = hosts
        self.mtu = mtu
        self.name = []
        self.addr = []
        self.ifname = ["veth0", "veth1"]  # each lives in its own namespace: no clash possible
        self.subnet = None
        self.prefixlen = 24
        self.hostname = socket.gethostname()
        self.stale_cleanup = []
        self.inodes = []
        self.children = []
        self.host_links_before = set()
        self.setup_seconds = None
        self.teardown_seconds = None

    def __enter__(self):
        t0 = time.monotonic()
        try:
            self._setup()
        except BaseException:
            self._teardown()
            raise
        self.setup_seconds = time.monotonic() - t0
        return self

    def _setup(self):
        if not shutil.which("ip"):
            raise NetnsError("no `ip` (Debian package iproute2)")
        self.host_links_before = _host_links()
        self.stale_cleanup = cleanup_stale()
        n = next(_counter)
        self.subnet = pick_subnet()
        for i in range(2):
            name = "%s%d-%d-%d" % (NS_PREFIX, os.getpid(), n, i)
            _ip("netns", "add", name)
            self.name.append(name)
            st = os.stat(os.path.join("/run/netns", name))
            self.inodes.append((st.st_dev, st.st_ino))
            self.addr.append("%s.%d" % (self.subnet, i + 1))
        mtu = ["mtu", str(self.mtu)] if self.mtu else []
        _ip("link", "add", self.ifname[0], "netns", self.name[0], *mtu, "type", "veth",
            "peer", "name", self.ifname[1], "netns", self.name[1], *mtu)
        for i in range(2):
            ns = self.name[i]
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", "%s/%d" % (self.addr[i], self.prefixlen),
                "dev", self.ifname[i])
            _ip("-n", ns, "link", "set", self.ifname[i], "up")
            if self.hosts:
                self._write_hosts(i)
        end = time.monotonic() + 10
        while not all(self._link_up(i) for i in range(2)):
            if time.monotonic() > end:
                raise NetnsError("veth not up after 10 s: %s" % " | ".join(
                    _ip("-n", ns, "-br", "addr", check=False).stdout.strip()
                    for ns in self.name))
            time.sleep(0.05)

    def _link_up(self, i):
        out = _ip("-n", self.name[i], "-br", "link", "show", "dev", self.ifname[i],
                  check=False).stdout
        return "LOWER_UP" in out and " UP " in out + " "

    def _write_hosts(self, i):
        short = self.hostname.split(".")[0]
        names = " ".join(dict.fromkeys([self.hostname, short]))
        d = os.path.join("/etc/netns", self.name[i])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "hosts"), "w") as f:
            f.write("# written by tests/cluster/netns_fixture.py for namespace %s\n"
                    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                    "%s\t%s\n%s\t%s-peer\n" % (self.name[i], self.addr[i], names,
                                               self.addr[1 - i], short))

    # -- use --------------------------------------------------------------------------------

    def argv(self, i, argv):
        """The command line that runs `argv` inside namespace i."""
        return ["ip", "netns", "exec", self.name[i]] + list(argv)

    def popen(self, i, argv, **kw):
        """subprocess.Popen of `argv` inside namespace i (killed at exit if still running)."""
        p = subprocess.Popen(self.argv(i, argv), **kw)
        self.children.append(p)
        return p

    def run(self, i, argv, **kw):
        """subprocess.run of `argv` inside namespace i."""
        return subprocess.run(self.argv(i, argv), **kw)

    # -- teardown ---------------------------------------------------------------------------

    def __exit__(self, exc_type, exc, tb):
        t0 = time.monotonic()
        problems = self._teardown()
        self.teardown_seconds = time.monotonic() - t0
        if problems and exc_type is None:
            raise NetnsError("teardown: " + "; ".join(problems))
        return False

    def _teardown(self):
        problems = []
        for name in self.name:
            problems += _delete_netns(name)
        for p in self.children:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                problems.append("pid %d (%s) outlived its namespace" % (p.pid, p.args))
        left = [n for n in self.name if n in list_netns()]
        if left:
            problems.append("namespaces still listed: %s" % left)
        for name, ident in zip(self.name, self.inodes):
            holders = _ns_holders(ident)
            if holders:
                problems.append("namespace %s (net:[%d]) kept alive by %s" % (
                    name, ident[1], ", ".join(holders)))
        return problems

    def check_gone(self):
        """Problems showing that this pair was not fully removed (empty list when clean)."""
        problems = []
        if any(n in list_netns() for n in self.name):
            problems.append("namespace still listed")
        for ident in self.inodes:
            if _ns_holders(ident):
                problems.append("net:[%d] still held" % ident[1])
        for ifname in set(self.ifname) & (_host_links() - self.host_links_before):
            problems.append("link %s appeared in the host namespace" % ifname)
        for name in self.name:
            if os.path.exists(os.path.join("/etc/netns", name)):
                problems.append("/etc/netns/%s left" % name)
        return problems


# ------------------------------------------------------------------------------------------------
# Availability
# ------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def why_unavailable(probe=True):
    """None when a NetnsPair can be made here, else one line saying why not (cached)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if not shutil.which("ip"):
        return "no `ip` command (Debian package iproute2)"
    if not probe:
        return None
    try:
        with NetnsPair() as net:
            r = net.run(0, ["ip", "-br", "addr"], capture_output=True, text=True, timeout=20)
            if r.returncode != 0:
                return "ip netns exec failed: %s" % r.stderr.strip().splitlines()[-1:]
    except Exception as e:  # noqa: BLE001 - any failure means "cannot run here"
        return "cannot make a veth pair between network namespaces here: %s" % (
            str(e).strip().splitlines() or [type(e).__name__])[0]
    return None


# ------------------------------------------------------------------------------------------------
# Self-test
# ------------------------------------------------------------------------------------------------

SERVER = r"""
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, port))
s.listen(4)
print("ready", flush=True)
s.settimeout(float(sys.argv[3]) if len(sys.argv) > 3 else 20)
try:
    while True:
        c, peer = s.accept()
        data = c.recv(100)
        c.sendall(b"pong from %s to %s: " % (socket.gethostname().encode(), peer[0].encode())
                  + data)
        c.close()
except socket.timeout:
    pass
"""

CLIENT = r"""
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
    c.sendall(b"ping")
    print("OK", c.recv(200).decode())
except OSError as e:
    print("FAIL", type(e).__name__, e.errno, e.strerror or e)
"""


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _self_test(args):
    failures = []

    def expect(cond, what, detail=""):
        print("  %s %s%s" % ("ok  " if cond else "FAIL", what, (": " + detail) if detail else ""))
        if not cond:
            failures.append(what)

    reason = why_unavailable(probe=False)
    if reason:
        print("unavailable: %s" % reason)
        return 77
    py = sys.executable or "/usr/bin/python3"
    before_ns = set(list_netns())
    for rep in range(args.repeat):
        print("== run %d/%d (hosts=%s)" % (rep + 1, args.repeat, args.hosts))
        with NetnsPair(hosts=args.hosts) as net:
            for line in net.stale_cleanup:
                print("  stale: %s" % line)
            print("  namespaces %s, %s=%s, %s=%s, set up in %.2f s" % (
                net.name, net.ifname[0], net.addr[0], net.ifname[1], net.addr[1],
                net.setup_seconds))
            for i in range(2):
                print("  ns%d: %s" % (i, " | ".join(net.run(i, ["ip", "-br", "addr"],
                      capture_output=True, text=True).stdout.strip().splitlines())))

            def serve(i, host, port):
                p = net.popen(i, [py, "-c", SERVER, host, str(port), "20"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                line = p.stdout.readline().strip()
                if line != "ready":
                    p.kill()
                    raise NetnsError("server in ns%d on %s:%d: %r %s" % (
                        i, host, port, line, p.stderr.read()))
                return p

            def connect(i, host, port):
                r = net.run(i, [py, "-c", CLIENT, host, str(port)], capture_output=True,
                            text=True, timeout=30)
                return (r.stdout + r.stderr).strip()

            port = _free_port()
            srv = serve(1, net.addr[1], port)
            out = connect(0, net.addr[1], port)
            expect(out.startswith("OK") and net.addr[0] in out,
                   "TCP ns0 -> ns1 %s:%d" % (net.addr[1], port), out)
            route = net.run(0, ["ip", "route", "get", net.addr[1]], capture_output=True,
                            text=True).stdout.split("\n")[0].strip()
            expect(" dev %s " % net.ifname[0] in route + " ", "ns0 routes %s via %s" % (
                net.addr[1], net.ifname[0]), route)
            local0 = net.run(0, ["ip", "-4", "-o", "addr"], capture_output=True,
                             text=True).stdout
            expect(net.addr[1] + "/" not in local0, "%s is not a local address of ns0"
                   % net.addr[1])
            # With ns0's veth down, ns1's address is unreachable: it was never on loopback.
            net.run(0, ["ip", "link", "set", net.ifname[0], "down"], check=True)
            out = connect(0, net.addr[1], port)
            expect(out.startswith("FAIL"), "veth down: %s unreachable from ns0" % net.addr[1],
                   out)
            net.run(0, ["ip", "link", "set", net.ifname[0], "up"], check=True)
            end = time.monotonic() + 10
            while not net._link_up(0) and time.monotonic() < end:
                time.sleep(0.05)
            out = connect(0, net.addr[1], port)
            expect(out.startswith("OK"), "veth up again: reachable", out)
            srv.kill()
            srv.wait()

            # 127.0.0.1 of ns0 is not ns1's loopback, nor the host's.
            port = _free_port()
            lo1 = serve(1, "127.0.0.1", port)
            out = connect(0, "127.0.0.1", port)
            expect(out.startswith("FAIL"), "ns1 listens on 127.0.0.1:%d, ns0 cannot reach it"
                   % port, out)
            out = connect(1, "127.0.0.1", port)
            expect(out.startswith("OK"), "ns1 reaches its own 127.0.0.1:%d" % port, out)
            hsock = socket.socket()
            hsock.bind(("127.0.0.1", 0))
            hsock.listen(1)
            hport = hsock.getsockname()[1]
            out = connect(0, "127.0.0.1", hport)
            expect(out.startswith("FAIL"), "host listens on 127.0.0.1:%d, ns0 cannot reach it"
                   % hport, out)
            hsock.close()
            lo1.kill()
            lo1.wait()

            # The hostname inside a namespace.
            hn = socket.gethostname()
            host_res = subprocess.run(["getent", "hosts", hn], capture_output=True,
                                      text=True).stdout.strip()
            print("  hostname %r; host: getent hosts -> %r" % (hn, host_res))
            for i in range(2):
                res = net.run(i, ["sh", "-c", "hostname; getent hosts $(hostname)"],
                              capture_output=True, text=True).stdout.split("\n")
                name_in, resolved = res[0].strip(), (res[1].split() or ["(none)"])[0]
                route = net.run(i, ["ip", "route", "get", resolved], capture_output=True,
                                text=True)
                route = (route.stdout + route.stderr).strip().split("\n")[0]
                port = _free_port()
                try:
                    bound = serve(i, resolved, port)
                    peer_out = connect(1 - i, resolved, port)
                    own_out = connect(i, resolved, port)
                    bound.kill()
                    bound.wait()
                except NetnsError as e:
                    peer_out = own_out = "cannot bind: %s" % str(e).splitlines()[-1]
                print("  ns%d: hostname %r resolves to %s; route: %s\n"
                      "       server there: reachable from ns%d itself: %s; from the peer "
                      "ns%d: %s" % (i, name_in, resolved, route, i, own_out, 1 - i, peer_out))
                expect(name_in == hn, "ns%d has the host's hostname (UTS not namespaced)" % i)
                if args.hosts:
                    expect(resolved == net.addr[i], "hosts=True: ns%d resolves the hostname to "
                           "%s" % (i, net.addr[i]), resolved)
                    expect(peer_out.startswith("OK"), "hosts=True: peer reaches it", peer_out)
            if args.leave_process:
                # Something still running inside at exit: teardown must kill it.
                net.popen(1, ["sleep", "1000"])
                net.popen(0, ["sh", "-c", "sleep 1000 & sleep 1000"])
                time.sleep(0.3)
        print("  teardown %.2f s" % net.teardown_seconds)
        gone = net.check_gone()
        expect(not gone, "namespaces, veth and /etc/netns files gone", "; ".join(gone))
    now = set(list_netns())
    expect(now <= before_ns and not any(n.startswith("%s%d-" % (NS_PREFIX, os.getpid()))
                                         for n in now),
           "no namespace of ours in ip netns list", str(sorted(now)))
    print("self-test: %s" % ("FAILED: " + "; ".join(failures) if failures else "passed"))
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--hosts", action="store_true", help="NetnsPair(hosts=True)")
    ap.add_argument("--leave-process", action="store_true",
                    help="leave processes running inside at exit (teardown must kill them)")
    ap.add_argument("--why", action="store_true", help="print why_unavailable() (probing)")
    args = ap.parse_args()
    if args.why:
        print(why_unavailable() or "available")
        return 0
    return _self_test(args)


if __name__ == "__main__":
    sys.exit(main())
