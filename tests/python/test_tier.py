"""Disk tier (docs/architecture/store-tiers.md) through the unchanged Mooncake
Python API: real crescent-master + crescent-node processes with --ssd_path on
real files (io_uring, O_DIRECT). Each test names the behaviour it protects."""
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import Daemons, exe, wait_line, SANITIZED, STARTUP_S
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

MiB = 1 << 20


def start_master(d, extra=()):
    p = d.start([exe("crescent-master"), "--rpc_port=0", "--rpc_address=127.0.0.1",
                 "--enable_http_metadata_server=true", "--http_metadata_server_host=127.0.0.1",
                 "--http_metadata_server_port=0", "--metrics_address=127.0.0.1",
                 "--metrics_port=0", "--client_ttl=2"] + list(extra))
    m = wait_line(p, r"listening rpc=(\d+) metrics=(\d+) http_metadata=(\d+)", "crescent-master")
    return {"master": "127.0.0.1:%s" % m.group(1), "metrics": int(m.group(2)),
            "metadata": "http://127.0.0.1:%s/metadata" % m.group(3)}


def node_argv(c, ssd_path, dram="32MB", ssd="256MB", extra=()):
    return [exe("crescent-node"), "--master_server_address", c["master"], "--metadata_server",
            c["metadata"], "--local_hostname", "127.0.0.1", "--global_segment_size", dram,
            "--ssd_path", str(ssd_path), "--ssd_capacity", ssd] + list(extra)


def start_node(d, c, ssd_path, **kw):
    p = d.start(node_argv(c, ssd_path, **kw), stderr=subprocess.PIPE)
    wait_line(p, r"ready segment=(\S+)", "crescent-node")
    return p


def client(c):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", c["metadata"], 0, "16MB", "tcp", "", c["master"]) == 0
    return s


def metrics(c):
    txt = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % c["metrics"], timeout=10).read()
    out = {}
    for line in txt.decode().splitlines():
        if line.startswith("crescent_master_"):
            k, v = line.split()
            out[k[len("crescent_master_"):]] = int(v)
    return out


def query_key(c, key):
    try:
        r = urllib.request.urlopen("http://127.0.0.1:%d/query_key?key=%s" % (c["metrics"], key),
                                   timeout=10)
        return json.loads(r.read())
    except urllib.error.HTTPError:
        return None


def value(i, size):
    b = (b"%08d" % i) * (size // 8)
    return b + b"x" * (size - len(b))


def put_retry(s, key, v, cfg=None, tries=200):
    """A full pool pushes back (the disk tier is still taking the cold
    objects): a writer retries, like an application would."""
    for _ in range(tries):
        rc = s.put(key, v) if cfg is None else s.put(key, v, cfg)
        if rc == 0:
            return 0
        time.sleep(0.05)
    return rc


@pytest.fixture
def d():
    ds = Daemons()
    yield ds
    ds.stop()


@pytest.fixture(params=["local", "server"])
def read_path(request, monkeypatch):
    """Both ways a client reads a disk replica: itself, from the node's data
    file (a node on the same host: the default), and through the node's
    read server (how a client on another host reads; CRESCENT_TIER_LOCAL=0
    for the processes this test starts)."""
    if request.param == "server":
        monkeypatch.setenv("CRESCENT_TIER_LOCAL", "0")
    return request.param


N_KEYS = 48 if SANITIZED else 96


@pytest.mark.parametrize("size", [MiB, 64 << 10])
def test_working_set_larger_than_dram_stays_readable(d, tmp_path, size):
    """3x the DRAM pool, DRAM + disk hold it all: >= 99% of puts readable,
    byte for byte, served from the disk tier, through the Python API. With
    64 KiB values a writer outruns the disk's bound of offloads in flight
    (256 per disk): eviction then skips the objects that wait for their
    copy (back pressure) instead of dropping them (it dropped 3-24 % of
    them, tier_dram_dropped_total)."""
    c = start_master(d)
    start_node(d, c, tmp_path)
    s = client(c)
    n = N_KEYS * MiB // size
    ok = [k for k in range(n) if put_retry(s, "k%d" % k, value(k, size)) == 0]
    assert len(ok) >= 0.99 * n, "puts that succeeded: %d of %d" % (len(ok), n)
    good = sum(1 for k in ok if s.get("k%d" % k) == value(k, size))
    assert good >= 0.99 * n, "readable: %d of %d" % (good, n)
    m = metrics(c)
    assert m["tier_ssd_offloads_total"] > 0 and m["tier_ssd_hits_total"] > 0, m
    assert m["tier_dram_dropped_total"] == 0, m["tier_dram_dropped_total"]
    tiers = {r["tier"] for k in ok[:4] for r in (query_key(c, "k%d" % k) or {}).get("replicas", [])}
    assert "ssd" in tiers, tiers
    s.close()


def test_node_sigkill_restart_serves_its_disk_objects(d, tmp_path, read_path):
    """A node SIGKILLed and restarted on the same --ssd_path re-reports what
    is on its disk: those objects are readable again, byte for byte."""
    c = start_master(d)
    node = start_node(d, c, tmp_path)
    s = client(c)
    n = 60 if not SANITIZED else 40
    for k in range(n):
        assert put_retry(s, "r%d" % k, value(k, MiB)) == 0
    on_disk = [k for k in range(n)
               if any(r["tier"] == "ssd" for r in (query_key(c, "r%d" % k) or {}).get("replicas", []))]
    assert on_disk, "nothing reached the disk tier"
    node.send_signal(signal.SIGKILL)
    node.wait()
    # the master drops the dead node's segments after --client_ttl (2 s)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and metrics(c)["tier_ssd_segments"]:
        time.sleep(0.2)
    start_node(d, c, tmp_path)
    back = sum(1 for k in on_disk if s.get("r%d" % k) == value(k, MiB))
    assert back == len(on_disk), "readable after restart: %d of %d" % (back, len(on_disk))
    assert metrics(c)["tier_ssd_adopted_total"] >= len(on_disk)
    s.close()


def test_flipped_byte_on_disk_is_a_miss_and_counted(d, tmp_path, read_path):
    """One flipped byte in an object file: the get fails (a miss), never
    returns wrong bytes; the master counts the corrupt copy and drops it."""
    c = start_master(d, ["--tier_offload_watermark=0"])  # write-through
    start_node(d, c, tmp_path)
    s = client(c)
    for k in range(8):
        assert s.put("c%d" % k, value(k, MiB)) == 0
    # wait for the write-through copies, then push everything out of DRAM
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and metrics(c)["tier_ssd_offloads_total"] < 8:
        time.sleep(0.1)
    for k in range(8, 8 + 40):
        assert put_retry(s, "c%d" % k, value(k, MiB)) == 0
    q = query_key(c, "c0")
    reps = q["replicas"]
    assert [r["tier"] for r in reps] == ["ssd"], q
    off = reps[0]["shards"][0]["addr"] + 4096 + 12345  # header block, then the value
    with open(os.path.join(str(tmp_path), "crescent-ssd.data"), "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x40]))
        f.flush()
        os.fsync(f.fileno())
    got = s.get("c0")
    assert got != value(0, MiB) and len(got) == 0, "corrupted object returned bytes"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and metrics(c)["tier_ssd_corrupt_total"] < 1:
        time.sleep(0.1)
    assert metrics(c)["tier_ssd_corrupt_total"] >= 1
    assert s.is_exist("c0") == 0
    assert s.get("c1") == value(1, MiB)  # the others are intact
    s.close()


def test_same_host_reads_do_not_go_through_the_node_process(d, tmp_path):
    """A client on the node's host reads disk replicas from the node's data
    file itself (the node hands it over once): with the node process
    SIGSTOPped, disk-resident objects still come back byte for byte."""
    c = start_master(d, ["--client_ttl=120"])  # the frozen node keeps its segments
    node = start_node(d, c, tmp_path, dram="4MB", ssd="64MB")
    s = client(c)
    n = 16
    for k in range(n):
        assert put_retry(s, "l%d" % k, value(k, MiB)) == 0
    on_disk = [k for k in range(n)
               if [r["tier"] for r in query_key(c, "l%d" % k)["replicas"]] == ["ssd"]]
    assert len(on_disk) >= 2, on_disk
    assert s.get("l%d" % on_disk[0]) == value(on_disk[0], MiB)  # gets the node's file
    node.send_signal(signal.SIGSTOP)
    try:
        got = [k for k in on_disk[1:] if s.get("l%d" % k) == value(k, MiB)]
    finally:
        node.send_signal(signal.SIGCONT)
    assert got == on_disk[1:], "read with the node stopped: %s of %s" % (got, on_disk[1:])
    s.close()


def test_values_larger_than_a_reservation_do_not_churn_reservations(d, tmp_path):
    """A value of at most 1 MiB is carved from a client reservation (one
    round trip), but a reservation is at most 1/16 of a segment: with a
    4 MB pool one is 256 KiB. Such a value goes two-phase without asking
    for a reservation each time: every RESERVE took space, and while the
    pool waited for its disk tier, each failed placement closed the new
    reservation into the quarantine (until expiry + put timeout), so the
    quarantine filled the pool and every put failed (a regression of the
    reserved put by default)."""
    c = start_master(d, ["--client_ttl=120"])
    start_node(d, c, tmp_path, dram="4MB", ssd="64MB")
    s = client(c)
    sizes = [MiB - 8192 + 17 * (k % 5) for k in range(12)]
    for k, n in enumerate(sizes):
        assert put_retry(s, "big%d" % k, value(k, n)) == 0, k
    m = metrics(c)
    assert m["reservations_granted_total"] <= 2, m["reservations_granted_total"]
    for k, n in enumerate(sizes):
        assert s.get("big%d" % k) == value(k, n), k
    s.close()


@pytest.mark.parametrize("window", ["4KiB", "2MiB", "not-a-size"])
def test_same_host_batch_reads_through_the_read_window(d, tmp_path, monkeypatch, capfd, window):
    """A batch of same-host disk reads keeps CRESCENT_TIER_READ_WINDOW value
    bytes in flight (at least one object) and checks each object while the
    next ones are read: with one object in flight (4KiB), a few (2MiB) or
    a bad setting (refused with a warning, the default used), objects of
    mixed sizes, partial last blocks included, come back byte for byte,
    read by the client itself (the node is stopped meanwhile)."""
    monkeypatch.setenv("CRESCENT_TIER_READ_WINDOW", window)
    c = start_master(d, ["--client_ttl=120"])  # the frozen node keeps its segments
    node = start_node(d, c, tmp_path, dram="4MB", ssd="64MB")
    s = client(c)
    sizes = [MiB - 4096 * (k % 3) + 17 * (k % 5) for k in range(16)]
    for k, n in enumerate(sizes):
        assert put_retry(s, "w%d" % k, value(k, n)) == 0
    on_disk = [k for k in range(len(sizes))
               if [r["tier"] for r in query_key(c, "w%d" % k)["replicas"]] == ["ssd"]]
    assert len(on_disk) >= 4, on_disk
    assert s.get("w%d" % on_disk[0]) == value(on_disk[0], sizes[on_disk[0]])  # the file
    node.send_signal(signal.SIGSTOP)
    try:
        got = s.get_batch(["w%d" % k for k in on_disk[1:]])
    finally:
        node.send_signal(signal.SIGCONT)
    bad = [k for k, g in zip(on_disk[1:], got) if g != value(k, sizes[k])]
    assert not bad, "wrong or missing with the node stopped: %s of %s" % (bad, on_disk[1:])
    warned = "CRESCENT_TIER_READ_WINDOW=not-a-size" in capfd.readouterr().err
    assert warned == (window == "not-a-size")
    s.close()


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def test_frozen_node_disk_reads_are_bounded_by_the_stall_time(d, tmp_path, monkeypatch):
    """Regression (issue 11): a client reading a disk replica of a SIGSTOPped
    node through its read server (a client on another host; here
    CRESCENT_TIER_LOCAL=0) waited out the 30 s transfer timeout. The read
    gives up after the Transfer Engine's stall time now: the frozen node's
    disk-only objects are clean misses, the other node's disk objects are
    read with their bytes, and all of it happens while the node is still
    frozen (a watchdog continues it only after several stall times; the old
    client got its answers only once the node continued). The master keeps
    the frozen node (a long client_ttl), so the client itself must give up
    on it; afterwards the node serves its objects again."""
    monkeypatch.setenv("CRESCENT_TIER_LOCAL", "0")
    c = start_master(d, ["--client_ttl=120", "--tier_promote=false"])
    ports = [free_port(), free_port()]
    for i in range(2):
        os.makedirs(str(tmp_path / ("n%d" % i)))
    nodes, segs = [], []
    for i in range(2):
        p = d.start(node_argv(c, tmp_path / ("n%d" % i), dram="4MB", ssd="64MB",
                              extra=["--ssd_port", str(ports[i])]), stderr=subprocess.PIPE)
        segs.append(wait_line(p, r"ready segment=(\S+)", "crescent-node").group(1))
        nodes.append(p)
    s = client(c)
    keys = []

    def put_on(i):  # the next key, asked on node i
        k = len(keys)
        cfg = ReplicateConfig(preferred_segments=[segs[i]])
        assert put_retry(s, "f%d" % k, value(k, MiB), cfg) == 0
        keys.append(k)

    # half of the keys asked on each node (a 4 MB DRAM tier holds 3 of them),
    # so both nodes move some to disk whatever the placement cursor did
    for k in range(24):
        put_on(k % 2)

    def disk_node(key):
        reps = (query_key(c, key) or {}).get("replicas", [])
        if [r["tier"] for r in reps] != ["ssd"]:
            return None
        return ports.index(int(reps[0]["shards"][0]["segment"].rsplit(":", 1)[1]))

    on = {0: [], 1: []}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        on = {0: [], 1: []}
        for k in keys:
            i = disk_node("f%d" % k)
            if i is not None:
                on[i].append(k)
        if len(on[0]) >= 2 and on[1]:
            break
        time.sleep(0.2)
        # A put that finds its preferred node's DRAM full goes to the other
        # node rather than wait, so while a node's demotions lag its puts
        # (sanitizer builds), its keys may all end up on the other node:
        # ask the short node for more until it has its disk-only keys.
        if len(keys) < 80:
            if len(on[0]) < 2:
                put_on(0)
            if not on[1]:
                put_on(1)
    if not (len(on[0]) >= 2 and on[1]):
        # what the master did instead: each key's replicas, its tier counters
        where = {k: [(r["tier"], r["shards"][0]["segment"])
                     for r in (query_key(c, "f%d" % k) or {}).get("replicas", [])]
                 for k in keys}
        tier = {k: v for k, v in metrics(c).items() if k.startswith("tier_")}
        logs = []
        for p in nodes:
            os.set_blocking(p.stderr.fileno(), False)
            logs.append((p.stderr.read() or b"")[-3000:].decode(errors="replace"))
        pytest.fail("disk-only keys per node: %s; segments %s; replicas %s; %s; node logs %s"
                    % (on, segs, where, tier, logs))
    for k in on[0] + on[1]:  # both read servers answer (pooled connections now)
        assert s.get("f%d" % k) == value(k, MiB)

    stall_s = int(os.environ.get("CRESCENT_XFER_STALL_MS", "1000")) / 1000.0
    hold_s = max(15.0, 4 * stall_s + 5)  # the gets below need ~2 stall times
    nodes[0].send_signal(signal.SIGSTOP)
    wait_stopped(nodes[0].pid)  # a stop is delivered asynchronously
    watchdog = subprocess.Popen(["sh", "-c", "sleep %s; kill -CONT %d" % (hold_s, nodes[0].pid)],
                                start_new_session=True)
    try:
        t0 = time.monotonic()
        frozen = [s.get("f%d" % k) for k in on[0][:2]]
        t1 = time.monotonic()
        live = [s.get("f%d" % k) == value(k, MiB) for k in on[1]]
        still_frozen = watchdog.poll() is None
        print("frozen node: 2 disk gets took %.2f s, %d live-node disk gets %.2f s"
              % (t1 - t0, len(on[1]), time.monotonic() - t1))
    finally:
        if watchdog.poll() is None:  # the answers are in: no need to wait for it
            os.killpg(watchdog.pid, signal.SIGKILL)
        watchdog.wait()
        nodes[0].send_signal(signal.SIGCONT)
    assert still_frozen, ("the gets returned only after the frozen node continued "
                          "(%.0f s): the read server path waited past the stall time" % hold_s)
    assert all(v in (b"", None) for v in frozen), [v and len(v) for v in frozen]
    assert all(live), "the live node's disk objects: %s" % live
    for k in on[0]:  # the node serves them again
        assert s.get("f%d" % k) == value(k, MiB)


def wait_stopped(pid, timeout=10):
    """Waits until every thread of pid is stopped (a SIGSTOP takes effect
    only once each thread runs again, which on a loaded machine can be
    after the next request has been served)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for t in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/stat" % (pid, t)) as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass
        if states and all(st in ("T", "t") for st in states):
            return
        time.sleep(0.005)
    raise AssertionError("process %d did not stop within %d s" % (pid, timeout))


RD_MAGIC = 0x32525443  # tier.h: the read server's request magic "CTR2"


def rd_request(key, version, off, size, roff=0, rlen=None, tag=0):
    k = key.encode()
    rlen = size - roff if rlen is None else rlen
    return struct.pack("<IIQQQQQII", RD_MAGIC, len(k), version, off, size, roff, rlen, tag, 0) + k


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        b = sock.recv(n - len(buf))
        if not b:
            raise ConnectionError("read server closed after %d of %d bytes" % (len(buf), n))
        buf += b
    return bytes(buf)


def rd_reply(sock):
    st, tag, n = struct.unpack("<iIQ", recv_exact(sock, 16))
    return st, tag, recv_exact(sock, n) if n else b""


def test_read_server_answers_each_pipelined_request_once_and_checks_each(d, tmp_path):
    """The node's read server (how a client on another host reads) on the
    wire: a burst of pipelined requests larger than its window (full reads,
    a range, another version, an extent past the disk, a misaligned offset)
    gets one reply per request, naming the request's tag (in whatever order
    the disk finished them), with the right bytes or the right error, never
    bytes of another object; a request with a bad magic, or the old layout's
    magic, closes the connection."""
    c = start_master(d)
    start_node(d, c, tmp_path, extra=["--ssd_queue_depth", "4"])  # window of 8 requests
    s = client(c)
    for k in range(48):
        assert put_retry(s, "w%d" % k, value(k, MiB)) == 0
    disk = []
    for k in range(48):
        for r in (query_key(c, "w%d" % k) or {}).get("replicas", []):
            if r["tier"] == "ssd":
                disk.append((k, query_key(c, "w%d" % k)["version"], r["shards"][0]))
    assert len(disk) >= 4, "objects on disk: %d" % len(disk)
    seg = disk[0][2]["segment"]
    host, port = seg[len("ssd@"):].rsplit(":", 1)
    reqs, want = [], []
    for i in range(40):  # 5x the window
        k, ver, sh = disk[i % len(disk)]
        kind = i % 8
        if kind == 3:    # a range of the value
            reqs.append(rd_request("w%d" % k, ver, sh["addr"], MiB, 1000, 5000, tag=1000 + i))
            want.append((0, value(k, MiB)[1000:6000]))
        elif kind == 5:  # a version the disk does not hold: a miss
            reqs.append(rd_request("w%d" % k, ver + 1, sh["addr"], MiB, tag=1000 + i))
            want.append((-704, b""))
        elif kind == 6:  # past the end of the disk
            reqs.append(rd_request("w%d" % k, ver, 1 << 40, MiB, tag=1000 + i))
            want.append((-600, b""))
        elif kind == 7:  # not block-aligned
            reqs.append(rd_request("w%d" % k, ver, sh["addr"] + 512, MiB, tag=1000 + i))
            want.append((-600, b""))
        else:
            reqs.append(rd_request("w%d" % k, ver, sh["addr"], MiB, tag=1000 + i))
            want.append((0, value(k, MiB)))
    with socket.create_connection((host, int(port)), timeout=30) as so:
        so.sendall(b"".join(reqs))
        answered = set()
        for _ in want:
            got_st, tag, got = rd_reply(so)
            i = tag - 1000
            assert 0 <= i < len(want) and i not in answered, "reply with tag %d" % tag
            answered.add(i)
            st, data = want[i]
            assert (got_st, len(got)) == (st, len(data)), \
                "reply %d: status %d, %d bytes; wanted %d, %d" % (i, got_st, len(got), st, len(data))
            assert got == data, "reply %d: wrong bytes" % i
        so.sendall(struct.pack("<II", 0x12345678, 4) + b"\0" * 48 + b"abcd")
        assert so.recv(16) == b"", "a request with a bad magic was answered"
    k, ver, sh = disk[0]
    with socket.create_connection((host, int(port)), timeout=30) as so:
        old = struct.pack("<IIQQQQQ", 0x44525443, 2, ver, sh["addr"], MiB, 0, MiB)  # "CTRD"
        so.sendall(old + b"w0" + b"\0" * 16)
        assert so.recv(16) == b"", "a request in the old layout was answered"
    s.close()


def run_node(c, ssd_path, timeout=30, **kw):
    return subprocess.run(node_argv(c, ssd_path, **kw) + ["--start_timeout_s", "5"],
                          capture_output=True, text=True, timeout=timeout)


def test_bad_ssd_path_and_capacity_give_clear_errors(d, tmp_path):
    c = start_master(d)
    r = run_node(c, tmp_path / "missing")
    assert r.returncode != 0 and "--ssd_path" in r.stderr and "No such file" in r.stderr, r.stderr
    r = run_node(c, "/proc")  # a read-only file system
    assert r.returncode != 0 and "--ssd_path" in r.stderr, r.stderr
    r = run_node(c, tmp_path, ssd="500TB")
    assert r.returncode != 0 and "does not fit" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "crescent-ssd.data") or \
        os.path.getsize(tmp_path / "crescent-ssd.data") == 0


def test_two_nodes_on_one_directory_refused(d, tmp_path):
    """A second node on a directory in use is refused with a clear error
    and touches nothing: the first node's disk objects stay readable."""
    c = start_master(d, ["--tier_offload_watermark=0"])  # write-through
    start_node(d, c, tmp_path)
    s = client(c)
    for k in range(4):
        assert s.put("n%d" % k, value(k, MiB)) == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and metrics(c)["tier_ssd_offloads_total"] < 4:
        time.sleep(0.1)
    assert metrics(c)["tier_ssd_offloads_total"] >= 4
    size = os.path.getsize(tmp_path / "crescent-ssd.data")
    r = run_node(c, tmp_path, ssd="512MB")
    assert r.returncode != 0 and "in use by another process" in r.stderr, r.stderr
    assert os.path.getsize(tmp_path / "crescent-ssd.data") == size
    # push the DRAM copies out: the gets below read the disk copies
    for k in range(4, 4 + 40):
        assert put_retry(s, "n%d" % k, value(k, MiB)) == 0
    for k in range(4):
        assert [x["tier"] for x in query_key(c, "n%d" % k)["replicas"]] == ["ssd"], k
        assert s.get("n%d" % k) == value(k, MiB), "n%d after the refused second node" % k
    s.close()


def test_read_only_ssd_path_is_refused_with_a_clear_error(d, tmp_path):
    """A directory on a read-only file system (a tmpfs this test mounts
    read-only; root ignores a directory's mode bits, so a mode-0555
    directory would not be read-only here) is refused at start, saying so,
    and nothing is written."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=16m", "crescent-tier-ro", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here: %s" % r.stderr.strip())
    try:
        c = start_master(d)
        r = run_node(c, mnt)
        assert r.returncode != 0, r.stderr
        assert "--ssd_path" in r.stderr and "must be writable" in r.stderr, r.stderr
        assert os.listdir(mnt) == []
    finally:
        if subprocess.run(["umount", str(mnt)]).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)])


def test_foreign_and_truncated_files_are_left_alone(d, tmp_path):
    """Foreign files in the directory are ignored and kept; a data file cut
    short loses only the objects past its end."""
    c = start_master(d, ["--tier_offload_watermark=0"])
    node = start_node(d, c, tmp_path)
    s = client(c)
    for k in range(6):
        assert s.put("t%d" % k, value(k, MiB)) == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and metrics(c)["tier_ssd_offloads_total"] < 6:
        time.sleep(0.1)
    offs = sorted((query_key(c, "t%d" % k)["replicas"][-1]["shards"][0]["addr"], k) for k in range(6))
    node.send_signal(signal.SIGTERM)
    node.wait()
    (tmp_path / "notes.txt").write_text("not crescent's")
    cut = offs[-1][0] + 8192  # inside the last object
    os.truncate(tmp_path / "crescent-ssd.data", cut)
    s.remove_all()
    start_node(d, c, tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "not crescent's"
    for off, k in offs[:-1]:
        assert s.get("t%d" % k) == value(k, MiB)
    assert s.is_exist("t%d" % offs[-1][1]) == 0
    s.close()


def test_second_disk_hit_promotes_back_to_dram(d, tmp_path):
    """A disk-only object read twice is copied back into DRAM (a one-hit key
    is not); the promoted copy is read with the right bytes."""
    c = start_master(d, ["--tier_offload_watermark=0"])  # write-through
    start_node(d, c, tmp_path)
    s = client(c)
    for k in range(4):
        assert s.put("p%d" % k, value(k, MiB)) == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and metrics(c)["tier_ssd_offloads_total"] < 4:
        time.sleep(0.1)
    # push them out of DRAM, then make room again
    for k in range(4, 44):
        assert put_retry(s, "p%d" % k, value(k, MiB)) == 0
    assert [r["tier"] for r in query_key(c, "p0")["replicas"]] == ["ssd"]
    for k in range(4, 44):
        s.remove("p%d" % k)
    assert s.get("p0") == value(0, MiB)  # first hit: stays on disk
    assert s.get("p1") == value(1, MiB)
    time.sleep(0.3)
    assert [r["tier"] for r in query_key(c, "p1")["replicas"]] == ["ssd"]
    assert s.get("p0") == value(0, MiB)  # second hit: promoted
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and metrics(c)["tier_ssd_promotions_total"] < 1:
        time.sleep(0.05)
    tiers = [r["tier"] for r in query_key(c, "p0")["replicas"]]
    assert sorted(tiers) == ["dram", "ssd"], tiers
    assert s.get("p0") == value(0, MiB)
    s.close()


def test_master_restart_gets_disk_objects_back_from_the_node(d, tmp_path):
    """The master SIGKILLed and restarted on the same ports (no journal):
    the running node mounts its disk again and re-reports it; what was on
    disk is readable again, byte for byte."""
    from conftest import free_port
    rpc, meta, mport = free_port(), free_port(), free_port()
    argv = [exe("crescent-master"), "--rpc_port=%d" % rpc, "--rpc_address=127.0.0.1",
            "--enable_http_metadata_server=true", "--http_metadata_server_host=127.0.0.1",
            "--http_metadata_server_port=%d" % meta, "--metrics_address=127.0.0.1",
            "--metrics_port=%d" % mport, "--client_ttl=2"]
    m = d.start(argv)
    wait_line(m, r"listening rpc=", "crescent-master")
    c = {"master": "127.0.0.1:%d" % rpc, "metrics": mport,
         "metadata": "http://127.0.0.1:%d/metadata" % meta}
    start_node(d, c, tmp_path)
    s = client(c)
    for k in range(48):
        assert put_retry(s, "m%d" % k, value(k, MiB)) == 0
    on_disk = [k for k in range(48)
               if any(r["tier"] == "ssd" for r in (query_key(c, "m%d" % k) or {}).get("replicas", []))]
    assert on_disk
    m.send_signal(signal.SIGKILL)
    m.wait()
    m2 = d.start(argv)
    wait_line(m2, r"listening rpc=", "crescent-master")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and metrics(c)["tier_ssd_adopted_total"] < len(on_disk):
        time.sleep(0.2)
    back = sum(1 for k in on_disk if s.get("m%d" % k) == value(k, MiB))
    assert back == len(on_disk), "readable after the master restart: %d of %d" % (back, len(on_disk))
    s.close()


# ---- disk full, stalled readers, promotion racing eviction -----------------

def gen_value(k, g, size):
    """Value of key k, generation g: self-describing, so a reader can tell
    another object's (or another generation's torn) bytes from good ones."""
    unit = b"%06d.%06d;" % (k, g)
    return (unit * (size // len(unit) + 1))[:size]


READER = r'''
import os, sys
from mooncake.store import MooncakeDistributedStore
meta, master, prefix, n, size, stop, out = sys.argv[1:]
n, size = int(n), int(size)
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", meta, 0, "16MB", "tcp", "", master) == 0
ok = wrong = miss = 0
while not os.path.exists(stop):
    if ok and not os.path.exists(out + ".ready"):
        open(out + ".ready", "w").close()
    for k in range(n):
        v = s.get("%s%d" % (prefix, k))
        if not v:
            miss += 1
            continue
        unit = v[:14]
        good = len(v) == size and unit.startswith(b"%06d." % k) and \
            (unit * (size // 14 + 1))[:size] == v
        ok += good
        wrong += not good
with open(out, "w") as f:
    f.write("%d %d %d" % (ok, wrong, miss))
s.close()
'''


def start_reader(d, c, tmp_path, prefix, n, size):
    script = tmp_path / "reader.py"
    script.write_text(READER)
    stop, out = tmp_path / ("%s.stop" % prefix), tmp_path / ("%s.out" % prefix)
    p = subprocess.Popen([sys.executable, str(script), c["metadata"], c["master"], prefix, str(n),
                          str(size), str(stop), str(out)])
    d.procs.append(p)
    ready = tmp_path / ("%s.out.ready" % prefix)
    deadline = time.monotonic() + STARTUP_S
    while not ready.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), "the reader process read nothing within %s s" % STARTUP_S
    return p, stop, out


def finish_reader(p, stop, out):
    stop.write_text("")
    assert p.wait(timeout=120) == 0
    ok, wrong, miss = map(int, out.read_text().split())
    return ok, wrong, miss


def test_reader_stalled_past_its_lease_on_disk_objects_never_gets_wrong_bytes(d, tmp_path, read_path):
    """A reader process SIGSTOPped in the middle of its gets of disk-resident
    objects, for longer than its lease, while every key is removed and put
    again (the freed disk extents are reused by the new copies): once it
    continues, each get returns the bytes of some generation of its own key
    or a miss, never another object's bytes."""
    c = start_master(d, ["--default_kv_lease_ttl=200"])
    start_node(d, c, tmp_path, dram="4MB", ssd="64MB")  # most of the keys live on disk
    s = client(c)
    n, size = 24, 256 << 10
    for k in range(n):
        assert put_retry(s, "s%d" % k, gen_value(k, 0, size)) == 0
    p, stop, out = start_reader(d, c, tmp_path, "s", n, size)
    rounds = 3 if SANITIZED else 6
    for g in range(1, rounds + 1):
        time.sleep(0.05 * g)  # the reader is somewhere in its loop of gets
        p.send_signal(signal.SIGSTOP)
        time.sleep(0.4)  # past its 200 ms lease
        for k in range(n):
            for _ in range(100):
                if s.remove("s%d" % k) == 0 or s.is_exist("s%d" % k) == 0:
                    break
                time.sleep(0.05)  # still leased by someone
            assert put_retry(s, "s%d" % k, gen_value(k, g, size)) == 0
        p.send_signal(signal.SIGCONT)
    ok, wrong, miss = finish_reader(p, stop, out)
    assert wrong == 0, "wrong bytes returned %d times (%d good, %d misses)" % (wrong, ok, miss)
    assert ok > 0
    m = metrics(c)
    assert m["tier_ssd_hits_total"] > 0 and m["tier_ssd_erases_total"] > 0, \
        (m["tier_ssd_hits_total"], m["tier_ssd_erases_total"])
    s.close()


def test_promotion_racing_eviction_never_returns_wrong_bytes(d, tmp_path, read_path):
    """Disk-only keys read again and again by another process (second hits
    promote them into DRAM) while a writer fills DRAM past its capacity and
    frees it again, evicting/demoting what is being or was just promoted:
    no wrong bytes. (The reader is paused past its lease before each fill,
    so its keys can be pushed out of DRAM at all.)"""
    c = start_master(d, ["--tier_offload_watermark=0", "--default_kv_lease_ttl=300"])
    start_node(d, c, tmp_path, dram="16MB", ssd="128MB")
    s = client(c)
    n, size = 8, 512 << 10
    for k in range(n):
        assert put_retry(s, "h%d" % k, gen_value(k, 0, size)) == 0
    p, stop, out = start_reader(d, c, tmp_path, "h", n, size)
    rounds = 3 if SANITIZED else 4
    for g in range(rounds):
        p.send_signal(signal.SIGSTOP)
        time.sleep(0.4)  # its leases run out
        for k in range(40):  # more than DRAM: pushes the read keys (and promotions) out
            assert put_retry(s, "f%d" % k, gen_value(1000 + k, g, size)) == 0
        p.send_signal(signal.SIGCONT)
        for k in range(40):  # room for promotions again
            s.remove("f%d" % k)
        deadline = time.monotonic() + 30  # until the reader's second hits promote again
        p0 = metrics(c)["tier_ssd_promotions_total"]
        while time.monotonic() < deadline and metrics(c)["tier_ssd_promotions_total"] == p0:
            time.sleep(0.02)
    ok, wrong, miss = finish_reader(p, stop, out)
    assert wrong == 0, "wrong bytes returned %d times (%d good, %d misses)" % (wrong, ok, miss)
    m = metrics(c)
    assert m["tier_ssd_promotions_total"] >= rounds and m["tier_ssd_demotions_total"] > 0, \
        (m["tier_ssd_promotions_total"], m["tier_ssd_demotions_total"])
    assert ok > 0
    s.close()


@pytest.fixture
def small_fs(tmp_path):
    """A 48 MiB tmpfs (a real, small file system that fills up), always
    unmounted; skipped where mounting is not allowed."""
    mnt = tmp_path / "smallfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "crescent-tier-test", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here: %s" % r.stderr.strip())
    yield mnt
    if subprocess.run(["umount", str(mnt)]).returncode != 0:
        subprocess.run(["umount", "-l", str(mnt)])


def test_disk_full_gives_clean_errors_and_loses_nothing(small_fs, d, tmp_path):
    """On a small real file system: a capacity larger than the free space is
    refused at start with a clear error and nothing written; once the tier
    is up, the file system filling up (another writer) costs nothing (the
    data file is preallocated): every put stays readable; a restart asking
    for more than fits is refused without touching the data file, and a
    restart with the old capacity serves every disk object again."""
    c = start_master(d)
    r = run_node(c, small_fs, ssd="64MB", dram="16MB")
    assert r.returncode != 0 and "does not fit" in r.stderr, r.stderr
    data = small_fs / "crescent-ssd.data"
    assert not data.exists() or data.stat().st_size == 0
    node = start_node(d, c, small_fs, dram="16MB", ssd="32MB")
    # another writer fills the rest of the file system
    filler = small_fs / "filler"
    fd = os.open(str(filler), os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * (1 << 20))
    except OSError as e:
        assert e.errno == 28, e  # ENOSPC
    finally:
        os.close(fd)
    assert os.statvfs(str(small_fs)).f_bavail < 256  # full
    s = client(c)
    n = 24  # 16 MiB DRAM + 32 MiB disk hold them (with room for the watermarks)
    ok = [k for k in range(n) if put_retry(s, "z%d" % k, value(k, MiB)) == 0]
    assert len(ok) == n, "puts that succeeded on a full file system: %d of %d" % (len(ok), n)
    bad = [(k, len(s.get("z%d" % k)), query_key(c, "z%d" % k)) for k in ok
           if s.get("z%d" % k) != value(k, MiB)]
    assert not bad, (bad[:3], len(bad), sorted((k, v) for k, v in metrics(c).items() if v and ("tier" in k or "evict" in k)))
    on_disk = [k for k in ok
               if [r["tier"] for r in query_key(c, "z%d" % k)["replicas"]] == ["ssd"]]
    assert on_disk and metrics(c)["tier_ssd_offload_failures_total"] == 0
    size = data.stat().st_size
    node.send_signal(signal.SIGTERM)
    node.wait()
    r = run_node(c, small_fs, ssd="40MB", dram="16MB")
    assert r.returncode != 0 and "does not fit" in r.stderr, r.stderr
    assert data.stat().st_size == size
    start_node(d, c, small_fs, dram="16MB", ssd="32MB")
    back = sum(1 for k in on_disk if s.get("z%d" % k) == value(k, MiB))
    assert back == len(on_disk), "readable after the restart: %d of %d" % (back, len(on_disk))
    s.close()
