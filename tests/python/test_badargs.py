"""Every method of the store and the engine called with junk arguments:
each call returns or raises TypeError/ValueError/OverflowError — it never
crashes the interpreter, never hangs, and leaves the object usable."""
import itertools
import warnings

import numpy as np
import pytest

from conftest import make_store
from mooncake.engine import TransferEngine
from mooncake.store import MooncakeDistributedStore

# 4096 is never mapped (vm.mmap_min_addr), so no junk value is a usable pointer.
JUNK = [None, -1, 0, 4096, 2 ** 64 + 5, 1.5, "", "k", b"\xff", [], [1, -2], ["a", None], {}, [[]],
        [[4096]], object()]
OK_EXC = (TypeError, ValueError, OverflowError)

STORE_METHODS = ["put", "get", "put_parts", "get_buffer", "put_from", "get_into", "get_size",
                 "is_exist", "remove", "batch_is_exist", "batch_put_from", "batch_get_into",
                 "put_batch", "get_batch", "batch_remove", "batch_put_from_multi_buffers",
                 "batch_get_into_multi_buffers", "register_buffer", "unregister_buffer",
                 "remove_all", "get_hostname", "put_tensor", "get_tensor", "batch_get_buffer"]
# Mooncake's newer methods (tests/python/test_mooncake_api.py covers their behaviour)
STORE_METHODS += ["setup_dummy", "init_all", "alloc_from_mem_pool", "health_check", "isExist",
                  "put_from_with_metadata", "get_into_ranges",
                  "batch_get_into_multi_buffer_ranges", "batch_put_session_start",
                  "batch_put_from_multi_buffer_ranges", "batch_put_session_end",
                  "batch_put_session_abort", "upsert", "upsert_parts", "upsert_batch",
                  "upsert_from", "batch_upsert_from", "upsert_tensor", "batch_upsert_tensor",
                  "upsert_tensor_from", "batch_upsert_tensor_from", "pub_tensor",
                  "batch_pub_tensor", "batch_put_tensor", "batch_get_tensor", "get_tensor_into",
                  "batch_get_tensor_into", "put_tensor_from", "batch_put_tensor_from",
                  "put_tensor_with_tp", "batch_put_tensor_with_tp", "get_tensor_with_tp",
                  "batch_get_tensor_with_tp", "get_tensor_with_tp_into",
                  "batch_get_tensor_with_tp_into", "put_tensor_with_tp_from",
                  "batch_put_tensor_with_tp_from", "put_tensor_with_parallelism",
                  "batch_put_tensor_with_parallelism", "get_tensor_with_parallelism",
                  "batch_get_tensor_with_parallelism", "get_tensor_with_parallelism_into",
                  "put_tensor_with_parallelism_from", "save_tensor_to_safetensor",
                  "load_tensor_from_safetensor", "get_replica_desc", "batch_get_replica_desc",
                  "batch_replica_clear", "create_copy_task", "create_move_task", "query_task",
                  "mount_segment", "unmount_segment", "allocate_and_mount_segment",
                  "unmount_and_free_segment", "remove_by_regex"]
ENGINE_METHODS = ["get_rpc_port", "register_memory", "unregister_memory", "batch_register_memory",
                  "batch_unregister_memory", "transfer_sync_write", "transfer_sync_read",
                  "batch_transfer_sync_write", "batch_transfer_sync_read", "transfer_sync",
                  "batch_transfer_sync", "batch_transfer_async_write", "batch_transfer_async_read",
                  "batch_transfer_async", "get_batch_transfer_status", "transfer_submit_write",
                  "transfer_check_status", "get_first_buffer_address", "allocate_managed_buffer",
                  "free_managed_buffer", "write_bytes_to_buffer", "read_bytes_from_buffer",
                  "get_notifies", "send_notify", "send_probe", "transfer_tensor_sync_write",
                  "transfer_tensor_sync_read", "get_local_topology", "warmup_efa_segment",
                  "scatter_transfer_sync_write_with_ticket",
                  "scatter_transfer_sync_read_with_ticket"]


def arg_tuples(limit):
    out = [()]
    for n in (1, 2, 3, 4):
        combos = itertools.product(JUNK, repeat=n)
        out += list(itertools.islice(combos, 0, None, max(1, len(JUNK) ** n // limit)))
    return out


def hammer(obj, methods, limit, runtime_error="torch"):
    calls = 0
    for name in methods:
        fn = getattr(obj, name)
        for args in arg_tuples(limit):
            try:
                fn(*args)
            except OK_EXC:
                pass
            except RuntimeError as e:  # tensor helpers without torch
                assert runtime_error in str(e), (name, args, e)
            calls += 1
    return calls


def test_store_methods_with_junk(cluster):
    s = make_store(cluster)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            n = hammer(s, STORE_METHODS, 40)
        assert n > 1000
        # still fully usable
        assert s.put("after-junk", b"fine") == 0 and s.get("after-junk") == b"fine"
        assert s.remove("after-junk", force=True) == 0
    finally:
        s.close()
    # and on a closed / never set up store
    hammer(s, STORE_METHODS, 10)
    hammer(MooncakeDistributedStore(), STORE_METHODS, 10)


def test_engine_methods_with_junk():
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            n = hammer(e, ENGINE_METHODS, 40)
        assert n > 1000
        buf = np.zeros(4096, dtype=np.uint8)
        assert e.register_memory(buf) == 0
        assert e.transfer_sync_read(e.get_local_name(), buf.ctypes.data, buf.ctypes.data + 2048,
                                    16) == 0
    finally:
        e.close()
    hammer(e, ENGINE_METHODS, 10)
    hammer(TransferEngine(), ENGINE_METHODS, 10)


def test_bad_arguments_get_mooncakes_answers(cluster):
    """One row per kind of bad argument, on the calls added for Mooncake's
    newer API: wrong types raise TypeError, negative sizes ValueError,
    mismatched list lengths give -600 per key, unregistered memory -600,
    a closed store -1010 — and the store stays usable."""
    INVALID, NOT_READY = -600, -1010
    s = make_store(cluster)
    try:
        buf = np.zeros(8192, dtype=np.uint8)
        p = buf.ctypes.data
        args7 = ("localhost", cluster["metadata"], 0, "16MB", "tcp", "", cluster["master"])
        # wrong types
        for call in (lambda: s.create_copy_task(b"k", ["seg"]),
                     lambda: s.create_copy_task("k", "seg"),
                     lambda: s.create_move_task("k", 1, "seg"),
                     lambda: s.query_task([1]), lambda: s.query_task((1, "2")),
                     lambda: s.batch_replica_clear(["k"], segment_name=3),
                     lambda: s.batch_replica_clear("k"),
                     lambda: s.setup("localhost", tenant_id=1),
                     lambda: s.setup(*args7, tenant_id=1),
                     lambda: s.setup(*args7, None, []),  # enable_ssd_offload, 9th
                     lambda: s.setup(*args7, None, False, 5),  # ssd_offload_path, 10th
                     lambda: s.setup(*args7, ipc_socket_path=3),
                     lambda: s.put_from("k", "not a pointer", 10)):
            with pytest.raises(TypeError):
                call()
        # negative sizes
        for call in (lambda: s.put_from("k", p, -1), lambda: s.get_into("k", p, -5),
                     lambda: s.upsert_from("k", p, -1)):
            with pytest.raises(ValueError):
                call()
        # mismatched list lengths: one code per key, nothing stored
        assert s.batch_put_from(["a", "b"], [p], [16]) == [INVALID, INVALID]
        assert s.batch_upsert_from(["a", "b"], [p, p + 16], [16]) == [INVALID, INVALID]
        assert s.batch_get_into(["a", "b"], [p, p], [16]) == [INVALID, INVALID]
        assert s.batch_put_tensor(["a", "b"], []) == [INVALID, INVALID]
        assert s.batch_is_exist(["a", "b"]) == [0, 0]
        # unregistered memory
        assert s.put_from("k", p, 16) == INVALID
        assert s.get_into("k", p, 16) == INVALID
        assert s.batch_put_from(["k"], [p], [16]) == [INVALID]
        # out-of-range task ids and unknown tasks
        assert s.query_task((-1, 2)) == (None, -1400)
        assert s.query_task((2 ** 64, 0)) == (None, -1400)
        assert s.create_copy_task("k", ["s%d" % i for i in range(8)]) == ((0, 0), INVALID)
        # still usable
        assert s.put("still", b"ok") == 0 and s.get("still") == b"ok"
    finally:
        s.close()
    # closed store
    assert s.create_copy_task("k", ["seg"]) == ((0, 0), NOT_READY)
    assert s.create_move_task("k", "a:1", "b:2") == ((0, 0), NOT_READY)
    assert s.batch_replica_clear(["k"]) == []
    assert s.upsert("k", b"v") == NOT_READY
    assert s.batch_put_from(["k"], [p], [16]) in ([NOT_READY], [INVALID])


# the rest of MooncakeDistributedStore's methods (session, tp / parallelism
# variants, pub, file helpers); close / setup are exercised above
KV_SESSION_METHODS = ["attach_kv_session", "close_kv_session", "get_kv_session",
                      "list_kv_session_keys", "pin_kv_session", "unpin_kv_session",
                      "update_kv_session"]
MORE_STORE_METHODS = [
    "batch_get_tensor_with_parallelism_into", "batch_pub_tensor_with_tp",
    "batch_put_tensor_with_parallelism_from", "batch_upsert_pub_tensor",
    "batch_upsert_pub_tensor_with_tp", "batch_upsert_tensor_with_parallelism",
    "batch_upsert_tensor_with_parallelism_from", "batch_upsert_tensor_with_tp",
    "batch_upsert_tensor_with_tp_from", "get_tensor_dim_selection_into",
    "load_kv_cache_from_file", "load_tensor_from_file", "pub_tensor_with_tp",
    "save_kv_cache_to_file", "save_tensor_to_file", "upsert_pub_tensor",
    "upsert_pub_tensor_with_tp", "upsert_tensor_with_parallelism", "get_tensor_into_cuda",
    "batch_get_tensor_into_cuda", "query_prefix_match", "query_cost", "inflight_begin",
    "inflight_end", "put_tensor_chunk_with_tp", "batch_put_tensor_chunk_with_tp",
    "put_tensor_chunk_with_tp_from", "batch_put_tensor_chunk_with_tp_from", "alloc",
    "progressive_get", "streaming_batch_get_buffer_ranges",
    "upsert_tensor_with_parallelism_from", "upsert_tensor_with_tp", "upsert_tensor_with_tp_from",
    "probe_key", "batch_probe_key", "batch_get_session_start", "batch_get_session_end",
    "batch_put_session_revoke", "get_into_ranges_from_snapshot", "unmount_local_disk_segment",
    "get_offload_rpc_read_count"]
# RuntimeError "Client is not initialized" on a store not set up (Mooncake's)
SNAPSHOT_METHODS = ["prepare_get_into_ranges_snapshot"]


def test_more_mooncake_methods_with_junk(cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # junk file names ("k") land here
    public = [n for n in dir(MooncakeDistributedStore) if not n.startswith("_")
              and callable(getattr(MooncakeDistributedStore, n))]
    assert sorted(set(public) - set(STORE_METHODS) - set(MORE_STORE_METHODS)
                  - set(KV_SESSION_METHODS) - set(SNAPSHOT_METHODS)
                  - {"progressive_put", "begin_weight_snapshot"}) == \
        ["close", "setup"]  # a new method must be added to one of the lists
    s = make_store(cluster, cls=MooncakeDistributedStore)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert hammer(s, MORE_STORE_METHODS, 40) > 1000
            # not applicable here: Mooncake's "unavailable" for any argument
            hammer(s, KV_SESSION_METHODS + ["progressive_put", "begin_weight_snapshot"], 10,
                   runtime_error="UNAVAILABLE_IN_CURRENT_MODE")
            hammer(s, SNAPSHOT_METHODS, 40)
        assert s.put("after-more-junk", b"fine") == 0 and s.get("after-more-junk") == b"fine"
        assert s.remove("after-more-junk", force=True) == 0
    finally:
        s.close()
    hammer(s, MORE_STORE_METHODS, 10)
    hammer(MooncakeDistributedStore(), MORE_STORE_METHODS, 10)
    for closed in (s, MooncakeDistributedStore()):
        hammer(closed, SNAPSHOT_METHODS, 10, runtime_error="Client is not initialized")
