"""Helpers shared by the benchmark drivers (bench/te/run.py,
bench/store/run.py): logging, background processes and network namespaces
that are always cleaned up, and the veth pair the cross-namespace cases use.
"""
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

procs = []  # background processes to stop on exit
netns = []  # namespaces to delete on exit


def load_module(name, path):
    """Imports another benchmark's run.py (path) as module name, so that one
    benchmark can reuse another's helpers."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def emit(md, out=""):
    """Prints a result table and writes it to out (a path) when given."""
    print(md)
    if out:
        with open(out, "w") as f:
            f.write(md)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def stop(p):
    """SIGTERM, then SIGKILL after 10 s; forgets p."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p in procs:
        procs.remove(p)


def cleanup():
    """Stops every background process (newest first), deletes every namespace."""
    for p in reversed(list(procs)):
        stop(p)
    procs.clear()
    for ns in netns:
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
    netns.clear()


def cleanup_on_signals():
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: (cleanup(), sys.exit(130)))


def veth_pair(tag, subnet):
    """Two namespaces <tag>-a-<pid>, <tag>-b-<pid> joined by a veth pair with
    10.<subnet>.x.1 / .2 (x from the pid); lo up in both. Namespaces of an
    earlier run killed before its cleanup (same tag, no process inside) are
    deleted first. Returns (exec prefix a, exec prefix b, ip a, ip b); the
    namespaces are deleted by cleanup(). Needs root and iproute2."""
    for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
                               text=True).stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        if re.fullmatch(re.escape(tag) + r"-[ab]-\d+", ns) and not subprocess.run(
                ["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.strip():
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
    pid = str(os.getpid() % 100000)
    a, b = "%s-a-%s" % (tag, pid), "%s-b-%s" % (tag, pid)
    va, vb = "%sva%s" % (tag, pid), "%svb%s" % (tag, pid)
    ipa = "10.%d.%d.1" % (subnet, os.getpid() % 250)
    ipb = "10.%d.%d.2" % (subnet, os.getpid() % 250)

    def sh(*cmd):
        subprocess.run(cmd, check=True)
    for ns in (a, b):
        sh("ip", "netns", "add", ns)
        netns.append(ns)
    sh("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
    sh("ip", "link", "set", va, "netns", a)
    sh("ip", "link", "set", vb, "netns", b)
    for ns, dev, ip in ((a, va, ipa), (b, vb, ipb)):
        sh("ip", "-n", ns, "addr", "add", ip + "/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    return ("ip", "netns", "exec", a), ("ip", "netns", "exec", b), ipa, ipb
