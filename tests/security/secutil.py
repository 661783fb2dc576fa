"""Helpers for the security tests: clusters with security on (a cluster key
generated per module) and off, plus an independent implementation of the
wire formats of src/common/auth (handshake, HTTP signatures) in Python, so
the tests speak the protocol as docs/security.md describes it, not through
the library under test."""
import hashlib
import hmac
import os
import socket
import struct
import sys
import tempfile
import time

import pytest

import importlib.util

# tests/python's helpers (Daemons, exe, wait_line), loaded under another name
_spec = importlib.util.spec_from_file_location(
    "py_fixtures", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                                "conftest.py"))
_py = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_py)
Daemons, exe, wait_line = _py.Daemons, _py.exe, _py.wait_line

RPC_MAGIC = 0x4D535243
AUTH_MAGIC = 0x55415243
ILLEGAL_CLIENT = -601


# ---- cluster key and MACs (docs/security.md) ---------------------------------

def new_key_file(d, name="cluster.key"):
    path = os.path.join(d, name)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    return path


def read_key(path):
    return open(path, "rb").read().rstrip(b"\r\n\t ")


def mac(key, label, *parts):
    return hmac.new(key, label.encode() + b"\0" + b"".join(parts), hashlib.sha256).digest()


def key_id(key):
    return mac(key, "crescent key id")[:8]


def http_auth_header(key, method, target, body=b"", ts=None):
    ts = int(time.time()) if ts is None else ts
    nonce = os.urandom(16)
    m = mac(key, "crescent http v1", method.encode() + b"\0", target.encode() + b"\0",
            struct.pack("<Q", ts), nonce, hashlib.sha256(body).digest())
    return "v1:%d:%s:%s" % (ts, nonce.hex(), m.hex())


# ---- raw master RPC ------------------------------------------------------------

def rpc_frame(type_, payload=b"", req_id=1):
    return struct.pack("<IHHQIiII", RPC_MAGIC, 1, type_, req_id, len(payload), 0, 0, 0) + payload


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise ConnectionError("closed after %d of %d bytes" % (len(b), n))
        b += c
    return b


def rpc_reply(s):
    h = recv_exact(s, 32)
    magic, ver, type_, req_id, plen, status, _, _ = struct.unpack("<IHHQIiII", h)
    assert magic == RPC_MAGIC
    return type_, status, recv_exact(s, plen) if plen else b""


def rpc_connect(addr, src="127.0.0.1"):
    host, port = addr.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.settimeout(10)
    s.connect((host, int(port)))
    return s


def rpc_authenticate(s, key, ctx=b"rpc"):
    """Runs the handshake over RPC frames (0x50/0x51). Returns the PROOF reply
    status (0 = admitted); raises if the master fails to prove the key."""
    nc = os.urandom(32)
    hello = struct.pack("<IBBH", AUTH_MAGIC, 1, 1, 0) + key_id(key) + nc
    s.sendall(rpc_frame(0x50, hello))
    t, st, chal = rpc_reply(s)
    if st:
        return st
    assert len(chal) == 80
    ns, mac_s = chal[16:48], chal[48:80]
    assert hmac.compare_digest(mac_s, mac(key, "crescent handshake v1", b"S", ctx + b"\0", nc, ns)), \
        "master did not prove the cluster key"
    proof = struct.pack("<IBBH", AUTH_MAGIC, 1, 3, 0) + mac(key, "crescent handshake v1", b"C",
                                                            ctx + b"\0", nc, ns)
    s.sendall(rpc_frame(0x51, proof))
    return rpc_reply(s)[1]


def rpc_remove_all(s, force=True):
    s.sendall(rpc_frame(4, struct.pack("<I", 1 if force else 0), req_id=7))
    return rpc_reply(s)


# ---- clusters ------------------------------------------------------------------

def start_master(d, key_file=None, extra=()):
    argv = [exe("crescent-master"), "--rpc_port=0", "--enable_http_metadata_server=true",
            "--http_metadata_server_port=0", "--metrics_port=0", "--client_ttl=3"]
    if key_file:
        argv.append("--cluster_key_file=" + key_file)
    p = d.start(argv + list(extra), stderr=open(os.path.join(d.dir, "master.err"), "w"))
    m = wait_line(p, r"listening rpc=(\d+) metrics=(\d+) http_metadata=(\d+)", "crescent-master")
    return {"proc": p, "master": "127.0.0.1:" + m.group(1), "metrics": int(m.group(2)),
            "metadata": "http://127.0.0.1:%s/metadata" % m.group(3), "http_port": int(m.group(3))}


def start_node(d, c, key_file=None, size="32MB", extra=()):
    argv = [exe("crescent-node"), "--master_server_address", c["master"], "--metadata_server",
            c["metadata"], "--global_segment_size", size]
    if key_file:
        argv.append("--cluster_key_file=" + key_file)
    p = d.start(argv + list(extra), stderr=open(os.path.join(d.dir, "node%d.err" % len(d.procs)), "w"))
    return p, wait_line(p, r"ready segment=(\S+)", "crescent-node").group(1)


def make_cluster(key):
    d = Daemons()
    d.dir = tempfile.mkdtemp(prefix="cr-sec-")
    kf = new_key_file(d.dir) if key else None
    c = start_master(d, kf)
    c["node_proc"], c["node"] = start_node(d, c, kf)
    c.update({"daemons": d, "key_file": kf, "key": read_key(kf) if kf else None, "dir": d.dir})
    return c


def store_for(c, key_file=None, segment="0", env_key=True):
    """A legitimate client (the crescent package). The key reaches the library
    the way a library user passes it: CRESCENT_CLUSTER_KEY_FILE."""
    import crescent.store
    old = os.environ.get("CRESCENT_CLUSTER_KEY_FILE")
    if key_file and env_key:
        os.environ["CRESCENT_CLUSTER_KEY_FILE"] = key_file
    else:
        os.environ.pop("CRESCENT_CLUSTER_KEY_FILE", None)
    try:
        s = crescent.store.DistributedStore()
        rc = s.setup("127.0.0.1", c["metadata"], segment, "16MB", "tcp", "", c["master"])
    finally:
        if old is None:
            os.environ.pop("CRESCENT_CLUSTER_KEY_FILE", None)
        else:
            os.environ["CRESCENT_CLUSTER_KEY_FILE"] = old
    return s, rc


# ---- trickled requests (slowloris) ---------------------------------------------

def eventually(probe, bound_s):
    """True once probe() is (tried every 0.5 s); False after bound_s, a
    guard against a hang, not a timing check."""
    deadline = time.monotonic() + bound_s
    while not probe():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
    return True


class Trickler:
    """Sockets that have sent a request's start (a request line, maybe headers)
    and then trickle one more byte each every period_s, never finishing it.
    A thread does the sending and notices when the server closed one (a send
    fails, or a read sees the end): closed() counts those."""

    def __init__(self, socks, period_s=1.5):
        import threading
        self.socks, self.period_s = list(socks), period_s
        self.gone = set()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _dead(self, s):
        import select
        import ssl
        try:
            if select.select([s], [], [], 0)[0]:
                return s.recv(1) == b""
            s.send(b"a")
        except ssl.SSLWantReadError:
            return False
        except (OSError, ValueError):
            return True
        return False

    def _run(self):
        while not self._stop.wait(self.period_s):
            for s in self.socks:
                if s not in self.gone and self._dead(s):
                    self.gone.add(s)

    def closed(self):
        return len(self.gone)

    def wait_all_closed(self, bound_s):
        """True once the server closed every socket; False after bound_s."""
        return eventually(lambda: len(self.gone) == len(self.socks), bound_s)

    def stop(self):
        self._stop.set()
        self._t.join()
        for s in self.socks:
            s.close()


def trickle_start(port, src, start=b"GET /metadata?key=x HTTP/1.1\r\nX-Slow: ", wrap=None):
    """A connection from src to 127.0.0.1:port (TLS when wrap, a function of
    the socket) that has sent start; None if the server refused it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        if wrap:
            s = wrap(s)
        s.sendall(start)
        return s
    except OSError:
        s.close()
        return None
