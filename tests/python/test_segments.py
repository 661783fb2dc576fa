"""Mooncake's mount_segment / allocate_and_mount_segment / unmount_segment /
unmount_and_free_segment on crescent, against a real master.

The master here has no storage node: the only memory in the pool is what
the clients mount, so a put that succeeds proves the object went into a
mounted segment, and a put after the unmount that fails proves the space
left the pool."""
import os
import uuid

import numpy as np
import pytest

from conftest import Daemons, start_master
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

NO_SPACE = -200
SEGMENT_NOT_FOUND = -101
INVALID_PARAMS = -600
NOT_FOUND = -704
NOT_READY = -1010
UNAVAILABLE = -1011
FILE_NOT_FOUND = -1100
MiB = 1 << 20


def K(tag=""):
    return "seg-%s-%s" % (tag, uuid.uuid4().hex[:12])


@pytest.fixture(scope="module")
def cluster():
    d = Daemons()
    try:
        master, meta = start_master(d)
        yield {"master": master, "metadata": meta}
    finally:
        d.stop()


def client(cluster):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", cluster["metadata"], 0, "4MB", "tcp", "", cluster["master"]) == 0
    return s


@pytest.fixture
def store(cluster):
    s = client(cluster)
    yield s
    s.close()


@pytest.fixture
def reader(cluster):
    s = client(cluster)
    yield s
    s.close()


def replica_segments(store, key):
    return sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint
                  for d in store.get_replica_desc(key))


def test_allocate_mount_put_get_unmount(store, reader):
    key, val = K("a"), os.urandom(300 << 10)
    assert store.put(key, val) == NO_SPACE  # the pool is empty: nobody mounted memory
    r = store.allocate_and_mount_segment(1)
    assert r["ret"] == 0, r
    assert r["allocated_size"] == 4 * MiB  # rounded up to Mooncake's 4 MiB slab
    (sid,) = r["segment_ids"]
    assert store.put(key, val) == 0
    assert replica_segments(store, key) == [sid]
    assert reader.get(key) == val  # another client reads it from the mounted memory
    assert store.unmount_and_free_segment([sid]) == 0
    # the only replica went with the segment: a miss, never other bytes
    assert reader.get(key) == b""
    assert reader.is_exist(key) == 0
    assert store.put(K("after"), b"x" * 4096) == NO_SPACE


def test_allocated_size_rounds_up_to_slab(store):
    r = store.allocate_and_mount_segment(4 * MiB + 1, "tcp", "cpu")
    assert r["ret"] == 0 and r["allocated_size"] == 8 * MiB
    assert store.unmount_and_free_segment(r["segment_ids"], 0) == 0


def test_mount_file_segment_holds_the_bytes(store, reader, tmp_path):
    f = tmp_path / "seg.bin"
    size = 8 * MiB
    f.write_bytes(b"\0" * (size + 4096))
    r = store.mount_segment(str(f), size, 4096, "tcp", "")
    assert r["ret"] == 0, r
    (sid,) = r["segment_ids"]
    key, val = K("f"), os.urandom(64 << 10)
    assert store.put(key, val) == 0
    assert replica_segments(store, key) == [sid]
    assert reader.get(key) == val
    # the object's bytes are in the file, after the offset: the segment is the file
    data = f.read_bytes()
    assert data[4096:].find(val) >= 0 and data[:4096] == b"\0" * 4096
    assert store.unmount_segment([sid], 0) == 0
    assert reader.get(key) == b""
    assert f.stat().st_size == size + 4096  # the file stays


def test_unmount_keeps_objects_with_another_replica(store, reader):
    a = store.allocate_and_mount_segment(8 * MiB)["segment_ids"][0]
    b = store.allocate_and_mount_segment(8 * MiB)["segment_ids"][0]
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    keys = [K("r%d" % i) for i in range(8)]
    vals = [os.urandom(40 << 10) for _ in keys]
    for k, v in zip(keys, vals):
        assert store.put(k, v, cfg) == 0
        assert replica_segments(store, k) == sorted([a, b])
    assert store.unmount_and_free_segment([a]) == 0
    for k, v in zip(keys, vals):
        assert reader.get(k) == v  # read from the replica left on b
        assert replica_segments(reader, k) == [b]
    assert store.unmount_and_free_segment([b]) == 0
    assert reader.batch_is_exist(keys) == [0] * len(keys)


def test_unmount_with_grace_period_then_reads_miss(store, reader):
    sid = store.allocate_and_mount_segment(4 * MiB)["segment_ids"][0]
    key, val = K("g"), os.urandom(1 << 20)
    assert store.put(key, val) == 0
    buf = np.zeros(1 << 20, dtype=np.uint8)
    assert reader.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    assert reader.get_into(key, buf.ctypes.data, buf.nbytes) == len(val)
    assert buf.tobytes() == val
    assert store.unmount_and_free_segment([sid], 1) == 0  # 1 s grace
    n = reader.get_into(key, buf.ctypes.data, buf.nbytes)
    assert n == NOT_FOUND
    reader.unregister_buffer(buf.ctypes.data)


def test_close_unmounts_extra_segments(cluster, reader):
    s = client(cluster)
    sid = s.allocate_and_mount_segment(4 * MiB)["segment_ids"][0]
    key = K("c")
    assert s.put(key, b"v" * 5000) == 0
    assert s.close() == 0
    assert reader.is_exist(key) == 0
    assert reader.put(K("c2"), b"x") == NO_SPACE
    # a closed store answers like every other call
    assert s.unmount_and_free_segment([sid]) == NOT_READY
    assert s.allocate_and_mount_segment(4 * MiB)["ret"] == NOT_READY


def test_preferred_segment_places_in_a_mounted_segment(store):
    a = store.allocate_and_mount_segment(4 * MiB)["segment_ids"][0]
    b = store.allocate_and_mount_segment(4 * MiB)["segment_ids"][0]
    for sid in (a, b, a):
        cfg = ReplicateConfig()
        cfg.preferred_segment = sid
        k = K("p")
        assert store.put(k, b"p" * 10000, cfg) == 0
        assert replica_segments(store, k) == [sid]
    assert store.unmount_and_free_segment([a, b]) == 0


# ---- bad arguments: Mooncake's codes or exceptions, never a crash ----------------------

def test_mount_bad_arguments(store, tmp_path):
    f = tmp_path / "small.bin"
    f.write_bytes(b"\0" * MiB)
    assert store.mount_segment(str(tmp_path / "nope"), MiB) == {"ret": FILE_NOT_FOUND,
                                                                  "segment_ids": []}
    assert store.mount_segment(str(f), 2 * MiB)["ret"] == INVALID_PARAMS  # past EOF
    assert store.mount_segment(str(f), 0)["ret"] == INVALID_PARAMS
    assert store.mount_segment(str(f), 1000)["ret"] == INVALID_PARAMS  # not 4 KiB
    assert store.mount_segment(str(f), 4096, 100)["ret"] == INVALID_PARAMS  # unaligned offset
    assert store.mount_segment(str(f), MiB, 0, "tcp", "cuda:0")["ret"] == UNAVAILABLE
    assert store.mount_segment(str(f), MiB, 0, "nvlink")["ret"] == UNAVAILABLE
    assert store.mount_segment(str(f), MiB, 0, "tcp", "bogus")["ret"] == INVALID_PARAMS
    with pytest.raises(TypeError):
        store.mount_segment(None, MiB)
    with pytest.raises(TypeError):
        store.mount_segment(str(f), "1MB")
    with pytest.raises(ValueError):
        store.mount_segment(str(f), -4096)
    with pytest.raises(TypeError):
        store.mount_segment(str(f), MiB, 0, 5)
    assert store.allocate_and_mount_segment(0)["ret"] == INVALID_PARAMS
    r = store.allocate_and_mount_segment((1 << 64) - 1)  # overflows the 1 TiB bound
    assert r == {"ret": INVALID_PARAMS, "segment_ids": [], "allocated_size": 0}
    with pytest.raises(ValueError):
        store.allocate_and_mount_segment(-1)
    with pytest.raises(TypeError):
        store.allocate_and_mount_segment(1.5)


def test_unmount_bad_arguments(store, tmp_path):
    f = tmp_path / "m.bin"
    f.write_bytes(b"\0" * MiB)
    fid = store.mount_segment(str(f), MiB)["segment_ids"][0]
    aid = store.allocate_and_mount_segment(MiB)["segment_ids"][0]
    assert store.unmount_segment(["no-such-segment"]) == SEGMENT_NOT_FOUND
    assert store.unmount_segment([]) == INVALID_PARAMS
    assert store.unmount_segment([fid, fid]) == INVALID_PARAMS
    # each call only unmounts what its counterpart mounted; nothing is unmounted
    assert store.unmount_segment([aid]) == INVALID_PARAMS
    assert store.unmount_and_free_segment([fid]) == INVALID_PARAMS
    assert store.unmount_segment([fid, "no-such-segment"]) == SEGMENT_NOT_FOUND
    assert store.put(K("still"), b"s" * 4096) == 0  # both still mounted
    with pytest.raises(TypeError):
        store.unmount_segment(fid)  # a str is not a list of ids
    with pytest.raises(TypeError):
        store.unmount_segment([1])
    with pytest.raises(ValueError):
        store.unmount_segment([fid], -1)
    assert store.unmount_segment([fid], 10 ** 6) == INVALID_PARAMS
    assert store.unmount_segment([fid]) == 0
    assert store.unmount_segment([fid]) == SEGMENT_NOT_FOUND  # already gone
    assert store.unmount_and_free_segment([aid]) == 0


def test_not_set_up():
    s = MooncakeDistributedStore()
    assert s.allocate_and_mount_segment(MiB)["ret"] == NOT_READY
    assert s.mount_segment("/nonexistent", MiB)["ret"] == NOT_READY
    assert s.unmount_segment(["x"]) == NOT_READY
    assert s.unmount_and_free_segment(["x"]) == NOT_READY


def test_mount_overlapping_registered_memory_is_refused(store):
    buf = np.zeros(2 * MiB + 4096, dtype=np.uint8)
    base = (buf.ctypes.data + 4095) // 4096 * 4096
    assert store.register_buffer(base, MiB) == 0
    # a registered zero-copy buffer cannot also be a segment (native call, own memory)
    assert store._seg_mount(base, MiB) == INVALID_PARAMS
    assert store.unregister_buffer(base) == 0


def test_extra_segment_remounted_after_master_restart(tmp_path):
    """SIGKILL the master, start it again on the same ports: the client's
    heartbeat remounts its extra segment (and republishes its descriptor to
    the new embedded metadata server), so puts land there again."""
    import signal
    import time

    from conftest import STARTUP_S, free_port
    rpc, http = free_port(), free_port()
    d = Daemons()
    try:
        master, meta = start_master(d, rpc, http)
        c = {"master": master, "metadata": meta}
        s, r = client(c), client(c)
        sid = s.allocate_and_mount_segment(4 * MiB)["segment_ids"][0]
        assert s.put(K("before"), b"b" * 4096) == 0
        d.procs[0].send_signal(signal.SIGKILL)
        d.procs[0].wait()
        d.procs = []
        start_master(d, rpc, http)
        key, val = K("after"), os.urandom(100 << 10)
        deadline = time.monotonic() + 3 * STARTUP_S
        rc = None
        while time.monotonic() < deadline:
            rc = s.put(key, val)
            if rc == 0:
                break
            time.sleep(0.2)
        assert rc == 0, "no remount after the master restart: put returned %s" % rc
        assert replica_segments(s, key) == [sid]
        deadline = time.monotonic() + 3 * STARTUP_S
        got = b""
        while time.monotonic() < deadline and got != val:
            got = r.get(key)
            time.sleep(0.1)
        assert got == val
        assert s.unmount_and_free_segment([sid]) == 0
        r.close()
        s.close()
    finally:
        d.stop()


# ---- mooncake.mooncake_store_service: the REST service over these calls -------------

def _http(port, method, path, obj=None):
    import json
    import urllib.error
    import urllib.request
    data = None if obj is None else json.dumps(obj).encode()
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture
def service(cluster, tmp_path):
    import asyncio
    import json
    from mooncake.mooncake_store_service import MooncakeStoreService
    cfg = tmp_path / "mooncake.json"
    cfg.write_text(json.dumps({
        "local_hostname": "127.0.0.1", "metadata_server": cluster["metadata"],
        "master_server_address": cluster["master"], "global_segment_size": 0,
        "local_buffer_size": "4MB", "protocol": "tcp", "device_name": ""}))
    svc = MooncakeStoreService(str(cfg), {"no_such_field": "ignored"})
    assert asyncio.run(svc.start_store_service(max_wait_time=30)) is True
    assert asyncio.run(svc.start_http_service(0, "127.0.0.1")) is True
    yield svc
    asyncio.run(svc.stop())


def test_store_service_rest_api_mounts_and_serves(service, reader):
    import json
    port = service.port
    # no memory in the pool yet: the put fails
    assert _http(port, "PUT", "/api/put", {"key": "k1", "value": "hello"})[0] == 500
    st, body = _http(port, "POST", "/api/mount", {"size": MiB})
    assert st == 200, body
    r = json.loads(body)
    assert r["allocated_size"] == 4 * MiB and len(r["segment_ids"]) == 1
    key = K("svc")
    assert _http(port, "PUT", "/api/put", {"key": key, "value": "héllo"})[0] == 200
    assert _http(port, "GET", "/api/get/" + key) == (200, "héllo".encode())
    assert reader.get(key) == "héllo".encode()  # stored in the service's mounted segment
    assert json.loads(_http(port, "GET", "/api/exist/" + key)[1]) == {"exists": True}
    k2 = K("svc2")  # never read: no read lease keeps it from a remove without force
    assert _http(port, "PUT", "/api/put", {"key": k2, "value": "bye"})[0] == 200
    assert _http(port, "DELETE", "/api/remove/" + k2)[0] == 200
    assert _http(port, "GET", "/api/get/" + k2)[0] == 404
    assert json.loads(_http(port, "GET", "/api/exist/" + k2)[1]) == {"exists": False}
    assert _http(port, "POST", "/api/unmount", {"segment_ids": r["segment_ids"]})[0] == 200
    assert _http(port, "POST", "/api/unmount", {"segment_ids": r["segment_ids"]})[0] == 500
    # bad requests
    assert _http(port, "POST", "/api/mount", {"size": -1})[0] == 400
    assert _http(port, "POST", "/api/mount", {"size": "1MB"})[0] == 400
    assert _http(port, "POST", "/api/unmount", {})[0] == 400
    assert _http(port, "PUT", "/api/put", {"key": "k"})[0] == 400
    assert _http(port, "GET", "/api/nothing")[0] == 404
    st, body = _http(port, "POST", "/api/reconfigure", {"mode": "sideways"})
    assert st == 400 and b"Invalid mode" in body


def test_store_service_reconfigure_decode_prefill(service, tmp_path):
    import json
    port = service.port
    f1, f2 = tmp_path / "d1", tmp_path / "d2"
    for f in (f1, f2):
        f.write_bytes(b"\0" * (4 * MiB))
    st, body = _http(port, "POST", "/api/reconfigure",
                     {"mode": "decode", "path": str(f1), "size": 4 * MiB})
    assert st == 200, body
    first = json.loads(body)["segment_ids"]
    key = K("dec")
    assert _http(port, "PUT", "/api/put", {"key": key, "value": "x" * 5000})[0] == 200
    assert f1.read_bytes().find(b"x" * 5000) >= 0  # the value lives in the mounted file
    # make-before-break: a failing new mount keeps the old segment serving
    st, body = _http(port, "POST", "/api/reconfigure",
                     {"mode": "decode", "path": str(tmp_path / "missing"), "size": 4 * MiB})
    assert st == 500 and json.loads(body)["mode"] == "decode"
    assert _http(port, "GET", "/api/get/" + key)[0] == 200
    st, body = _http(port, "POST", "/api/reconfigure",
                     {"mode": "decode", "path": str(f2), "size": 4 * MiB})
    assert st == 200
    second = json.loads(body)["segment_ids"]
    assert second != first and service.mounted_segment_ids == second
    assert _http(port, "POST", "/api/reconfigure", {"mode": "prefill"}) == (
        200, json.dumps({"status": "success", "mode": "prefill"}).encode())
    assert service.mounted_segment_ids == []
    assert _http(port, "PUT", "/api/put", {"key": K("p"), "value": "y"})[0] == 500
    # shm: names only (no paths), then unmount by id
    assert _http(port, "POST", "/api/mount_shm", {"name": "../etc/x", "size": MiB})[0] == 400
    shm = "crescent-i13-test-%s" % uuid.uuid4().hex[:8]
    with open("/dev/shm/" + shm, "wb") as fh:
        fh.truncate(MiB)
    try:
        st, body = _http(port, "POST", "/api/mount_shm", {"name": shm, "size": MiB})
        assert st == 200, body
        ids = json.loads(body)["segment_ids"]
        assert _http(port, "POST", "/api/unmount_shm", {"segment_ids": ids[0]})[0] == 200
        st, body = _http(port, "POST", "/api/unmount_shm", {"segment_ids": ids})
        assert st == 500 and json.loads(body)["failed_segment_ids"] == ids
    finally:
        os.unlink("/dev/shm/" + shm)


def test_store_service_command(cluster, tmp_path):
    """python3 -m mooncake.mooncake_store_service (mc_store_rest_server)
    with -D overrides, until SIGTERM."""
    import signal
    import subprocess
    import sys
    from conftest import wait_line
    env = dict(os.environ, MOONCAKE_MASTER=cluster["master"])
    env.pop("MOONCAKE_CONFIG_PATH", None)
    p = subprocess.Popen([sys.executable, "-m", "mooncake.mooncake_store_service",
                          "--port", "0", "--host", "127.0.0.1",
                          "-Dmetadata_server=" + cluster["metadata"],
                          "-Dlocal_hostname=127.0.0.1", "-Dglobal_segment_size=8MB",
                          "-Dlocal_buffer_size=4MB"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        port = int(wait_line(p, r"listening on 127.0.0.1:(\d+)", "store service").group(1))
        key = K("cmd")
        assert _http(port, "PUT", "/api/put", {"key": key, "value": "v"})[0] == 200
        assert _http(port, "GET", "/api/get/" + key) == (200, b"v")
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()


def test_store_service_handlers_as_mooncakes_tests_call_them():
    """Mooncake's test_mooncake_store_service_api.py drives the handlers
    directly (service built with __new__, an asyncio.Lock, a stand-in store,
    responses read through .status / .text / .body). The same cases here,
    with a stand-in store: this checks the handler layer alone; the tests
    above run it against a real cluster."""
    import asyncio
    import json
    from types import SimpleNamespace
    from mooncake.mooncake_store_service import MooncakeStoreService, _shm_name_to_path

    class Stand:
        def __init__(self):
            self.calls = []

        def mount_segment(self, path, size, offset, protocol, location):
            self.calls.append(("mount", path, size, offset, protocol, location))
            return {"ret": 0, "segment_ids": ["s1"]}

        def unmount_segment(self, ids):
            self.calls.append(("unmount", list(ids)))
            return -1 if "bad" in ids else 0

        def allocate_and_mount_segment(self, size, protocol, location):
            return {"ret": 0, "segment_ids": ["s2"], "allocated_size": 4096}

        def unmount_and_free_segment(self, ids):
            self.calls.append(("free", list(ids)))
            return 0

    class Req:
        def __init__(self, body, key=None):
            self.body, self.match_info = body, {"key": key}

        async def json(self):
            return self.body

    svc = MooncakeStoreService.__new__(MooncakeStoreService)
    st = Stand()
    svc.store, svc.config = st, SimpleNamespace(protocol="tcp")
    svc.current_mode, svc.mounted_segment_ids, svc.last_mount_info = "prefill", [], {}
    svc._state_lock = asyncio.Lock()
    run = asyncio.run

    r = run(svc.handle_mount_shm(Req({"name": "seg", "size": 4096, "offset": 128,
                                      "protocol": "tcp", "location": "cpu:0"})))
    assert r.status == 200 and json.loads(r.text)["segment_ids"] == ["s1"]
    assert st.calls[-1] == ("mount", "/dev/shm/seg", 4096, 128, "tcp", "cpu:0")
    svc.current_mode, svc.mounted_segment_ids = "decode", ["s1", "bad"]
    r = run(svc.handle_unmount_shm(Req({"segment_ids": ["s1", "bad"]})))
    assert r.status == 500 and json.loads(r.text)["failed_segment_ids"] == ["bad"]
    assert svc.mounted_segment_ids == ["bad"] and svc.current_mode == "decode"
    r = run(svc.handle_mount(Req({"size": 1, "protocol": "tcp", "location": "cpu:0"})))
    assert json.loads(r.text) == {"status": "success", "segment_ids": ["s2"],
                                  "allocated_size": 4096}
    assert run(svc.handle_unmount(Req({"segment_ids": "s2"}))).status == 200
    assert st.calls[-1] == ("free", ["s2"])
    for bad in ({"name": "seg"}, {"name": "../foo", "size": 4096}):
        r = run(svc.handle_mount_shm(Req(bad)))
        assert r.status == 400 and "name or size" in json.loads(r.text)["error"]
    assert "Invalid size" in run(svc.handle_mount(Req({"size": 0}))).text
    assert "Missing segment_ids" in run(svc.handle_unmount_shm(Req({}))).text
    assert _shm_name_to_path("/x") == "/dev/shm/x" and _shm_name_to_path("a/b") is None
    # put / get / exist / remove / remove_all, store failures and exceptions
    st.put = lambda k, v: 0
    assert run(svc.handle_put(Req({"key": "k", "value": "v"}))).status == 200
    for body in ({"value": "v"}, {"key": "", "value": "v"}):
        assert "Missing key or value" in run(svc.handle_put(Req(body))).text
    st.put = lambda k, v: -1
    assert "PUT operation failed" in run(svc.handle_put(Req({"key": "k", "value": "v"}))).text
    st.get = lambda k: b"payload"
    r = run(svc.handle_get(Req({}, "k")))
    assert (r.status, r.body) == (200, b"payload")
    for miss in (None, b""):
        st.get = lambda k, m=miss: m
        st.is_exist = lambda k: 0
        r = run(svc.handle_get(Req({}, "k")))
        assert r.status == 404 and "Key not found" in r.text

    def boom(*a):
        raise RuntimeError("store crashed")
    for name, call in (("get", lambda: svc.handle_get(Req({}, "k"))),
                       ("is_exist", lambda: svc.handle_exist(Req({}, "k"))),
                       ("remove", lambda: svc.handle_remove(Req({}, "k"))),
                       ("remove_all", lambda: svc.handle_remove_all(Req({})))):
        setattr(st, name, boom)
        r = run(call())
        assert r.status == 500 and "store crashed" in json.loads(r.text)["error"], name
    st.is_exist = lambda k: True
    assert json.loads(run(svc.handle_exist(Req({}, "k"))).text) == {"exists": True}
    st.remove = lambda k: -1
    assert "Remove operation failed" in run(svc.handle_remove(Req({}, "k"))).text
    st.remove_all = lambda: 5
    assert "5" in json.loads(run(svc.handle_remove_all(Req({}))).text)["status"]
    st.remove_all = lambda: -1
    assert "RemoveAll operation failed" in run(svc.handle_remove_all(Req({}))).text
