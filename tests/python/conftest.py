"""Fixtures for crescent's Python tests: a real local cluster on 127.0.0.1.

PYTHONPATH holds <build>/python (the crescent package and its C extension)
and python/compat (the mooncake package); CTest sets both (tests/python/
CMakeLists.txt). Every daemon started here listens on 127.0.0.1 only, on
ephemeral ports, and is killed at teardown (also when a test fails).
"""
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time

import pytest

import crescent

HERE = os.path.dirname(os.path.abspath(__file__))
SANITIZED = os.environ.get("CRESCENT_SANITIZED") == "1"
# The master and the node take a while longer to come up under ASan.
STARTUP_S = 60 if SANITIZED else 20


def exe(name):
    p = crescent.find_executable(name)
    if p is None:
        pytest.fail("executable %s not found (CRESCENT_BIN_DIR, build tree, PATH): build crescent "
                    "first" % name)
    return p


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=STARTUP_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s before listening on %d" % (what, proc.returncode, port))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on 127.0.0.1:%d within %ss" % (what, port, timeout))


def wait_line(proc, pattern, what, timeout=STARTUP_S):
    """Reads proc's stdout until a line matches pattern; returns the match."""
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            for line in buf.decode(errors="replace").splitlines():
                m = re.search(pattern, line)
                if m:
                    return m
        elif proc.poll() is not None:
            break
    raise RuntimeError("%s: no line matching %r within %ss (exit %s); output: %r"
                       % (what, pattern, timeout, proc.poll(), buf[-2000:]))


class Daemons:
    """Processes started by a fixture, all stopped at teardown."""

    def __init__(self):
        self.procs = []

    def start(self, argv, **kw):
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=kw.pop("stderr", None), **kw)
        self.procs.append(p)
        return p

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()
        self.procs = []


@pytest.fixture
def daemons():
    d = Daemons()
    yield d
    d.stop()


def start_metadata(d):
    """crescent-metadata on an ephemeral port; returns its URL."""
    p = d.start([exe("crescent-metadata"), "--port", "0", "--host", "127.0.0.1"])
    m = wait_line(p, r"serving (http://\S+)", "crescent-metadata")
    return m.group(1)


def start_master(d, rpc_port=0, http_port=0):
    """crescent-master with its embedded HTTP metadata server, started with
    Mooncake's mooncake_master flags (ports 0 = ephemeral). Returns
    (master_addr, metadata_url); d.metrics_port is its metrics port."""
    p = d.start([exe("crescent-master"), "--rpc_port=%d" % rpc_port,
                 "--rpc_address=127.0.0.1",
                 "--enable_http_metadata_server=true",
                 "--http_metadata_server_host=127.0.0.1",
                 "--http_metadata_server_port=%d" % http_port,
                 "--metrics_address=127.0.0.1", "--metrics_port=0"])
    m = wait_line(p, r"listening rpc=(\d+) metrics=(\d+) .*http_metadata=(\d+)", "crescent-master")
    d.metrics_port = int(m.group(2))
    return "127.0.0.1:%s" % m.group(1), "http://127.0.0.1:%s/metadata" % m.group(3)


def start_node(d, master, metadata, size="64MB"):
    """crescent-node contributing `size` bytes; returns its segment name."""
    p = d.start([exe("crescent-node"), "--master_server_address", master,
                 "--metadata_server", metadata, "--local_hostname", "127.0.0.1",
                 "--global_segment_size", size])
    return wait_line(p, r"ready segment=(\S+)", "crescent-node").group(1)


@pytest.fixture(scope="module")
def cluster():
    """master (+ embedded HTTP metadata) and one storage node, for a test module."""
    d = Daemons()
    try:
        master, meta = start_master(d)
        # CRESCENT_TEST_METADATA=P2PHANDSHAKE runs the store suites with the
        # peer-to-peer handshake instead of the master's HTTP metadata.
        meta = os.environ.get("CRESCENT_TEST_METADATA", meta)
        node = start_node(d, master, "p2p" if meta == "P2PHANDSHAKE" else meta)
        yield {"master": master, "metadata": meta, "node": node, "daemons": d,
               "metrics": d.metrics_port}
    finally:
        d.stop()


SEG = "16MB" if SANITIZED else "64MB"


def make_store(cluster, cls=None, segment=SEG, local_buffer="16MB"):
    if cls is None:
        from crescent.store import DistributedStore as cls
    s = cls()
    rc = s.setup("127.0.0.1", cluster["metadata"], segment, local_buffer, "tcp", "",
                 cluster["master"])
    assert rc == 0, "setup failed: %d (%s)" % (rc, crescent.strerror(rc))
    return s


@pytest.fixture
def store(cluster):
    s = make_store(cluster)
    yield s
    s.remove_all()
    s.close()


@pytest.fixture
def mstore(cluster):
    """A mooncake.store.MooncakeDistributedStore client of the module's cluster;
    everything it stored is removed (forced) at teardown."""
    from mooncake.store import MooncakeDistributedStore
    s = make_store(cluster, cls=MooncakeDistributedStore)
    yield s
    s.remove_all(True)
    s.close()


def upserts_under_readers(store, key, vals, read, rounds, readers=2):
    """Upserts key with vals in turn, `rounds` times, while `readers`
    threads call read() (a list of values read) in a loop until it ends.
    Returns (bad, seen): (length, first bytes) of the first value read that
    is none of vals in each thread that met one, and the first bytes of the
    values read."""
    import threading
    stop = threading.Event()
    seen, bad = set(), []

    def reader():
        while not stop.is_set():
            for v in read():
                if v not in vals:
                    bad.append((len(v), v[:16]))
                    return
                seen.add(v[0])

    ts = [threading.Thread(target=reader) for _ in range(readers)]
    for t in ts:
        t.start()
    try:
        for i in range(rounds):
            assert store.upsert(key, vals[i % len(vals)]) == 0
    finally:
        stop.set()
        for t in ts:
            t.join()
    return bad, seen


def run_py(script, *args, env=None, timeout=120):
    """Runs a helper script with the same interpreter and PYTHONPATH."""
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([sys.executable, script] + [str(a) for a in args], env=e,
                          capture_output=True, text=True, timeout=timeout)


def gil_released_during(call, attempts=5):
    """True if another Python thread ran while `call()` was inside C.

    The switch interval is raised so the interpreter never takes the GIL away
    by itself: the main thread below can only run while the worker has
    released the GIL voluntarily. The worker reads a counter just before and
    just after the call; the counter moving means the binding released the
    GIL during the call (not a timing assertion: a call that keeps the GIL
    cannot let the counter move at all)."""
    import sys
    import threading
    old = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    moved = []
    try:
        for _ in range(attempts):
            state = {"n": 0, "done": False}

            def worker():
                c0 = state["n"]
                call()
                moved.append(state["n"] - c0)
                state["done"] = True

            t = threading.Thread(target=worker)
            t.start()
            while not state["done"]:
                state["n"] += 1
                time.sleep(0)  # lets the worker take the GIL back when it returns
            t.join()
            if moved[-1] > 0:
                return True
        return False
    finally:
        sys.setswitchinterval(old)
