#!/usr/bin/env python3
"""Strangers against a running job: every port the job listens on, attacked while it listens.

    stranger_suite.py --build BUILD_DIR
    stranger_suite.py --attack ADDR:PORT [--store]    (one port, from wherever this runs: prints
                                                       one JSON line per attempt)

Runs `accel launch -n 2 guarded_program` twice: once alone (the reference), once with a stranger
that, as soon as the job listens, connects to each of its listening ports and
  - sends nothing, - sends garbage, - sends an oversized length,
  - sends a well-formed store request of libaccel's protocol without the handshake (the store),
  - does the store's handshake with a wrong token (the store),
  - does the collectives' handshake with a wrong token, claiming to be rank 1 (the others),
  - (when Debian's python3-torch imports) makes a real c10d TCPStore client request.
The ranks' collectives listeners live only until the ranks above them have connected: in the
second run rank 1 is a late peer (late_peer.so delays its connects but the store's by 3 s), which
keeps rank 0's listener open while the stranger is at it.

Checks: every listening socket of the job is on a loopback address; the job ends as the
reference did, with bitwise the same parameters; each attempt on every port is closed by the job
within a second and named (by the stranger's own address and port) in the log; once every rank
has taken part in a collective, nothing but the store listens. Exit 0 when all holds, 1 otherwise.
"""

import argparse
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time

DEBIAN_PYTHON = "/usr/bin/python3"
SERVER_HELLO = b"ACCELST1"
CLIENT_HELLO = b"ACCELCL1"
ACCEPTOR_HELLO = b"ACCELNS1"
CONNECTOR_HELLO = b"ACCELNC1"
STORE_KINDS = ["nothing", "garbage", "oversized length", "store request without the token",
               "wrong token"]
COLLECTIVE_KINDS = ["nothing", "garbage", "oversized length", "collectives handshake, wrong token"]


def fail(msg, output=""):
    print("FAIL: " + msg)
    if output:
        print("---- job output ----\n" + output[-6000:])
    sys.exit(1)


def job_pids(root):
    """root and its descendants (from /proc/*/stat)."""
    parent = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                text = f.read()
            parent[int(d)] = int(text[text.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, pp in parent.items() if pp == p]
    return out


def _socket_inodes(pid):
    out = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                m = re.match(r"socket:\[(\d+)\]", os.readlink("/proc/%d/fd/%s" % (pid, fd)))
            except OSError:
                continue
            if m:
                out.add(m.group(1))
    except OSError:
        pass
    return out


def listening(pids):
    """{(address, port)} of the TCP sockets in LISTEN state that these processes hold, each read
    from its own process's network namespace (/proc/PID/net/tcp)."""
    found = set()
    for pid in pids:
        inodes = _socket_inodes(pid)
        if not inodes:
            continue
        for table, family in (("tcp", 4), ("tcp6", 6)):
            try:
                lines = open("/proc/%d/net/%s" % (pid, table)).read().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                f = line.split()
                if f[3] != "0A" or f[9] not in inodes:
                    continue
                addr_hex, port_hex = f[1].split(":")
                raw = bytes.fromhex(addr_hex)
                if family == 4:
                    addr = socket.inet_ntop(socket.AF_INET, raw[::-1])
                else:
                    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                    addr = socket.inet_ntop(socket.AF_INET6, words)
                found.add((addr, int(port_hex, 16)))
    return found


def is_loopback(addr):
    return addr.startswith("127.") or addr == "::1" or addr.startswith("::ffff:127.")


def connect_to(addr, port):
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect((addr, port))
    return s


def until_closed(s, limit=5.0):
    """Seconds until the peer closed (reading what it sends), or None past limit."""
    start = time.monotonic()
    s.settimeout(0.1)
    while time.monotonic() - start < limit:
        try:
            if not s.recv(4096):
                return time.monotonic() - start
        except socket.timeout:
            continue
        except OSError:  # reset
            return time.monotonic() - start
    return None


def frame(body):
    return struct.pack("<I", len(body)) + body


def attack(addr, port, kind, results, lock):
    """One stranger's attempt; appends (kind, port, local port, seconds until closed or None)."""
    try:
        s = connect_to(addr, port)
    except OSError as e:
        with lock:
            results.append((kind, port, None, "connect failed: %s" % e))
        return
    local = s.getsockname()[1]
    start = time.monotonic()
    try:
        if kind == "garbage":
            s.sendall(os.urandom(64))
        elif kind == "oversized length":
            s.sendall(struct.pack("<I", 0x7fffffff) + b"x" * 16)
        elif kind == "store request without the token":
            key = b"census/0"
            s.sendall(frame(bytes([2]) + struct.pack("<I", len(key)) + key + struct.pack("<q", 0)))
        elif kind == "wrong token":
            s.settimeout(2)
            hello = s.recv(24)
            if hello[:8] == SERVER_HELLO:
                s.sendall(CLIENT_HELLO + os.urandom(16) + os.urandom(32))
        elif kind == "collectives handshake, wrong token":
            s.settimeout(2)
            hello = s.recv(28)
            if hello[:8] == ACCEPTOR_HELLO:
                s.sendall(CONNECTOR_HELLO + struct.pack("<I", 1) + os.urandom(16) + os.urandom(32))
    except OSError:
        pass
    closed = until_closed(s)
    if closed is not None:
        closed = time.monotonic() - start
    s.close()
    with lock:
        results.append((kind, port, local, closed))


TCPSTORE_CLIENT = r"""
import sys, time, datetime
import torch.distributed as dist
start = time.monotonic()
try:
    s = dist.TCPStore(sys.argv[1], int(sys.argv[2]), is_master=False,
                      timeout=datetime.timedelta(seconds=5))
    s.get("census/0")
    print("served")
except Exception as e:
    print("refused after %.2f s: %s" % (time.monotonic() - start, str(e).splitlines()[0][:120]))
"""


def tcpstore_attack(addr, port, results, lock):
    if not os.path.exists(DEBIAN_PYTHON):
        return
    probe = subprocess.run([DEBIAN_PYTHON, "-c", "import torch.distributed"], capture_output=True)
    if probe.returncode != 0:
        return
    r = subprocess.run([DEBIAN_PYTHON, "-c", TCPSTORE_CLIENT, addr, str(port)],
                       capture_output=True, text=True, timeout=60)
    with lock:
        results.append(("torch TCPStore client", port, None, r.stdout.strip() or r.stderr[-300:]))


def attack_port(addr, port, is_store, results, lock):
    """Every kind of attempt on one port, each on its own thread; returns the threads."""
    threads = [threading.Thread(target=tcpstore_attack, args=(addr, port, results, lock))]
    for kind in (STORE_KINDS if is_store else COLLECTIVE_KINDS):
        threads.append(threading.Thread(target=attack, args=(addr, port, kind, results, lock)))
    for t in threads:
        t.start()
    return threads


def run_job(build, env, stranger):
    cli = os.path.join(build, "bin", "accel")
    program = os.path.join(build, "bin", "guarded_program")
    if stranger:
        # Ahead of what is preloaded already (a sanitizer run's libomp, say), not instead of it.
        preload = os.path.join(build, "lib", "late_peer.so")
        if env.get("LD_PRELOAD"):
            preload += ":" + env["LD_PRELOAD"]
        env = dict(env, LD_PRELOAD=preload, LATE_PEER_SECONDS="3")
    job = subprocess.Popen([cli, "launch", "-n", "2", program], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=env)
    out = []
    reader = threading.Thread(target=lambda: out.extend(job.stdout))
    reader.start()
    seen, results, threads, lock = {}, [], [], threading.Lock()
    after_ready = set()
    store_port = None
    deadline = time.monotonic() + 120
    while job.poll() is None and time.monotonic() < deadline:
        pids = job_pids(job.pid)
        if store_port is None:
            for pid in pids[1:]:
                try:
                    env_text = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
                except OSError:
                    continue
                for kv in env_text:
                    if kv.startswith(b"MASTER_PORT="):
                        store_port = int(kv.split(b"=")[1])
        ready = any(l.strip() == "ready" for l in list(out))
        now_listening = listening(pids)
        if ready:
            after_ready |= now_listening
        for addr, port in now_listening:
            if (addr, port) in seen:
                continue
            seen[(addr, port)] = "store" if port == store_port else "collectives"
            if stranger:
                threads += attack_port(addr, port, port == store_port, results, lock)
        time.sleep(0.02)
    if job.poll() is None:
        job.kill()
        fail("the job did not finish within 120 s", "".join(out))
    reader.join()
    for t in threads:
        t.join()
    return job.returncode, "".join(out), seen, store_port, results, after_ready


def judge(results, out, is_store):
    """Prints each attempt; False when one was not closed within 1 s and named in the log (or,
    for a real TCPStore client, was served)."""
    ok = True
    for kind, port, local, closed in sorted(results, key=lambda r: (not is_store(r[1]), r[0])):
        where = "store" if is_store(port) else "collectives"
        if kind == "torch TCPStore client":
            print("  %s :%d  %-36s %s" % (where, port, kind, closed))
            if "served" == closed:
                ok = False
                print("    ^ the job served a client without the token")
            continue
        if local is None:
            print("  %s :%d  %-36s %s" % (where, port, kind, closed))
            ok = False
            continue
        logged = re.search(r"refused a connection from [^ ]*:%d: (.*)" % local, out)
        state = ("closed after %.2f s" % closed) if closed is not None else "left open"
        print("  %s :%d  %-36s %s%s" % (where, port, kind, state,
                                         "; logged: " + logged.group(1)[:70] if logged else ""))
        if closed is None or closed > 1.0 or not logged:
            ok = False
            print("    ^ expected: closed by the job within 1 s and named in the log")
    return ok


def attack_one(target, is_store):
    """--attack: every kind against one port, one JSON line per attempt."""
    import json
    addr, port = target.rsplit(":", 1)
    results, lock = [], threading.Lock()
    for t in attack_port(addr.strip("[]"), int(port), is_store, results, lock):
        t.join()
    for kind, p, local, closed in results:
        print(json.dumps({"kind": kind, "port": p, "local": local, "closed": closed}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build")
    ap.add_argument("--attack", metavar="ADDR:PORT")
    ap.add_argument("--store", action="store_true")
    args = ap.parse_args()
    if args.attack:
        attack_one(args.attack, args.store)
        return
    if not args.build:
        ap.error("--build or --attack is needed")
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "ACCEL_JOB_TOKEN",
              "ACCEL_JOB_TOKEN_FILE", "ACCEL_LISTEN_ADDRESS"):
        env.pop(k, None)

    code, ref_out, _, _, _, _ = run_job(args.build, env, stranger=False)
    ref = re.search(r"steps \d+ params [0-9a-f]+", ref_out)
    if code != 0 or not ref:
        fail("the job alone failed (status %d)" % code, ref_out)
    print("alone: %s" % ref.group(0))

    code, out, seen, store_port, results, after_ready = run_job(args.build, env, stranger=True)
    got = re.search(r"steps \d+ params [0-9a-f]+", out)
    if code != 0 or not got:
        fail("the job failed with a stranger at its ports (status %d)" % code, out)
    if got.group(0) != ref.group(0):
        fail("with a stranger the job ended with '%s', alone with '%s'" % (got.group(0),
                                                                         ref.group(0)), out)
    print("with strangers: %s (the same)" % got.group(0))
    print("listening sockets seen: " + ", ".join("%s:%d (%s)" % (a, p, w)
                                                 for (a, p), w in sorted(seen.items())))
    wide = [(a, p) for (a, p) in seen if not is_loopback(a)]
    if wide:
        fail("the job listened beyond the loopback address: %s" % wide, out)
    if store_port is None or not any(p == store_port for (_, p) in seen):
        fail("the store's listening socket was never seen", out)
    if not any(w == "collectives" for w in seen.values()):
        fail("no collectives listener was seen while rank 1 was late", out)
    lingering = [(a, p) for (a, p) in after_ready if p != store_port]
    if lingering:
        fail("once the ranks had connected, the job still listened on %s" % lingering, out)
    if not judge(results, out, lambda p: p == store_port):
        fail("a stranger was not refused as it should be", out)
    print("every attempt on every port refused within a second and logged; nothing but the "
          "store listened once the ranks had connected; the job unharmed")


if __name__ == "__main__":
    main()
