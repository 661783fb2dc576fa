"""Shared-file-system tier (--root_fs_dir; docs/architecture/store-tiers.md)
through the unchanged Mooncake Python API: real crescent-master + crescent-node
processes and real files in a directory every process sees. Each test names
the behaviour it protects."""
import os
import re
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import Daemons, exe, free_port, wait_line, SANITIZED
from test_tier import client, metrics, put_retry, query_key, value

MiB = 1 << 20
NAME = re.compile(r"^[0-9a-f]{32}-[0-9a-f]{16}$")


@pytest.fixture
def d():
    ds = Daemons()
    yield ds
    ds.stop()


class Cluster:
    """A master on fixed ports (so clients and nodes find it again after a
    restart) with --root_fs_dir, and a node contributing DRAM."""

    def __init__(self, d, root, journal=None, dram="32MB"):
        self.d, self.root, self.dram = d, root, dram
        rpc, meta, mport = free_port(), free_port(), free_port()
        self.argv = [exe("crescent-master"), "--rpc_port=%d" % rpc, "--rpc_address=127.0.0.1",
                     "--enable_http_metadata_server=true",
                     "--http_metadata_server_host=127.0.0.1",
                     "--http_metadata_server_port=%d" % meta, "--metrics_address=127.0.0.1",
                     "--metrics_port=%d" % mport, "--client_ttl=2", "--cluster_id=t1",
                     "--root_fs_dir=%s" % root]
        if journal:
            self.argv.append("--journal_dir=%s" % journal)
        self.c = {"master": "127.0.0.1:%d" % rpc, "metrics": mport,
                  "metadata": "http://127.0.0.1:%d/metadata" % meta}
        self.master = self.node = None

    def start(self, node=True):
        self.master = self.d.start(self.argv)
        wait_line(self.master, r"listening rpc=", "crescent-master")
        if node:
            self.node = self.d.start(
                [exe("crescent-node"), "--master_server_address", self.c["master"],
                 "--metadata_server", self.c["metadata"], "--local_hostname", "127.0.0.1",
                 "--global_segment_size", self.dram], stderr=subprocess.PIPE)
            wait_line(self.node, r"ready segment=", "crescent-node")
        return self

    def kill(self):
        """SIGKILL every process: the whole cluster is gone."""
        for p in (self.node, self.master):
            if p and p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        self.master = self.node = None

    def files(self):
        return sorted(f for f in os.listdir(os.path.join(self.root, "t1")) if NAME.match(f))


def wait_attached(cl, n, timeout=60):
    """Files are written and attached by each client's persist thread after
    the put returns: wait until the master has n of them."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        m = metrics(cl.c)
        if m["tier_fs_attached_total"] >= n:
            return m
        time.sleep(0.05)
    raise AssertionError("attached: %s of %d" % (metrics(cl.c)["tier_fs_attached_total"], n))


def batch_get(s, keys, size):
    """One batch get into registered memory (the parallel path)."""
    buf = np.zeros(len(keys) * size, dtype=np.uint8)
    assert s.register_buffer(buf) == 0
    try:
        rs = s.batch_get_into(keys, [buf.ctypes.data + i * size for i in range(len(keys))],
                              [size] * len(keys))
        return [bytes(buf[i * size:i * size + r]) if r >= 0 else None for i, r in enumerate(rs)]
    finally:
        assert s.unregister_buffer(buf) == 0


N = 16 if SANITIZED else 32


@pytest.mark.parametrize("restart", ["cold", "journal"])
def test_whole_cluster_restart_reads_every_object_back(d, tmp_path, restart):
    """Every process SIGKILLed, then restarted (a master without a journal
    adopts the files; with --journal_dir its index already lists them): all
    objects are readable again, byte for byte, by a new client in one
    parallel batch get, served from the files."""
    root = tmp_path / "shared"
    root.mkdir()
    cl = Cluster(d, str(root), journal=str(tmp_path / "j") if restart == "journal" else None)
    cl.start()
    s = client(cl.c)
    sizes = {"o%d" % k: (4 * MiB if k % 4 == 0 else MiB) for k in range(N)}
    for k, (key, size) in enumerate(sizes.items()):  # a full pool pushes back
        assert put_retry(s, key, value(k, size)) == 0
    m = wait_attached(cl, N)
    assert len(cl.files()) == N, cl.files()
    assert m["tier_fs_attached_total"] == N and m["tier_fs_objects"] == N, m
    tiers = [r["tier"] for r in query_key(cl.c, "o%d" % (N - 1))["replicas"]]
    assert tiers == ["dram", "fs"], tiers
    s.close()
    cl.kill()
    cl.start()
    m = metrics(cl.c)
    assert m["tier_fs_objects"] == N and m["keys"] == N, m
    s = client(cl.c)
    keys = list(sizes)
    got = batch_get(s, keys, 4 * MiB)
    bad = [key for k, key in enumerate(keys) if got[k] != value(k, sizes[key])]
    assert not bad, "not read back after the restart: %s" % bad
    m = metrics(cl.c)
    assert m["tier_fs_adopted_total"] == N and m["tier_fs_corrupt_total"] == 0, m
    # without a journal only the files hold them (with one, the restored
    # DRAM replicas of the dead node are listed first: their reads fail and
    # fall over to the files, which these counters do not see)
    assert restart != "cold" or m["tier_fs_hits_total"] >= N, m
    # new puts after the restart get versions above the adopted ones
    assert s.put("after", value(99, MiB)) == 0 and s.get("after") == value(99, MiB)
    s.close()


def test_working_set_larger_than_dram_is_served_from_the_files(d, tmp_path):
    """DRAM eviction keeps objects that have a file (and waits for the file
    of a new object): 3x the DRAM pool stays readable (every key), the
    evicted ones from the shared tier."""
    cl = Cluster(d, str(tmp_path)).start()
    s = client(cl.c)
    n = 48 if SANITIZED else 96
    for k in range(n):  # a pool full of objects still being persisted pushes back
        assert put_retry(s, "w%d" % k, value(k, MiB)) == 0
    wait_attached(cl, n)
    s.put("w-last", b"x")  # a put after the attaches: DRAM eviction demotes them now
    m = metrics(cl.c)
    assert m["tier_fs_demotions_total"] > 0 and m["tier_fs_only_objects"] > 0, m
    got = batch_get(s, ["w%d" % k for k in range(n)], MiB)
    good = sum(1 for k in range(n) if got[k] == value(k, MiB))
    assert good == n, "readable: %d of %d" % (good, n)
    assert metrics(cl.c)["tier_fs_hits_total"] > 0
    s.close()


def flip(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x40]))


def test_corrupted_truncated_and_foreign_files_are_misses_and_counted(d, tmp_path):
    """A flipped byte in a value, a truncated file, another object's bytes
    under a file's name: each is a miss (never wrong bytes) and a counted
    error; files the tier did not write are never touched; the other
    objects read fine."""
    cl = Cluster(d, str(tmp_path)).start()
    s = client(cl.c)
    for k in range(6):
        assert s.put("c%d" % k, value(k, MiB)) == 0
    wait_attached(cl, 6)
    files = cl.files()
    assert len(files) == 6
    s.close()
    cl.kill()
    d2 = os.path.join(str(tmp_path), "t1")
    # which file is which: the key is in the header, after 64 bytes
    by_key = {}
    for f in files:
        with open(os.path.join(d2, f), "rb") as fh:
            h = fh.read(4096)
        klen = int.from_bytes(h[28:32], "little")
        by_key[h[64:64 + klen].decode()] = f
    flip(os.path.join(d2, by_key["c0"]), 4096 + 1000)            # value byte
    os.truncate(os.path.join(d2, by_key["c1"]), 4096 + 8192)      # truncated
    with open(os.path.join(d2, by_key["c3"]), "rb") as fh:        # c3's bytes as c2
        other = fh.read()
    with open(os.path.join(d2, by_key["c2"]), "wb") as fh:
        fh.write(other)
    foreign = os.path.join(d2, "notes.txt")
    with open(foreign, "w") as fh:
        fh.write("an operator's file")
    cl.start(node=False)
    s = client(cl.c)
    # c2's file now has c3's header under c2's name: the scan refuses it;
    # c0 (value byte) and c1 (truncated) are found by the reader
    got = batch_get(s, ["c%d" % k for k in range(6)], MiB)
    assert got[0] is None and got[1] is None and got[2] is None, [g is None for g in got]
    assert [got[k] == value(k, MiB) for k in (3, 4, 5)] == [True] * 3
    m = metrics(cl.c)
    assert m["tier_fs_corrupt_total"] == 3, m
    assert s.get("c0") == b"" and metrics(cl.c)["tier_fs_corrupt_total"] == 3  # dropped: a plain miss
    assert open(foreign).read() == "an operator's file"
    s.close()


def test_a_file_deleted_behind_the_store_is_a_miss_and_unlisted(d, tmp_path):
    """A file removed by someone else while the master lists it (the only
    copy): the read is a miss, the master checks, drops the listing, and the
    key can be written again (it stayed listed and unwritable before)."""
    cl = Cluster(d, str(tmp_path)).start()
    s = client(cl.c)
    for k in range(3):
        assert s.put("g%d" % k, value(k, MiB)) == 0
    wait_attached(cl, 3)
    s.close()
    cl.kill()
    cl.start(node=False)  # the files are the only copies now
    s = client(cl.c)
    assert metrics(cl.c)["tier_fs_adopted_total"] == 3
    d2 = os.path.join(str(tmp_path), "t1")
    for f in cl.files():
        with open(os.path.join(d2, f), "rb") as fh:
            h = fh.read(4096)
        klen = int.from_bytes(h[28:32], "little")
        if h[64:64 + klen] == b"g1":
            os.unlink(os.path.join(d2, f))
    got = batch_get(s, ["g0", "g1", "g2"], MiB)
    assert got[1] is None and got[0] == value(0, MiB) and got[2] == value(2, MiB)
    assert metrics(cl.c)["tier_fs_corrupt_total"] == 1
    assert s.is_exist("g1") == 0 and s.get("g1") == b""
    s.close()


def test_remove_deletes_the_file_and_the_key_stays_gone(d, tmp_path):
    """A remove deletes the object's file: after a whole-cluster restart the
    key does not come back; a replaced key keeps only its newest file."""
    cl = Cluster(d, str(tmp_path)).start()
    s = client(cl.c)
    assert s.put("gone", value(1, MiB)) == 0 and s.put("kept", value(2, MiB)) == 0
    wait_attached(cl, 2)
    assert len(cl.files()) == 2
    assert s.remove("gone") == 0
    assert len(cl.files()) == 1
    assert metrics(cl.c)["tier_fs_removed_total"] == 1
    # a remove racing the persist thread (put, then remove at once): no file
    # is left behind either way
    assert s.put("quick", value(3, MiB)) == 0 and s.remove("quick") == 0
    s.close()  # drains the persist queue
    assert len(cl.files()) == 1, cl.files()
    cl.kill()
    cl.start(node=False)
    s = client(cl.c)
    assert s.is_exist("gone") == 0 and s.get("kept") == value(2, MiB)
    s.close()


def run_master(path):
    return subprocess.run([exe("crescent-master"), "--rpc_port=0", "--metrics_port=-1",
                           "--root_fs_dir", str(path)], capture_output=True, text=True,
                          timeout=60)


def test_missing_or_non_directory_root_fs_dir_gives_clear_errors(tmp_path):
    """A missing directory, a file: crescent-master says which, exits 2."""
    r = run_master(tmp_path / "missing")
    assert r.returncode == 2 and "No such file or directory" in r.stderr, r.stderr
    f = tmp_path / "afile"
    f.write_text("x")
    r = run_master(f)
    assert r.returncode == 2 and "is not a directory" in r.stderr, r.stderr
    assert f.read_text() == "x"


def test_read_only_root_fs_dir_gives_a_clear_error(tmp_path):
    """A read-only file system (a tmpfs mounted ro; permissions do not stop
    root): refused at start, not at the first put."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "crescent-fs-test", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        if os.geteuid() == 0:
            pytest.skip("cannot mount a tmpfs here: %s" % r.stderr.strip())
        os.chmod(mnt, 0o500)  # a non-root user: permissions do it
    try:
        r = run_master(mnt)
        assert r.returncode == 2 and ("Read-only file system" in r.stderr or
                                      "Permission denied" in r.stderr), r.stderr
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_symlinks_planted_in_tmp_are_never_written_through(d, tmp_path):
    """tmp/ under --root_fs_dir is shared with the group and its names are
    predictable (<hash of key>-<version>.tmp, the master's .probe): a
    symlink planted under such a name used to be opened O_CREAT|O_TRUNC, so
    the writer truncated and overwrote its target (and the master renamed
    the link into the tier). Now the name is removed and created O_EXCL: the
    target is untouched and the tier holds a real file."""
    root = tmp_path / "shared"
    (root / "t1" / "tmp").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("victim contents\n")
    tmpdir = root / "t1" / "tmp"
    os.symlink(victim, tmpdir / ".probe")  # the master's writability probe at start
    cl = Cluster(d, str(root))
    cl.start()
    assert victim.read_text() == "victim contents\n"
    s = client(cl.c)
    assert put_retry(s, "k", value(1, MiB)) == 0
    wait_attached(cl, 1)
    (first,) = cl.files()
    prefix, v = first.split("-")
    v = int(v, 16)
    # the next versions of the same key: one of them is the new put's
    assert s.remove("k") == 0 and cl.files() == []
    for nv in range(v + 1, v + 65):
        os.symlink(victim, tmpdir / ("%s-%016x.tmp" % (prefix, nv)))
    assert put_retry(s, "k", value(2, MiB)) == 0
    wait_attached(cl, 2)
    assert victim.read_text() == "victim contents\n"
    files = cl.files()
    assert files and all(not os.path.islink(root / "t1" / f) for f in files), files
    assert s.get("k") == value(2, MiB)
    s.close()
