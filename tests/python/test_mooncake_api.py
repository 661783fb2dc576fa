"""Mooncake's whole mooncake.store / mooncake.engine surface on crescent, against
a real local cluster (crescent-master with a short read lease + a storage
node): every module name, ReplicateConfig's fields, the methods beyond the
basic put/get (upserts, tensors with TP and general parallelism,
safetensors, ranged reads, put sessions, replica descriptors, replica
clear) and the calls whose feature crescent lacks, which must answer with
Mooncake's codes instead of AttributeError."""
import ctypes
import os
import struct
import time
import uuid

import numpy as np
import pytest

import crescent
from conftest import Daemons, SEG, exe, start_node, upserts_under_readers, wait_line
import mooncake
from mooncake import engine as mengine
from mooncake import store as mstore
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
from crescent import mooncake_types as mtypes

INVALID_PARAMS = -600
NOT_FOUND = -704
NOT_READY = -1010
HAS_LEASE = -706
UNAVAILABLE = -1011
LEASE_MS = 300
H = 304  # Mooncake's serialized tensor metadata

torch = pytest.importorskip("torch", reason="python3-torch is not installed")


def K(tag=""):
    return "m-%s-%s" % (tag, uuid.uuid4().hex[:12])


@pytest.fixture(scope="module")
def cluster():
    """A master with a 300 ms read lease (so lease expiry is reachable by
    waiting, never asserted on time) and one storage node."""
    d = Daemons()
    try:
        p = d.start([exe("crescent-master"), "--rpc_port=0", "--rpc_address=127.0.0.1",
                     "--enable_http_metadata_server=true",
                     "--http_metadata_server_host=127.0.0.1", "--http_metadata_server_port=0",
                     "--metrics_address=127.0.0.1", "--metrics_port=0",
                     "--default_kv_lease_ttl=%d" % LEASE_MS])
        m = wait_line(p, r"listening rpc=(\d+) .*http_metadata=(\d+)", "crescent-master")
        master = "127.0.0.1:%s" % m.group(1)
        meta = "http://127.0.0.1:%s/metadata" % m.group(2)
        node = start_node(d, master, meta)
        yield {"master": master, "metadata": meta, "node": node}
    finally:
        d.stop()


def own_store(cluster):
    """A store whose own segment takes allocations. The master holds the
    name (host:port) of a segment it dropped until every late reader or
    writer of the old one is done (store-master.md), and places nothing in a
    new segment of that name meanwhile; a new client that happens to get a
    recently closed client's port gets none of its own puts. Tests that
    assert placement on the caller's segment need one that is not held."""
    for _ in range(5):
        s = MooncakeDistributedStore()
        assert s.setup("localhost", cluster["metadata"], SEG, "16MB", "tcp", "",
                       cluster["master"]) == 0
        c = ReplicateConfig()
        c.replica_num = 1
        c.preferred_segment = s.get_hostname()
        k = K("probe")
        own = s.put(k, b"p" * 4096, c) == 0 and \
            endpoints(s, k) == [mtypes.segment_name_of(s.get_hostname())]
        s.remove(k, True)
        if own:
            return s
        s.close()
    raise AssertionError("no store got its own segment in 5 tries")


@pytest.fixture
def store(cluster):
    s = own_store(cluster)
    yield s
    s.remove_all(force=True)
    s.close()


def wait_lease():
    time.sleep(LEASE_MS / 1000 * 2)


def while_leased(store, keys, op):
    """Reads keys (each read takes a LEASE_MS lease) and then runs op();
    returns op's result, or None when the reads and op took more than half
    a lease (a loaded machine: the leases may have run out, so what op saw
    proves nothing). The caller then retries with fresh keys."""
    t0 = time.monotonic()
    for k in keys:
        store.get(k)
    res = op()
    return res if time.monotonic() - t0 < LEASE_MS / 2000 else None


# ---- names ---------------------------------------------------------------------

MOONCAKE_STORE_NAMES = {
    "RangedReadSnapshot", "ObjectDataType", "SoftPinAction", "ReplicateConfig", "ReplicaStatus",
    "MemoryDescriptor", "DiskDescriptor", "ReplicaDescriptor", "Descriptor", "TaskType",
    "TaskStatus", "QueryTaskResponse", "BufferHandle", "BufferLeaseView", "BufferLease",
    "BufferPool", "RegisteredBufferPool", "RegisteredBufferLease", "RegisteredBufferLeaseView",
    "MooncakeHostMemAllocator", "MooncakeDistributedNoFRegister", "MooncakeDistributedStore",
    "EngramStoreConfig", "EngramStore", "bind_to_numa_node", "get_alloc_func_addr",
    "get_free_func_addr", "UNKNOWN", "KVCACHE", "TENSOR", "WEIGHT", "SAMPLE", "ACTIVATION",
    "GRADIENT", "OPTIMIZER_STATE", "METADATA", "GENERAL", "UNDEFINED", "INITIALIZED",
    "PROCESSING", "COMPLETE", "REMOVED", "FAILED", "REPLICA_COPY", "REPLICA_MOVE", "PENDING",
    "SUCCESS", "ParallelAxis", "TensorParallelism", "ReadTarget", "AXIS_DP", "AXIS_TP",
    "AXIS_EP", "AXIS_PP", "READ_MODE_AS_STORED", "READ_MODE_SHARD", "READ_MODE_FULL"}

STORE_METHODS = """setup setup_dummy init_all alloc_from_mem_pool close get_hostname health_check
get get_batch get_buffer batch_get_buffer get_size is_exist batch_is_exist isExist remove
batch_remove remove_all remove_by_regex register_buffer unregister_buffer put put_parts put_batch
put_from batch_put_from put_from_with_metadata get_into batch_get_into get_into_ranges
batch_put_from_multi_buffers batch_get_into_multi_buffers batch_put_from_multi_buffer_ranges
batch_get_into_multi_buffer_ranges batch_put_session_start batch_put_session_end
batch_put_session_abort upsert upsert_parts upsert_batch upsert_from batch_upsert_from
upsert_tensor upsert_pub_tensor batch_upsert_tensor batch_upsert_pub_tensor upsert_tensor_from
batch_upsert_tensor_from upsert_tensor_with_tp batch_upsert_tensor_with_tp upsert_pub_tensor_with_tp
batch_upsert_pub_tensor_with_tp upsert_tensor_with_tp_from batch_upsert_tensor_with_tp_from
upsert_tensor_with_parallelism batch_upsert_tensor_with_parallelism
upsert_tensor_with_parallelism_from batch_upsert_tensor_with_parallelism_from put_tensor
get_tensor batch_put_tensor batch_get_tensor pub_tensor batch_pub_tensor get_tensor_into
batch_get_tensor_into put_tensor_from batch_put_tensor_from put_tensor_with_tp
batch_put_tensor_with_tp pub_tensor_with_tp batch_pub_tensor_with_tp get_tensor_with_tp
batch_get_tensor_with_tp get_tensor_with_tp_into batch_get_tensor_with_tp_into
put_tensor_with_tp_from batch_put_tensor_with_tp_from put_tensor_with_parallelism
batch_put_tensor_with_parallelism get_tensor_with_parallelism batch_get_tensor_with_parallelism
get_tensor_with_parallelism_into batch_get_tensor_with_parallelism_into
put_tensor_with_parallelism_from batch_put_tensor_with_parallelism_from
save_tensor_to_safetensor load_tensor_from_safetensor save_tensor_to_file load_tensor_from_file
get_replica_desc batch_get_replica_desc batch_replica_clear create_copy_task create_move_task
query_task mount_segment unmount_segment allocate_and_mount_segment unmount_and_free_segment
pin_kv_session unpin_kv_session attach_kv_session get_kv_session close_kv_session
update_kv_session list_kv_session_keys""".split()


def test_every_store_name_exists():
    missing = sorted(n for n in MOONCAKE_STORE_NAMES if not hasattr(mstore, n))
    assert not missing, missing
    assert MOONCAKE_STORE_NAMES <= set(mstore.__all__)
    # export_values(): the later enums win the shared names, as in Mooncake
    assert mstore.PROCESSING is mstore.TaskStatus.PROCESSING
    assert mstore.FAILED is mstore.TaskStatus.FAILED
    assert mstore.COMPLETE is mstore.ReplicaStatus.COMPLETE
    assert (int(mstore.SoftPinAction.PRESERVE), int(mstore.SoftPinAction.ENABLE),
            int(mstore.SoftPinAction.DISABLE)) == (0, 1, 2)
    assert mooncake.BufferPool is mstore.BufferPool
    from mooncake.buffer_pool import BufferPool, RegisteredBufferPool
    assert BufferPool is RegisteredBufferPool is mstore.BufferPool
    methods = [m for m in STORE_METHODS if not callable(getattr(MooncakeDistributedStore, m, None))]
    assert not methods, methods
    assert len(STORE_METHODS) >= 98


def test_unsupported_classes_raise_named_error():
    for cls in (mstore.EngramStore, mstore.EngramStoreConfig,
                mstore.MooncakeDistributedNoFRegister):
        with pytest.raises(RuntimeError, match="UNAVAILABLE_IN_CURRENT_MODE"):
            cls()


def test_replicate_config_fields_and_refusal():
    c = ReplicateConfig()
    assert (c.replica_num, c.with_soft_pin, c.with_hard_pin, c.preferred_segments,
            c.preferred_segment, c.soft_pin_action, c.soft_pin_ttl_ms, c.nof_replica_num,
            c.dfs_replica_num, c.preferred_nof_segments, c.data_type) == \
        (1, False, False, [], "", mstore.SoftPinAction.PRESERVE, 0, 0, 0, [],
         mstore.ObjectDataType.UNKNOWN)
    c.soft_pin_action = mstore.SoftPinAction.ENABLE
    c.soft_pin_ttl_ms = 1000
    c.data_type = mstore.ObjectDataType.KVCACHE
    c.preferred_segment = "localhost:12345"
    assert c.preferred_segments == ["localhost:12345"]
    c.prefer_alloc_in_same_node = "True"
    assert c.prefer_alloc_in_same_node is True
    with pytest.raises(AttributeError):
        c.no_such_field = 1
    with pytest.raises(ValueError):
        c.soft_pin_action = 7
    with pytest.raises(TypeError):
        c.replica_num = "2"
    with pytest.raises(ValueError):
        c.replica_num = -1
    assert "replica_num=1" in str(c)


def test_engine_names_and_opcodes():
    assert mengine.TransferOpcode.Read == 0 and mengine.TransferOpcode.Write == 1
    assert mengine.TransferOpcode.READ is mengine.TransferOpcode.Read
    for flag in ("SUPPORT_CUDA", "SUPPORT_EFA", "SUPPORT_HIP", "SUPPORT_MNNVL",
                 "SUPPORT_INTRA_NVLINK"):
        assert getattr(mengine, flag) is False


@pytest.mark.parametrize("protocol", ["nvlink", "hip", "nvlink_intra", "efa"])
def test_engine_rejects_hardware_protocols(protocol):
    e = mengine.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", protocol, "") == -1


def test_engine_device_memory_and_unknown_peer():
    e = mengine.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        buf = np.zeros(8192, dtype=np.uint8)
        assert e.register_memory(buf.ctypes.data, buf.nbytes, location="cuda:0") == -1
        assert e.register_memory(buf.ctypes.data, buf.nbytes, location="cpu:0") == 0
        assert e.transfer_submit_write("127.0.0.1:1", buf.ctypes.data, 4096, 16) == 0
        assert e.unregister_memory(buf.ctypes.data) == 0
    finally:
        e.close()


# ---- lifecycle -------------------------------------------------------------------

def test_setup_hostname_port_range_health_and_dummy(cluster):
    s = MooncakeDistributedStore()
    assert s.get_hostname() == ""
    assert s.health_check() == NOT_READY
    assert s.setup_dummy(16 << 20, 16 << 20, "localhost:12345") == UNAVAILABLE
    assert s.setup("localhost", cluster["metadata"], SEG, "16MB", "tcp", "",
                   cluster["master"]) == 0
    host, _, port = s.get_hostname().rpartition(":")
    assert host == "localhost" and 12300 <= int(port) <= 14300
    assert s.health_check() == 0
    assert s.setup("localhost", cluster["metadata"], SEG, "16MB", "tcp", "",
                   cluster["master"]) != 0
    assert s.setup_dummy(16 << 20, 16 << 20, "localhost:12345") != 0
    assert s.init_all("tcp", "") == UNAVAILABLE and s.alloc_from_mem_pool(4096) == 0
    # get_hostname() works as preferred_segment: the replica lands on this client
    c = ReplicateConfig()
    c.preferred_segment = s.get_hostname()
    k = K("pref")
    assert s.put(k, b"here", c) == 0
    desc = s.get_replica_desc(k)
    assert len(desc) == 1
    seg = desc[0].get_memory_descriptor().buffer_descriptor.transport_endpoint
    assert seg == "127.0.0.1:%s" % port
    assert s.close() == 0
    assert s.health_check() == NOT_READY
    assert s.setup({"local_hostname": "localhost", "metadata_server": cluster["metadata"],
                    "master_server_addr": cluster["master"], "protocol": "tcp",
                    "rdma_devices": "", "global_segment_size": "16MB",
                    "local_buffer_size": "16MB"}) == 0
    assert s.close() == 0
    # the newer keyword arguments (vLLM passes them when set)
    args = ("localhost", cluster["metadata"], SEG, "16MB", "tcp", "", cluster["master"])
    with pytest.warns(RuntimeWarning, match="disk tier"):
        assert s.setup(*args, enable_ssd_offload=True, ssd_offload_path="/tmp/x") == UNAVAILABLE
    with pytest.warns(RuntimeWarning, match="multi-tenant"):
        assert s.setup(*args, tenant_id="team-a") == UNAVAILABLE
    with pytest.raises(TypeError):
        s.setup(*args, tenant_id=5)
    with pytest.raises(TypeError):
        s.setup(*args, no_such_argument=1)
    assert s.health_check() == NOT_READY  # none of those set it up
    # Mooncake's current positional order: engine, enable_ssd_offload,
    # ssd_offload_path, tenant_id, enable_client_http_server, client_http_port,
    # enable_embedded_master (the 9th is enable_ssd_offload, not ipc_socket_path)
    assert s.setup(*args, None, False, "", "default", False, 9300, False) == 0
    assert s.close() == 0
    with pytest.warns(RuntimeWarning, match="disk tier"):
        assert s.setup(*args, None, True) == UNAVAILABLE
    with pytest.warns(RuntimeWarning, match="multi-tenant"):
        assert s.setup(*args, None, False, "", "team-a") == UNAVAILABLE
    with pytest.warns(RuntimeWarning):
        assert s.setup(*args, None, False, "", "default", True) == UNAVAILABLE
    with pytest.raises(TypeError):  # 15 positional arguments: one more than Mooncake's
        s.setup(*args, None, False, "", "default", False, 9300, False, "/tmp/mc.sock")
    # the first seven are required, as in Mooncake's binding (or one config dict)
    for n in range(1, 7):
        with pytest.raises(TypeError, match="missing required"):
            s.setup(*args[:n])
    with pytest.raises(TypeError, match="missing required"):
        s.setup({"local_hostname": "localhost"}, cluster["metadata"])
    assert s.health_check() == NOT_READY
    # Mooncake's earlier ipc_socket_path and SSD-prefetch throttle: keyword-only
    # extras, checked, with no effect (vLLM finds the throttle in the doc)
    with pytest.warns(RuntimeWarning, match="ipc_socket_path"):
        assert s.setup(*args, ipc_socket_path="/tmp/mc.sock") == 0
    assert s.close() == 0
    assert "ssd_prefetch_cooldown_sec" in MooncakeDistributedStore.setup.__doc__
    assert s.setup(*args, ssd_prefetch_cooldown_sec=0, ssd_prefetch_dedup_ttl_sec=-1) == 0
    assert s.close() == 0
    assert s.setup(*args, ssd_prefetch_cooldown_sec=10, ssd_prefetch_dedup_ttl_sec=60) == 0
    assert s.close() == 0
    for bad in ({"ssd_prefetch_cooldown_sec": "5s"}, {"ssd_prefetch_dedup_ttl_sec": 1.5}):
        with pytest.raises(TypeError):
            s.setup(*args, **bad)
    assert s.setup({"local_hostname": "localhost", "metadata_server": cluster["metadata"],
                    "master_server_addr": cluster["master"], "protocol": "tcp",
                    "global_segment_size": "16MB", "local_buffer_size": "16MB",
                    "enable_ssd_prefetch": "false", "ssd_prefetch_cooldown_sec": "5",
                    "ssd_prefetch_dedup_ttl_sec": "30"}) == 0
    assert s.close() == 0
    # Mooncake's dict overload names its parameter config: setup(config=...)
    # works, takes no other argument, and wants a dict
    cfg = {"local_hostname": "localhost", "metadata_server": cluster["metadata"],
           "master_server_addr": cluster["master"], "protocol": "tcp",
           "global_segment_size": "16MB", "local_buffer_size": "16MB"}
    assert s.setup(config=cfg) == 0
    kc = K("cfgkw")
    assert s.put(kc, b"v") == 0 and s.get(kc) == b"v"
    assert s.close() == 0
    for bad in (lambda: s.setup(config="local_hostname=localhost"),
                lambda: s.setup("localhost", config=cfg),
                lambda: s.setup(config=cfg, tenant_id="default2"),
                lambda: s.setup(config=cfg, protocol="tcp"),
                lambda: s.setup()):
        with pytest.raises(TypeError):
            bad()
    assert s.health_check() == NOT_READY


def test_remove_all_force(store):
    k = K("lease")
    assert store.put(k, b"x" * 10) == 0
    assert store.get(k) == b"x" * 10  # takes a read lease
    assert store.remove_all(force=True) >= 1
    assert store.is_exist(k) == 0


def test_nof_and_dfs_replicas_unavailable(store):
    c = ReplicateConfig()
    c.nof_replica_num = 1
    assert store.put(K("nof"), b"v", c) == UNAVAILABLE
    c.nof_replica_num = 0
    c.dfs_replica_num = 1
    buf = np.ones(64, dtype=np.uint8)
    assert store.register_buffer(buf) == 0
    assert store.batch_put_from([K("dfs")], [buf.ctypes.data], [64], c) == [UNAVAILABLE]
    assert store.unregister_buffer(buf) == 0


# ---- upsert ------------------------------------------------------------------------

def test_upsert_family_replaces(store):
    k = K("up")
    assert store.upsert(k, b"one") == 0 and store.get(k) == b"one"
    assert store.put(k, b"two") == 0 and store.get(k) == b"one"  # put keeps the old value
    assert store.upsert(k, b"three-longer") == 0 and store.get(k) == b"three-longer"
    assert store.upsert_parts(k, b"a", b"b") == 0 and store.get(k) == b"ab"
    ks = [K("ub%d" % i) for i in range(3)]
    assert store.upsert_batch(ks, [b"1", b"2", b"3"]) == 0
    assert store.upsert_batch(ks, [b"x", b"y", b"z"]) == 0
    assert store.get_batch(ks) == [b"x", b"y", b"z"]
    assert store.upsert_batch(ks, [b"x"]) == INVALID_PARAMS
    buf = np.frombuffer(b"zero-copy-value!", dtype=np.uint8).copy()
    assert store.register_buffer(buf) == 0
    assert store.upsert_from(k, buf.ctypes.data, 16) == 0 and store.get(k) == b"zero-copy-value!"
    assert store.batch_upsert_from(ks, [buf.ctypes.data] * 3, [4, 8, 16]) == [0, 0, 0]
    assert store.get_batch(ks) == [b"zero", b"zero-cop", b"zero-copy-value!"]
    assert store.unregister_buffer(buf) == 0


def test_upsert_is_atomic_for_readers(store, cluster):
    """While one client upserts a key over and over with values of changing
    sizes, readers in another client always get one whole value: never a
    miss (b""), never a mix of two versions."""
    k = K("atomic")
    vals = [bytes([i]) * (1000 + 7919 * i) for i in range(1, 9)]
    assert store.upsert(k, vals[0]) == 0
    other = MooncakeDistributedStore()
    assert other.setup("localhost", cluster["metadata"], 0, "16MB", "tcp", "",
                       cluster["master"]) == 0
    try:
        bad, seen = upserts_under_readers(store, k, vals, lambda: [other.get(k)], 120)
    finally:
        other.close()
    assert not bad, bad
    assert store.get(k) == vals[119 % len(vals)]
    assert len(seen) > 1  # the readers did see versions change


# ---- tensors -------------------------------------------------------------------------

def test_tensor_layout_is_mooncakes(store):
    t = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    k = K("t")
    assert store.put_tensor(k, t) == 0
    raw = store.get(k)
    # Mooncake's TensorObjectHeader (40 bytes) + TensorLayoutMetadata (264)
    magic, ver, hsize, dtype, ndim, kind, flags, off, nbytes = struct.unpack_from("<IHHiiIIQQ", raw)
    assert (magic, ver, hsize, dtype, ndim, kind, off, nbytes) == \
        (0x4d4f4f4e, 1, H, 6, 2, 0, H, 24)  # INT32 = 6, FULL layout
    lay = struct.unpack_from("<8q8qII", raw, 40)
    assert lay[:8] == (2, 3) + (-1,) * 6 and lay[8:16] == lay[:8] and lay[16] == 0
    assert raw[H:] == t.numpy().tobytes()
    # Mooncake's first (40-byte) layout still reads
    legacy = K("legacy")
    assert store.put(legacy, struct.pack("<ii4q", 6, 2, 2, 3, -1, -1) + t.numpy().tobytes()) == 0
    assert torch.equal(store.get_tensor(legacy), t)
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
               torch.uint8, torch.int16, torch.int64, torch.bool):
        x = (torch.arange(8) % 2).to(dt).reshape(2, 2, 2)
        kk = K("dt")
        assert store.put_tensor(kk, x) == 0
        y = store.get_tensor(kk)
        assert y.dtype == dt and torch.equal(x, y)
    scalar = torch.tensor(3.5)
    assert store.put_tensor(K("0d"), scalar) == 0


def test_zero_element_tensors_round_trip_every_form(store):
    # Mooncake's current binding: a tensor with no element is stored as the
    # 304-byte metadata alone (data_bytes 0) and read back as an empty tensor
    # of its dtype and shape, by every put/get form
    shapes = [(0,), (2, 0, 3), (0, 4)]
    for dt in (torch.float32, torch.bfloat16, torch.int64):
        for shp in shapes:
            k = K("e")
            assert store.put_tensor(k, torch.empty(shp, dtype=dt)) == 0
            raw = store.get(k)
            assert len(raw) == H
            _m, _v, _h, _d, ndim, _k, _f, off, nbytes = struct.unpack_from("<IHHiiIIQQ", raw)
            assert (ndim, off, nbytes) == (len(shp), H, 0)
            got = store.get_tensor(k)
            assert got.dtype == dt and tuple(got.shape) == shp and got.numel() == 0
    full, e = torch.arange(6.0).reshape(2, 3), torch.empty(3, 0, dtype=torch.float16)
    ks = [K("b0"), K("b1")]
    assert store.batch_put_tensor(ks, [e, full]) == [0, 0]
    g = store.batch_get_tensor(ks)
    assert g[0].shape == (3, 0) and g[0].dtype == torch.float16 and torch.equal(g[1], full)
    kp2 = [K("p0"), K("p1")]
    assert store.batch_pub_tensor(kp2, [full, e], ReplicateConfig()) == [0, 0]
    assert store.get_tensor(kp2[1]).shape == (3, 0)
    # upsert replaces a tensor with an empty one and back
    k = K("up")
    assert store.put_tensor(k, full) == 0
    assert store.upsert_tensor(k, e) == 0
    assert store.get_tensor(k).shape == (3, 0)
    assert store.batch_upsert_tensor([k], [full]) == [0]
    assert torch.equal(store.get_tensor(k), full)
    # _into: the metadata alone lands in the buffer; the tensor is empty
    buf = np.zeros(4096, dtype=np.uint8)
    assert store.register_buffer(buf) == 0
    ke = K("into")
    assert store.put_tensor(ke, torch.empty(0, 5, dtype=torch.int32)) == 0
    assert store.get_into(ke, buf.ctypes.data, buf.nbytes) == H
    got = store.get_tensor_into(ke, buf.ctypes.data, buf.nbytes)
    assert got.shape == (0, 5) and got.dtype == torch.int32
    res = store.batch_get_tensor_into([ke, ks[1]], [buf.ctypes.data, buf.ctypes.data + 2048],
                                      [2048, 2048])
    assert res[0].shape == (0, 5) and torch.equal(res[1], full)
    # _from: a header-only serialized tensor is stored as is
    assert store.get_into(ke, buf.ctypes.data, buf.nbytes) == H
    kf = K("from")
    assert store.put_tensor_from(kf, buf.ctypes.data, H) == 0
    assert store.get(kf) == store.get(ke)
    assert store.batch_put_tensor_from([K("f1"), K("f2")], [buf.ctypes.data] * 2, [H, H]) == [0, 0]
    assert store.upsert_tensor_from(kf, buf.ctypes.data, H) == 0
    assert store.get_tensor(kf).shape == (0, 5)
    # a destination tensor receives 0 bytes
    assert store.get_tensor_into_cuda(ke, torch.empty(0, 5, dtype=torch.int32)) == 0
    # ... of exactly the stored shape, as Mooncake's binding checks (also 0 bytes)
    assert store.get_tensor_into_cuda(ke, torch.empty(0, 4, dtype=torch.int32)) == -600
    assert store.get_tensor_into_cuda(ke, torch.empty(0, dtype=torch.int32)) == -600
    # tensor parallelism: tensor.chunk's empty shards are stored and read
    kt = K("tp")
    assert store.put_tensor_with_tp(kt, torch.empty(4, 0), tp_size=2, split_dim=0) == 0
    for r in range(2):
        assert store.get_tensor_with_tp(kt, tp_rank=r, tp_size=2).shape == (2, 0)
    assert store.batch_get_tensor_with_tp([kt], tp_rank=1, tp_size=2)[0].shape == (2, 0)
    got = store.get_tensor_with_tp_into(kt, buf.ctypes.data, buf.nbytes, tp_rank=1, tp_size=2)
    assert got.shape == (2, 0)
    kt2 = K("tpf")
    assert store.get_into(ke, buf.ctypes.data, buf.nbytes) == H
    assert store.put_tensor_with_tp_from(kt2, buf.ctypes.data, H, tp_size=5, split_dim=1) == 0
    assert store.get_tensor_with_tp(kt2, tp_rank=4, tp_size=5).shape == (0, 1)
    assert store.batch_put_tensor_with_tp([K("bt")], [torch.empty(0, 2)], tp_size=2,
                                          split_dim=1) == [0]
    # parallelism API: a writer partition of an empty tensor
    kp = K("par")
    assert store.put_tensor_with_parallelism(kp, torch.empty(0, 4),
                                             writer_partition=(1, 2, 1)) == 0
    assert store.get_tensor(kp + "_tp_1").shape == (0, 2)
    # chunk API: a rank's empty chunk of an empty full tensor
    kc = K("chunk")
    assert store.put_tensor_chunk_with_tp(kc, torch.empty(2, 0), tp_rank=0, tp_size=2,
                                          split_dim=0, full_shape=[4, 0]) == 0
    assert store.get_tensor(kc + "_tp_0").shape == (2, 0)
    assert store.put_tensor_chunk_with_tp(kc, torch.empty(3, 0), tp_rank=1, tp_size=2,
                                          split_dim=0, full_shape=[4, 0]) == INVALID_PARAMS
    assert store.unregister_buffer(buf) == 0
    # a stored header whose data length does not match its shape is still refused
    bad = bytearray(store.get(ke))
    struct.pack_into("<q", bad, 40 + 64, 1)  # local_shape[0] = 1: 5 elements, no data
    struct.pack_into("<q", bad, 40, 1)
    kb = K("badhdr")
    assert store.put(kb, bytes(bad)) == 0
    assert store.get_tensor(kb) is None


def test_tensor_edge_cases(store):
    assert store.put_tensor(K("9d"), torch.zeros(*[1] * 8, 2)) == INVALID_PARAMS
    k8 = K("8d")
    assert store.put_tensor(k8, torch.ones(*[1] * 7, 2)) == 0
    assert store.get_tensor(k8).shape == (1,) * 7 + (2,)
    assert store.put_tensor(K("junk"), "not a tensor") == INVALID_PARAMS
    k = K("bytes")
    assert store.put(k, b"not a tensor at all, just bytes that are long enough") == 0
    assert store.get_tensor(k) is None
    assert store.get_tensor(K("missing")) is None
    assert store.batch_put_tensor([K("a")], []) == [INVALID_PARAMS]
    assert store.batch_get_tensor([K("x"), K("y")]) == [None, None]


def test_tensor_into_and_from(store):
    t = torch.randn(4, 8)
    k = K("into")
    assert store.put_tensor(k, t) == 0
    buf = np.zeros(4096, dtype=np.uint8)
    assert store.register_buffer(buf) == 0
    got = store.get_tensor_into(k, buf.ctypes.data, buf.nbytes)
    assert torch.equal(got, t)
    n = H + t.numel() * 4
    # Mooncake's test_upsert_api: change the tensor in place, write it back
    got.fill_(42.0)
    assert store.upsert_tensor_from(k, buf.ctypes.data, n) == 0
    assert torch.equal(store.get_tensor(k), torch.full((4, 8), 42.0))
    got.copy_(t)
    assert store.upsert_tensor_from(k, buf.ctypes.data, n) == 0
    k2 = K("from")
    assert store.put_tensor_from(k2, buf.ctypes.data, n) == 0
    assert torch.equal(store.get_tensor(k2), t)
    assert store.upsert_tensor_from(k2, buf.ctypes.data, n) == 0
    assert store.put_tensor_from(K("bad"), buf.ctypes.data + 8, 32) == INVALID_PARAMS
    # one buffer that is not a serialized tensor refuses the whole batch, as
    # Mooncake's binding does: -600 for every key, the good one not stored
    # either (the _from/upsert and tp_size=1 _with_tp_from forms alike)
    for call in (store.batch_put_tensor_from, store.batch_upsert_tensor_from,
                 lambda ks, ps, ns: store.batch_put_tensor_with_tp_from(ks, ps, ns, tp_size=1),
                 lambda ks, ps, ns: store.batch_upsert_tensor_with_tp_from(ks, ps, ns)):
        b1, b2 = K("b1"), K("b2")
        assert call([b1, b2], [buf.ctypes.data] * 2, [n, 10]) == \
            [INVALID_PARAMS, INVALID_PARAMS]
        assert call([b2, b1], [buf.ctypes.data + 8, buf.ctypes.data], [64, n]) == \
            [INVALID_PARAMS, INVALID_PARAMS]
        assert store.is_exist(b1) == 0 and store.is_exist(b2) == 0
        assert call([b1, b2], [buf.ctypes.data] * 2, [n, n]) == [0, 0]
        assert torch.equal(store.get_tensor(b2), t)
    assert store.batch_put_tensor_from([], [], []) == []
    # with tp_size > 1 each buffer is decoded and split on its own (Mooncake's
    # batch_put_tensor_with_tp_from): a bad one fails alone
    kb = K("tpb")
    assert store.batch_put_tensor_with_tp_from([K("tpbad"), kb], [buf.ctypes.data] * 2, [10, n],
                                               tp_size=2) == [INVALID_PARAMS, 0]
    assert torch.equal(store.get_tensor_with_tp(kb, 1, 2), t[2:])
    res = store.batch_get_tensor_into([k, K("none")], [buf.ctypes.data, buf.ctypes.data + 2048],
                                      [2048, 2048])
    assert torch.equal(res[0], t) and res[1] is None
    assert store.unregister_buffer(buf) == 0


def test_tensor_parallel(store):
    t = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    k = K("tp")
    assert store.put_tensor_with_tp(k, t, tp_size=2, split_dim=1) == 0
    assert torch.equal(store.get_tensor(k + "_tp_0"), t[:, :4])
    raw = store.get(k + "_tp_1")  # a SHARD layout naming the full shape and the TP axis
    assert struct.unpack_from("<I", raw, 16)[0] == 1
    lay = struct.unpack_from("<8q8qII6iq", raw, 40)
    assert lay[:2] == (4, 8) and lay[8:10] == (4, 4) and lay[16] == 1
    assert lay[18:23] == (1, 0, 1, 2, 1)  # kind TP, axis 0, rank 1 of 2, split_dim 1
    assert torch.equal(store.get_tensor_with_tp(k, tp_rank=1, tp_size=2), t[:, 4:])
    assert store.get_tensor_with_tp(k, tp_rank=3, tp_size=4) is None
    # Mooncake's get_tensor_with_tp reads the object under key_tp_<rank> as it
    # is (split_dim and the stored shard metadata are not used to rebuild
    # anything): a tensor put there directly comes back unchanged
    kd = K("tpd")
    other = torch.arange(6, dtype=torch.int16).reshape(3, 2)
    assert store.put_tensor(kd + "_tp_1", other) == 0
    assert torch.equal(store.get_tensor_with_tp(kd, tp_rank=1, tp_size=7, split_dim=1), other)
    assert store.get_tensor_with_tp(kd, tp_rank=0, tp_size=7) is None
    assert store.get_tensor_with_tp(kd + "_tp_1", tp_rank=5, tp_size=1).dtype == torch.int16
    assert store.put_tensor_with_tp(K("bad"), t, tp_size=3, split_dim=5) == INVALID_PARAMS
    ks = [K("btp1"), K("btp2")]
    c = ReplicateConfig()
    assert store.batch_pub_tensor_with_tp(ks, [t, t * 2], c, tp_size=4) == [0, 0]
    got = store.batch_get_tensor_with_tp(ks, tp_rank=3, tp_size=4)
    assert torch.equal(got[0], t[3:]) and torch.equal(got[1], t[3:] * 2)
    assert store.upsert_tensor_with_tp(ks[0], t + 1, tp_size=4) == 0
    assert torch.equal(store.get_tensor_with_tp(ks[0], 0, 4), t[:1] + 1)
    # _from: the full tensor is read from registered memory and split
    buf = np.zeros(4096, dtype=np.uint8)
    assert store.register_buffer(buf) == 0
    assert store.get_tensor_into(k + "_tp_0", buf.ctypes.data, 4096) is not None
    kf = K("tpf")
    assert store.put_tensor_with_tp_from(kf, buf.ctypes.data, H + 16 * 4, tp_size=2) == 0
    assert torch.equal(store.get_tensor_with_tp(kf, 1, 2), t[2:, :4])
    shard = store.get_tensor_with_tp_into(kf, buf.ctypes.data + 1024, 1024, 1, 2)
    assert torch.equal(shard, t[2:, :4])
    assert store.unregister_buffer(buf) == 0


def test_general_parallelism(store):
    P, TP, RT = mstore.ParallelAxis, mstore.TensorParallelism, mstore.ReadTarget
    full = torch.arange(24, dtype=torch.float32).reshape(2, 12)
    k = K("par")
    # lone TP axis: shard input, legacy key names
    for r in range(3):
        par = TP([P("tp", r, 3, split_dim=1)])
        assert store.put_tensor_with_parallelism(k, full[:, 4 * r:4 * r + 4], par) == 0
    assert torch.equal(store.get_tensor(k + "_tp_2"), full[:, 8:])
    tgt = RT("full", TP([P("tp", 0, 3, split_dim=1)]))
    assert torch.equal(store.get_tensor_with_parallelism(k, tgt), full)
    # without split_dim the shards' layout metadata names it
    assert torch.equal(store.get_tensor_with_parallelism(k, RT("full", TP([P("tp", 0, 3)]))), full)
    tgt = RT("shard", TP([P("tp", 1, 3, split_dim=1)]))
    assert torch.equal(store.get_tensor_with_parallelism(k, tgt), full[:, 4:8])
    # DP + TP: full input, the TP shard is cut here
    k2 = K("dptp")
    for r in range(2):
        par = TP([P("dp", 1, 2), P("tp", r, 2, split_dim=0)])
        assert store.put_tensor_with_parallelism(k2, full, par) == 0
    tgt = RT("full", TP([P("dp", 1, 2), P("tp", 0, 2, split_dim=0)]))
    assert torch.equal(store.get_tensor_with_parallelism(k2, tgt), full)
    # writer_partition on a full tensor, uneven split
    k3 = K("wp")
    x = torch.arange(10, dtype=torch.int64)
    for r in range(3):
        assert store.put_tensor_with_parallelism(k3, x, writer_partition=(r, 3, 0)) == 0
    assert torch.equal(store.get_tensor_with_parallelism(
        k3, RT("full", TP([P("tp", 0, 3, split_dim=0)]))), x)
    # Mooncake's scripts/test_tensor_api.py: a full read needs no parallelism
    # (the shards' metadata names it), shards are tensor.chunk()'s, and a
    # shard read with another TP size is cut from the rebuilt tensor
    assert torch.equal(store.get_tensor_with_parallelism(k3, RT("full")), x)
    assert torch.equal(store.get_tensor_with_parallelism(k3, RT("shard", TP([P("tp", 2, 3, 0)]))),
                       x.chunk(3)[2])
    assert torch.equal(store.get_tensor_with_parallelism(k, RT("shard", TP([P("tp", 1, 2, 1)]))),
                       full.chunk(2, 1)[1])
    assert store.get_tensor_with_parallelism(k, RT("shard", TP([P("tp", 5, 6, 1)]))) is not None
    with pytest.raises(ValueError):
        store.put_tensor_with_parallelism(k3, x, TP([P("tp", 0, 2)]), writer_partition=(0, 2, 0))
    with pytest.raises(ValueError):
        P("zz", 0, 1)
    assert store.put_tensor_with_parallelism(K("oob"), x, TP([P("tp", 5, 2, split_dim=0)])) == \
        INVALID_PARAMS
    # batch, as-stored, into, upsert
    ks = [K("bp1"), K("bp2")]
    assert store.batch_put_tensor_with_parallelism(ks, [x, x * 2]) == [0, 0]
    got = store.batch_get_tensor_with_parallelism(ks)
    assert torch.equal(got[1], x * 2)
    assert store.batch_upsert_tensor_with_parallelism(ks, [x * 3, x * 4]) == [0, 0]
    buf = np.zeros(4096, dtype=np.uint8)
    assert store.register_buffer(buf) == 0
    into = store.get_tensor_with_parallelism_into(ks[1], buf.ctypes.data, 4096)
    assert torch.equal(into, x * 4)
    fi = store.get_tensor_with_parallelism_into(
        k, buf.ctypes.data, 4096, RT("full", TP([P("tp", 0, 3, split_dim=1)])))
    assert torch.equal(fi, full)
    kf = K("pf")
    assert store.put_tensor_with_parallelism_from(kf, buf.ctypes.data, H + 24 * 4) == 0
    assert torch.equal(store.get_tensor(kf), full)
    assert store.unregister_buffer(buf) == 0


def test_safetensors_roundtrip_and_format(store, tmp_path):
    t = torch.tensor([[1.5, 2.5], [3.5, 4.5]], dtype=torch.float32)
    k = K("st")
    assert store.put_tensor(k, t) == 0
    path = tmp_path / "nested" / "x.safetensors"
    assert store.save_tensor_to_safetensor(k, path.as_uri(), filesystem="file",
                                           tensor_name="kv") == 0
    raw = path.read_bytes()
    n = struct.unpack_from("<Q", raw)[0]
    import json
    hdr = json.loads(raw[8:8 + n])
    assert hdr["kv"] == {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}
    assert raw[8 + n:] == t.numpy().tobytes() and n % 8 == 0
    k2 = K("st2")
    back = store.load_tensor_from_safetensor(k2, str(path), tensor_name="kv")
    assert torch.equal(back, t) and torch.equal(store.get_tensor(k2), t)
    # Mooncake's store_file_io codes: no tensor -> FILE_NOT_FOUND (-1100)
    assert store.save_tensor_to_safetensor(K("missing"), str(tmp_path / "m")) == -1100
    assert store.load_tensor_from_safetensor(k2, str(tmp_path / "nope.safetensors")) is None
    (tmp_path / "bad.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    assert store.load_tensor_from_safetensor(k2, str(tmp_path / "bad.safetensors")) is None
    assert store.save_tensor_to_file(k, str(tmp_path / "t.pt")) == 0
    assert torch.equal(store.load_tensor_from_file(K("pt"), str(tmp_path / "t.pt")), t)


def test_store_file_io_signatures_and_codes(store, tmp_path):
    """Mooncake's store_file_io methods: format auto/torch/safetensors,
    key defaulting to the file name, the kv_cache aliases, codes."""
    import mooncake.store_file_io as sfio
    assert MooncakeDistributedStore._mooncake_file_io_patched
    sfio.patch_store_file_io_support()  # idempotent
    t = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    k = K("fio")
    assert store.put_tensor(k, t) == 0
    st = tmp_path / "a" / "w.safetensors"
    assert store.save_tensor_to_file(k, st) == 0  # "auto" by suffix: safetensors
    assert st.read_bytes()[8:9] == b"{"
    pt = tmp_path / "w.bin"
    assert store.save_kv_cache_to_file(k, str(pt), format="pt") == 0
    back = store.load_kv_cache_from_file(file_name=str(pt), format="torch", map_location="cpu")
    assert torch.equal(back, t) and torch.equal(store.get_tensor(str(pt)), t)
    # no tensor_name and no entry named like the key: the first tensor
    k3 = K("fio3")
    assert torch.equal(store.load_tensor_from_file(k3, str(st)), t)
    assert store.load_tensor_from_file(k3) is None  # no file_name
    assert store.save_tensor_to_file(k, str(pt), format="parquet") == sfio.INVALID_PARAMS
    assert store.save_tensor_to_file(k, "x", filesystem="s3") == sfio.INVALID_PARAMS
    assert store.save_tensor_to_file(k, "x", storage_options={"anon": True}) == -600
    assert store.load_tensor_from_file(k3, "bucket/x", filesystem="hdfs") is None
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "f").write_bytes(b"")
    # a path below a regular file cannot be written
    assert store.save_tensor_to_file(k, str(tmp_path / "ro" / "f" / "x.pt")) in (
        sfio.PERSISTENT_FAIL, sfio.FILE_NOT_FOUND)
    with pytest.raises(TypeError):
        store.save_tensor_to_file(5)
    with pytest.raises(TypeError):
        store.save_tensor_to_file(k, str(pt), format=1)


# ---- ranges, sessions, metadata ---------------------------------------------------

def test_get_into_ranges_matches_mooncakes_example(store):
    k1, k2 = K("r1"), K("r2")
    assert store.put(k1, bytes(range(40))) == 0
    assert store.put(k2, bytes(range(100, 140))) == 0
    b0 = (ctypes.c_ubyte * 32)()
    b1 = (ctypes.c_ubyte * 32)()
    p0, p1 = ctypes.addressof(b0), ctypes.addressof(b1)
    assert store.register_buffer(p0, 32) == 0 and store.register_buffer(p1, 32) == 0
    res = store.get_into_ranges([p0, p1], [[k1, k2], [k2, k1]],
                                [[[0, 20], [8]], [[4], [16]]],
                                [[[1, 30], [2]], [[0], [10]]],
                                [[[4, 3], [5]], [[6], [4]]])
    assert res == [[[4, 3], [5]], [[6], [4]]]
    assert bytes(b0[0:4]) == bytes(range(1, 5)) and bytes(b0[20:23]) == bytes(range(30, 33))
    assert bytes(b0[8:13]) == bytes(range(102, 107)) and bytes(b1[4:10]) == bytes(range(100, 106))
    # missing key, source overflow, unregistered destination, shape mismatch
    res = store.get_into_ranges([p0], [[K("none"), k1, k1]], [[[0], [0], [0]]],
                                [[[0], [39], [0]]], [[[1], [2], [1]]])
    assert res == [[[NOT_FOUND], [INVALID_PARAMS], [1]]]
    junk = (ctypes.c_ubyte * 8)()
    assert store.get_into_ranges([ctypes.addressof(junk)], [[k1]], [[[0]]], [[[0]]],
                                 [[[4]]]) == [[[INVALID_PARAMS]]]
    assert store.get_into_ranges([p0], [[k1]], [], [], []) == [[[INVALID_PARAMS]]]
    out = store.batch_get_into_multi_buffer_ranges([k1], [[p1]], [[5]], [[35]])
    assert out == [5] and bytes(b1[0:5]) == bytes(range(35, 40))
    assert store.unregister_buffer(p0) == 0 and store.unregister_buffer(p1) == 0


def test_put_sessions(store):
    buf = ctypes.create_string_buffer(b"buffer-data")
    a = ctypes.addressof(buf)
    assert store.register_buffer(a, len(buf)) == 0
    r1, r2 = K("s1"), K("s2")
    assert store.batch_put_session_start([r1, r2], [11, 11]) == [0, 0]
    assert store.batch_put_session_start([r1], [11]) == [-705]
    assert store.batch_put_from_multi_buffer_ranges([r1, r2], [[a], [a, a + 5]], [[11], [5, 6]],
                                                    [[0], [0, 5]]) == [11, 11]
    assert store.batch_put_from_multi_buffer_ranges([r1], [[a]], [[11]], [[1]]) == \
        [INVALID_PARAMS]
    assert store.batch_put_session_end([r1, r2, K("none")]) == [0, 0, NOT_FOUND]
    assert store.get(r1) == b"buffer-data" and store.get(r2) == b"buffer-data"
    assert store.batch_put_session_start([K("ab")], [4]) == [0]
    assert store.unregister_buffer(a) == 0


def test_put_from_with_metadata(store):
    data = np.arange(16, dtype=np.uint8)
    meta = np.array([42, 43], dtype=np.uint8)
    assert store.register_buffer(data) == 0 and store.register_buffer(meta) == 0
    k = K("meta")
    assert store.put_from_with_metadata(k, data.ctypes.data, meta.ctypes.data, 16, 2) == 0
    assert store.get(k) == bytes([42, 43]) + bytes(range(16))
    assert store.unregister_buffer(data) == 0 and store.unregister_buffer(meta) == 0


def test_replica_descriptors(store, cluster):
    c = ReplicateConfig()
    c.replica_num = 2
    k = K("desc")
    assert store.put(k, b"v" * 5000, c) == 0
    desc = store.get_replica_desc(k)
    assert len(desc) == 2
    segs = set()
    for d in desc:
        assert d.status == mstore.ReplicaStatus.COMPLETE
        assert d.is_memory_replica() and not d.is_disk_replica()
        md = d.get_memory_descriptor()
        assert sum(x.size for x in md.buffer_descriptors) == 5000
        assert md.buffer_descriptor.buffer_address > 0
        segs.add(md.buffer_descriptor.transport_endpoint)
        with pytest.raises(RuntimeError):
            d.get_disk_descriptor()
    assert cluster["node"] in segs and len(segs) == 2
    assert store.get_replica_desc(K("none")) == []
    m = store.batch_get_replica_desc([k, K("none")])
    assert list(m) == [k] and len(m[k]) == 2


def test_batch_replica_clear(store):
    for attempt in range(10):
        ks = [K("c%d-%d" % (attempt, i)) for i in range(3)]
        for k in ks:
            assert store.put(k, b"data") == 0
        res = while_leased(store, ks, lambda: store.batch_replica_clear(ks))
        if res is not None:
            break
    else:
        pytest.skip("machine too loaded: no attempt read and cleared within half a lease")
    assert res == []  # live leases: skipped
    wait_lease()
    assert store.batch_replica_clear([]) == []
    assert store.batch_replica_clear([ks[0], K("none")]) == [ks[0]]
    assert store.get(ks[0]) == b""
    assert store.batch_replica_clear([ks[1]], segment_name="nonexistent_host:99999") == []
    assert store.is_exist(ks[1]) == 1


def test_remove_by_regex(store):
    tag = uuid.uuid4().hex[:8]
    ks = ["rx-%s-sess-%d" % (tag, i) for i in range(5)] + ["rx-%s-keep-%d" % (tag, i)
                                                          for i in range(3)]
    for k in ks:
        assert store.put(k, b"v") == 0
    # a live read lease on ks[0]: skipped unless forced
    n = while_leased(store, ks[:1], lambda: store.remove_by_regex("^rx-%s-sess-" % tag))
    if n is None:
        pytest.skip("machine too loaded: the read lease may have run out before the remove")
    assert n == 4
    assert store.batch_probe_key(ks) == [1, 0, 0, 0, 0, 1, 1, 1]
    assert store.remove_by_regex("^rx-%s-sess-" % tag, force=True) == 1
    assert store.remove_by_regex("^rx-%s-(keep-[02])$" % tag) == 2
    assert store.batch_is_exist(ks[5:]) == [0, 1, 0]
    assert store.remove_by_regex("^rx-%s-nothing" % tag) == 0
    assert store.remove_by_regex("(") == INVALID_PARAMS
    assert store.remove_by_regex("") == INVALID_PARAMS
    with pytest.raises(TypeError):
        store.remove_by_regex(5)
    assert MooncakeDistributedStore().remove_by_regex("x") == NOT_READY


def endpoints(store, key):
    return sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint
                  for d in store.get_replica_desc(key))


def wait_task(store, tid):
    import time
    for _ in range(1200):  # a bound, not a timing assertion
        resp, err = store.query_task(tid)
        assert err == 0
        if resp.status in (mstore.TaskStatus.SUCCESS, mstore.TaskStatus.FAILED):
            return resp
        time.sleep(0.05)
    raise AssertionError("task %r never finished" % (tid,))


@pytest.fixture
def store2(cluster):
    s = own_store(cluster)
    yield s
    s.close()


def test_batch_replica_clear_one_segment(store, cluster):
    """Mooncake's test_clear_specific_segment_replica: only the replica on
    the named segment goes; the other keeps serving the key."""
    c = ReplicateConfig()
    c.replica_num = 2
    c.preferred_segment = store.get_hostname()
    k = K("clr")
    assert store.put(k, b"two replicas", c) == 0
    own = mtypes.segment_name_of(store.get_hostname())
    assert endpoints(store, k) == sorted([own, cluster["node"]])
    wait_lease()
    assert store.batch_replica_clear([k], segment_name=store.get_hostname()) == [k]
    assert endpoints(store, k) == [cluster["node"]]
    assert store.get(k) == b"two replicas"
    wait_lease()
    assert store.batch_replica_clear([k], segment_name=store.get_hostname()) == []  # none there
    assert store.batch_replica_clear([k], segment_name=cluster["node"]) == [k]  # the last one
    assert store.is_exist(k) == 0


def test_copy_and_move_tasks(store, store2, cluster):
    """Mooncake's scripts/test_copy_move_api.py, on three segments (this
    store, a second store, the node): the copies are real replicas holding
    the bytes, the move leaves the replica on the target only."""
    own = mtypes.segment_name_of(store.get_hostname())
    other = mtypes.segment_name_of(store2.get_hostname())
    node = cluster["node"]
    c = ReplicateConfig()
    c.replica_num = 1
    c.preferred_segment = store.get_hostname()
    payload = os.urandom(2 << 20)
    k = K("copy")
    assert store.put(k, payload, c) == 0
    assert endpoints(store, k) == [own]
    tid, err = store.create_copy_task(k, [store2.get_hostname(), node])
    assert err == 0 and isinstance(tid, tuple) and len(tid) == 2
    resp = wait_task(store, tid)
    assert resp.status == mstore.TaskStatus.SUCCESS, resp
    assert resp.type == mstore.TaskType.REPLICA_COPY and resp.id == tid
    assert resp.created_at_ms_epoch > 0 and resp.last_updated_at_ms_epoch >= resp.created_at_ms_epoch
    assert endpoints(store, k) == sorted([own, other, node])
    # the copies hold the bytes: drop the original, read what is left
    wait_lease()
    assert store.batch_replica_clear([k], segment_name=store.get_hostname()) == [k]
    assert store2.get(k) == payload
    # a copy to a segment already holding a replica changes nothing
    tid, err = store.create_copy_task(k, [store2.get_hostname()])
    assert err == 0 and wait_task(store, tid).status == mstore.TaskStatus.SUCCESS
    assert endpoints(store, k) == sorted([other, node])

    k2 = K("move")
    assert store.put(k2, payload[:4096], c) == 0
    tid, err = store.create_move_task(k2, store.get_hostname(), store2.get_hostname())
    assert err == 0
    resp = wait_task(store, tid)
    assert resp.status == mstore.TaskStatus.SUCCESS and resp.type == mstore.TaskType.REPLICA_MOVE
    assert endpoints(store, k2) == [other]
    assert store.get(k2) == payload[:4096]

    # Mooncake's error cases
    none = K("none")
    assert store.create_copy_task(none, [node])[1] == NOT_FOUND
    assert store.create_move_task(none, node, other)[1] == NOT_FOUND
    assert store.create_copy_task(k2, ["unknown_segment_1", "unknown_segment_2"])[1] == INVALID_PARAMS
    assert store.create_move_task(k2, "unknown_source_segment", node)[1] == INVALID_PARAMS
    assert store.create_move_task(k2, other, "unknown_destination_segment")[1] == INVALID_PARAMS
    assert store.create_move_task(k2, other, other)[1] == INVALID_PARAMS
    assert store.create_move_task(k2, node, other)[1] == INVALID_PARAMS  # no replica on node
    assert store.create_copy_task(k2, [])[1] == INVALID_PARAMS
    assert store.query_task((0, 0)) == (None, -1400)
    with pytest.raises(TypeError):
        store.create_copy_task(1, [node])
    with pytest.raises(TypeError):
        store.create_move_task(k2, None, node)
    with pytest.raises(TypeError):
        store.query_task("x")
    closed = MooncakeDistributedStore()
    assert closed.create_copy_task(k2, [node]) == ((0, 0), NOT_READY)


def test_concurrent_copy_tasks(store, store2, cluster):
    """Many tasks at once from several threads (Mooncake's concurrent case)."""
    import concurrent.futures as cf
    c = ReplicateConfig()
    c.preferred_segment = store.get_hostname()
    ks = [K("cc%d" % i) for i in range(24)]
    for k in ks:
        assert store.put(k, k.encode() * 50, c) == 0
    with cf.ThreadPoolExecutor(8) as ex:
        tids = list(ex.map(lambda k: store.create_copy_task(k, [store2.get_hostname()]), ks))
    assert all(err == 0 for _, err in tids)
    for tid, _ in tids:
        assert wait_task(store, tid).status == mstore.TaskStatus.SUCCESS
    own = mtypes.segment_name_of(store.get_hostname())
    other = mtypes.segment_name_of(store2.get_hostname())
    for k in ks:
        assert endpoints(store, k) == sorted([own, other])


def test_unavailable_features_answer_with_codes(store):
    with pytest.raises(RuntimeError, match="UNAVAILABLE_IN_CURRENT_MODE"):
        store.get_kv_session("s")


# ---- buffers --------------------------------------------------------------------------

def test_buffer_pool(store):
    pool = mstore.BufferPool(store, min_size_class=4096, alignment=4096)
    lease = pool.acquire(1234)
    assert lease.size == 1234 and lease.ptr % 4096 == 0
    lease.buffer[:4] = b"abcd"
    k = K("bp")
    assert store.put_from(k, lease.ptr, 4) == 0 and store.get(k) == b"abcd"
    view = lease.buffer
    with pytest.raises(RuntimeError, match="exported views"):
        lease.release()
    del view
    lease.release()
    small = mstore.BufferPool(store, min_size_class=4096, max_size_class=4096, max_regions=1,
                              block_on_exhaustion=False)
    one = small.acquire(1)
    with pytest.raises(RuntimeError, match="exhausted"):
        small.acquire(1)
    with pytest.raises(RuntimeError, match="active leases"):
        small.close()
    one.release()
    small.close()
    with pytest.raises(RuntimeError, match="alignment"):
        mstore.BufferPool(store, alignment=12345)
    assert pool.acquire(0).size == 0
    pool.close()


def test_host_allocator_and_func_addrs(store):
    a = mstore.MooncakeHostMemAllocator()
    p = a.alloc(1 << 20)
    assert p and p % 4096 == 0
    assert store.register_buffer(p, 1 << 20) == 0
    ctypes.memset(p, 0x5a, 64)
    k = K("ha")
    assert store.put_from(k, p, 64) == 0 and store.get(k) == b"\x5a" * 64
    assert store.unregister_buffer(p) == 0
    assert a.free(p) == 0 and a.free(p) == INVALID_PARAMS
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(mstore.get_alloc_func_addr())
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(mstore.get_free_func_addr())
    q = alloc(8192)
    assert q
    free(q)
    mstore.bind_to_numa_node(0)
    with pytest.warns(RuntimeWarning):
        mstore.bind_to_numa_node(4095)


# ---- pure-Python modules -----------------------------------------------------------------

def test_mooncake_config(tmp_path, monkeypatch, cluster):
    from mooncake.mooncake_config import MooncakeConfig
    f = tmp_path / "mc.json"
    f.write_text('{"local_hostname": "localhost", "metadata_server": "%s", '
                 '"master_server_address": "%s", "global_segment_size": "32MB", '
                 '"local_buffer_size": "16 MB", "protocol": "tcp", "device_name": "", '
                 '"enable_ssd_offload": "false"}' % (cluster["metadata"], cluster["master"]))
    c = MooncakeConfig.from_file(str(f))
    assert (c.global_segment_size, c.local_buffer_size, c.enable_ssd_offload, c.tenant_id) == \
        (32 << 20, 16 << 20, False, "default")
    s = MooncakeDistributedStore()
    assert s.setup(*c.setup_args()) == 0
    s.close()
    monkeypatch.delenv("MOONCAKE_CONFIG_PATH", raising=False)
    monkeypatch.delenv("MOONCAKE_MASTER", raising=False)
    with pytest.raises(ValueError):
        MooncakeConfig.load_from_env()
    monkeypatch.setenv("MOONCAKE_MASTER", cluster["master"])
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "1gb")
    e = MooncakeConfig.load_from_env()
    assert e.master_server_address == cluster["master"] and e.global_segment_size == 1 << 30
    assert e.metadata_server == "P2PHANDSHAKE"
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(f))
    assert MooncakeConfig.load_from_env() == c
    f.write_text('{"local_hostname": "x"}')
    with pytest.raises(ValueError, match="master_server_address|metadata_server"):
        MooncakeConfig.from_file(str(f))


def test_async_store(cluster):
    import asyncio
    from mooncake.async_store import AsyncMooncakeDistributedStore

    async def main():
        s = AsyncMooncakeDistributedStore()
        assert await s.setup("localhost", cluster["metadata"], SEG, "16MB", "tcp", "",
                             cluster["master"]) == 0
        k = K("async")
        res = await asyncio.gather(s.put(k, b"v1"), s.is_exist(K("none")))
        assert res == [0, 0]
        assert await s.get(k) == b"v1"
        assert await s.close() == 0
    asyncio.run(main())

    # Mooncake's own form (scripts/test_async_store.py): async_<method>
    from mooncake.async_store import MooncakeDistributedStoreAsync
    s = MooncakeDistributedStoreAsync()
    assert isinstance(s, MooncakeDistributedStore)
    assert s.setup("localhost", cluster["metadata"], SEG, "16MB", "tcp", "", cluster["master"]) == 0

    async def main2():
        keys = [K("a%d" % i) for i in range(4)]
        assert await s.async_put_batch(keys, [b"x"] * 4) == 0
        assert await s.async_batch_is_exist(keys + [K("none")]) == [1, 1, 1, 1, 0]
        got = await asyncio.gather(*[s.async_get(k) for k in keys])
        assert got == [b"x"] * 4
        t = torch.arange(12).view(3, 4)
        assert await s.async_put_tensor_with_tp(keys[0] + "t", t, tp_size=2, split_dim=1) == 0
        parts = await asyncio.gather(*[s.async_get_tensor_with_tp(keys[0] + "t", tp_rank=r,
                                                                  tp_size=2, split_dim=1)
                                       for r in range(2)])
        assert torch.equal(torch.cat(parts, 1), t)
        with pytest.raises(AttributeError):
            s.async_no_such_method
        with pytest.raises(AttributeError):
            s.no_such_attribute
    asyncio.run(main2())
    assert s.close() == 0


def test_modules_not_provided_say_why():
    """Mooncake's other pure-Python modules: each imports as a clear
    ImportError naming the module and the reason, never a bare
    ModuleNotFoundError; the re-exports work."""
    import importlib
    from mooncake import _not_here
    for name, why in _not_here.WHY.items():
        with pytest.raises(ImportError, match="not provided by crescent") as e:
            importlib.import_module("mooncake." + name)
        assert why in str(e.value) and e.value.name == "mooncake." + name
    from mooncake.buffer_pool import RegisteredBufferPool
    assert RegisteredBufferPool is mstore.BufferPool
    from mooncake import http_metadata_server
    assert callable(http_metadata_server.main)


def test_kv_bootstrap_server():
    """mooncake.http_metadata_server.KVBootstrapServer, as Mooncake's
    test_http_metadata_server.py drives it, then over real HTTP."""
    import asyncio
    import urllib.error
    import urllib.request
    from mooncake.http_metadata_server import KVBootstrapServer

    class Req:
        def __init__(self, method, key=None, body=b""):
            self.method, self.query, self.body = method, {} if key is None else {"key": key}, body

        async def read(self):
            return self.body

    srv = KVBootstrapServer(port=0)
    h = lambda r: asyncio.run(srv._handle_metadata(r))  # noqa: E731
    for m in ("GET", "PUT", "DELETE"):
        r = h(Req(m, body=b"v"))
        assert r.status == 400 and r.content_type == "text/plain"
    assert h(Req("PUT", "", b"v")).status == 400 and h(Req("PUT", "   ", b"v")).status == 400
    assert "" not in srv.store and "   " not in srv.store
    assert h(Req("PUT", "  valid  ", b"value")).status == 200
    g = h(Req("GET", "  valid  "))
    assert g.status == 200 and g.body == b"value" and "valid" in srv.store
    assert h(Req("GET", "none")).status == 404
    srv.start()
    try:
        base = "http://127.0.0.1:%d" % srv.port
        urllib.request.urlopen(urllib.request.Request(base + "/metadata?key=k", data=b"x",
                                                      method="PUT"), timeout=10).read()
        assert urllib.request.urlopen(base + "/metadata?key=k", timeout=10).read() == b"x"
        assert urllib.request.urlopen(base + "/health", timeout=10).status == 200
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + "/metadata?key=", timeout=10)
        assert e.value.code == 400
    finally:
        srv.close()


# ---- remote_tensor_batch / get_tensor_dim_selection_into ---------------------------------

def test_remote_tensor_batch_materializes_selected_rows(store):
    from mooncake import remote_tensor_batch as rtb
    a = torch.arange(6 * 3, dtype=torch.float32).reshape(6, 3)
    b = torch.arange(6 * 2 * 2, dtype=torch.int64).reshape(6, 2, 2) * 7
    ka, kb = K("rtb-a"), K("rtb-b")
    assert store.put(ka, a.numpy().tobytes()) == 0           # raw payload
    assert store.put_tensor(kb, b) == 0                       # Mooncake's tensor object
    batch = rtb.RemoteTensorBatch({"a": rtb.TensorFieldRef.from_tensor(ka, a),
                                   "b": rtb.TensorFieldRef(kb, (6, 2, 2), torch.int64, H)}, 6)
    m = rtb.RemoteTensorBatchMaterializer(store)

    def check(rb, idx):
        out = m.materialize_buffers(rb)
        for name, full in (("a", a), ("b", b)):
            buf, shape, dtype = out[name]
            got = torch.frombuffer(buf, dtype=full.dtype).reshape(shape) if buf else \
                torch.empty(shape, dtype=full.dtype)
            assert torch.equal(got, full[idx]), (name, idx)
        assert len(rb) == len(idx)

    check(batch, list(range(6)))
    check(batch.select_indices([5, 0, -1]), [5, 0, 5])
    check(batch.select_indices(torch.tensor([True, False] * 3)), [0, 2, 4])
    check(batch.slice(1, None, 2), [1, 3, 5])
    check(batch.slice(1, 3, None).repeat(2, interleave=True), [1, 1, 2, 2])
    check(batch.slice(1, 3, None).repeat(2, interleave=False), [1, 2, 1, 2])
    check(rtb.RemoteTensorBatch.cat([batch.slice(4, None, None), batch.select_indices([0])]),
          [4, 5, 0])
    check(batch.select_indices([]), [])
    # into caller buffers, one field; metadata helpers
    req = batch.select_fields(["a"]).select_indices([2]).read_requests()[0]
    assert req.output_shape() == (1, 3) and req.output_nbytes() == 12
    dst = bytearray(12)
    assert m.materialize_request_into(req, dst) == 12
    assert torch.equal(torch.frombuffer(dst, dtype=torch.float32), a[2])
    with pytest.raises(ValueError, match="too small"):
        m.materialize_request_into(req, bytearray(8))
    with pytest.raises(ValueError):
        batch.union(batch)  # duplicate fields
    with pytest.raises(IndexError):
        batch.select_indices([True, False])  # mask of the wrong length
    assert rtb.selection_output_shape((4, 5), [("repeat", (3, True))], dim=-1) == (4, 15)
    assert rtb.tensor_nbytes((2, 3), "bfloat16") == 12 and rtb.dtype_byte_size(torch.int16) == 2


def test_get_tensor_dim_selection_into_codes(store):
    t = torch.arange(24, dtype=torch.int32).reshape(4, 6)
    k = K("dsel")
    assert store.put(k, t.numpy().tobytes()) == 0
    buf = np.zeros(256, dtype=np.uint8)
    p = buf.ctypes.data
    assert store.register_buffer(p, buf.nbytes) == 0
    try:
        sel = [("slice", (None, None, 2))]
        n = store.get_tensor_dim_selection_into(k, p, 256, [4, 6], "int32", 1, sel, 0)
        assert n == 4 * 3 * 4
        assert np.array_equal(buf[:n].view(np.int32).reshape(4, 3), t[:, ::2].numpy())
        args = ([4, 6], "int32", 0, [("select_idxs", [1])], 0)
        assert store.get_tensor_dim_selection_into(K("none"), p, 256, *args) == NOT_FOUND
        assert store.get_tensor_dim_selection_into(k, p, 8, *args) == -10  # buffer too small
        unreg = np.zeros(64, dtype=np.uint8)
        assert store.get_tensor_dim_selection_into(k, unreg.ctypes.data, 64, *args) == \
            INVALID_PARAMS
        for bad in (([4, 6], "complex64", 0, [], 0), ([4, 6], "int32", 2, [], 0),
                    ([4, 6], "int32", 0, [("select_idxs", [4])], 0),
                    ([4, 6], "int32", 0, [("bogus", 1)], 0),
                    ([4, 6], "int32", 0, [("slice", (0, 4, 0))], 0),
                    ([4, 6], "int32", 0, [], 8),  # object shorter than offset + tensor
                    ([5, 6], "int32", 0, [], 0)):
            assert store.get_tensor_dim_selection_into(k, p, 256, *bad) == INVALID_PARAMS, bad
        with pytest.raises(TypeError):
            store.get_tensor_dim_selection_into(k, p, 256, "4x6", "int32")
        with pytest.raises(ValueError):
            store.get_tensor_dim_selection_into(k, p, -1, [4, 6], "int32")
    finally:
        store.unregister_buffer(p)


def test_model_loader_mooncake_saves_a_model(store, cluster):
    from mooncake import model_loader_mooncake as mlm
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16),
                                torch.nn.Linear(16, 4))
    prefix = K("model")
    mlm.save_model_to_mooncake(model, store, prefix, tp_rank=1, io_threads=3)
    import json
    names = json.loads(store.get(prefix + "/manifest.json"))
    assert names == list(model.state_dict())
    # a second process-like client loads it back into a fresh model
    s2 = mlm.create_store(setup={"local_hostname": "127.0.0.1",
                                 "metadata_server": cluster["metadata"],
                                 "global_segment_size": 0, "local_buffer_size": 16 << 20,
                                 "master_server_addr": cluster["master"]})
    try:
        fresh = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16),
                                    torch.nn.Linear(16, 4))
        fresh.load_state_dict({n: s2.get_tensor("%s/rank_1/%s" % (prefix, n)) for n in names})
        for (n, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
            assert torch.equal(a, b), n
    finally:
        s2.close()
    with pytest.raises(ValueError):
        mlm.create_store()
    with pytest.raises(RuntimeError, match="-1011"):
        mlm.create_store(init_all={"device_name": ""})  # dummy-client mode: not here
    with pytest.raises(ImportError, match="SGLang"):
        from mooncake.model_loader_mooncake import MooncakeModelLoader  # noqa: F401


def test_logging_config_from_mc_log_level(monkeypatch):
    import logging
    from mooncake.logging_config import configure_logging_from_env
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        monkeypatch.setenv("MC_LOG_LEVEL", "warn")
        configure_logging_from_env()
        assert root.level == logging.WARNING and root.handlers
        handlers = list(root.handlers)
        configure_logging_from_env()  # same level: untouched
        assert root.handlers == handlers
        monkeypatch.setenv("MC_LOG_LEVEL", "TRACE")
        configure_logging_from_env()
        assert root.level == logging.DEBUG
        monkeypatch.setenv("MC_LOG_LEVEL", "chatty")
        configure_logging_from_env()  # unknown: a warning, level kept
        assert root.level == logging.DEBUG
        monkeypatch.setenv("MC_LOG_LEVEL", "")
        configure_logging_from_env()
        assert root.level == logging.DEBUG
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])


def test_partial_read_plans_read_the_submatrix(store):
    """mooncake._partial_read: the planned ranges, read with get_into_ranges
    from a matrix stored raw, give exactly the numpy submatrix."""
    from mooncake._partial_read import plan_matrix_read
    m = np.arange(10 * 6, dtype=np.int32).reshape(10, 6)
    k = K("mat")
    assert store.put(k, m.tobytes()) == 0
    out = np.zeros(10 * 6, dtype=np.int32)
    p = out.ctypes.data
    assert store.register_buffer(p, out.nbytes) == 0
    try:
        for rows, cols in ((range(10), slice(None)), (range(2, 7), slice(None)),
                           ((1, 2, 3, 7, 8, 0), slice(None)), (range(1, 9, 3), slice(1, 4)),
                           ((9, 0), slice(5, None)), (range(3), slice(4, 2))):
            plan = plan_matrix_read(m.shape, 4, rows, cols, 64)
            want = m[list(rows)][:, cols]
            assert plan.shape == want.shape and plan.nbytes == want.nbytes
            if not plan.nbytes:
                assert plan.ranges == ()
                continue
            src = [[[r[0] for r in plan.ranges]]]
            dst = [[[r[1] for r in plan.ranges]]]
            n = [[[r[2] for r in plan.ranges]]]
            assert store.get_into_ranges([p], [[k]], dst, src, n) == n
            got = out.view(np.uint8)[:plan.nbytes].view(np.int32).reshape(plan.shape)
            assert np.array_equal(got, want), (rows, cols)
        # consecutive whole rows are one range; too many ranges -> None
        assert plan_matrix_read((10, 6), 4, range(2, 7), slice(None), 1).ranges == \
            ((2 * 24, 0, 5 * 24),)
        assert plan_matrix_read((10, 6), 4, (0, 2, 4), slice(None), 2).ranges is None
        for bad, exc in ((((10,), 4, range(1), slice(None), 4), ValueError),
                         (((10, 6), 4, [1], slice(None), 4), TypeError),
                         (((10, 6), 4, range(0, 3, -1), slice(None), 4), ValueError),
                         (((10, 6), 4, (10,), slice(None), 4), IndexError),
                         (((10, 6), 4, range(2), slice(0, 6, 2), 4), ValueError)):
            with pytest.raises(exc):
                plan_matrix_read(*bad)
    finally:
        store.unregister_buffer(p)


# -- Mooncake's test_replicated_distributed_object_store.py, case by case -------------

def test_replicated_puts_with_keyword_config(store, cluster):
    """put / put_batch / put_from / batch_put_from called with Mooncake's
    keyword names, default config and replica_num=2 (two segments: this
    client's and a second client's), misnamed keywords TypeError; plain
    remove succeeds once the read leases ran out."""
    other = MooncakeDistributedStore()
    assert other.setup("localhost", cluster["metadata"], SEG, "16MB", "tcp", "",
                       cluster["master"]) == 0
    try:
        two = ReplicateConfig()
        two.replica_num = 2
        two.with_soft_pin = False
        two.with_hard_pin = False
        data = b"Hello, Config World!"
        k1, k2 = K("rk1"), K("rk2")
        assert store.put(key=k1, value=data) == 0
        assert store.put(key=k2, value=data, config=two) == 0
        for bad in ({"key_arg_name_error": k1, "value": data, "config": two},
                    {"key": k1, "value_arg_name_error": data, "config": two},
                    {"key": k1, "value": data, "config_arg_name_error": two}):
            with pytest.raises(TypeError):
                store.put(**bad)
        bkeys1, bkeys2 = [K("rb%d" % i) for i in range(3)], [K("rc%d" % i) for i in range(3)]
        vals = [b"Batch Data %d" % i for i in range(3)]
        assert store.put_batch(bkeys1, vals) == 0
        assert store.put_batch(keys=bkeys2, values=vals, config=two) == 0
        spacing = 1 << 20
        buf = (ctypes.c_ubyte * (3 * spacing))()
        base = ctypes.addressof(buf)
        assert store.register_buffer(base, 3 * spacing) == 0
        ptrs = [base + i * spacing for i in range(3)]
        for p, v in zip(ptrs, vals):
            ctypes.memmove(p, v, len(v))
        f1, f2 = K("rf1"), K("rf2")
        assert store.put_from(key=f1, buffer_ptr=ptrs[0], size=len(vals[0])) == 0
        assert store.put_from(key=f2, buffer_ptr=ptrs[0], size=len(vals[0]), config=two) == 0
        g1, g2 = [K("rg%d" % i) for i in range(3)], [K("rh%d" % i) for i in range(3)]
        sizes = [len(v) for v in vals]
        assert store.batch_put_from(keys=g1, buffer_ptrs=ptrs, sizes=sizes) == [0, 0, 0]
        assert store.batch_put_from(keys=g2, buffer_ptrs=ptrs, sizes=sizes, config=two) == \
            [0, 0, 0]
        want = {k1: data, k2: data, f1: vals[0], f2: vals[0]}
        want.update(zip(bkeys1 + bkeys2 + g1 + g2, vals * 4))
        for k, v in want.items():
            assert store.get(k) == v and other.get(k) == v, k
        for k in (k2, f2, *bkeys2, *g2):  # two replicas on two segments
            desc = store.get_replica_desc(k)
            assert len(desc) == 2, (k, desc)
        wait_lease()
        assert store.unregister_buffer(base) == 0
        for k in want:
            assert store.remove(k) == 0, k
    finally:
        other.close()


def test_replica_survives_its_writer_closing(store, cluster):
    """replica_num=2 from a client with a segment: after that client closes
    (its segment goes), a second client still reads the value, and so does
    the first once set up again."""
    other = MooncakeDistributedStore()
    assert other.setup("localhost", cluster["metadata"], SEG, "16MB", "tcp", "",
                       cluster["master"]) == 0
    writer = MooncakeDistributedStore()
    assert writer.setup("localhost", cluster["metadata"], SEG, "16MB", "tcp", "",
                        cluster["master"]) == 0
    try:
        two = ReplicateConfig()
        two.replica_num = 2
        key, data = K("surv"), b"Replicated failure tolerance test data!"
        assert writer.put(key=key, value=data, config=two) == 0
        assert writer.get(key) == data
        assert writer.close() == 0
        assert other.get(key) == data
        assert writer.setup("localhost", cluster["metadata"], SEG, "16MB", "tcp", "",
                            cluster["master"]) == 0
        assert writer.get(key) == data
        wait_lease()
        assert writer.remove(key) == 0
    finally:
        writer.close()
        other.close()


# -- Mooncake's test_put_get_tensor.py, case by case (on the real store) ---------------

def test_remote_tensor_batch_helpers_as_mooncake_checks_them():
    from mooncake import remote_tensor_batch as rtb
    ref = rtb.TensorFieldRef("batch/input_ids", (4, 2), "torch.int64", 128)
    assert rtb.dtype_byte_size("torch.int64") == 8
    assert rtb.tensor_nbytes(ref.shape, ref.dtype) == 64 and ref.nbytes() == 64
    sels = (rtb.TensorDimSelection.select_idxs([3, 1]), rtb.TensorDimSelection.repeat(2, True))
    assert rtb.selection_output_shape((4, 2), sels) == (4, 2)
    req = rtb.TensorReadRequest("input_ids", rtb.TensorFieldRef("batch/input_ids", (4, 2),
                                                               "int64"), selections=sels)
    assert req.output_shape() == (4, 2) and req.output_nbytes() == 64
    assert req.store_selections() == [("select_idxs", [3, 1]), ("repeat", (2, True))]
    remote = rtb.RemoteTensorBatch({
        "input_ids": rtb.TensorFieldRef("batch/input_ids", (4, 2), "int64"),
        "attention_mask": rtb.TensorFieldRef("batch/attention_mask", (4, 2), "int64")}, 4)
    selected = remote.select_fields(["input_ids"]).select_indices(
        [True, False, True, False]).slice(0, 1, None)
    repeated = selected.repeat(3, False)
    assert selected.keys() == ["input_ids"] and len(selected) == 1 and len(repeated) == 3
    assert [s.as_tuple() for s in repeated.selections] == [
        ("select_idxs", [True, False, True, False]), ("slice", (0, 1, None)),
        ("repeat", (3, False))]
    one = rtb.RemoteTensorBatch({"input_ids": rtb.TensorFieldRef("batch/input_ids", (4,),
                                                                 "int64")}, 4)
    cat = rtb.RemoteTensorBatch.cat([one.select_indices([3, 1]), one.slice(0, 2, None)])
    assert len(cat) == 4 and [s.op for s in cat.selections] == ["cat"]
    assert rtb.selection_output_shape((4,), cat.selections) == (4,)
    assert [[s.op for s in g] for g in cat.selections[0].value] == [["select_idxs"], ["slice"]]
    assert cat.read_requests(["input_ids"])[0].store_selections() == [
        ("cat", ((("select_idxs", [3, 1]),), (("slice", (0, 2, None)),)))]
    with pytest.raises(IndexError):
        rtb.selection_output_shape((4, 2), (rtb.TensorDimSelection.select_idxs([True, False]),))
    view = memoryview(bytearray(8)).cast("H")
    with rtb.writable_buffer_region(view) as region:
        assert region.size == 8
        region.close()
        region.close()  # idempotent
    view.release()  # the region released its own view of it


def test_remote_tensor_batch_materializer_on_the_store(store):
    from mooncake import remote_tensor_batch as rtb
    src = np.arange(8, dtype=np.int64).reshape(4, 2)
    k = K("rtbm")
    assert store.put(k, b"\0" * 16 + src.tobytes()) == 0  # data after a 16-byte header
    m = rtb.RemoteTensorBatchMaterializer(store)
    req = rtb.TensorReadRequest("input_ids", rtb.TensorFieldRef(k, (4, 2), "int64", 16),
                                selections=(rtb.TensorDimSelection.select_idxs([3, 1]),))
    out = bytearray(req.output_nbytes())
    assert m.materialize_request_into(req, out) == len(out)
    assert np.array_equal(np.frombuffer(out, dtype=np.int64).reshape(2, 2), src[[3, 1]])
    whole = rtb.TensorReadRequest("input_ids", rtb.TensorFieldRef(k, (4, 2), "int64", 16))
    big = bytearray(whole.output_nbytes() + 16)  # a preallocated region larger than needed
    with rtb.writable_buffer_region(big) as region:
        assert m.materialize_request_into_region(whole, region) == 64
    assert bytes(big[:64]) == src.tobytes()
    remote = rtb.RemoteTensorBatch({"input_ids": rtb.TensorFieldRef(k, (4, 2), "int64", 16)}, 4)
    buf, shape, dtype = rtb.RemoteTensorBatchMaterializer(
        store, rtb.BytearrayBufferAllocator()).materialize_buffers(remote)["input_ids"]
    assert (len(buf), shape, dtype) == (64, (4, 2), "int64") and bytes(buf) == src.tobytes()
    zero = rtb.TensorReadRequest("input_ids", rtb.TensorFieldRef(K("absent"), (2, 2), "int64"),
                                 selections=(rtb.TensorDimSelection.repeat(0),))
    assert m.materialize_request_into(zero, bytearray()) == 0  # no store call: no -704
    huge = rtb.RemoteTensorBatch({"x": rtb.TensorFieldRef(k, ((64 << 30) + 1,), "uint8")},
                                 (64 << 30) + 1)
    with pytest.raises(ValueError):
        m.materialize_buffers(huge)  # refused before allocating 64 GiB


def test_put_get_tensor_dtypes_shapes_and_dim_selections(store):
    for t in (torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1, 2, 3, 4], dtype=torch.int32),
              torch.tensor([True, False, False, True]), torch.rand(1000),
              torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
              torch.arange(1, 9, dtype=torch.int64).reshape(2, 2, 2)):
        k = K("pgt")
        assert store.put_tensor(k, t) == 0
        got = store.get_tensor(k)
        assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t)
    cases = [((4, 2), 0, [("select_idxs", [3, 1]), ("repeat", (2, True))], (4, 2),
              lambda s: s[[3, 3, 1, 1]]),
             ((2, 4, 3), 1, [("slice", (1, 4, 2))], (2, 2, 3), lambda s: s[:, 1:4:2, :]),
             ((2, 3, 4), -1, [("select_idxs", [3, 1])], (2, 3, 2), lambda s: s[:, :, [3, 1]]),
             ((4,), 0, [("cat", [[("select_idxs", [3, 1])], [("slice", (0, 2, None))]])], (4,),
              lambda s: s[[3, 1, 0, 1]]),
             ((6,), 0, [("slice", (1, 5, None)),
                        ("cat", [[("select_idxs", [2, 0])], [("slice", (1, 3, None))]])], (4,),
              lambda s: s[[3, 1, 2, 3]])]
    for shape, dim, sels, out_shape, expect in cases:
        src = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
        k = K("dsel")
        assert store.put(k, src.tobytes()) == 0
        n = int(np.prod(out_shape)) * 8
        buf = (ctypes.c_ubyte * n)()
        p = ctypes.addressof(buf)
        assert store.register_buffer(p, n) == 0
        try:
            assert store.get_tensor_dim_selection_into(k, p, n, list(shape), "int64", dim,
                                                       sels) == n
            got = np.frombuffer(bytes(buf), dtype=np.int64).reshape(out_shape)
            np.testing.assert_array_equal(got, expect(src))
        finally:
            assert store.unregister_buffer(p) == 0
            assert store.remove(k, True) == 0


# -- Mooncake's test_buffer_pool_native.py, case by case --------------------------------

def test_buffer_pool_cases_as_mooncake_checks_them(store):
    import gc
    import threading
    BP = mstore.BufferPool
    pool = BP(store, min_size_class=4096, alignment=4096)
    lease = pool.acquire(1234)
    lease.buffer[:4] = b"abcd"
    assert bytes(lease.buffer[:4]) == b"abcd"
    lease.release()
    again = pool.acquire(2048)  # the released region is reused
    again.release()
    pool.close()
    dflt = BP(store)  # default: the store's registered memory
    big = dflt.acquire(4 << 20)
    extra = dflt.acquire(1024, block=False)  # more than the local buffer: still served
    assert (big.size, extra.size) == (4 << 20, 1024)
    extra.release()
    big.release()
    dflt.close()
    warm = BP(store, 1 << 20, min_size_class=4096, alignment=4096, prewarm_size=1024,
              prewarm_count=2)
    a, b = warm.acquire(1024), warm.acquire(1024)
    a.release()
    b.release()
    warm.close()
    aligned = BP(store, min_size_class=4096, alignment=65536)
    x = aligned.acquire(1024)
    assert x.ptr % 65536 == 0  # Mooncake asserts 64 (its local buffer); crescent honours 64 KiB
    x.release()
    aligned.close()
    for size in (0, 1, 128 * 1024 + 1):  # above max_size_class too
        p = BP(store, 1 << 20, max_size_class=128 * 1024, alignment=4096)
        y = p.acquire(size)
        assert y.size == size and len(y.buffer) == size
        y.release()
        p.close()
    one = BP(store, min_size_class=4096, max_size_class=4096, alignment=4096, max_regions=1)
    held = one.acquire(1)
    got = []
    for kw in ({"timeout": 60.0}, {}):  # a late release wakes a waiting acquire
        t = threading.Thread(target=lambda: got.append(one.acquire(1, **kw)))
        t.start()
        time.sleep(0.05)  # lets the thread block (not asserted: either order works)
        held.release()
        t.join(60)
        assert not t.is_alive() and len(got) in (1, 2)
        held = got[-1]
    held.release()
    one.close()
    gone = BP(store, 4096, min_size_class=4096, alignment=4096)
    z = gone.acquire(1)
    del z
    gc.collect()
    gone.close()  # the destructor released it: no "active leases"
    huge = BP(store, 1 << 20, min_size_class=4096, alignment=4096)
    with pytest.raises(RuntimeError, match="overflow|capacity"):
        huge.acquire((1 << 64) - 1)
    huge.close()


# -- Mooncake's test_registered_buffer_pool.py, case by case (real store) ---------------

def test_registered_buffer_pool_module_cases(store):
    import threading
    from mooncake.registered_buffer_pool import (RegisteredBufferPool as RBP,
                                                 RegisteredBufferPoolConfig)
    # external registration: registered while leased, refused -> None
    pool = RBP(store, max_bytes=4096, min_size_class=1024, alignment=4096)
    ext = np.zeros(16, dtype=np.uint8)
    lease = pool.try_register_external(ext.ctypes.data, 16)
    k = K("ext")
    assert lease is not None and store.put(k, b"x" * 16) == 0
    assert store.get_into(k, ext.ctypes.data, 16) == 16  # usable as a registered target
    lease.release()
    assert store.get_into(k, ext.ctypes.data, 16) < 0  # unregistered again
    with pytest.raises(RuntimeError, match="released twice"):
        lease.release()
    assert pool.try_register_external(4096, 16) is None  # the store refuses that address
    pool.close()
    groups = RBP(store, max_bytes=8192, min_size_class=1024, max_size_class=2048,
                 alignment=1024)
    assert groups.iter_transfer_groups([512, 1024, 1024, 3000, 512]) == [[0, 1], [2], [3], [4]]
    groups.close()
    # reuse of a released region; counters
    pool = RBP(store, max_bytes=1 << 20, min_size_class=1024, alignment=4096)
    with pool.buffer(1000) as first:
        first_ptr = first.ptr
        assert first.size == 1000 and first.ptr % 4096 == 0
        first.buffer[:3] = b"abc"
        assert store.put_from(k + "2", first.ptr, 3) == 0 and store.get(k + "2") == b"abc"
    with pool.buffer(900) as second:
        assert second.ptr == first_ptr
    st = pool.stats()
    assert (st.acquire_count, st.allocate_count, st.reuse_count, st.release_count) == \
        (2, 1, 1, 2)
    pool.close()
    # capacity without blocking, double release
    small = RBP(store, max_bytes=4096, min_size_class=4096, alignment=4096,
                block_on_exhaustion=False)
    held = small.acquire(1024)
    with pytest.raises(RuntimeError, match="exhausted"):
        small.acquire(1024)
    held.release()
    with pytest.raises(RuntimeError, match="released twice"):
        held.release()
    small.close()
    # prewarm, from_config, ensure_prewarmed
    warm = RBP(store, max_bytes=8192, min_size_class=1024, alignment=4096)
    warm.prewarm(1000, 2)
    with warm.buffer(1000) as a, warm.buffer(1000) as b:
        assert a.ptr != b.ptr
    st = warm.stats()
    assert st.allocate_count == 0 and st.reuse_count == 2
    warm.close()
    cfg = RBP.from_config(store, RegisteredBufferPoolConfig(
        max_bytes=8192, min_size_class=1024, alignment=4096, prewarm_size=1000, prewarm_count=2))
    st = cfg.stats()
    assert st.free_regions == 2 and st.size_classes == {1024: 2}
    cfg.ensure_prewarmed(1000, 3)
    cfg.ensure_prewarmed(1000, 2)  # only what is missing
    assert cfg.stats().free_regions == 3
    cfg.close()
    with pytest.raises(ValueError, match="prewarm_size"):
        RBP(store, max_bytes=8192, prewarm_count=1)
    # an oversize request: its own region, unregistered on release
    over = RBP(store, max_bytes=8192, min_size_class=1024, max_size_class=2048, alignment=1024)
    with over.buffer(3000) as big:
        assert big.size == 3000
    st = over.stats()
    assert st.oversize_allocate_count == 1 and st.free_regions == 0
    over.close()
    # close with an active lease refuses; a waiting acquire gets a released region
    busy = RBP(store, max_bytes=4096, min_size_class=4096, alignment=4096)
    one = busy.acquire(1)
    with pytest.raises(RuntimeError, match="active leases"):
        busy.close()
    got = []
    t = threading.Thread(target=lambda: got.append(busy.acquire(1, timeout=60)))
    t.start()
    one.release()
    t.join(60)
    assert not t.is_alive() and got
    with pytest.raises(TimeoutError):
        busy.acquire(1, timeout=0.01)  # still held by the thread's lease
    got[0].release()
    busy.close()
    with pytest.raises(RuntimeError, match="closed"):
        busy.acquire(1)


# -- Mooncake's scripts/test_pub_tensor.py (a benchmark: its checks) --------------------

def test_pub_tensor_roundtrips_exactly_after_remove_all(store):
    """pub_tensor with a ReplicateConfig (printed, as the script does), a
    remove_all between publications, get_tensor equal element by element with
    the same dtype and shape; batch and upsert forms too."""
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    assert "replica_num=1" in str(cfg)
    t = torch.randn(1 << 16, dtype=torch.float32)
    k = K("pub")
    for _ in range(2):
        assert store.remove_all() >= 0
        assert store.pub_tensor(k, t, cfg) == 0
    got = store.get_tensor(k)
    assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t)
    ks = [K("bpub"), K("bpub")]
    assert store.batch_pub_tensor(ks, [t[:10], t[10:30].reshape(4, 5)], cfg) == [0, 0]
    assert torch.equal(store.get_tensor(ks[1]), t[10:30].reshape(4, 5))
    assert store.upsert_pub_tensor(k, t * 2, cfg) == 0
    assert torch.equal(store.get_tensor(k), t * 2)
    assert store.batch_upsert_pub_tensor(ks, [t[:3], t[:4]], cfg) == [0, 0]
    assert torch.equal(store.get_tensor(ks[0]), t[:3])


# -- Mooncake's test_partial_read.py, case by case; the plans also run on the store -----

def _run_plan_on_store(store, source, plan):
    """Executes a plan's (source offset, destination offset, size) ranges with
    get_into_ranges from the stored matrix into a registered buffer."""
    k = K("pr")
    assert store.put(k, source.tobytes()) == 0
    out = np.zeros(max(plan.nbytes, 1), dtype=np.uint8)
    assert store.register_buffer(out.ctypes.data, out.nbytes) == 0
    try:
        if plan.ranges:
            res = store.get_into_ranges([out.ctypes.data], [[k]],
                                        [[[d for _, d, _ in plan.ranges]]],
                                        [[[s for s, _, _ in plan.ranges]]],
                                        [[[n for _, _, n in plan.ranges]]])
            assert res == [[[n for _, _, n in plan.ranges]]]
    finally:
        store.unregister_buffer(out.ctypes.data)
    return np.frombuffer(out[:plan.nbytes].tobytes(), dtype=source.dtype).reshape(plan.shape)


@pytest.mark.parametrize("shape,dtype,rows,columns,want_shape,want_ranges", [
    ((4, 5), np.int16, (3, 0, 3), slice(1, 4), (3, 3), ((32, 0, 6), (2, 6, 6), (32, 12, 6))),
    ((4, 6), np.int32, (2,), slice(1, 5), (1, 4), None),
    ((4, 6), np.int32, (3, 0, 1), slice(4, 5), (3, 1), None),
    ((6, 3), np.uint8, (2, 3, 4, 1, 1, 2), slice(None), (6, 3), ((6, 0, 9), (3, 9, 3), (3, 12, 6)))])
def test_partial_read_plans_match_numpy(store, shape, dtype, rows, columns, want_shape,
                                        want_ranges):
    from mooncake._partial_read import plan_matrix_read
    src = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    plan = plan_matrix_read(shape, src.itemsize, rows, columns, max_ranges=len(rows))
    assert plan.shape == want_shape
    if want_ranges is not None:
        assert plan.ranges == want_ranges
    np.testing.assert_array_equal(_run_plan_on_store(store, src, plan), src[list(rows), columns])


def test_partial_read_edges():
    import sys
    from mooncake._partial_read import plan_matrix_read
    for rows, cols, shape in (((), slice(1, 3), (0, 2)), ((0, 1), slice(2, 2), (2, 0))):
        p = plan_matrix_read(shape=(3, 4), itemsize=4, rows=rows, columns=cols, max_ranges=0)
        assert (p.shape, p.nbytes, p.ranges) == (shape, 0, ())
    src = np.arange(20, dtype=np.int16).reshape(4, 5)
    p = plan_matrix_read(src.shape, src.itemsize, rows=(2, 0), columns=slice(-3, 99),
                         max_ranges=16)
    out = bytearray(p.nbytes)
    raw = src.tobytes()
    for s, d, n in p.ranges:
        out[d:d + n] = raw[s:s + n]
    np.testing.assert_array_equal(np.frombuffer(out, dtype=np.int16).reshape(p.shape),
                                  src[[2, 0], -3:99])
    p = plan_matrix_read(shape=(5, 4), itemsize=4, rows=(0, 1), columns=slice(1, 3), max_ranges=1)
    assert p.shape == (2, 2) and p.ranges is None  # over the cap: no partial plan
    assert plan_matrix_read((8, 4), 2, range(2, 6), slice(None), max_ranges=1).ranges == \
        ((16, 0, 32),)
    assert plan_matrix_read((8, 4), 2, range(2, 6), slice(None), max_ranges=0).ranges is None
    for shape, rows, cols, err in (((3,), (), slice(None), ValueError),
                                   ((3, 4, 5), (), slice(None), ValueError),
                                   ((3, 4), (), slice(None, None, 2), ValueError),
                                   ((3, 4), range(2, -1, -1), slice(None), ValueError),
                                   ((3, 4), (3,), slice(None), IndexError),
                                   ((sys.maxsize, 2), (), slice(None), OverflowError)):
        with pytest.raises(err):
            plan_matrix_read(shape=shape, itemsize=4, rows=rows, columns=cols, max_ranges=16)


# -- Mooncake's test_tensor_read_snapshot.py, case by case (CPU destinations) -----------

class _TensorAfterMetadata:
    """A destination tensor that runs a callback when the binding inspects it
    (its class name holds "Tensor": Mooncake's binding takes an object for a
    tensor by its class name, as its own test's proxy is named)."""

    def __init__(self, tensor, callback):
        self.tensor, self.callback = tensor, callback

    def is_contiguous(self):
        cb, self.callback = self.callback, None
        if cb is not None:
            cb()
        return self.tensor.is_contiguous()

    def __getattr__(self, name):
        return getattr(self.tensor, name)


def test_tensor_read_snapshot_cases(store):
    for batched in (False, True):
        k = K("snap")
        original = torch.arange(8, dtype=torch.float32)
        replacement = original + 100
        dst = torch.full_like(original, -1)
        size = dst.numel() * dst.element_size()
        assert store.put_tensor(k, original) == 0
        upserts = []
        proxy = _TensorAfterMetadata(dst, lambda: upserts.append(store.upsert_tensor(k, replacement)))
        if batched:
            assert store.batch_get_tensor_into_cuda([k], [proxy]) == [size]
        else:
            assert store.get_tensor_into_cuda(k, proxy) == size
        assert upserts == [0]  # the upsert ran between the read and the fill
        assert torch.equal(dst, original)  # one version: the one located first
        assert torch.equal(store.get_tensor(k), replacement)
    # a missing key keeps its -704 next to a valid item
    k = K("snap")
    original = torch.arange(8, dtype=torch.float32)
    dsts = [torch.empty_like(original), torch.empty_like(original)]
    assert store.put_tensor(k, original) == 0
    assert store.batch_get_tensor_into_cuda([k + "_missing", k], dsts) == [-704, 32]
    assert torch.equal(dsts[1], original)
    # destinations that cannot take it: -600; not a tensor object: -600.
    # Mooncake's binding wants the stored dtype and exactly the stored shape:
    # a larger destination, or the same size in another shape, is refused
    # and left untouched
    assert store.get_tensor_into_cuda(k, torch.empty(8, dtype=torch.int32)) == -600
    assert store.get_tensor_into_cuda(k, torch.empty(4)) == -600
    assert store.get_tensor_into_cuda(k, torch.empty(16)[::2]) == -600
    for big in (torch.full((16,), -1.0), torch.full((2, 4), -1.0), torch.full((1, 8), -1.0)):
        assert store.get_tensor_into_cuda(k, big) == -600
        assert store.batch_get_tensor_into_cuda([k, k], [big, torch.empty(8)]) == [-600, 32]
        assert bool((big == -1).all())
    assert store.put(k + "raw", b"not a tensor") == 0
    assert store.get_tensor_into_cuda(k + "raw", torch.empty(8)) == -600
    assert store.batch_get_tensor_into_cuda([k], []) == [-600]
    # not a tensor (Mooncake: a class name without "Tensor"): -600, no exception
    assert store.get_tensor_into_cuda(k, b"x") == -600
    assert store.batch_get_tensor_into_cuda([k], [None]) == [-600]
    assert store.get_tensor_into_cuda(k + "_missing", b"x") == -704


# -- Mooncake's scripts/test_local_cache.py (reader role, one process) ------------------

def test_local_cache_reads_as_mooncakes_script_checks(store, cluster):
    writer = MooncakeDistributedStore()
    assert writer.setup("localhost", cluster["metadata"], SEG, "16MB", "tcp", "",
                        cluster["master"]) == 0
    try:
        def data(k, n=3000):
            return (k.encode() * (n // len(k) + 1))[:n]
        single, batch, into = K("lc1"), [K("lcb%d" % i) for i in range(8)], K("lci")
        binto, gone = [K("lcbi%d" % i) for i in range(4)], K("lcrm")
        for k in [single, into, gone] + batch + binto:
            assert writer.put(k, data(k)) == 0
        assert bytes(store.get_buffer(single)) == data(single)
        for _ in range(2):  # "miss" then "hit": same bytes
            assert bytes(store.get_buffer(single, local_cache=True)) == data(single)
            assert [bytes(b) for b in store.batch_get_buffer(batch, local_cache=True)] == \
                [data(k) for k in batch]
        assert bytes(store.get_buffer(single, local_cache=False)) == data(single)
        buf = np.zeros(4 * 4096, dtype=np.uint8)
        assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
        try:
            for _ in range(2):
                n = store.get_into(into, buf.ctypes.data, 4096, local_cache=True)
                assert n == 3000 and buf[:n].tobytes() == data(into)
                buf[:] = 0
                ptrs = [buf.ctypes.data + i * 4096 for i in range(4)]
                lens = store.batch_get_into(binto, ptrs, [4096] * 4, local_cache=True)
                assert lens == [3000] * 4
                assert [buf[i * 4096:i * 4096 + 3000].tobytes() for i in range(4)] == \
                    [data(k) for k in binto]
        finally:
            store.unregister_buffer(buf.ctypes.data)
        assert bytes(store.get_buffer(gone, local_cache=True)) == data(gone)
        wait_lease()
        assert store.remove(gone) == 0
        assert store.get_buffer(gone, local_cache=True) is None  # nothing served from a cache
        # a value replaced by another client is never served stale
        assert writer.upsert(single, b"new value") == 0
        assert bytes(store.get_buffer(single, local_cache=True)) == b"new value"
        with pytest.raises(TypeError):
            store.get_buffer(single, local_cache="yes")
    finally:
        writer.close()


def test_prefix_query_and_cost_routing_answer_disabled(store):
    """scripts/test_prefix_query.py / test_query_cost.py accept the "feature
    off" codes; crescent's master has neither feature, so those are the answers."""
    assert store.query_prefix_match([]) == (None, None, None, -1600)
    assert store.query_prefix_match([1] * 257) == (None, None, None, -1600)
    assert store.query_prefix_match([0xCAFEBABE, 2], avg_block_bytes=64) == \
        (None, None, None, -1600)
    assert store.query_cost([]) == (None, -1700)
    assert store.query_cost(["seg-%d" % i for i in range(1025)]) == (None, -1700)
    assert store.query_cost(["a", "b"], client_host="127.0.0.1", client_zone="",
                            request_size_bytes=0, include_unmounted=True) == (None, -1700)
    assert store.inflight_begin("smoke-seg") == (None, -1700)
    assert store.inflight_end("smoke-seg") == (None, -1700)
    with pytest.raises(TypeError):
        store.query_prefix_match(["not-a-hash"])
    with pytest.raises(TypeError):
        store.inflight_begin(None)


# -- Mooncake's scripts/test_tensor_chunk_api.py, case by case --------------------------

def test_tensor_chunk_api_cases(store):
    import struct
    k = K("chunk")
    bad = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    assert store.put_tensor_chunk_with_tp(k, bad, tp_rank=0, tp_size=2, split_dim=2,
                                          full_shape=[8, 4]) != 0
    assert [store.is_exist(k + s) for s in ("_tp_0", "_tp_0_meta", "_global_meta")] == [0, 0, 0]
    t = torch.arange(32, dtype=torch.float32).reshape(8, 4)
    chunks = t.chunk(4, 0)
    for r, c in enumerate(chunks):
        assert store.put_tensor_chunk_with_tp(k, c, tp_rank=r, tp_size=4, split_dim=0,
                                              full_shape=list(t.shape)) == 0
        assert torch.equal(store.get_tensor("%s_tp_%d" % (k, r)), c)
        assert store.is_exist("%s_tp_%d_meta" % (k, r)) == 1
    assert store.is_exist(k + "_global_meta") == 1
    meta = store.get(k + "_tp_2_meta")
    assert len(meta) == 16 and struct.unpack("<qq", meta) == (4, 2)
    g = store.get(k + "_global_meta")
    assert len(g) == 48
    assert struct.unpack_from("<ii", g, 8) == (0, 4)  # split_dim, tp_size
    assert struct.unpack_from("<qq", g, 16) == (8, 4)
    assert torch.equal(store.get_tensor_with_tp(k, tp_rank=2, tp_size=4, split_dim=0), chunks[2])
    # a chunk whose shape is not the rank's torch.chunk piece is refused
    assert store.put_tensor_chunk_with_tp(K("c"), t[:3], tp_rank=3, tp_size=4, split_dim=0,
                                          full_shape=[8, 4]) == -600
    assert store.put_tensor_chunk_with_tp(K("c"), chunks[0], tp_rank=4, tp_size=4, split_dim=0,
                                          full_shape=[8, 4]) == -600
    # batches: rank 1 writes no global meta, rank 0 does
    for rank, size in ((1, 2), (0, 4)):
        ts = [torch.arange(24.).reshape(6, 4), torch.arange(48.).reshape(6, 8)]
        ks = [K("cb"), K("cb")]
        cs = [x.chunk(size, 1)[rank].contiguous() for x in ts]
        assert store.batch_put_tensor_chunk_with_tp(ks, cs, tp_rank=rank, tp_size=size,
                                                    split_dim=1,
                                                    full_shapes=[list(x.shape) for x in ts]) == \
            [0, 0]
        for kk, c in zip(ks, cs):
            assert torch.equal(store.get_tensor("%s_tp_%d" % (kk, rank)), c)
            assert store.is_exist("%s_tp_%d_meta" % (kk, rank)) == 1
            assert store.is_exist(kk + "_global_meta") == (1 if rank == 0 else 0)
    # _from: the serialized chunk (put_tensor's layout) in registered memory
    full = torch.arange(30, dtype=torch.float32).reshape(5, 6)
    chunk = full.chunk(3, 1)[1].contiguous()
    seed = K("seed")
    assert store.put_tensor(seed, chunk) == 0
    n = store.get_size(seed)
    buf = (ctypes.c_ubyte * n)()
    addr = ctypes.addressof(buf)
    assert store.register_buffer(addr, n) == 0
    try:
        assert store.get_tensor_into(seed, addr, n) is not None
        kf = K("cfrom")
        assert store.put_tensor_chunk_with_tp_from(kf, addr, n, tp_rank=1, tp_size=3,
                                                   split_dim=1, full_shape=[5, 6]) == 0
        assert torch.equal(store.get_tensor(kf + "_tp_1"), chunk)
        assert store.batch_put_tensor_chunk_with_tp_from([kf], [addr], [n], tp_rank=1,
                                                         tp_size=3, split_dim=1,
                                                         full_shapes=[[5, 6]]) == [0]
        assert store.batch_put_tensor_chunk_with_tp_from([kf], [addr], [], tp_rank=1,
                                                         tp_size=3, split_dim=1,
                                                         full_shapes=[[5, 6]]) == [-600]
    finally:
        store.unregister_buffer(addr)
    unreg = (ctypes.c_ubyte * n)()
    assert store.put_tensor_chunk_with_tp_from(K("x"), ctypes.addressof(unreg), n, 1, 3, 1,
                                               [5, 6]) == -600  # unregistered memory


# -- Mooncake's test_http_metadata_server_startup.py, case by case ----------------------

def test_kv_bootstrap_server_startup_cases(caplog):
    import logging
    import socket
    from mooncake.http_metadata_server import KVBootstrapServer, KVPoll
    with socket.socket() as taken:  # a bound, listening port: run() must fail
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        srv = KVBootstrapServer(port=taken.getsockname()[1], host="127.0.0.1")
        with caplog.at_level(logging.INFO):
            with pytest.raises(OSError):
                srv.run()
        srv.thread.join(10)
        assert not srv.thread.is_alive() and srv.poll() == KVPoll.Failed
        assert not any("HTTP Metadata Server started" in r.getMessage() for r in caplog.records)
        srv.close()
    caplog.clear()
    srv = KVBootstrapServer(port=0, host="127.0.0.1")
    with caplog.at_level(logging.INFO):
        t = srv.run()
    try:
        assert t.is_alive() and srv.poll() == KVPoll.Success and srv.port > 0
        assert any("HTTP Metadata Server started" in r.getMessage() for r in caplog.records)
    finally:
        srv.close()
    assert not t.is_alive() and srv.poll() == KVPoll.Failed
    srv.close()  # idempotent


# -- Mooncake's test_meta_server.py (an is_exist QPS script): its calls -------------------

def test_is_exist_from_threads_on_a_segmentless_client(cluster):
    """Setup with global_segment_size=0 against the master's HTTP metadata
    server, then is_exist of random keys from 4 threads: every call answers
    0 (absent) — or 1 for the one key that exists — and none raises."""
    import random
    import threading
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", cluster["metadata"], 0, 512 << 20, "tcp", "eth0",
                   cluster["master"]) == 0
    present = K("meta")
    assert s.put(present, b"v") == 0
    bad = []

    def worker(seed):
        rng = random.Random(seed)
        for _ in range(100):
            k = present if rng.random() < 0.1 else str(rng.randint(0, 1000000))
            r = s.is_exist(k)
            if r != (1 if k == present else 0):
                bad.append((k, r))

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    try:
        assert not any(t.is_alive() for t in ts) and bad == []
    finally:
        s.remove(present, True)
        s.close()


# -- Mooncake's test_streaming_transfer.py: the read side; progressive put refused -------

def test_streaming_reads_and_progressive_put(store):
    k = K("prog")
    data = bytes(i % 256 for i in range(4096 * 4))
    assert store.put(k, data) == 0
    dst = store.alloc(len(data))
    assert dst != 0 and dst % 4096 == 0
    h = store.progressive_get(k, dst, len(data), 4096)
    assert h.num_chunks == 4 and h.wait_all() == 0 and h.completed_count == 4
    assert ctypes.string_at(dst, len(data)) == data
    k2 = K("prog")
    d2 = os.urandom(2048 * 3)
    assert store.put(k2, d2) == 0
    ctypes.memset(dst, 0, len(d2))
    h = store.progressive_get(k2, dst, len(d2), 2048)
    assert all(h.wait_chunk(i) == 0 and h.is_chunk_ready(i) for i in range(3))
    assert ctypes.string_at(dst, len(d2)) == d2
    miss = store.progressive_get(K("none"), dst, 4096, 1024)
    assert miss.wait_all() == -704 and miss.completed_count == 0
    keys, parts = [K("sc"), K("sc")], [os.urandom(8192), os.urandom(8192)]
    for kk, p in zip(keys, parts):
        assert store.put(kk, p) == 0
    h = store.streaming_batch_get_buffer_ranges(keys, dst, [0, 4096], [0, 0], [4096, 4096])
    assert h.num_chunks == 2 and h.wait_all() == 0
    assert ctypes.string_at(dst, 8192) == parts[0][:4096] + parts[1][:4096]
    assert store.streaming_batch_get_buffer_ranges(keys, dst, [0], [0, 0], [1, 1]) is None
    assert store.alloc(0) == 0
    with pytest.raises(RuntimeError, match="UNAVAILABLE_IN_CURRENT_MODE"):
        store.progressive_put(K("pp"), 4096, 4)


# ---- names of Mooncake's newest bindings (the audit of tests/python/
# mooncake_api_names.txt): each checked for its behaviour on the cluster ----------

def test_every_mooncake_name_and_parameter_list_is_here():
    """check_mooncake_api.py: every name of mooncake_api_names.txt exists with
    Mooncake's parameter names and defaults, and docs/python.md names it."""
    import check_mooncake_api as chk
    docs = os.path.join(os.path.dirname(chk.HERE), os.pardir, "docs", "python.md")
    entries, absent, differ, unins, undoc = chk.check(os.path.normpath(docs))
    assert len(entries) > 350
    assert (absent, differ, unins, undoc) == ([], [], [], [])


def test_probe_key_grants_no_lease(store):
    k = K("probe")
    assert store.put(k, b"abc") == 0
    assert store.probe_key(k) == 1 and store.probe_key(K("none")) == 0
    assert store.batch_probe_key([k, K("none")]) == [1, 0]
    assert store.batch_probe_key([]) == []
    # no read lease was taken: a plain remove succeeds at once
    assert store.remove(k) == 0
    assert store.probe_key(k) == 0


def test_batch_probe_key_last_hit_only_marks_only_the_last_complete_candidate(store):
    a, b, c, gone = K("pa"), K("pb"), K("pc"), K("pgone")
    for k in (a, b, c):
        assert store.put(k, b"ckpt") == 0
    # default policy: plain existence, candidate_size unused (0 allowed)
    assert store.batch_probe_key([a, b, c, gone]) == [1, 1, 1, 0]
    assert store.batch_probe_key([a], candidate_size=0) == [1]
    assert store.batch_probe_key([a, gone], "none", 3) == [1, 0]
    last = "LastHitOnly"
    assert store.batch_probe_key([a, b, c, gone], last, 2) == [1, 1, 0, 0]
    assert store.batch_probe_key([a, b, b, c], last, 2) == [0, 0, 1, 1]
    assert store.batch_probe_key([a, gone, b, c], last, 2) == [0, 0, 1, 1]
    assert store.batch_probe_key([a, gone], last, 2) == [0, 0]
    assert store.batch_probe_key([a, b], last) == [0, 1]  # default size 1
    assert store.batch_probe_key([a, b, c], last, 3) == [1, 1, 1]
    assert store.batch_probe_key([], last, 0) == []
    for size in (0, 3):
        with pytest.raises(ValueError):
            store.batch_probe_key([a, b], last, size)
    with pytest.raises(ValueError):
        store.batch_probe_key([a], "unknown")
    with pytest.raises(ValueError):
        store.batch_probe_key([a], "lasthitonly")
    with pytest.raises(TypeError):
        store.batch_probe_key([a], last, -1)
    with pytest.raises(TypeError):
        store.batch_probe_key([a], None)
    # keyword names as Mooncake's binding
    assert store.batch_probe_key(keys=[a, b], policy=last, candidate_size=1) == [0, 1]
    # the probes left the objects readable and, with is_exist leasing nothing
    # here, removable at once
    assert store.get(c) == b"ckpt"
    u = MooncakeDistributedStore()
    for policy in ("none", last):
        r = u.batch_probe_key([a, b, c, gone], policy, 2)
        assert len(r) == 4 and all(v < 0 for v in r), r
    for k in (a, b, c):
        assert store.remove(k, True) == 0


def test_exist_options_accepted_by_is_exist_and_batch_is_exist(store):
    k = K("eo")
    assert store.put(k, b"x") == 0
    o = mstore.ExistOptions()
    assert o.prefetch_to_memory is False
    o.prefetch_to_memory = True
    assert mstore.ExistOptions(prefetch_to_memory=True).prefetch_to_memory is True
    with pytest.raises(TypeError):
        o.prefetch_to_memory = "yes"
    with pytest.raises(AttributeError):
        o.prefetch_to_disk = True
    assert store.is_exist(k, o) == 1 and store.is_exist(K("none"), options=o) == 0
    assert store.is_exist(k, None) == 1 and store.is_exist(key=k) == 1
    assert store.batch_is_exist([k, K("none")], o) == [1, 0]
    assert store.batch_is_exist(keys=[k], options=mstore.ExistOptions()) == [1]
    with pytest.raises(TypeError):
        store.is_exist(k, {"prefetch_to_memory": True})
    with pytest.raises(TypeError):
        store.batch_is_exist([k], 1)
    assert MooncakeDistributedStore().batch_is_exist([k], o) == [NOT_READY]
    assert store.remove(k) == HAS_LEASE  # is_exist read-leased it (Mooncake's ExistKey)
    assert store.remove(k, force=True) == 0


def test_allocate_host_buffer_and_free_host_buffer():
    from mooncake.engine import allocate_host_buffer, free_host_buffer
    p = allocate_host_buffer(4 << 20)
    assert p != 0 and p % 4096 == 0
    ctypes.memset(p, 0xAB, 4 << 20)  # the whole range is ours
    assert ctypes.string_at(p + (4 << 20) - 1, 1) == b"\xab"
    free_host_buffer(p)
    with pytest.raises(ValueError):  # freed already: refused, not a double free
        free_host_buffer(p)
    with pytest.raises(ValueError):  # never allocated here
        free_host_buffer(ctypes.addressof(ctypes.c_char()))
    assert allocate_host_buffer(0) == 0
    assert free_host_buffer(0) is None
    with pytest.raises(TypeError):
        allocate_host_buffer(-1)
    with pytest.raises(TypeError):
        allocate_host_buffer("4096")
    assert allocate_host_buffer(1 << 62) == 0  # cannot be had: 0, nothing leaked
    ptrs = [allocate_host_buffer(n) for n in (1, 4097, 1 << 16)]
    assert len(set(ptrs)) == 3 and all(ptrs)
    for q in ptrs:
        free_host_buffer(q)
    assert crescent.engine.allocate_host_buffer is allocate_host_buffer


def test_setup_dummy_and_init_all_warn_why_they_are_refused(cluster):
    s = MooncakeDistributedStore()
    with pytest.warns(RuntimeWarning, match="no real-client daemon"):
        assert s.setup_dummy(16 << 20, 16 << 20, "localhost:12345") == UNAVAILABLE
    with pytest.warns(RuntimeWarning, match="no dummy client"):
        assert s.init_all("tcp", "") == UNAVAILABLE


def test_mooncake_config_parse_segment_size_alias():
    from mooncake.mooncake_config import _parse_segment_size, _size
    assert _parse_segment_size is _size
    assert _parse_segment_size("1.5gb") == int(1.5 * (1 << 30))
    with pytest.raises(ValueError):
        _parse_segment_size("gb")


def test_get_sessions_and_put_session_revoke(store):
    k = K("gs")
    assert store.put(k, bytes(range(200))) == 0
    assert store.batch_get_session_start([k, K("none")]) == [0, NOT_FOUND]
    buf = (ctypes.c_ubyte * 64)()
    p = ctypes.addressof(buf)
    assert store.register_buffer(p, 64) == 0
    assert store.batch_get_into_multi_buffer_ranges([k], [[p]], [[10]], [[150]]) == [10]
    assert bytes(buf[:10]) == bytes(range(150, 160))
    assert store.batch_get_session_end([k]) == 0
    # keyword names are Mooncake's
    assert store.batch_get_into_multi_buffer_ranges(
        keys=[k], all_buffer_ptrs=[[p]], all_sizes=[[4]], all_src_offsets=[[0]]) == [4]
    s = K("ps")
    assert store.batch_put_session_start([s], [16]) == [0]
    assert store.batch_put_from_multi_buffer_ranges(
        keys=[s], all_buffer_ptrs=[[p]], all_sizes=[[16]], all_dst_offsets=[[0]]) == [16]
    assert store.batch_put_session_revoke([s]) == [0]
    assert store.batch_put_session_revoke([s]) == [NOT_FOUND]
    assert store.is_exist(s) == 0  # revoked: nothing stored
    closed = MooncakeDistributedStore()
    assert closed.batch_get_session_start([k]) == [NOT_READY]
    assert closed.batch_get_session_end([k]) == NOT_READY
    assert store.unregister_buffer(p) == 0


def test_ranged_reads_through_a_snapshot(store, cluster):
    k1, k2 = K("s1"), K("s2")
    assert store.put(k1, bytes(range(40))) == 0
    assert store.put(k2, bytes(range(100, 140))) == 0
    snap = store.prepare_get_into_ranges_snapshot([k1, k2, k1])
    assert isinstance(snap, mstore.RangedReadSnapshot) and snap.keys == (k1, k2)
    b = (ctypes.c_ubyte * 32)()
    p = ctypes.addressof(b)
    assert store.register_buffer(p, 32) == 0
    res = store.get_into_ranges_from_snapshot(snap, [p], [[k1, k2]], [[[0], [8]]],
                                              [[[1], [2]]], [[[4], [5]]])
    assert res == [[[4], [5]]]
    assert bytes(b[0:4]) == bytes(range(1, 5)) and bytes(b[8:13]) == bytes(range(102, 107))
    # an upsert after the snapshot is read (crescent locates replicas per read)
    assert store.upsert(k1, bytes(range(50, 90))) == 0
    assert store.get_into_ranges_from_snapshot(snap, [p], [[k1]], [[[0]]], [[[0]]],
                                               [[[3]]]) == [[[3]]]
    assert bytes(b[0:3]) == bytes(range(50, 53))
    other = MooncakeDistributedStore()
    assert other.setup("localhost", cluster["metadata"], 0, "16MB", "tcp", "",
                       cluster["master"]) == 0
    try:
        with pytest.raises(ValueError, match="another Store"):
            other.get_into_ranges_from_snapshot(snap, [p], [[k1]], [[[0]]], [[[0]]], [[[1]]])
    finally:
        other.close()
    with pytest.raises(TypeError):
        store.get_into_ranges_from_snapshot(object(), [p], [[k1]], [[[0]]], [[[0]]], [[[1]]])
    with pytest.raises(TypeError):
        mstore.RangedReadSnapshot()
    with pytest.raises(RuntimeError, match="not initialized"):
        MooncakeDistributedStore().prepare_get_into_ranges_snapshot([k1])
    assert store.unregister_buffer(p) == 0


def test_newest_not_applicable_calls_answer(store, cluster):
    assert store.unmount_local_disk_segment() == UNAVAILABLE
    assert store.unmount_local_disk_segment(grace_period_seconds=5) == UNAVAILABLE
    assert MooncakeDistributedStore().unmount_local_disk_segment() == NOT_READY
    with pytest.raises(ValueError):
        store.unmount_local_disk_segment(-1)
    assert store.get_offload_rpc_read_count() == 0
    with pytest.raises(RuntimeError, match="UNAVAILABLE_IN_CURRENT_MODE"):
        store.begin_weight_snapshot(object(), object())
    with pytest.raises(RuntimeError, match="UNAVAILABLE_IN_CURRENT_MODE"):
        store._get_pyclient_capsule()
    with pytest.raises(RuntimeError, match="UNAVAILABLE_IN_CURRENT_MODE"):
        mstore._get_pyclient_from_wrapper(store)
    for cls_method in ("real_register", "real_unregister_by_endpoint"):
        with pytest.raises(RuntimeError, match="UNAVAILABLE_IN_CURRENT_MODE"):
            getattr(mstore.MooncakeDistributedNoFRegister, cls_method)(None)
    for kw in ({"enable_embedded_master": True}, {"enable_client_http_server": True}):
        s = MooncakeDistributedStore()
        with pytest.warns(RuntimeWarning):
            assert s.setup("localhost", cluster["metadata"], 0, "16MB", "tcp", "",
                           cluster["master"], **kw) == UNAVAILABLE
        s.close()
    s = MooncakeDistributedStore()
    assert s.setup({"local_hostname": "localhost", "metadata_server": cluster["metadata"],
                    "global_segment_size": 0, "local_buffer_size": "16MB",
                    "master_server_addr": cluster["master"], "client_http_port": 9300,
                    "enable_embedded_master": "false"}) == 0
    s.close()
    k = K("ld")
    assert store.put(k, b"xyz") == 0
    reps = store.get_replica_desc(k)
    assert reps and all(r.is_memory_replica() and not r.is_local_disk_replica() for r in reps)


def test_private_tensor_serialization_helpers(store):
    assert mstore._tensor_metadata_size() == H
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    meta, ptr, size, owner = mstore._serialize_tensor(t)
    assert len(meta) == H and size == 48 and ptr == owner.data_ptr()
    k = K("ser")
    assert store.put_tensor(k, t) == 0
    stored = bytes(store.get_buffer(k))
    assert stored[:H] == meta and stored[H:] == ctypes.string_at(ptr, size)
    back = mstore._deserialize_tensor(stored)
    assert back.dtype == torch.float32 and torch.equal(back, t)
    with pytest.raises(ValueError):
        mstore._serialize_tensor([1, 2])
    with pytest.raises(ValueError):
        mstore._deserialize_tensor(b"junk")


def test_newest_engine_names():
    assert mengine.Read is mengine.TransferOpcode.Read and mengine.Write == 1
    assert mengine.TransferEngine.TransferOpcode is mengine.TransferOpcode
    assert mengine.SUPPORT_MUSA is False and mengine.SUPPORT_MULTI_PROTOCOL is False
    assert mengine.InnerTransferEngine is mengine.TransferEngine
    S = mengine.ScatterTransferCompletionStatus
    assert (int(S.COMPLETED), int(S.FAILED_DRAINED), int(S.COMPLETION_UNKNOWN)) == (0, 1, 2)
    e = mengine.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        import json
        topo = json.loads(e.get_local_topology())
        assert "cpu:0" in topo and topo["cpu:0"] == [[], []]
        assert json.loads(e.get_local_topology(device_name="mlx5_0")) == topo
        assert e.warmup_efa_segment(e.get_local_name()) == 0
        assert isinstance(e.get_engine(), mengine.InnerTransferEngine)
        with pytest.raises(RuntimeError, match="UNAVAILABLE_IN_CURRENT_MODE"):
            e.get_engine_ptr()
        buf = np.zeros(8192, dtype=np.uint8)
        assert e.register_memory(buf.ctypes.data, buf.nbytes) == 0  # location "*"
        base = buf.ctypes.data
        buf[:100] = np.arange(100, dtype=np.uint8)
        me = e.get_local_name()
        # nic_hint / transport_hint are accepted as in Mooncake (one NIC here)
        assert e.transfer_sync_write(me, base, base + 4096, 10, transport_hint="",
                                     nic_hint="mlx5_0") == 0
        assert bytes(buf[4096:4106]) == bytes(range(10))
        assert e.batch_transfer_sync_read(me, [base + 200], [base + 4096], [10],
                                          nic_hint="") == 0
        assert bytes(buf[200:210]) == bytes(range(10))
        # scatter: op i moves lengths[i] bytes at the offsets of its regions
        t = e.scatter_transfer_sync_write_with_ticket(
            me, [base, base + 50], [50, 50], [base + 5000, base + 6000], [100, 100],
            [1, 2], [0, 10], [3, 4])
        assert t.status is S.COMPLETED and t.drained and t.drain(0) is True
        assert bytes(buf[5000:5003]) == bytes([1, 2, 3])
        assert bytes(buf[6010:6014]) == bytes([52, 53, 54, 55])
        t = e.scatter_transfer_sync_read_with_ticket(
            me, [base + 300], [16], [base], [100], [0], [90], [10])
        assert t.status is S.COMPLETED and bytes(buf[300:310]) == bytes(range(90, 100))
        with pytest.raises(ValueError, match="capacity"):
            e.scatter_transfer_sync_write_with_ticket(me, [base], [8], [base + 5000], [100],
                                                      [4], [0], [5])
        with pytest.raises(ValueError, match="differ"):
            e.scatter_transfer_sync_write_with_ticket(me, [base], [8], [base], [8], [0], [0],
                                                      [1, 2])
        t = e.scatter_transfer_sync_write_with_ticket("127.0.0.1:1", [base], [8], [base], [8],
                                                      [0], [0], [4])
        assert t.status is S.FAILED_DRAINED and t.drained
        assert e.unregister_memory(base) == 0
    finally:
        e.close()


# ---- mooncake._kv_codec / mooncake.codec_store -------------------------------------

def _fp8_ref(x, scale):
    """Scalar E4M3FN code of x / scale: nearest value, ties to the even code."""
    vals = [i / 512.0 if i < 8 else (8 + (i & 7)) * 2.0 ** ((i >> 3) - 10) for i in range(127)]
    m = min(abs(float(np.float32(x) / np.float32(scale))), 448.0)
    best = min(range(127), key=lambda c: (abs(vals[c] - m), c & 1))
    return best | (0x80 if np.signbit(np.float32(x)) else 0)


def test_kv_codec_record_layout_golden_and_errors():
    from mooncake._kv_codec import Dtype, InvalidRecord, ScaledFp8Codec
    import zlib

    def reseal(rec):
        b = bytearray(rec)
        b[24:28] = bytes(4)
        struct.pack_into("<I", b, 24, zlib.crc32(b))
        return bytes(b)

    c = ScaledFp8Codec(4)
    assert c.format_id == "fp8-e4m3fn-v1-g4" and ScaledFp8Codec().format_id.endswith("g128")
    src = np.array([448, -448, 1, -0.0], dtype=np.float16)
    want = reseal(struct.pack("<8sHBBIQIIQf", b"MCKVFP8\0", 1, 1, 1, 4, 4, 0, 0, 4, 1.0)
                  + bytes([0x7E, 0xFE, 0x38, 0x80]))
    rec = c.encode(src.view(np.uint8), Dtype.FLOAT16, [4])
    assert rec == want and c.encoded_size(Dtype.FLOAT16, [4]) == len(want)
    # 1.0625 / 1.1875 sit halfway between FP8 codes: ties go to the even code
    rec = c.encode(np.array([448, 1.0625, 1.1875, -1.0625], np.float16).view(np.uint8),
                   Dtype.FLOAT16, [4])
    assert rec[-4:] == bytes([0x7E, 0x38, 0x3A, 0xB8])
    # groups of 7 over 3x11 values: scale = max|x| / 448 per group, codes as the
    # scalar reference rounds them; decode returns code * scale
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(33) * 5).astype(np.float16)
    c7 = ScaledFp8Codec(7)
    rec = c7.encode(x.view(np.uint8), Dtype.FLOAT16, [3, 11])
    off = 32 + 16
    scales = np.frombuffer(rec, "<f4", 5, off)
    for g in range(5):
        grp = x[g * 7:(g + 1) * 7].astype(np.float32)
        assert scales[g] == np.float32(np.abs(grp).max()) / np.float32(448)
        for i, v in enumerate(grp):
            assert rec[off + 20 + g * 7 + i] == _fp8_ref(v, scales[g]), (g, i, v)
    out = bytearray(66)
    c7.decode_into(rec, out, Dtype.FLOAT16, [3, 11])
    y = np.frombuffer(bytes(out), np.float16).astype(np.float32)
    assert np.all(np.abs(y - x.astype(np.float32)) <= np.abs(x.astype(np.float32)) / 8 + 1e-3)
    # bfloat16 (numpy has no bf16: bytes of torch's)
    bf = torch.tensor([1.5, -3.0, 0.0, 100.0], dtype=torch.bfloat16)
    raw = bf.view(torch.int16).numpy().view(np.uint8)
    rec = c.encode(raw, Dtype.BFLOAT16, [4])
    dst = torch.empty(4, dtype=torch.bfloat16)
    c.decode_into(rec, dst.view(torch.int16).numpy().view(np.uint8), Dtype.BFLOAT16, [4])
    assert torch.allclose(dst.float(), bf.float(), rtol=0.07)
    # bad arguments: ValueError (Mooncake's invalid_argument), InvalidRecord (a
    # ValueError) for corrupt records, and the destination untouched
    for shape in ([], [0], [2 ** 63], [2 ** 32, 2 ** 32], [1] * 9):
        with pytest.raises(ValueError):
            c.encoded_size(Dtype.FLOAT16, shape)
    with pytest.raises(ValueError, match="source size"):
        c.encode(b"\0\0", Dtype.FLOAT16, [2 ** 40])
    with pytest.raises(ValueError, match="Non-finite"):
        c.encode(np.array([1, np.inf], np.float16).view(np.uint8), Dtype.FLOAT16, [2])
    with pytest.raises(ValueError, match="contiguous one-dimensional"):
        c.encode(np.zeros(4, np.float16), Dtype.FLOAT16, [4])
    with pytest.raises(TypeError):
        c.encode(b"\0\0", 1, [1])
    with pytest.raises(ValueError):
        ScaledFp8Codec(0)
    with pytest.raises(TypeError):
        ScaledFp8Codec(-1)
    rec = ScaledFp8Codec().encode(b"\0\0", Dtype.FLOAT16, [1])
    with pytest.raises(ValueError):
        ScaledFp8Codec().decode_into(rec, bytearray(1), Dtype.FLOAT16, [1])
    with pytest.raises((ValueError, BufferError)):
        ScaledFp8Codec().decode_into(rec, bytes(2), Dtype.FLOAT16, [1])
    for end in range(32):
        with pytest.raises(InvalidRecord):
            ScaledFp8Codec().decode_into(rec[:end], bytearray(2), Dtype.FLOAT16, [1])
    assert issubclass(InvalidRecord, ValueError)
    good = ScaledFp8Codec().encode(np.ones(16, np.float16).view(np.uint8), Dtype.FLOAT16, [16])
    for off in (0, 8, 10, 12, 16, 24, 28, 32, 40, 44):
        bad = bytearray(good)
        bad[off] ^= 1
        dst = bytearray(b"\7" * 32)
        with pytest.raises(InvalidRecord):
            ScaledFp8Codec().decode_into(bytes(bad), dst, Dtype.FLOAT16, [16])
        assert dst == bytearray(b"\7" * 32)
    for mutate in (lambda b: b.__setitem__(8, 2), lambda b: b.__setitem__(28, 1),
                   lambda b: struct.pack_into("<f", b, 40, -1.0),
                   lambda b: struct.pack_into("<f", b, 40, float("nan")),
                   lambda b: struct.pack_into("<f", b, 40, 0.0),
                   lambda b: b.__setitem__(len(b) - 1, 0xFF), lambda b: b.pop(),
                   lambda b: b.append(0x78)):
        bad = bytearray(good)
        mutate(bad)
        with pytest.raises(InvalidRecord):
            ScaledFp8Codec().decode_into(reseal(bad), bytearray(32), Dtype.FLOAT16, [16])
    with pytest.raises(ValueError, match="mismatch"):
        ScaledFp8Codec(64).decode_into(good, bytearray(32), Dtype.FLOAT16, [16])
    with pytest.raises(ValueError, match="mismatch"):
        ScaledFp8Codec().decode_into(good, bytearray(32), Dtype.FLOAT16, [4, 4])


def test_codec_store_client_on_the_store(store):
    from mooncake.codec_store import CodecStoreClient, StoreReadError
    from mooncake._kv_codec import InvalidRecord
    cl = CodecStoreClient(store)
    src = torch.randn(2, 4096, generator=torch.Generator().manual_seed(5)).bfloat16()
    k = K("codec")
    assert cl.put(k, src) == 0
    skey = cl.storage_key(k)
    assert skey.startswith("__mc_codec__/fp8-e4m3fn-v1-g128/")
    assert len(store.get(skey)) < src.numel() * 2  # the store holds the FP8 record
    dst = torch.empty_like(src)
    assert cl.get_into(k, dst) is dst
    assert torch.allclose(dst.float(), src.float(), rtol=0.07, atol=src.float().abs().max() / 400)
    first = store.get(skey)
    assert cl.put(k, src * 2) == 0  # put of an existing key: the store's answer,
    assert store.get(skey) == first  # and the first record stays (insert-only put)
    with pytest.raises(StoreReadError):
        cl.get_into(K("missing"), torch.empty(4, dtype=torch.float16))
    for bad in (torch.ones(3), torch.ones(2, 3, dtype=torch.float16).t(),
                torch.empty(0, dtype=torch.float16), torch.ones(1, dtype=torch.float16,
                                                                requires_grad=True)):
        with pytest.raises(ValueError):
            cl.put(K("bad"), bad)
    for g in (0, -1, 2 ** 32, True, 1.5):
        with pytest.raises(ValueError):
            CodecStoreClient(store, g)
    before = torch.full((16,), 7, dtype=torch.float16)
    with pytest.raises(ValueError, match="mismatch"):
        cl.get_into(k, before.clone().reshape(4, 4))
    jk = K("junk")
    assert store.put(cl.storage_key(jk), b"not a record") == 0
    t = torch.full((4,), 7, dtype=torch.float16)
    with pytest.raises(InvalidRecord):
        cl.get_into(jk, t)
    assert torch.equal(t, torch.full((4,), 7, dtype=torch.float16))


def test_store_rs_backend_functions(store):
    # Mooncake's Store-RS module functions: tracing accepted, no client metrics
    # registry or endpoint here (crescent-master serves /metrics)
    assert mstore.init_tracing() is None and mstore.init_tracing("info") is None
    with pytest.raises(TypeError):
        mstore.init_tracing(3)
    assert mstore.metrics_server_address() is None
    with pytest.raises(RuntimeError, match="UNAVAILABLE_IN_CURRENT_MODE"):
        mstore.metrics_text()
    with pytest.raises(RuntimeError, match="UNAVAILABLE_IN_CURRENT_MODE"):
        mstore.start_metrics_server()
    assert mstore.metrics_server_address() is None
    assert mstore.stop_metrics_server() is None
    for n in ("init_tracing", "metrics_text", "start_metrics_server", "stop_metrics_server",
              "metrics_server_address"):
        assert n in mstore.__all__
    assert store.put(K("still"), b"works") == 0  # the store is unaffected
