"""crescent.store / mooncake.store against a real local cluster (crescent-master
with its embedded HTTP metadata server + a crescent-node storage daemon):
every method, Mooncake's return conventions, misses, bad input, a closed
store and several threads sharing one client."""
import threading
import urllib.request
import uuid

import numpy as np
import pytest

import crescent
from conftest import SEG, make_store, upserts_under_readers
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

NOT_FOUND = -704
HAS_LEASE = -706
INVALID_PARAMS = -600
BUFFER_OVERFLOW = -10
NOT_READY = -1010


def K(tag=""):
    """A key unique to this call (the cluster is shared by the module)."""
    return "t-%s-%s" % (tag, uuid.uuid4().hex[:12])


def data(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


# ---- setup ---------------------------------------------------------------------

def test_setup_positional_mooncake_form(cluster):
    s = MooncakeDistributedStore()
    rc = s.setup("localhost", cluster["metadata"], 16 * 1024 * 1024, 16 * 1024 * 1024, "tcp", "",
                 cluster["master"])
    assert rc == 0, crescent.strerror(rc)
    # Mooncake's form: the given hostname and a port in 12300-14300
    name = s.get_hostname()
    host, _, port = name.rpartition(":")
    assert host == "localhost" and 12300 <= int(port) <= 14300, name
    assert s.setup("localhost", cluster["metadata"], 0, "16MB", "tcp", "", cluster["master"]) < 0
    assert s.close() == 0


def test_setup_human_readable_sizes_and_keywords(cluster):
    s = MooncakeDistributedStore()
    rc = s.setup(local_hostname="127.0.0.1", metadata_server=cluster["metadata"],
                 global_segment_size="32MB", local_buffer_size="8MiB", protocol="tcp",
                 rdma_devices="", master_server_addr=cluster["master"])
    assert rc == 0
    k = K("kw")
    assert s.put(k, b"v") == 0 and s.get(k) == b"v"
    s.close()


def test_zero_local_buffer_copying_calls_fail_zero_copy_works(cluster):
    # Mooncake: setup accepts local_buffer_size=0; the copying calls have no
    # buffer to stage through (put -600, get b""), zero-copy calls work.
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", cluster["metadata"], 0, 0, "tcp", "", cluster["master"]) == 0
    k = K("zero-lbuf")
    assert s.put(k, b"v" * 100000) == -600
    assert s.put_batch([k], [b"v"]) == -600 and s.upsert(k, b"v") == -600
    src = np.full(100000, 7, dtype=np.uint8)
    dst = np.zeros_like(src)
    assert s.register_buffer(src) == 0 and s.register_buffer(dst) == 0
    assert s.put_from(k, src.ctypes.data, src.nbytes) == 0
    assert s.get(k) == b"" and s.get_buffer(k) is None
    assert s.get_batch([k, k]) == [b"", b""] and s.batch_get_buffer([k]) == [None]
    assert s.get_into(k, dst.ctypes.data, dst.nbytes) == src.nbytes and np.array_equal(src, dst)
    assert s.remove(k, force=True) == 0
    s.close()


def test_setup_dict_form(cluster):
    s = MooncakeDistributedStore()
    rc = s.setup({"local_hostname": "127.0.0.1", "metadata_server": cluster["metadata"],
                  "global_segment_size": "16MB", "local_buffer_size": 16 << 20,
                  "protocol": "tcp", "device_name": "",
                  "master_server_address": cluster["master"]})
    assert rc == 0
    s.close()


def store_setup_rc(s, cluster, gss):
    return s.setup("127.0.0.1", cluster["metadata"], gss, "16MB", "tcp", "", cluster["master"])


def test_setup_errors(cluster):
    s = MooncakeDistributedStore()
    # unparsable size strings are an error code (Mooncake), bad numbers raise
    assert store_setup_rc(s, cluster, "12 parsecs") == INVALID_PARAMS
    # Mooncake's test_store_setup_lifecycle: a failed setup must be closed
    # before the next one, and that close succeeds
    assert store_setup_rc(s, cluster, SEG) == NOT_READY
    assert s.close() == 0
    assert store_setup_rc(s, cluster, "50%") == INVALID_PARAMS
    assert s.close() == 0
    with pytest.raises(ValueError):
        s.setup("127.0.0.1", cluster["metadata"], -1, "16MB", "tcp", "", cluster["master"])
    with pytest.raises(TypeError):
        s.setup("127.0.0.1", cluster["metadata"], [], "16MB", "tcp", "", cluster["master"])
    with pytest.raises(TypeError):
        s.setup(42, cluster["metadata"], 0, "16MB", "tcp", "", cluster["master"])
    # nobody listens there: the master is unreachable
    assert s.setup("127.0.0.1", cluster["metadata"], 0, "16MB", "tcp", "", "127.0.0.1:1") < 0
    assert s.close() == 0
    assert s.setup("127.0.0.1", "redis://127.0.0.1:1", 0, "16MB", "tcp", "", cluster["master"]) < 0
    assert s.close() == 0
    # set up: a second setup fails and leaves it set up; after close it works again
    assert store_setup_rc(s, cluster, SEG) == 0
    assert store_setup_rc(s, cluster, SEG) != 0
    assert s.setup_dummy(16 << 20, 16 << 20, "localhost:12345") != 0
    assert s.health_check() == 0
    assert s.close() == 0
    assert store_setup_rc(s, cluster, SEG) == 0
    s.close()


# ---- copying API -----------------------------------------------------------------

@pytest.mark.parametrize("spin", ["0", "20", "junk", "99999"])
def test_rpc_spin_setting(cluster, monkeypatch, capfd, spin):
    """CRESCENT_RPC_SPIN_US (how long a call busy-polls for the master's
    reply): off, a small budget, or a bad value (refused with a warning,
    the default used); puts and gets work the same every way."""
    monkeypatch.setenv("CRESCENT_RPC_SPIN_US", spin)
    s = make_store(cluster)
    try:
        keys = [K("spin") for _ in range(20)]
        for i, k in enumerate(keys):
            assert s.put(k, data(4096, i).tobytes()) == 0
        assert all(s.get(k) == data(4096, i).tobytes() for i, k in enumerate(keys))
        warned = "CRESCENT_RPC_SPIN_US=%s is not" % spin in capfd.readouterr().err
        assert warned == (spin in ("junk", "99999"))
    finally:
        s.remove_all()
        s.close()


def test_put_get_roundtrip_and_miss(store):
    k = K("pg")
    assert store.put(k, b"Hello, crescent!") == 0
    assert store.get(k) == b"Hello, crescent!"
    assert store.get(K("missing")) == b""
    # Mooncake: putting an existing key succeeds and keeps the stored value
    assert store.put(k, b"again") == 0
    assert store.get(k) == b"Hello, crescent!"


def test_put_accepts_buffer_objects(store):
    arr = data(100000, 1)
    k1, k2, k3 = K("np"), K("ba"), K("mv")
    assert store.put(k1, arr) == 0
    assert store.put(k2, bytearray(b"bytearray!")) == 0
    assert store.put(k3, memoryview(arr)[10:20]) == 0
    assert store.get(k1) == arr.tobytes()
    assert store.get(k2) == b"bytearray!"
    assert store.get(k3) == arr[10:20].tobytes()


def test_value_larger_than_local_buffer(store):
    # the fixture's local buffer is 16 MiB: the copying put/get stage in chunks
    big = data(20 << 20 if SEG == "64MB" else 6 << 20, 2)
    k = K("big")
    assert store.put(k, big) == 0
    assert store.get_size(k) == big.nbytes
    assert store.get(k) == big.tobytes()


def test_put_parts(store):
    k = K("parts")
    assert store.put_parts(k, b"Hello, ", bytearray(b"World"), memoryview(b"!")) == 0
    assert store.get(k) == b"Hello, World!"
    with pytest.raises(TypeError):
        store.put_parts(K("parts"), b"a", 3)


def test_put_batch_get_batch(store):
    keys = [K("b%d" % i) for i in range(5)]
    vals = [("value-%d" % i).encode() * (i + 1) for i in range(5)]
    assert store.put_batch(keys, vals) == 0
    got = store.get_batch(keys + [K("nope")])
    assert got == vals + [b""]
    assert store.put_batch(keys[:2], vals[:1]) == INVALID_PARAMS
    assert store.put_batch(keys, vals) == 0  # already there: success, as in Mooncake
    # one bad value fails the call, the other keys are stored
    ok, bad = K("ok"), K("empty")
    assert store.put_batch([ok, bad], [b"fine", b""]) == INVALID_PARAMS
    assert store.batch_is_exist([ok, bad]) == [1, 0]
    with pytest.raises(TypeError):
        store.put_batch(keys[:1], [12])


def test_is_exist_batch_is_exist_get_size(store):
    k = K("ex")
    assert store.is_exist(k) == 0
    assert store.put(k, b"12345") == 0
    assert store.is_exist(k) == 1
    assert store.batch_is_exist([k, K("no"), k]) == [1, 0, 1]
    assert store.get_size(k) == 5
    assert store.get_size(K("no")) == NOT_FOUND


def test_remove_force_and_remove_all(cluster):
    s = make_store(cluster)
    try:
        k = K("rm")
        assert s.put(k, b"x") == 0
        assert s.remove(k) == 0
        assert s.is_exist(k) == 0
        assert s.remove(k) == NOT_FOUND
        # a get takes a read lease: plain remove refuses, force removes
        k2 = K("lease")
        assert s.put(k2, b"leased") == 0
        assert s.get(k2) == b"leased"
        assert s.remove(k2) == HAS_LEASE
        assert s.remove(k2, force=True) == 0
        assert s.get(k2) == b""
        ks = [K("all") for _ in range(3)]
        for k in ks:
            assert s.put(k, b"v") == 0
        n = s.remove_all()
        assert n >= 3, "remove_all removed %d" % n
        assert s.batch_is_exist(ks) == [0, 0, 0]
        assert s.batch_remove([K("none")], force=False) == [NOT_FOUND]
        # more keys than one master call takes (4096): a status per key, in
        # order
        many = [K("many") for _ in range(4100)]
        for i in (0, 4097, 4099):
            assert s.put(many[i], b"v") == 0
        want = [NOT_FOUND] * 4100
        want[0] = want[4097] = want[4099] = 0
        assert s.batch_remove(many) == want
        assert s.batch_is_exist([many[0], many[4097], many[4099]]) == [0, 0, 0]
    finally:
        s.close()


def test_get_buffer_protocol(store):
    k = K("buf")
    payload = data(4096, 3)
    assert store.put(k, payload) == 0
    h = store.get_buffer(k)
    assert h is not None
    assert h.size() == 4096 and len(h) == 4096 and h.ptr() != 0
    arr = np.array(h, copy=False)
    assert arr.dtype == np.uint8 and np.array_equal(arr, payload)
    assert bytes(memoryview(h)) == payload.tobytes()
    assert store.get_buffer(K("none")) is None
    hs = store.batch_get_buffer([k, K("none")])
    assert bytes(hs[0]) == payload.tobytes() and hs[1] is None


def test_get_batch_and_batch_get_buffer_per_key_in_order(store):
    """Both read a batch with one master round trip (regression: they read
    key by key, ~100x slower than batch_get_into for 5000 small keys): each
    key's value in order, b"" / None for a miss, a duplicate read twice, an
    empty list; values bigger than a staging chunk (4 MiB of the 16 MiB
    local buffer) and than the whole local buffer, and bigger than what
    get_batch copies from its batch (1 MiB: read alone) read whole."""
    sizes = [1, 100, 4095, 4096, 65537, (1 << 20) + 1, 5 << 20, 20 << 20]
    keys = [K("gb%d" % i) for i in range(len(sizes))]
    vals = [data(n, 50 + i).tobytes() for i, n in enumerate(sizes)]
    for k, v in zip(keys, vals):
        assert store.put(k, v) == 0
    miss = K("gb-miss")
    ask = [keys[1], miss, keys[7], keys[0], keys[1]] + keys[2:7] + [miss]
    want = [vals[1], b"", vals[7], vals[0], vals[1]] + vals[2:7] + [b""]
    got = store.get_batch(ask)
    assert [len(v) for v in got] == [len(v) for v in want]
    assert got == want
    hs = store.batch_get_buffer(ask)
    assert [None if h is None else h.size() for h in hs] == \
        [len(v) if v else None for v in want]
    assert [None if h is None else bytes(h) for h in hs] == [v if v else None for v in want]
    assert store.get_batch([]) == [] and store.batch_get_buffer([]) == []
    assert store.get_batch([miss, miss]) == [b"", b""]
    assert store.batch_get_buffer([miss]) == [None]
    # tuples and generators are key lists too; junk raises as before
    assert store.get_batch(tuple(keys[:2])) == vals[:2]
    assert [bytes(h) for h in store.batch_get_buffer(k for k in keys[:2])] == vals[:2]
    for bad in ("abc", [1], None):
        with pytest.raises(TypeError):
            store.get_batch(bad)
        with pytest.raises(TypeError):
            store.batch_get_buffer(bad)
    with pytest.raises(ValueError):
        store.batch_get_buffer([keys[0], ""])


def test_get_batch_and_batch_get_buffer_over_the_store_limit(store):
    """More keys than one store batch (4096): a result per key, in order."""
    import crescent._crescent as native
    n = native.STORE_BATCH_MAX + 10
    keys = [K("gbl%d" % i) for i in range(n)]
    present = [0, native.STORE_BATCH_MAX - 1, native.STORE_BATCH_MAX, n - 1]
    for i in present:
        assert store.put(keys[i], ("v%d" % i).encode()) == 0
    want = [b""] * n
    for i in present:
        want[i] = ("v%d" % i).encode()
    assert store.get_batch(keys) == want
    assert [b"" if h is None else bytes(h) for h in store.batch_get_buffer(keys)] == want


def test_get_batch_never_returns_a_mix_while_values_change_size(store, cluster):
    """A key upserted over and over with values of changing sizes (across
    get_batch's 1 MiB copy bound too) while another client reads it with
    get_batch, batch_get_buffer and get (a one-key batch below the bound):
    every result is one whole value, never a miss or bytes of two versions."""
    k = K("gb-resize")
    vals = [bytes([i]) * n for i, n in enumerate((100, 70000, 3000, (1 << 20) + 4096, 9), 1)]
    assert store.upsert(k, vals[0]) == 0
    other = MooncakeDistributedStore()
    assert other.setup("127.0.0.1", cluster["metadata"], 0, "16MB", "tcp", "",
                       cluster["master"]) == 0
    try:
        bad, seen = upserts_under_readers(
            store, k, vals, lambda: other.get_batch([k, k]) + [other.get(k)] + [
                b"" if h is None else bytes(h) for h in other.batch_get_buffer([k])], 100)
    finally:
        other.close()
    assert not bad, bad
    assert len(seen) > 1  # the readers saw the versions change


def test_is_exist_grants_a_read_lease(store):
    """As Mooncake's ExistKey: an object is_exist / batch_is_exist found is
    read-leased (the get that follows the check finds it), so a remove
    without force is refused; probe_key takes no lease."""
    a, b, c = K("ex-lease"), K("ex-lease"), K("ex-lease")
    for k in (a, b, c):
        assert store.put(k, b"v") == 0
    assert store.is_exist(a) == 1
    assert store.remove(a) == HAS_LEASE
    assert store.batch_is_exist([b, K("none")]) == [1, 0]
    assert store.remove(b) == HAS_LEASE
    assert store.probe_key(c) == 1 and store.batch_probe_key([c]) == [1]
    assert store.remove(c) == 0
    assert store.remove(a, force=True) == 0 and store.remove(b, force=True) == 0


def master_counters(cluster):
    txt = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % cluster["metrics"],
                                 timeout=10).read().decode()
    out = {}
    for line in txt.splitlines():
        if line.startswith("crescent_master_rpc_"):
            k, v = line.split()
            out[k[len("crescent_master_"):]] = int(v)
    return out


def test_small_get_is_one_master_lookup(store, cluster):
    """get() of a value up to 1 MiB asks the master once (a one-key batch
    lookup with the read), never a GetSize first; a miss too. Above 1 MiB it
    may ask the size first, and still returns the whole value."""
    keys = [K("one-rt") for _ in range(8)]
    vals = [bytes([i + 1]) * n for i, n in enumerate((1, 4096, 65536, 1 << 20) * 2)]
    for k, v in zip(keys, vals):
        assert store.put(k, v) == 0
    before = master_counters(cluster)
    got = [store.get(k) for k in keys] + [store.get(K("one-rt-miss"))]
    after = master_counters(cluster)
    assert got == vals + [b""]
    d = {k: after[k] - before.get(k, 0) for k in after}
    assert d["rpc_get_size_total"] == 0, d
    lookups = d["rpc_get_replica_list_total"] + d["rpc_exist_total"]
    assert lookups == len(keys) + 1, d
    big = bytes(range(256)) * ((1 << 20) // 256 + 16)
    kb = K("one-rt-big")
    assert store.put(kb, big) == 0
    assert store.get(kb) == big


# ---- zero-copy API ---------------------------------------------------------------

def test_put_from_get_into(store):
    src = data(1 << 20, 4)
    dst = np.zeros(1 << 20, dtype=np.uint8)
    assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    k = K("zc")
    assert store.put_from(k, src.ctypes.data, src.nbytes) == 0
    n = store.get_into(k, dst.ctypes.data, dst.nbytes)
    assert n == src.nbytes
    assert np.array_equal(src, dst)
    # part of a registered buffer
    assert store.put_from(K("zc"), src.ctypes.data + 100, 1000) == 0
    # destination too small: BUFFER_OVERFLOW, as Mooncake
    assert store.get_into(k, dst.ctypes.data, 1000) == BUFFER_OVERFLOW
    # miss
    assert store.get_into(K("none"), dst.ctypes.data, dst.nbytes) == NOT_FOUND
    assert store.unregister_buffer(src.ctypes.data) == 0
    assert store.unregister_buffer(dst.ctypes.data) == 0
    assert store.unregister_buffer(dst.ctypes.data) == INVALID_PARAMS


def test_zero_copy_with_buffer_objects(store):
    src = data(65536, 5)
    dst = np.zeros(65536, dtype=np.uint8)
    assert store.register_buffer(src) == 0
    assert store.register_buffer(dst) == 0
    k = K("obj")
    assert store.put_from(k, src) == 0  # size from the buffer
    assert store.get_into(k, dst) == 65536
    assert np.array_equal(src, dst)
    with pytest.raises(ValueError):  # size larger than the buffer object
        store.get_into(k, dst, 70000)
    with pytest.raises(ValueError):  # read-only destination
        store.get_into(k, b"\0" * 65536)
    assert store.unregister_buffer(src) == 0 and store.unregister_buffer(dst) == 0


def test_unregistered_pointers_are_refused(store):
    src = data(4096, 6)
    k = K("unreg")
    assert store.put_from(k, src.ctypes.data, 4096) == INVALID_PARAMS
    assert store.is_exist(k) == 0
    assert store.put(k, src) == 0
    dst = np.zeros(4096, dtype=np.uint8)
    assert store.get_into(k, dst.ctypes.data, 4096) == INVALID_PARAMS
    assert not dst.any()
    # a garbage address can be neither registered nor used
    assert store.register_buffer(0x1000, 4096) == INVALID_PARAMS
    assert store.get_into(k, 0x1000, 4096) == INVALID_PARAMS
    # range running past a registration
    assert store.register_buffer(dst.ctypes.data, 4096) == 0
    assert store.get_into(k, dst.ctypes.data + 1, 4096) == INVALID_PARAMS
    assert store.register_buffer(dst.ctypes.data + 10, 100) == INVALID_PARAMS  # overlap
    assert store.unregister_buffer(dst.ctypes.data) == 0


def test_batch_put_from_batch_get_into(store):
    n, size = 16, 64 << 10
    src = data(n * size, 7)
    dst = np.zeros(n * size, dtype=np.uint8)
    assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    keys = [K("bz%d" % i) for i in range(n)]
    ptrs = [src.ctypes.data + i * size for i in range(n)]
    assert store.batch_put_from(keys, ptrs, [size] * n) == [0] * n
    # one miss, one unregistered destination: only those keys fail
    junk = np.zeros(size, dtype=np.uint8)
    qkeys = keys[:8] + [K("miss")] + keys[9:]
    dptrs = [dst.ctypes.data + i * size for i in range(n)]
    dptrs[3] = junk.ctypes.data
    res = store.batch_get_into(qkeys, dptrs, [size] * n)
    expect = [size] * n
    expect[8] = NOT_FOUND
    expect[3] = INVALID_PARAMS
    assert res == expect
    for i in range(n):
        if i in (3, 8):
            continue
        assert np.array_equal(dst[i * size:(i + 1) * size], src[i * size:(i + 1) * size]), i
    # re-putting existing keys succeeds (Mooncake), the stored values are kept
    src[:size] ^= 0xFF
    assert store.batch_put_from(keys[:2], ptrs[:2], [size] * 2) == [0, 0]
    assert store.get(keys[0]) == (src[:size] ^ 0xFF).tobytes()
    # lists of different lengths: every key fails with INVALID_PARAMS (Mooncake)
    assert store.batch_get_into(keys[:2], dptrs[:3], [size] * 3) == [INVALID_PARAMS] * 2
    assert store.batch_put_from(keys[:2], ptrs, [size] * n) == [INVALID_PARAMS] * 2
    with pytest.raises(ValueError):
        store.batch_put_from(keys[:1], ptrs[:1], [-1])
    assert store.batch_put_from([], [], []) == []
    store.unregister_buffer(src.ctypes.data)
    store.unregister_buffer(dst.ctypes.data)


def test_multi_buffers(store):
    """Each key from / into several fragments (contiguous and scattered)."""
    frag, nfrag, nkeys = 4096, 4, 3
    src = data(frag * nfrag * nkeys * 2, 8)
    dst = np.zeros_like(src)
    assert store.register_buffer(src) == 0
    assert store.register_buffer(dst) == 0
    base, dbase = src.ctypes.data, dst.ctypes.data
    keys = [K("mb%d" % i) for i in range(nkeys)]
    # key 0: contiguous fragments; keys 1, 2: every other fragment
    all_ptrs = [[base + j * frag for j in range(nfrag)]]
    all_ptrs += [[base + (nfrag + i * 2 * nfrag + 2 * j) * frag for j in range(nfrag)]
                 for i in range(nkeys - 1)]
    all_sizes = [[frag] * nfrag for _ in range(nkeys)]
    assert store.batch_put_from_multi_buffers(keys, all_ptrs, all_sizes) == [0] * nkeys
    for i, k in enumerate(keys):
        expect = b"".join(src[p - base:p - base + frag].tobytes() for p in all_ptrs[i])
        assert store.get(k) == expect, "key %d content" % i
    # read back into a different fragmentation (2 halves, scattered)
    half = frag * nfrag // 2
    dptrs = [[dbase + (2 * i) * half, dbase + (2 * i + 5) * half] for i in range(nkeys)]
    dsizes = [[half, half] for _ in range(nkeys)]
    res = store.batch_get_into_multi_buffers(keys, dptrs, dsizes)
    assert res == [frag * nfrag] * nkeys
    for i, k in enumerate(keys):
        got = dst[dptrs[i][0] - dbase:dptrs[i][0] - dbase + half].tobytes() + \
            dst[dptrs[i][1] - dbase:dptrs[i][1] - dbase + half].tobytes()
        assert got == store.get(k), "key %d scatter" % i
    # a miss and an unregistered fragment fail only their key
    junk = np.zeros(frag, dtype=np.uint8)
    res = store.batch_get_into_multi_buffers([keys[0], K("none"), keys[1]],
                                             [dptrs[0], dptrs[1], [junk.ctypes.data]],
                                             [dsizes[0], dsizes[1], [frag]])
    assert res == [frag * nfrag, NOT_FOUND, INVALID_PARAMS]
    # a key whose pointer and size lists differ fails alone
    assert store.batch_put_from_multi_buffers([K("x"), K("y")], [[base, base], [base]],
                                              [[frag], [frag]]) == [INVALID_PARAMS, 0]
    assert store.batch_get_into_multi_buffers(keys, [dptrs[0]], [dsizes[0]]) == \
        [INVALID_PARAMS] * nkeys
    with pytest.raises(TypeError):
        store.batch_put_from_multi_buffers(keys[:1], [base], [frag])


# ---- replication config ------------------------------------------------------------

def test_replicate_config(store, cluster):
    cfg = ReplicateConfig()
    assert cfg.replica_num == 1 and not cfg.with_soft_pin and not cfg.with_hard_pin
    cfg.with_soft_pin = True
    assert store.put(K("soft"), b"s", cfg) == 0
    cfg = ReplicateConfig()
    cfg.with_hard_pin = True
    assert store.put(K("hard"), b"h", cfg) == 0
    cfg = ReplicateConfig()
    cfg.preferred_segment = cluster["node"]
    assert cfg.preferred_segments == [cluster["node"]]
    k = K("pref")
    assert store.put(k, b"p", cfg) == 0 and store.get(k) == b"p"
    # two replicas: the node and this client both contribute memory
    cfg = ReplicateConfig(replica_num=2)
    k = K("two")
    assert store.put(k, b"twice", config=cfg) == 0
    assert store.get(k) == b"twice"
    with pytest.raises(ValueError):
        store.put(K("bad"), b"x", ReplicateConfig(replica_num=0))
    with pytest.raises(ValueError):
        store.put(K("bad"), b"x", ReplicateConfig(replica_num=99))
    with pytest.raises(TypeError):
        store.put(K("bad"), b"x", "not a config")
    # duck typing: any object with the attributes works
    class Cfg:
        replica_num = 1
        with_soft_pin = False
        with_hard_pin = False
        preferred_segments = []
    assert store.put(K("duck"), b"d", Cfg()) == 0


# ---- bad input and lifecycle ---------------------------------------------------------

def test_bad_arguments(store):
    with pytest.raises(TypeError):
        store.put(123, b"x")
    with pytest.raises(ValueError):
        store.put("", b"x")
    with pytest.raises(TypeError):
        store.put("k", 12345)
    with pytest.raises(TypeError):
        store.get(None)
    with pytest.raises(TypeError):
        store.is_exist(["k"])
    with pytest.raises(TypeError):
        store.batch_is_exist("abc")
    with pytest.raises(TypeError):
        store.batch_is_exist([1, 2])
    with pytest.raises(ValueError):
        store.register_buffer(4096, -1)
    with pytest.raises(TypeError):
        store.register_buffer("addr", 10)
    with pytest.raises(ValueError):
        store.get_into("k", 4096, -3)
    with pytest.raises(TypeError):
        store.get_into("k", 4096)  # int pointer needs a size
    assert store.put("x" * 5000, b"v") < 0  # key longer than the store allows


def test_closed_and_unset_store():
    s = MooncakeDistributedStore()
    assert s.put("k", b"v") == NOT_READY
    assert s.get("k") == b""
    assert s.get_buffer("k") is None
    assert s.is_exist("k") == NOT_READY
    assert s.batch_is_exist(["a", "b"]) == [NOT_READY, NOT_READY]
    assert s.get_size("k") == NOT_READY
    assert s.remove("k") == NOT_READY and s.remove_all() == NOT_READY
    buf = np.zeros(4096, dtype=np.uint8)
    assert s.register_buffer(buf.ctypes.data, 4096) == NOT_READY
    assert s.get_into("k", buf.ctypes.data, 4096) == NOT_READY
    assert s.get_batch(["k", "j"]) == [b"", b""] and s.batch_get_buffer(["k"]) == [None]
    assert s.get_hostname() == ""
    assert s.close() == 0 and s.close() == 0


def zero_copy_calls(p):
    """Every call that reads or writes registered memory, with what it
    answers on a store that is not set up or closed: -1010, a list of it
    from a batch (tensor reads: None, as for any failure)."""
    two = (["k", "j"], [p, p + 4096], [100, 100])
    calls = [
        ("register_buffer", lambda s: s.register_buffer(p + 8192, 100), NOT_READY),
        ("get_into", lambda s: s.get_into("k", p, 100), NOT_READY),
        ("put_from", lambda s: s.put_from("k", p, 100), NOT_READY),
        ("upsert_from", lambda s: s.upsert_from("k", p, 100), NOT_READY),
        ("batch_get_into", lambda s: s.batch_get_into(*two), [NOT_READY] * 2),
        ("batch_put_from", lambda s: s.batch_put_from(*two), [NOT_READY] * 2),
        ("batch_upsert_from", lambda s: s.batch_upsert_from(*two), [NOT_READY] * 2),
        ("batch_put_from_multi_buffers",
         lambda s: s.batch_put_from_multi_buffers(["k"], [[p, p + 200]], [[100, 100]]),
         [NOT_READY]),
        ("batch_get_into_multi_buffers",
         lambda s: s.batch_get_into_multi_buffers(["k"], [[p, p + 200]], [[100, 100]]),
         [NOT_READY]),
        ("put_from_with_metadata", lambda s: s.put_from_with_metadata("k", p, p + 4096, 100, 16),
         NOT_READY),
        ("get_into_ranges",
         lambda s: s.get_into_ranges([p], [["k"]], [[[0, 50]]], [[[0, 50]]], [[[50, 50]]]),
         [[[NOT_READY, NOT_READY]]]),
        ("batch_put_from_multi_buffer_ranges",
         lambda s: s.batch_put_from_multi_buffer_ranges(["k"], [[p]], [[100]], [[0]]),
         [NOT_READY]),
        ("batch_get_into_multi_buffer_ranges",
         lambda s: s.batch_get_into_multi_buffer_ranges(["k"], [[p]], [[100]], [[0]]),
         [NOT_READY]),
        ("batch_put_session_end", lambda s: s.batch_put_session_end(["k"]), [NOT_READY]),
        ("batch_put_session_abort", lambda s: s.batch_put_session_abort(["k"]), [NOT_READY]),
        ("progressive_get", lambda s: s.progressive_get("k", p, 100, 50).wait_all(), NOT_READY),
        ("streaming_batch_get_buffer_ranges",
         lambda s: s.streaming_batch_get_buffer_ranges(["k"], p, [0], [0], [100]).wait_all(),
         NOT_READY),
        ("get_tensor_dim_selection_into",
         lambda s: s.get_tensor_dim_selection_into("k", p, 4096, [4], "float32"), NOT_READY),
    ]
    try:
        import torch  # noqa: F401 - the tensor calls need it
    except ImportError:
        return calls
    return calls + [
        ("put_tensor_from", lambda s: s.put_tensor_from("k", p, 4096), NOT_READY),
        ("upsert_tensor_from", lambda s: s.upsert_tensor_from("k", p, 4096), NOT_READY),
        ("batch_put_tensor_from", lambda s: s.batch_put_tensor_from(["k"], [p], [4096]),
         [NOT_READY]),
        ("batch_upsert_tensor_from", lambda s: s.batch_upsert_tensor_from(["k"], [p], [4096]),
         [NOT_READY]),
        ("put_tensor_with_tp_from", lambda s: s.put_tensor_with_tp_from("k", p, 4096, 0, 2),
         NOT_READY),
        ("batch_put_tensor_with_tp_from",
         lambda s: s.batch_put_tensor_with_tp_from(["k"], [p], [4096], 0, 2), [NOT_READY]),
        ("put_tensor_chunk_with_tp_from", lambda s: s.put_tensor_chunk_with_tp_from("k", p, 4096),
         NOT_READY),
        ("put_tensor_with_parallelism_from",
         lambda s: s.put_tensor_with_parallelism_from("k", p, 4096), NOT_READY),
        ("batch_put_tensor_with_parallelism_from",
         lambda s: s.batch_put_tensor_with_parallelism_from(["k"], [p], [4096]), [NOT_READY]),
        ("get_tensor_into", lambda s: s.get_tensor_into("k", p, 4096), None),
        ("batch_get_tensor_into", lambda s: s.batch_get_tensor_into(["k"], [p], [4096]), [None]),
    ]


@pytest.mark.parametrize("when", ["before setup", "after close"])
def test_zero_copy_calls_on_a_store_not_set_up_return_1010_not_600(cluster, when):
    """Regression: the zero-copy calls checked the memory's registration
    before the store's state, so a store not set up (or closed, which drops
    its registrations) answered -600 "pointer not inside a registered
    buffer" instead of -1010 as register_buffer and every other call do."""
    buf = np.zeros(1 << 20, dtype=np.uint8)
    s = MooncakeDistributedStore()
    if when == "after close":
        assert s.setup("127.0.0.1", cluster["metadata"], 0, "16MB", "tcp", "",
                       cluster["master"]) == 0
        assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
        assert s.close() == 0
    calls = zero_copy_calls(buf.ctypes.data)
    got = {name: fn(s) for name, fn, _ in calls}
    assert got == {name: want for name, _, want in calls}
    # argument errors still come first: lists of different lengths
    assert s.batch_get_into(["k", "j"], [buf.ctypes.data], [100]) == [INVALID_PARAMS] * 2
    # and once set up, unregistered memory is -600 again
    assert s.setup("127.0.0.1", cluster["metadata"], 0, "16MB", "tcp", "",
                   cluster["master"]) == 0
    try:
        assert s.get_into("k", buf.ctypes.data, 100) == INVALID_PARAMS
        assert s.put_from("k", buf.ctypes.data, 100) == INVALID_PARAMS
        assert s.batch_get_into(["k"], [buf.ctypes.data], [100]) == [INVALID_PARAMS]
        assert s.batch_put_from_multi_buffers(["k"], [[buf.ctypes.data]], [[100]]) == \
            [INVALID_PARAMS]
    finally:
        s.close()


def test_close_while_other_threads_use_the_store(cluster):
    s = make_store(cluster)
    k = K("closing")
    assert s.put(k, b"v" * 1000) == 0
    results = []

    def worker():
        for _ in range(100000):
            r = s.get(k)
            results.append(r)
            if r == b"":
                break

    t = threading.Thread(target=worker)
    t.start()
    while not results:
        pass
    assert s.close() == 0
    t.join(60)
    assert not t.is_alive()
    assert results[0] == b"v" * 1000 and results[-1] == b""


def test_threads_share_one_store(store):
    nthreads, rounds, size = 4, 10, 256 << 10
    bufs = [np.zeros(size, dtype=np.uint8) for _ in range(nthreads)]
    for b in bufs:
        assert store.register_buffer(b) == 0
    errors = []

    def worker(i):
        try:
            for r in range(rounds):
                k = K("th%d-%d" % (i, r))
                val = np.full(size, (i * 31 + r) & 0xFF, dtype=np.uint8)
                assert store.put(k, val) == 0
                assert store.get_into(k, bufs[i]) == size
                assert np.array_equal(bufs[i], val), "thread %d round %d" % (i, r)
                assert store.is_exist(k) == 1
                assert store.get(k) == val.tobytes()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    for b in bufs:
        assert store.unregister_buffer(b) == 0


def test_tensors(store):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (put_tensor/get_tensor)")
    t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    k = K("tensor")
    assert store.put_tensor(k, t) == 0
    back = store.get_tensor(k)
    assert back.shape == t.shape and back.dtype == t.dtype and torch.equal(back, t)
    assert store.get_tensor(K("none")) is None


def test_batches_longer_than_the_store_limit(store):
    import crescent._crescent as native
    n = native.STORE_BATCH_MAX + 904
    keys = [K("many%d" % i) for i in range(n)]
    present = {0, 1, native.STORE_BATCH_MAX - 1, native.STORE_BATCH_MAX, n - 1}
    for i in present:
        assert store.put(keys[i], b"x") == 0
    res = store.batch_is_exist(keys)
    assert len(res) == n
    assert [i for i, r in enumerate(res) if r == 1] == sorted(present)
    assert all(r == 0 for i, r in enumerate(res) if i not in present)
    # zero-copy batches over the limit
    m = n - 800
    src = np.arange(m * 16, dtype=np.uint32).astype(np.uint8)
    dst = np.zeros_like(src)
    assert store.register_buffer(src) == 0 and store.register_buffer(dst) == 0
    zk = [K("zc%d" % i) for i in range(m)]
    assert store.batch_put_from(zk, [src.ctypes.data + 16 * i for i in range(m)], [16] * m) == \
        [0] * m
    got = store.batch_get_into(zk, [dst.ctypes.data + 16 * i for i in range(m)], [16] * m)
    assert got == [16] * m and np.array_equal(src, dst)
    assert store.unregister_buffer(src) == 0 and store.unregister_buffer(dst) == 0
    # put_batch over the limit too (staged, in several store batches)
    vals = [("v%d" % i).encode() for i in range(n)]
    assert store.put_batch(keys, vals) == 0
    assert store.batch_is_exist(keys) == [1] * n
    assert store.get_batch([keys[0], keys[2], keys[n - 2]]) == [b"x", vals[2], vals[n - 2]]


def test_empty_value_is_invalid(store):
    assert store.put(K("empty"), b"") == INVALID_PARAMS
    buf = np.zeros(16, dtype=np.uint8)
    assert store.register_buffer(buf) == 0
    assert store.put_from(K("empty"), buf.ctypes.data, 0) == INVALID_PARAMS
    assert store.unregister_buffer(buf) == 0


EXIT_SCRIPT = r"""
import sys
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", sys.argv[1], "16MB", "16MB", "tcp", "", sys.argv[2]) == 0
cfg = ReplicateConfig()
cfg.preferred_segment = s.get_hostname()   # the object lives in this process's memory
assert s.put(sys.argv[3], b"held by a process that exits", cfg) == 0
print(s.get_hostname(), flush=True)
# exits without close(): the atexit hook (or deallocation) must unmount the segment
"""


def test_exit_without_close_unmounts_segment(store, cluster, tmp_path):
    import time
    from conftest import run_py
    script = tmp_path / "exit_without_close.py"
    script.write_text(EXIT_SCRIPT)
    k = K("exit")
    r = run_py(str(script), cluster["metadata"], cluster["master"], k)
    assert r.returncode == 0, r.stderr
    # The segment is gone with the process: the key is a miss right away
    # (without the unmount it would linger until the master's client TTL).
    deadline = time.monotonic() + 3
    while store.is_exist(k) != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.is_exist(k) == 0
    assert store.get(k) == b""


def test_gil_is_released_during_batch_get_into(store):
    from conftest import gil_released_during
    n, size = 16, 1 << 20
    buf = np.zeros(n * size, dtype=np.uint8)
    assert store.register_buffer(buf) == 0
    keys = [K("gil%d" % i) for i in range(n)]
    ptrs = [buf.ctypes.data + i * size for i in range(n)]
    assert store.batch_put_from(keys, ptrs, [size] * n) == [0] * n
    assert gil_released_during(lambda: store.batch_get_into(keys, ptrs, [size] * n))
    assert gil_released_during(lambda: store.get(keys[0]))
    assert store.unregister_buffer(buf) == 0


def test_threads_register_and_batch_concurrently(store):
    """Threads register/unregister their own buffers while others run batches."""
    nthreads, rounds, n, size = 4, 5, 8, 32 << 10
    errors = []

    def worker(t):
        try:
            for r in range(rounds):
                src = np.full(n * size, (t * 7 + r) & 0xFF, dtype=np.uint8)
                dst = np.zeros(n * size, dtype=np.uint8)
                assert store.register_buffer(src) == 0
                assert store.register_buffer(dst) == 0
                keys = [K("c%d-%d-%d" % (t, r, i)) for i in range(n)]
                sp = [src.ctypes.data + i * size for i in range(n)]
                dp = [dst.ctypes.data + i * size for i in range(n)]
                assert store.batch_put_from(keys, sp, [size] * n) == [0] * n
                assert store.batch_get_into(keys, dp, [size] * n) == [size] * n
                assert np.array_equal(src, dst), "thread %d round %d" % (t, r)
                assert store.batch_remove(keys, force=True) == [0] * n
                assert store.unregister_buffer(src) == 0
                assert store.unregister_buffer(dst) == 0
                # unregistered now: refused, not crashed
                assert store.get_into(keys[0], dst.ctypes.data, size) == INVALID_PARAMS
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors


def test_random_ops_match_a_dict(store):
    """Random put/get/get_into/remove/is_exist against a dict model (seeded).
    Model: objects are immutable (a put of an existing key keeps the value),
    a get leaves a read lease so a plain remove may answer HAS_LEASE."""
    import random
    rng = random.Random(1234)
    pool = [K("fz%d" % i) for i in range(24)]
    model, log = {}, []
    buf = np.zeros(70000, dtype=np.uint8)
    assert store.register_buffer(buf) == 0
    try:
        for step in range(300):
            op, k = rng.choice(["put", "put", "get", "get_into", "remove", "exist"]), rng.choice(pool)
            log.append("%d %s %s" % (step, op, k))
            if op == "put":
                v = rng.randbytes(rng.randint(1, 65536))
                assert store.put(k, v) == 0, log[-5:]
                model.setdefault(k, v)
            elif op == "get":
                assert store.get(k) == model.get(k, b""), log[-5:]
            elif op == "get_into":
                n = store.get_into(k, buf, buf.nbytes)
                if k in model:
                    assert n == len(model[k]) and buf[:n].tobytes() == model[k], log[-5:]
                else:
                    assert n == NOT_FOUND, log[-5:]
            elif op == "remove":
                rc = store.remove(k)
                if k not in model:
                    assert rc == NOT_FOUND, log[-5:]
                else:
                    assert rc in (0, HAS_LEASE), (rc, log[-5:])
                    if rc == 0:
                        del model[k]
            else:
                assert store.is_exist(k) == (1 if k in model else 0), log[-5:]
        assert store.batch_is_exist(pool) == [1 if k in model else 0 for k in pool]
    finally:
        store.batch_remove(pool, force=True)
        store.unregister_buffer(buf)


def test_close_then_setup_again(cluster):
    """Mooncake's tear-down test: close() drops this client's memory (objects
    held there are gone), setup() on the same object works again."""
    s = make_store(cluster)
    k = K("again")
    cfg = ReplicateConfig()
    cfg.preferred_segment = s.get_hostname()
    assert s.put(k, b"held here", cfg) == 0
    assert s.close() == 0
    rc = s.setup("127.0.0.1", cluster["metadata"], "16MB", "16MB", "tcp", "", cluster["master"])
    assert rc == 0
    try:
        assert s.get(k) == b""
        assert s.put(k, b"second life") == 0 and s.get(k) == b"second life"
    finally:
        s.close()


def segments_of(s, key):
    return [d.get_memory_descriptor().buffer_descriptor.transport_endpoint
            for d in s.get_replica_desc(key)]


def test_setup_takes_another_port_when_the_master_holds_its_name(cluster, monkeypatch):
    """A client that left while a reader held a lease on its memory: the
    master holds its segment name (host:port) until the lease ends and
    places nothing in that memory. A new client drawing the same port gets
    the name at once when its memory lies elsewhere (the master holds the
    dropped range, not the name); when its memory overlaps the old range
    (this process may map it at the same address), setup() takes another
    port. Either way a put preferring the new client's own segment lands
    there at once (before, it went to the node for the rest of the lease:
    a rare failure of test_close_then_setup_again)."""
    import crescent.store as cs
    a = make_store(cluster)
    a_name = a.get_hostname()
    k = K("held-name")
    cfg = ReplicateConfig()
    cfg.preferred_segment = a_name
    assert a.put(k, b"x" * 100, cfg) == 0
    assert segments_of(a, k) == [a_name]
    reader = make_store(cluster)
    try:
        assert reader.get(k) == b"x" * 100  # a read lease on a's memory
        assert a.close() == 0
        draws = iter([int(a_name.rpartition(":")[2])] * 2)
        real = cs.random.randint
        monkeypatch.setattr(cs.random, "randint", lambda lo, hi: next(draws, None) or real(lo, hi))
        b = make_store(cluster)
        try:
            b_name = b.get_hostname()
            left = next(draws, None)
            if b_name == a_name:
                assert left is not None  # taken at the first draw: not held for b's memory
            else:
                assert left is None  # drawn twice, held both times: another port
            cfg.preferred_segment = b_name
            km = K("mine")
            assert b.put(km, b"y" * 100, cfg) == 0
            assert segments_of(b, km) == [b_name]
        finally:
            b.close()
    finally:
        reader.close()
