"""crescent.engine / mooncake.engine TransferEngine: two engines in two
processes (this one and engine_peer.py), over P2P handshake and over the HTTP
metadata service; every method, its return conventions and bad input."""
import ctypes
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import crescent
from conftest import HERE, start_metadata
from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode

PEER_SIZE = 4 << 20


def pattern(off, n):
    return ((np.arange(off, off + n, dtype=np.uint64) * 7 + 3) % 251).astype(np.uint8)


class Peer:
    def __init__(self, metadata, size=PEER_SIZE, host="127.0.0.1"):
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "engine_peer.py"), metadata,
                                   str(size), host], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        import select
        ready, _, _ = select.select([self.p.stdout], [], [], 60)  # bounded start-up
        info = json.loads((self.p.stdout.readline() if ready else "") or "{}")
        if "name" not in info:
            self.close()
            pytest.fail("peer engine failed to start: %r" % info)
        self.name, self.addr, self.port = info["name"], info["addr"], info["port"]
        self.first = info["first"]

    def cmd(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def read(self, off, n):
        return bytes.fromhex(self.cmd("hex %d %d" % (off, n)))

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
                self.p.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait()
        self.p.stdin.close()
        self.p.stdout.close()


@pytest.fixture
def peer():
    p = Peer("P2PHANDSHAKE")
    yield p
    p.close()


@pytest.fixture
def engine():
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    yield e
    e.close()


def registered(engine, n, fill=0):
    buf = np.full(n, fill, dtype=np.uint8)
    assert engine.register_memory(buf.ctypes.data, n) == 0
    return buf


def test_initialize_p2p_names_segment_ip_port(engine):
    port = engine.get_rpc_port()
    assert 0 < port < 65536
    assert engine.get_local_name() == "127.0.0.1:%d" % port


def test_initialize_twice_is_an_error(engine):
    rc = engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
    assert rc < 0, "second initialize returned %d" % rc


def test_write_then_read_between_processes(engine, peer):
    n = 1 << 20
    src = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
    assert engine.register_memory(src.ctypes.data, n) == 0
    rc = engine.transfer_sync_write(peer.name, src.ctypes.data, peer.addr + 4096, n)
    assert rc == 0, "transfer_sync_write: %d %s" % (rc, crescent.strerror(rc))
    got = peer.read(4096, n)
    assert got == src.tobytes(), "peer memory differs after write"
    # untouched bytes around the written range keep the pattern
    assert peer.read(0, 4096) == pattern(0, 4096).tobytes()
    assert peer.read(4096 + n, 100) == pattern(4096 + n, 100).tobytes()

    dst = registered(engine, n)
    rc = engine.transfer_sync_read(peer.name, dst.ctypes.data, peer.addr + 4096, n)
    assert rc == 0, "transfer_sync_read: %d" % rc
    assert np.array_equal(dst, src)


def test_buffer_objects_instead_of_addresses(engine, peer):
    """numpy arrays / bytearray / memoryview in place of int addresses (zero-copy)."""
    arr = np.zeros(8192, dtype=np.uint8)
    assert engine.register_memory(arr) == 0  # capacity from the buffer
    rc = engine.transfer_sync_read(peer.name, arr, peer.addr, 8192)
    assert rc == 0
    assert np.array_equal(arr, pattern(0, 8192))
    arr[:] = 9
    assert engine.transfer_sync_write(peer.name, memoryview(arr)[:100], peer.addr + 10, None) == 0
    assert peer.read(10, 100) == bytes([9]) * 100
    assert engine.unregister_memory(arr) == 0


def test_batch_sync_write_read(engine, peer):
    chunk, k = 64 << 10, 8
    src = registered(engine, chunk * k)
    for i in range(k):
        src[i * chunk:(i + 1) * chunk] = i + 1
    bufs = [src.ctypes.data + i * chunk for i in range(k)]
    # write the chunks in reverse order on the peer
    peers = [peer.addr + (k - 1 - i) * chunk for i in range(k)]
    assert engine.batch_transfer_sync_write(peer.name, bufs, peers, [chunk] * k) == 0
    for i in range(k):
        assert peer.read((k - 1 - i) * chunk, 16) == bytes([i + 1]) * 16
    dst = registered(engine, chunk * k)
    assert engine.batch_transfer_sync_read(peer.name, [dst.ctypes.data + i * chunk for i in range(k)],
                                           peers, [chunk] * k) == 0
    assert np.array_equal(dst, src)


def test_async_batches_and_status(engine, peer):
    chunk = 32 << 10
    src = registered(engine, chunk * 4, fill=0x5A)
    b1 = engine.batch_transfer_async_write(peer.name, [src.ctypes.data, src.ctypes.data + chunk],
                                           [peer.addr, peer.addr + chunk], [chunk, chunk])
    dst = registered(engine, chunk)
    b2 = engine.batch_transfer_async_read(peer.name, [dst.ctypes.data], [peer.addr + 3 * chunk],
                                          [chunk])
    assert b1 > 0 and b2 > 0 and b1 != b2
    assert engine.get_batch_transfer_status([b1, b2]) == 0
    assert peer.read(0, 2 * chunk) == bytes([0x5A]) * (2 * chunk)
    assert np.array_equal(dst, pattern(3 * chunk, chunk))
    # an id already collected (or never issued) is an error
    assert engine.get_batch_transfer_status([b1]) < 0
    assert engine.get_batch_transfer_status([123456789]) < 0
    # generic form with an explicit opcode
    b3 = engine.batch_transfer_async(peer.name, [dst.ctypes.data], [peer.addr], [chunk],
                                     TransferOpcode.READ)
    assert b3 > 0 and engine.get_batch_transfer_status([b3]) == 0
    assert np.array_equal(dst, np.full(chunk, 0x5A, dtype=np.uint8))


def test_submit_write_and_check_status(engine, peer):
    src = registered(engine, 4096, fill=7)
    bid = engine.transfer_submit_write(peer.name, src.ctypes.data, peer.addr + 100, 4096)
    assert bid > 0
    deadline = time.monotonic() + 30
    st = 0
    while st == 0 and time.monotonic() < deadline:
        st = engine.transfer_check_status(bid)
        time.sleep(0.001)
    assert st == 1, "transfer_check_status ended with %d" % st
    assert peer.read(100, 4096) == bytes([7]) * 4096
    assert engine.transfer_check_status(bid) == -1  # already released


def test_transfer_sync_with_notify(engine, peer):
    src = registered(engine, 1024, fill=3)
    note = TransferNotify("kv_done", "req-42 layer 7")
    assert engine.transfer_sync(peer.name, src.ctypes.data, peer.addr, 1024, TransferOpcode.WRITE,
                                note) == 0
    assert peer.read(0, 1024) == bytes([3]) * 1024
    got = []
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        got = json.loads(peer.cmd("notifies"))
        time.sleep(0.01)
    assert got == [["kv_done", "req-42 layer 7"]]
    assert json.loads(peer.cmd("notifies")) == []  # popped


def test_send_notify_and_receive_locally(engine):
    other = TransferEngine()
    assert other.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        assert other.send_notify(engine.get_local_name(), TransferNotify("hello", "world")) == 0
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got = engine.get_notifies()
            time.sleep(0.01)
        assert got == [TransferNotify("hello", "world")]
    finally:
        other.close()


def test_get_first_buffer_address(engine, peer, monkeypatch):
    assert peer.first != 0
    assert engine.get_first_buffer_address(peer.name) == peer.first
    assert engine.get_first_buffer_address("127.0.0.1:1") == 0  # nobody there
    # like Mooncake's engine, initialize() registers a managed-buffer pool, so
    # a fresh engine already has a first buffer...
    assert engine.get_first_buffer_address(engine.get_local_name()) != 0
    # ...unless the pool is turned off
    monkeypatch.setenv("CRESCENT_MANAGED_POOL_SIZE", "0")
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        assert e.get_first_buffer_address(e.get_local_name()) == 0
        a = e.allocate_managed_buffer(4096)  # mapped on its own then
        assert a != 0 and e.get_first_buffer_address(e.get_local_name()) == a
    finally:
        e.close()


def test_mooncake_initiator_pattern(engine, peer):
    """Mooncake's own TE test: write into the own first buffer with
    write_bytes_to_buffer, transfer to the target's first buffer, read back."""
    src = engine.get_first_buffer_address(engine.get_local_name())
    dst = engine.get_first_buffer_address(peer.name)
    assert src != 0 and dst != 0
    addrs = [src + i * 1024 for i in range(100)]
    data = [os.urandom(32 + i) for i in range(100)]
    for a, d in zip(addrs, data):
        assert engine.write_bytes_to_buffer(a, d, len(d)) == 0
    remote = [dst + i * 1024 for i in range(100)]
    lens = [len(d) for d in data]
    assert engine.batch_transfer_sync_write(peer.name, addrs, remote, lens) == 0
    for a, d in zip(addrs, data):
        assert engine.write_bytes_to_buffer(a, bytes(len(d)), len(d)) == 0
    bid = engine.batch_transfer_async_read(peer.name, addrs, remote, lens)
    assert bid != 0 and engine.get_batch_transfer_status([bid]) == 0
    for a, d in zip(addrs, data):
        assert engine.read_bytes_from_buffer(a, len(d)) == d


def test_managed_buffers(engine, peer):
    a = engine.allocate_managed_buffer(10000)
    assert a != 0
    assert engine.write_bytes_to_buffer(a, b"hello managed", 13) == 0
    assert engine.read_bytes_from_buffer(a, 13) == b"hello managed"
    # managed memory is registered: usable for transfers right away
    assert engine.transfer_sync_write(peer.name, a, peer.addr, 13) == 0
    assert peer.read(0, 13) == b"hello managed"
    assert engine.free_managed_buffer(a, 10000) == 0
    assert engine.free_managed_buffer(a, 10000) < 0  # double free is refused
    b = engine.allocate_managed_buffer(12000)  # same size class: reused
    assert b == a
    assert engine.free_managed_buffer(b, 12000) == 0
    assert engine.allocate_managed_buffer("1MB") != 0


def test_raw_byte_access_outside_registered_memory(engine):
    junk = np.zeros(64, dtype=np.uint8)  # not registered
    assert engine.write_bytes_to_buffer(junk.ctypes.data, b"x" * 8, 8) < 0
    assert junk[0] == 0
    with pytest.raises(ValueError):
        engine.read_bytes_from_buffer(junk.ctypes.data, 8)
    reg = registered(engine, 64)
    with pytest.raises(ValueError):  # length beyond the source bytes
        engine.write_bytes_to_buffer(reg.ctypes.data, b"abc", 10)
    with pytest.raises(ValueError):  # range runs past the registration
        engine.read_bytes_from_buffer(reg.ctypes.data + 60, 8)


def test_bad_input_raises_or_returns_negative(engine, peer):
    with pytest.raises(TypeError):
        engine.transfer_sync_write(peer.name, "not an address", peer.addr, 10)
    with pytest.raises(TypeError):
        engine.transfer_sync_write(12345, 0, peer.addr, 10)
    with pytest.raises(ValueError):
        engine.transfer_sync_write(peer.name, 4096, peer.addr, -1)
    with pytest.raises(ValueError):
        engine.transfer_sync_read(peer.name, 4096, -5, 10)
    with pytest.raises(TypeError):
        engine.register_memory(1.5, 10)
    with pytest.raises(ValueError):
        engine.register_memory(4096, -10)
    # lists of different lengths: an error code, as in Mooncake
    assert engine.batch_transfer_sync_write(peer.name, [1, 2], [3], [4, 5]) < 0
    assert engine.batch_transfer_async_read(peer.name, [1], [3, 4], [5]) == 0
    with pytest.raises(TypeError):
        engine.batch_transfer_sync_write(peer.name, 1, [3], [4])
    with pytest.raises(ValueError):
        engine.allocate_managed_buffer(-1)
    with pytest.raises(ValueError):  # read-only buffer as a read destination
        engine.transfer_sync_read(peer.name, b"immutable", peer.addr, 4)
    # garbage addresses are refused before anything dereferences them
    assert engine.register_memory(0x10, 4096) < 0
    with pytest.raises(ValueError):
        engine.register_memory(0, 4096)
    # local memory that is not registered: the request fails, nothing crashes
    unreg = np.zeros(4096, dtype=np.uint8)
    assert engine.transfer_sync_write(peer.name, unreg.ctypes.data, peer.addr, 4096) < 0
    # remote range outside the peer's registered memory
    src = registered(engine, 4096)
    assert engine.transfer_sync_write(peer.name, src.ctypes.data, peer.addr + PEER_SIZE - 10,
                                      4096) < 0
    assert engine.transfer_sync_read(peer.name, src.ctypes.data, 0x1000, 16) < 0
    # unknown segment
    assert engine.transfer_sync_write("127.0.0.1:1", src.ctypes.data, peer.addr, 16) < 0
    # unregistering twice
    assert engine.unregister_memory(src.ctypes.data) == 0
    assert engine.unregister_memory(src.ctypes.data) < 0
    # overlapping registration
    big = registered(engine, 8192)
    assert engine.register_memory(big.ctypes.data + 100, 100) < 0
    # an async batch whose request is invalid reports the failure at collection
    bid = engine.batch_transfer_async_write(peer.name, [unreg.ctypes.data], [peer.addr], [16])
    assert bid == 0 or engine.get_batch_transfer_status([bid]) < 0
    # an unknown target fails the submission: batch id 0 (Mooncake's convention)
    assert engine.batch_transfer_async_write("127.0.0.1:1", [big.ctypes.data], [0], [16]) == 0


def test_uninitialized_and_closed_engine():
    e = TransferEngine()
    assert e.get_rpc_port() < 0
    buf = np.zeros(4096, dtype=np.uint8)
    assert e.register_memory(buf.ctypes.data, 4096) < 0
    assert e.transfer_sync_write("127.0.0.1:1", buf.ctypes.data, 0, 16) < 0
    assert e.batch_transfer_async_read("x", [buf.ctypes.data], [0], [16]) == 0
    assert e.get_notifies() == []
    assert e.allocate_managed_buffer(4096) == 0
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert e.close() == 0
    assert e.close() == 0  # idempotent
    assert e.transfer_sync_write("127.0.0.1:1", buf.ctypes.data, 0, 16) < 0
    # initialize again after close: a new segment, registrations start empty
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert e.register_memory(buf) == 0
    assert e.transfer_sync_read(e.get_local_name(), buf.ctypes.data, buf.ctypes.data + 2048,
                                16) == 0
    assert e.close() == 0
    with pytest.raises(TypeError):
        TransferEngine(1)


def test_bad_initialize_arguments():
    e = TransferEngine()
    with pytest.raises(ValueError):
        e.initialize("127.0.0.1:notaport", "P2PHANDSHAKE", "tcp", "")
    assert e.initialize("127.0.0.1", "redis://127.0.0.1:6379", "tcp", "") < 0
    assert e.initialize("127.0.0.1", "127.0.0.1:1", "tcp", "") < 0  # bare = etcd, nobody there
    assert e.initialize("127.0.0.1", "http://127.0.0.1:1/metadata", "tcp", "") < 0
    assert e.initialize("no-such-host.invalid", "P2PHANDSHAKE", "tcp", "") < 0
    with pytest.warns(RuntimeWarning):
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "mlx5_0") == 0
    e.close()


def test_threads_share_one_engine(engine, peer):
    """Several Python threads issue transfers on one engine concurrently."""
    nthreads, chunk, rounds = 4, 64 << 10, 8
    bufs = [registered(engine, chunk) for _ in range(nthreads)]
    errors = []

    def worker(i):
        try:
            for r in range(rounds):
                bufs[i][:] = (i * 16 + r) & 0xFF
                off = peer.addr + i * chunk
                rc = engine.transfer_sync_write(peer.name, bufs[i].ctypes.data, off, chunk)
                assert rc == 0, "write rc %d" % rc
                bufs[i][:] = 0
                rc = engine.transfer_sync_read(peer.name, bufs[i].ctypes.data, off, chunk)
                assert rc == 0, "read rc %d" % rc
                assert (bufs[i] == ((i * 16 + r) & 0xFF)).all(), "thread %d round %d data" % (i, r)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors


def test_close_waits_for_other_threads(peer):
    """close() while another thread transfers: no crash, calls after it fail cleanly."""
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    buf = registered(e, 1 << 20)
    results = []

    def worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rc = e.transfer_sync_write(peer.name, buf.ctypes.data, peer.addr, 1 << 20)
            results.append(rc)
            if rc < 0:
                break

    t = threading.Thread(target=worker)
    t.start()
    while not results:
        time.sleep(0.001)
    assert e.close() == 0
    t.join(60)
    assert not t.is_alive()
    assert results[0] == 0, "first transfer before close failed: %d" % results[0]
    assert results[-1] < 0, "transfers kept succeeding after close"


def test_http_metadata_named_segments(daemons):
    """With the HTTP metadata service, local_hostname "host:port" is the name
    peers use; get_first_buffer_address looks segments up by name."""
    url = start_metadata(daemons)
    p = Peer(url, host="127.0.0.1:17011")
    try:
        assert p.name == "127.0.0.1:17011"
        e = TransferEngine()
        assert e.initialize("127.0.0.1:17012", url, "tcp", "") == 0
        try:
            assert e.get_local_name() == "127.0.0.1:17012"
            assert e.get_first_buffer_address(p.name) == p.addr
            dst = registered(e, 1000)
            assert e.transfer_sync_read(p.name, dst.ctypes.data, p.addr + 5, 1000) == 0
            assert np.array_equal(dst, pattern(5, 1000))
        finally:
            e.close()
    finally:
        p.close()


def test_etcd_metadata_bare_and_uri_forms(daemons, tmp_path):
    """Mooncake's bare "host:port" metadata string means etcd; "etcd://" too."""
    import shutil
    from conftest import free_port, wait_port
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.skip("etcd binary not found (Debian etcd-server)")
    cport, pport = free_port(), free_port()
    p = daemons.start([etcd, "--name", "crescent-py", "--data-dir", str(tmp_path / "etcd"),
                       "--listen-client-urls", "http://127.0.0.1:%d" % cport,
                       "--advertise-client-urls", "http://127.0.0.1:%d" % cport,
                       "--listen-peer-urls", "http://127.0.0.1:%d" % pport,
                       "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pport,
                       "--initial-cluster", "crescent-py=http://127.0.0.1:%d" % pport],
                      stderr=subprocess.DEVNULL)
    wait_port(cport, p, "etcd")
    peer_ = Peer("127.0.0.1:%d" % cport, host="127.0.0.1:17021")  # bare form
    try:
        e = TransferEngine()
        rc = -1
        deadline = time.monotonic() + 20  # etcd may still be electing itself leader
        while rc != 0 and time.monotonic() < deadline:
            rc = e.initialize("127.0.0.1:17022", "etcd://127.0.0.1:%d" % cport, "tcp", "")
            if rc != 0:
                time.sleep(0.2)
        assert rc == 0, "initialize with etcd: %d" % rc
        try:
            assert e.get_first_buffer_address(peer_.name) == peer_.addr
            dst = registered(e, 4096)
            assert e.transfer_sync_read(peer_.name, dst.ctypes.data, peer_.addr, 4096) == 0
            assert np.array_equal(dst, pattern(0, 4096))
        finally:
            e.close()
    finally:
        peer_.close()


def test_gil_is_released_during_transfers(engine, peer):
    from conftest import gil_released_during
    buf = registered(engine, PEER_SIZE)
    assert gil_released_during(
        lambda: engine.transfer_sync_read(peer.name, buf.ctypes.data, peer.addr, PEER_SIZE))


def test_device_name_ip_addresses_select_nics(peer):
    """IP addresses in device_name are the NICs the engine listens on and
    pools (two loopback addresses here); RDMA device names are ignored."""
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "127.0.0.1,127.0.0.2,mlx5_0") == 0
    try:
        assert e.get_local_name() == "127.0.0.1:%d" % e.get_rpc_port()
        n = 2 << 20
        src = registered(e, n, fill=0x3C)
        assert e.transfer_sync_write(peer.name, src.ctypes.data, peer.addr, n) == 0
        assert peer.read(n - 16, 16) == bytes([0x3C]) * 16
        dst = registered(e, n)
        assert e.transfer_sync_read(peer.name, dst.ctypes.data, peer.addr, n) == 0
        assert np.array_equal(dst, src)
    finally:
        e.close()


def test_batch_register_and_initialize_ext(peer):
    e = TransferEngine()
    assert e.initialize_ext("127.0.0.1", "ignored-with-p2p", "tcp", "", "p2p") == 0
    try:
        bufs = [np.full(4096, i + 1, dtype=np.uint8) for i in range(3)]
        addrs = [b.ctypes.data for b in bufs]
        assert e.batch_register_memory(addrs, [4096] * 3) == 0
        assert e.batch_register_memory(addrs[:1], [4096]) < 0  # already registered
        assert e.batch_transfer_sync_write(peer.name, addrs, [peer.addr + i * 4096 for i in range(3)],
                                           [4096] * 3) == 0
        assert peer.read(0, 3 * 4096) == b"".join(bytes([i + 1]) * 4096 for i in range(3))
        assert e.batch_unregister_memory(addrs) == 0
        assert e.batch_unregister_memory(addrs) < 0
        assert e.transfer_sync_write(peer.name, addrs[0], peer.addr, 16) < 0  # unregistered now
        # lists of different lengths: an error code and nothing registered (Mooncake)
        # Mooncake's test_batch_register_memory: -1 for mismatched lengths
        assert e.batch_register_memory(addrs, [4096]) == -1
        assert e.batch_register_memory(addrs[:0], [4096]) == -1
        assert e.batch_register_memory(addrs[:1], []) == -1
        assert e.batch_register_memory(addrs, [4096] * 3) == 0
        assert e.batch_unregister_memory(addrs) == 0
        # all or nothing: a failing entry undoes the ones before it
        assert e.batch_register_memory([addrs[0], addrs[0] + 100], [4096, 16]) < 0
        assert e.register_memory(addrs[0], 4096) == 0  # was not left registered
        assert e.unregister_memory(addrs[0]) == 0
        assert e.batch_register_memory([], []) == 0
    finally:
        e.close()


def test_zero_length_registration_is_mooncakes_invalid_argument(engine):
    """Mooncake's engine refuses a zero-length region with ERR_INVALID_ARGUMENT
    (-1), no exception: a zero-element tensor or an empty buffer registered
    gives -1; in a batch, -1 and nothing registered. Mooncake's
    MooncakeTransferEngine.register turns it into its RuntimeError."""
    import torch
    from mooncake.transfer_engine.transfer_engine import MooncakeTransferEngine
    buf = np.zeros(4096, dtype=np.uint8)
    empty = torch.empty(0, 5)
    assert engine.register_memory(buf.ctypes.data, 0) == -1
    assert engine.register_memory(empty.data_ptr() or buf.ctypes.data,
                                  empty.numel() * empty.element_size()) == -1
    assert engine.register_memory(np.zeros(0, dtype=np.uint8)) == -1
    assert engine.register_memory(0, 0) == -1  # the length is checked first, as Mooncake
    assert engine.batch_register_memory([buf.ctypes.data, buf.ctypes.data + 2048],
                                        [1024, 0]) == -1
    assert engine.register_memory(buf.ctypes.data, 4096) == 0  # nothing was left registered
    assert engine.unregister_memory(buf.ctypes.data) == 0
    mte = MooncakeTransferEngine("127.0.0.1")
    try:
        with pytest.raises(RuntimeError, match="registration failed"):
            mte.register(buf.ctypes.data, 0)
        mte.register(buf.ctypes.data, 4096)
        mte.deregister(buf.ctypes.data)
    finally:
        mte.close()


def test_peer_registers_memory_after_first_contact(engine, peer):
    """A target registered by the peer after this engine opened its segment is
    reachable (the cached descriptor is refreshed)."""
    dst = registered(engine, 8192)
    assert engine.transfer_sync_read(peer.name, dst.ctypes.data, peer.addr, 4096) == 0
    info = json.loads(peer.cmd("reg 65536 77"))
    assert info["rc"] == 0
    rc = engine.transfer_sync_read(peer.name, dst.ctypes.data, info["addr"], 8192)
    assert rc == 0, "read from memory registered later: %d" % rc
    assert (dst == 77).all()


@pytest.mark.parametrize("metadata", ["p2p", "http"])
@pytest.mark.parametrize("transports", ["default", "tcp"])
def test_write_after_peer_unregistered_fails(daemons, monkeypatch, metadata, transports):
    """Regression (audit): over shm (the default between processes of one
    host) writes into a buffer the peer had unregistered kept succeeding and
    changing its bytes, seconds later and with HTTP metadata too, where tcp
    refused them. After unregister_memory returns in the peer, READ and
    WRITE fail with -14 (EFAULT) over either transport and the peer's bytes
    stay as they were; registered again, the buffer is reachable again."""
    if transports == "tcp":
        monkeypatch.setenv("CRESCENT_TRANSPORTS", "tcp")
    meta = start_metadata(daemons) if metadata == "http" else "P2PHANDSHAKE"
    p = Peer(meta)
    e = TransferEngine()
    try:
        assert e.initialize("127.0.0.1", meta, "tcp", "") == 0
        src = registered(e, 8192, fill=0xAB)
        assert e.transfer_sync_write(p.name, src.ctypes.data, p.addr, 4096) == 0
        assert p.cmd("unreg") == "0"
        before = p.read(0, 8192)
        src[:] = 0xCD
        for delay in (0, 0.5):  # not a matter of time: nothing ever lands
            time.sleep(delay)
            rc = e.transfer_sync_write(p.name, src.ctypes.data, p.addr, 4096)
            assert rc == -14, "write after unregister: %d, want -14" % rc
            rc = e.transfer_sync_read(p.name, src.ctypes.data + 4096, p.addr, 4096)
            assert rc == -14, "read after unregister: %d, want -14" % rc
            after = p.read(0, 8192)
            assert after == before, "peer bytes changed after unregister (first at %d)" % next(
                i for i in range(8192) if after[i] != before[i])
        assert p.cmd("rereg") == "0"
        rc = e.transfer_sync_write(p.name, src.ctypes.data, p.addr, 4096)
        assert rc == 0, "write after registering again: %d" % rc
        assert p.read(0, 4096) == bytes([0xCD]) * 4096
    finally:
        e.close()
        p.close()


def test_send_probe(engine, peer):
    assert engine.send_probe(peer.name) == 0
    assert engine.send_probe("127.0.0.1:1") < 0  # nobody there
    # probes never show up as notifications: send a real one after it and
    # collect until it arrived (and a little longer)
    assert engine.send_notify(peer.name, TransferNotify("after", "probe")) == 0
    got, deadline = [], time.monotonic() + 10
    while ["after", "probe"] not in got and time.monotonic() < deadline:
        got += json.loads(peer.cmd("notifies"))
        time.sleep(0.01)
    time.sleep(0.1)
    got += json.loads(peer.cmd("notifies"))
    assert got == [["after", "probe"]]
    with pytest.raises(TypeError):
        engine.send_probe(None)


def test_declarative_transfer_api(engine, peer):
    """mooncake.transfer: local -> remote writes, remote -> local reads, and the
    argument checks Mooncake's declarative API makes."""
    from mooncake import transfer as mt
    assert mt.TransferEngine is TransferEngine and mt.TransferOpcode is TransferOpcode
    src = registered(engine, 8192, 0x3C)
    rc = mt.transfer(mt.local_buffer(src.ctypes.data, 8192),
                     mt.remote_buffer(peer.name, peer.addr + 100), engine=engine)
    assert rc == 0 and peer.read(100, 8192) == bytes([0x3C]) * 8192
    dst = registered(engine, 4096)
    req = mt.TransferRequest(mt.remote_buffer(peer.name, peer.addr + 100, 4096),
                             mt.local_buffer(dst.ctypes.data), transport_hint="")
    assert req.execute(engine) == 0 and dst.tobytes() == bytes([0x3C]) * 4096
    ep = mt.TransferEndpoint.remote(peer.name, 5)
    assert ep.is_remote and not ep.is_local
    with pytest.raises(ValueError, match="must be provided"):
        mt.transfer(mt.local_buffer(1), mt.remote_buffer("h:1", 2), engine=engine)
    with pytest.raises(ValueError, match="conflicting"):
        mt.transfer(mt.local_buffer(1, 4), mt.remote_buffer("h:1", 2, 8), engine=engine)
    with pytest.raises(ValueError, match="positive"):
        mt.transfer(mt.local_buffer(1), mt.remote_buffer("h:1", 2), engine=engine, length=0)
    with pytest.raises(ValueError, match="exactly one remote"):
        mt.transfer(mt.local_buffer(1), mt.local_buffer(2), engine=engine, length=4)
    with pytest.raises(ValueError, match="non-negative"):
        mt.local_buffer(-1)
    with pytest.raises(ValueError, match="non-empty"):
        mt.remote_buffer("", 0)
    with pytest.raises(TypeError, match="TransferEndpoint"):
        mt.transfer(1, 2, engine=engine, length=1)
    # an unregistered local range is refused by the engine, not a crash
    junk = np.zeros(64, dtype=np.uint8)
    assert mt.transfer(mt.local_buffer(junk.ctypes.data, 64),
                       mt.remote_buffer(peer.name, peer.addr), engine=engine) < 0


SHARED_RANK = r"""
import ctypes, sys
from mooncake.engine import SharedSegment
seg, blob = SharedSegment.create("t", 8192, 2, 1, owner_rank=0, mmap=True)
seg.complete([bytes.fromhex(sys.argv[1]), blob])
print(ctypes.string_at(seg.base_addr() + 10, 5).decode())
ctypes.memmove(seg.base_addr() + 100, b"from rank 1", 11)
"""


def test_shared_segment_host_memory_across_processes():
    """mooncake.engine.SharedSegment with mmap=True: the owner's memory is
    mapped by another process; the device backend is refused."""
    import ctypes
    from mooncake.engine import SharedSegment
    assert SharedSegment.supported(mmap=True) and not SharedSegment.supported()
    seg, blob = SharedSegment.create("t", 8192, 2, 0, owner_rank=0, mmap=True)
    assert not seg.ready() and seg.base_addr() == 0 and seg.size() == 8192
    _, other_blob = SharedSegment.create("t", 8192, 2, 1, owner_rank=0, mmap=True)
    seg.complete([blob, other_blob])
    assert seg.ready() and seg.base_addr() != 0 and seg.device_addr() == 0
    ctypes.memmove(seg.base_addr() + 10, b"hello", 5)
    out = subprocess.run([sys.executable, "-c", SHARED_RANK, blob.hex()], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "hello"
    assert ctypes.string_at(seg.base_addr() + 100, 11) == b"from rank 1"
    with pytest.raises(RuntimeError, match="already complete"):
        seg.complete([blob, other_blob])
    seg.close()
    with pytest.raises(RuntimeError, match="Not implemented"):
        SharedSegment.create("d", 4096, 1, 0)
    with pytest.raises(RuntimeError, match="size"):
        SharedSegment.create("z", 0, 1, 0, mmap=True)
    with pytest.raises(RuntimeError, match="rank_id"):
        SharedSegment.create("z", 4096, 2, 2, mmap=True)
    with pytest.raises(TypeError):
        SharedSegment.create("z", "4096", 1, 0, mmap=True)
    with pytest.raises(TypeError, match="create"):
        SharedSegment()
    s2, b2 = SharedSegment.create("q", 4096, 2, 1, owner_rank=0, mmap=True)
    with pytest.raises(RuntimeError, match="blobs for world_size"):
        s2.complete([b2])
    with pytest.raises(RuntimeError, match="does not describe"):
        s2.complete([b2, b2])
    forged = json.dumps({"magic": "crescent-shared-segment-1", "rank": 0, "owner": 0,
                         "size": 4096, "name": "q", "path": "/etc/passwd"}).encode()
    with pytest.raises(RuntimeError, match="names no shared segment file"):
        s2.complete([forged, b2])


def test_transfer_engine_package_training_to_inference():
    """mooncake.transfer_engine: MooncakeTraining pushes tensors that
    MooncakeInference receives (ZMQ for the names, the engine for the bytes)."""
    import torch
    from conftest import free_port
    from mooncake.transfer_engine import MooncakeTransferEngine, get_dtype_str, shape_to_stride
    from mooncake.transfer_engine.mooncake_training import MooncakeTraining
    from mooncake.transfer_engine.mooncake_inference import MooncakeInference
    assert shape_to_stride([2, 3, 4]) == [12, 4, 1] and get_dtype_str(torch.bfloat16) == "bfloat16"
    with pytest.raises(RuntimeError, match="RDMA"):
        MooncakeTransferEngine("127.0.0.1", 0, ib_device="mlx5_0")
    port = free_port()
    cfg = {"training_ip": "127.0.0.1", "inference_ip": "127.0.0.1", "port": port,
           "send_bulk": 4, "bind_ip": "127.0.0.1"}
    train = MooncakeTraining(cfg)
    infer = MooncakeInference(cfg)
    try:
        w = torch.arange(3000, dtype=torch.float32).reshape(30, 100)
        b = torch.ones(7, dtype=torch.bfloat16)
        train.reg_tensor("w", w)
        train.reg_tensor("b", b)
        got = infer.recv_tensor()
        assert list(got) == ["w"] and torch.equal(got["w"], w)
        got = infer.recv_tensor()
        assert torch.equal(got["b"], b) and got["b"].dtype == torch.bfloat16
        assert train.error is None and train.report() >= 0
    finally:
        infer.close()
        train.close()


_TRAIN_SCRIPT = r'''
import json, sys
sys.path.insert(0, sys.argv[2])  # Mooncake runs these scripts beside the modules
import torch
from new_tensor import create_tensor
from mooncake_training import MooncakeTraining
conf = json.loads(sys.argv[1])
train = MooncakeTraining(conf)
for i, (shape, dtype) in enumerate([([30, 100], "float32"), ([7], "bfloat16"),
                                    ([4, 4, 4], "int64")]):
    t = create_tensor(shape, dtype, gpu_id=conf["training_gpu_id"])
    t.copy_((torch.arange(t.numel()) * (i + 3)).reshape(shape).to(t.dtype))
    train.reg_tensor("t%d" % i, t)
train.reg_tensor(None, None)
print(json.dumps({"report": train.report()}), flush=True)
'''

_INFER_SCRIPT = r'''
import json, sys
sys.path.insert(0, sys.argv[2])
from new_tensor import create_tensor, get_dtype
from mooncake_inference import MooncakeInference
conf = json.loads(sys.argv[1])
infer = MooncakeInference(conf)
out = {}
for _ in range(3):
    for name, t in infer.recv_tensor().items():
        assert t.dtype == get_dtype(str(t.dtype).split(".")[1])
        out[name] = [str(t.dtype), list(t.shape), t.double().sum().item()]
infer.close()
print(json.dumps(out), flush=True)
'''


def test_mooncake_training_and_inference_scripts_as_mooncake_runs_them():
    """Mooncake's test_training.py / test_inference.py: the scripts sit beside
    the modules and import ``new_tensor``, ``mooncake_training`` and
    ``mooncake_inference`` as top-level modules (``load_model``, which they also
    import, is not shipped by Mooncake itself). The training process queues its
    tensors, ends with ``reg_tensor(None, None)`` and returns at once: the
    process must still live until every tensor is delivered (Mooncake's sender
    thread is not a daemon)."""
    import torch
    import mooncake.transfer_engine as te
    from conftest import free_port
    tdir = os.path.dirname(te.__file__)
    conf = json.dumps({"inference_ip": "127.0.0.1", "training_ip": "127.0.0.1",
                       "inference_gpu_id": 6, "training_gpu_id": 7, "port": free_port(),
                       "bulk_size": 5, "send_bulk": 15, "threads": 1, "timeout_ms": 60000,
                       "bind_ip": "127.0.0.1"})
    procs = [subprocess.Popen([sys.executable, "-c", src, conf, tdir], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for src in (_TRAIN_SCRIPT, _INFER_SCRIPT)]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert json.loads(outs[0][0])["report"] >= 0
    got = json.loads(outs[1][0])
    want = {}
    for i, (shape, dt) in enumerate([([30, 100], torch.float32), ([7], torch.bfloat16),
                                     ([4, 4, 4], torch.int64)]):
        t = (torch.arange(int(np.prod(shape))) * (i + 3)).reshape(shape).to(dt)
        want["t%d" % i] = [str(dt), shape, t.double().sum().item()]
    assert got == want


def _hugetlb_pool_free():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("HugePages_Free:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def test_shared_segment_cases_of_mooncakes_test():
    """Mooncake's test_shared_segment.py: a THP (hugetlb=False) round trip;
    HugeTLB needs mmap, and supported() says whether the build has the mode
    (True for mmap=True, hugetlb=True, as Mooncake's) while create() fails
    when the machine has no HugeTLB pool to hold it. host_register needs
    CUDA: not supported, create() raises "Not implemented"."""
    from mooncake.engine import SharedSegment
    assert SharedSegment.supported(mmap=True, hugetlb=False)
    seg, blob = SharedSegment.create("py-thp", 2 * 1024 * 1024, 1, 0, mmap=True, hugetlb=False)
    seg.complete([blob])
    try:
        assert seg.ready() and seg.base_addr() != 0
    finally:
        seg.close()
    assert not SharedSegment.supported(mmap=False, host_register=False, hugetlb=True)
    assert SharedSegment.supported(mmap=True, host_register=False, hugetlb=True)
    assert not SharedSegment.supported(mmap=True, host_register=True)
    with pytest.raises(RuntimeError, match="Not implemented"):
        SharedSegment.create("py-x", 2 * 1024 * 1024, 1, 0, mmap=True, host_register=True)
    if _hugetlb_pool_free() == 0:
        with pytest.raises(RuntimeError, match="HugeTLB pool"):
            SharedSegment.create("py-hugetlb", 2 * 1024 * 1024, 1, 0, mmap=True, hugetlb=True)
    else:
        seg, blob = SharedSegment.create("py-hugetlb", 2 * 1024 * 1024, 1, 0, mmap=True,
                                         hugetlb=True)
        seg.complete([blob])
        try:
            assert seg.ready() and seg.base_addr() != 0
        finally:
            seg.close()


def test_shared_segment_hugetlb_ranks_share_the_owners_memfd(monkeypatch):
    """The HugeTLB mode's sharing path (owner memfd, other ranks through
    /proc/<pid>/fd/<fd>), run with MFD_HUGETLB cleared so that it works
    without a HugeTLB pool; a blob naming another kind of file is refused."""
    from mooncake import _shared_segment as ss
    monkeypatch.setattr(os, "MFD_HUGETLB", 0)
    size = 3 * 4096 + 5
    owner, blob0 = ss.SharedSegment.create("py-h", size, 2, 0, mmap=True, hugetlb=True)
    other, blob1 = ss.SharedSegment.create("py-h", size, 2, 1, mmap=True, hugetlb=True)
    owner.complete([blob0, blob1])
    other.complete([blob0, blob1])
    try:
        ctypes.memmove(owner.base_addr() + size - 5, b"hello", 5)
        assert ctypes.string_at(other.base_addr() + size - 5, 5) == b"hello"
        assert other.size() == size
        with open(__file__, "rb") as f:
            forged = json.loads(blob0)
            forged["fd"] = f.fileno()
            third, blob2 = ss.SharedSegment.create("py-h", size, 2, 1, mmap=True, hugetlb=True)
            with pytest.raises(RuntimeError, match="not a crescent HugeTLB segment"):
                third.complete([json.dumps(forged).encode(), blob2])
        thp, _ = ss.SharedSegment.create("py-h", size, 2, 1, mmap=True, hugetlb=False)
        with pytest.raises(RuntimeError, match="hugetlb differs"):
            thp.complete([blob0, blob1])
    finally:
        owner.close()
        other.close()


def test_transfer_tensor_between_two_engines():
    """Mooncake's test_transfer_tensor.py: float32 / int32 / bool / 1000-element
    / 2-D tensors written into a receiver's managed buffer and read back."""
    torch = pytest.importorskip("torch")
    snd, rcv = TransferEngine(), TransferEngine()
    assert snd.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert rcv.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        target = rcv.get_local_name()
        for t in (torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1, 2, 3, 4], dtype=torch.int32),
                  torch.tensor([True, False, False, True]), torch.randn(1000), torch.randn(3, 4)):
            total = 24 + t.numel() * t.element_size()
            buf = rcv.allocate_managed_buffer(total)
            assert buf != 0
            try:
                assert snd.transfer_tensor_sync_write(target, t, buf) == 0
                got = snd.transfer_tensor_sync_read(target, buf, total)
                assert got.dtype == t.dtype and tuple(got.shape) == tuple(t.shape)
                assert torch.equal(got, t)
            finally:
                rcv.free_managed_buffer(buf, total)
        assert snd.transfer_tensor_sync_write(target, torch.empty(0), 4096) == -1
        assert snd.transfer_tensor_sync_write(target, torch.ones(1, 1, 1, 1, 2), 4096) == -1
        with pytest.raises(TypeError):
            snd.transfer_tensor_sync_write(target, b"x", 4096)
        assert snd.transfer_tensor_sync_read(target, 4096, 8) is None  # shorter than a header
        assert snd.transfer_tensor_sync_read(target, 4096, 64) is None  # unregistered peer range
    finally:
        snd.close()
        rcv.close()


def test_declarative_transfer_remaining_cases_of_mooncakes_test(engine):
    """test_declarative_transfer_api.py's cases not in the test above."""
    import types
    import mooncake.transfer as module
    from mooncake.transfer import TransferEndpoint, local_buffer, remote_buffer, transfer
    assert isinstance(module, types.ModuleType) and module.transfer is transfer
    with pytest.raises(ValueError, match="exactly one remote endpoint"):
        transfer(remote_buffer("p:1", 0x1000, 1), remote_buffer("d:1", 0x2000, 1), engine=engine)
    for bad in (lambda: TransferEndpoint.local(-1), lambda: TransferEndpoint.local(True)):
        with pytest.raises(ValueError, match="address"):
            bad()
    with pytest.raises(ValueError, match="hostname"):
        TransferEndpoint.remote("", 0x1000)
    for n in (-1, True):
        with pytest.raises(ValueError, match="length"):
            TransferEndpoint.local(0x1000, length=n)
    with pytest.raises(TypeError, match="TransferEndpoint"):
        transfer(0x1000, remote_buffer("d:1", 0x2000, 1), engine=engine)
    with pytest.raises(TypeError, match="TransferEndpoint"):
        transfer(local_buffer(0x1000, 1), 0x2000, engine=engine)


# ---- mooncake.engine.RpcInterface: messages between two processes ----------

RPC_PEER = r"""
import sys, time
from mooncake.engine import create_rpc_client
import torch
c = create_rpc_client()
addr = sys.argv[1]
print(c.send_data(addr, b"from-peer"), flush=True)
print(c.send_tensor(addr, torch.arange(6, dtype=torch.int16).reshape(2, 3)), flush=True)
c.close()
"""


def test_rpc_interface_between_two_processes():
    import asyncio
    from mooncake import engine as me
    torch = pytest.importorskip("torch", reason="python3-torch is not installed")
    assert me.CoroRPCInterface is me.RpcInterface
    got, tensors = [], []
    srv = me.RpcInterface()
    assert srv.initialize("127.0.0.1:0", thread_count=2) is True
    assert srv.initialize_server("127.0.0.1:0") is False  # one server per object
    srv.set_data_receive_callback(lambda d: got.append((d.source_address, d.data_size,
                                                        d.get_bytes(),
                                                        bytes(d.get_memory_view()))))
    srv.set_tensor_receive_callback(lambda t: tensors.append(t))
    assert srv.start_server_async() is True
    addr = "127.0.0.1:%d" % srv.listen_port
    try:
        out = subprocess.run([sys.executable, "-c", RPC_PEER, addr], capture_output=True,
                             text=True, timeout=120, env=dict(os.environ))
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["0", "0"]
        assert got[0][1:] == (9, b"from-peer", b"from-peer")
        assert got[0][0].startswith("127.0.0.1:")
        t = tensors[0]
        assert (t.shape, t.dtype, t.total_bytes, t.get_data_size()) == \
            ([2, 3], "torch.int16", 12, 12)
        back = torch.frombuffer(bytearray(t.get_data_as_bytes()), dtype=torch.int16)
        assert back.tolist() == list(range(6))
        # the same object as a client, sync and async
        cli = me.create_rpc_client(local_rank=1, world_size=2)
        assert cli.send_data(addr, bytearray(b"x" * 100000)) == 0
        assert got[-1][1] == 100000
        loop = asyncio.new_event_loop()
        try:
            assert loop.run_until_complete(cli.send_data_async(addr, b"a1", loop)) == 0
            assert loop.run_until_complete(
                cli.send_tensor_async(addr, torch.ones(4), loop)) == 0
        finally:
            loop.close()
        assert got[-1][2] == b"a1" and tensors[-1].shape == [4]
        # a callback that raises: the sender gets -1, the server keeps serving
        srv.set_data_receive_callback(lambda d: 1 / 0)
        assert cli.send_data(addr, b"boom") == -1
        srv.set_data_receive_callback(lambda d: got.append(d.get_bytes()))
        assert cli.send_data(addr, b"after") == 0 and got[-1] == b"after"
        # bad arguments
        with pytest.raises(TypeError):
            cli.send_data(5, b"x")
        with pytest.raises(ValueError):
            cli.send_data("no-port", b"x")
        with pytest.raises(TypeError):
            cli.send_tensor(addr, [1, 2])
        with pytest.raises(TypeError):
            srv.set_data_receive_callback(5)
        cli.close()
    finally:
        srv.stop_server()
    # a stopped server: sends fail with -1, never hang past the timeout
    c2 = me.RpcInterface()
    assert c2.initialize_client(pool_size=1, timeout_seconds=5)
    assert c2.send_data(addr, b"late") == -1
    assert me.RpcInterface().start_server() is False  # no initialize_server
    s8080 = me.create_rpc_server()  # Mooncake's fixed 0.0.0.0:8080 (may be taken here)
    assert isinstance(s8080, me.RpcInterface)
    s8080.close()
