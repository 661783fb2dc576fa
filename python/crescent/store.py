"""Distributed KV-cache store client for Python (Mooncake's ``mooncake.store`` API).

    store = DistributedStore()
    store.setup("127.0.0.1", "http://127.0.0.1:8080/metadata", "512MB", "64MB",
                "tcp", "", "127.0.0.1:50051")
    store.put("key", b"value"); store.get("key")

Return conventions are Mooncake's: 0 / negative ErrorCode values (-704 object
not found, -705 already exists, ...), ``get`` returns b"" on a miss,
``is_exist`` 1/0/negative, zero-copy reads return the number of bytes read.
Bad argument types raise TypeError, bad values (negative sizes, buffers too
small) ValueError.  Pointers may be ints or buffer-protocol objects.

The data path (put/get and their zero-copy and batch forms) is the C
extension; this module adds Mooncake's remaining methods on top of it:
tensors (Mooncake's tensor metadata layout, TP and general parallelism,
safetensors files), upserts, ranged reads, put sessions, replica
descriptors, and the calls whose feature crescent does not have, which
return -1011 (UNAVAILABLE_IN_CURRENT_MODE) or raise RuntimeError naming it.
"""
import atexit
import ctypes
import mmap
import os
import random
import re
import threading
import weakref

from crescent import _crescent
from crescent import tensor_codec as tc
from crescent.unsupported import RangedReadSnapshot
from crescent.mooncake_types import (Descriptor, ExistOptions, MemoryDescriptor, ParallelAxis,
                                     QueryTaskResponse, ReadTarget, ReplicaDescriptor,
                                     ReplicateConfig, TaskStatus, TaskType, TensorParallelism,
                                     segment_name_of)

__all__ = ["DistributedStore", "ReplicateConfig", "BufferHandle", "UNAVAILABLE",
           "get_alloc_func_addr", "get_free_func_addr", "bind_to_numa_node",
           "MooncakeHostMemAllocator"]

BufferHandle = _crescent.BufferHandle

# Mooncake's ErrorCode values used here.
OK = 0
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
NO_AVAILABLE_HANDLE = -200
SEGMENT_NOT_FOUND = -101
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
PREFIX_QUERY_DISABLED = -1600
COST_QUERY_DISABLED = -1700
UNAVAILABLE_IN_CURRENT_STATUS = -1010
UNAVAILABLE = -1011  # UNAVAILABLE_IN_CURRENT_MODE: the feature is not in crescent
FILE_NOT_FOUND = -1100
FILE_OPEN_FAIL = -1101
FILE_WRITE_FAIL = -1103
PERSISTENT_FAIL = -1503
TASK_NOT_FOUND = -1400

# Transports of Mooncake builds with hardware crescent does not have.
_HW_PROTOCOLS = ("nvlink", "nvlink_intra", "hip", "musa", "efa", "cxl", "ascend", "hccs",
                 "barex", "nvmeof", "ubshmem", "cuda")

# Mooncake picks the store's transfer port in this range.
PORT_RANGE = (12300, 14300)
_EADDRINUSE = -98


class _NativeCfg:
    """The fields the C extension reads from a config (_upsert: replace an
    existing object, see the C API's cr_store_replicate_config_t.upsert)."""
    __slots__ = ("replica_num", "with_soft_pin", "with_hard_pin", "preferred_segments", "_upsert")

    def __init__(self, c, upsert=False):
        self.replica_num = c.replica_num
        self.with_soft_pin = c._soft_pin()
        self.with_hard_pin = c.with_hard_pin
        self.preferred_segments = [segment_name_of(s) for s in c.preferred_segments]
        self._upsert = upsert


class _Required:
    """Default of a setup() parameter Mooncake's binding requires: it may be
    left out only by Mooncake's other overload, setup(config_dict)."""
    _mooncake_required = True

    def __repr__(self):
        return "<required>"


_REQUIRED = _Required()
_SETUP_REQUIRED = ("metadata_server", "global_segment_size", "local_buffer_size", "protocol",
                   "rdma_devices", "master_server_addr")


class _Unavailable(Exception):
    pass


_DEFAULT_CFG = ReplicateConfig()


def _cfg(config, upsert=False):
    """Translates a ReplicateConfig for the C extension. Raises _Unavailable
    for replicas crescent cannot place (NVMe-oF, DFS)."""
    if config is None:
        return _NativeCfg(_DEFAULT_CFG, True) if upsert else None
    if not isinstance(config, ReplicateConfig):
        return config  # let the extension refuse the type
    if config.nof_replica_num or config.dfs_replica_num or config.preferred_nof_segments:
        raise _Unavailable()
    return _NativeCfg(config, upsert)


def _is_seq(o):
    return isinstance(o, (list, tuple))


def _check_flag(v, name):
    if not isinstance(v, (bool, int)):
        raise TypeError("%s must be a bool" % name)


def _keys(keys, name="keys"):
    if isinstance(keys, (str, bytes)) or not hasattr(keys, "__iter__"):
        raise TypeError("%s must be a list of str" % name)
    keys = list(keys)
    for k in keys:
        if not isinstance(k, str):
            raise TypeError("%s must hold str, not %s" % (name, type(k).__name__))
    return keys


def _int(v, name):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("%s must be int, not %s" % (name, type(v).__name__))
    return v


# batch_probe_key's policies (Mooncake's BatchProbeKey lease selection).
_PROBE_POLICIES = ("none", "LastHitOnly")


def _exist_options(options):
    if options is not None and not isinstance(options, ExistOptions):
        raise TypeError("options must be an ExistOptions or None, not %s"
                        % type(options).__name__)


def _dict_int(d, key, default):
    """An int setting of setup(dict): config files give strings ("30")."""
    v = d.get(key, default)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            raise TypeError("%s must be an int, not %r" % (key, v)) from None
    return v


def _addr(obj, name="buffer_ptr"):
    """Address of an int pointer or a buffer-protocol object (and its size)."""
    if isinstance(obj, int) and not isinstance(obj, bool):
        if obj < 0 or obj >= 1 << 64:
            raise ValueError("%s out of range" % name)
        return obj, None
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError("%s must be an int address or a buffer, not %s"
                        % (name, type(obj).__name__)) from None
    if mv.readonly:
        raise ValueError("%s must be writable" % name)
    if not mv.contiguous:
        raise ValueError("%s must be contiguous" % name)
    nbytes = mv.nbytes
    if nbytes == 0:
        return 0, 0
    arr = (ctypes.c_char * nbytes).from_buffer(mv.cast("B") if mv.format != "B" else mv)
    return ctypes.addressof(arr), nbytes


_live = weakref.WeakSet()


@atexit.register
def _close_all():
    # Like Mooncake's ResourceTracker: stores still open at interpreter exit
    # unmount their segment now instead of when the master's client TTL expires.
    for s in list(_live):
        try:
            s.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


class _ChunkReadHandle:
    """Result of progressive_get / streaming_batch_get_buffer_ranges: the
    reads are done; per chunk 0 or its error code."""

    def __init__(self, results):
        self._res = list(results)

    @property
    def num_chunks(self):
        return len(self._res)

    @property
    def completed_count(self):
        return sum(1 for r in self._res if r == 0)

    def is_chunk_ready(self, index):
        return self._res[_int(index, "index")] == 0 if 0 <= index < len(self._res) else False

    def wait_chunk(self, index):
        if not 0 <= _int(index, "index") < len(self._res):
            return INVALID_PARAMS
        return self._res[index]

    def wait_all(self):
        return next((r for r in self._res if r != 0), 0)


class DistributedStore(_crescent.DistributedStore):
    """Mooncake-compatible store client (see the module doc)."""

    # Bounds of the client-side put sessions (batch_put_session_start).
    SESSION_MAX_KEYS = 4096
    SESSION_MAX_BYTES = 4 << 30

    def __init__(self):
        super().__init__()
        self._host = ""
        self._no_local_buffer = False
        self._regs = {}
        self._regs_mu = threading.Lock()
        self._sessions = {}
        self._session_bytes = 0
        self._sess_mu = threading.Lock()
        self._tasks = None  # copy/move task threads, made on first use
        self._segs = {}  # extra segments: id -> (kind, mmap); guarded by _regs_mu
        self._setup_failed = False  # a setup failed and close() was not called since
        _live.add(self)

    # ---- lifecycle -----------------------------------------------------------

    def setup(self, local_hostname=_REQUIRED, metadata_server=_REQUIRED, global_segment_size=_REQUIRED,
              local_buffer_size=_REQUIRED, protocol=_REQUIRED, rdma_devices=_REQUIRED,
              master_server_addr=_REQUIRED, engine=None, enable_ssd_offload=False,
              ssd_offload_path="", tenant_id="default", enable_client_http_server=False,
              client_http_port=9300, enable_embedded_master=False, *, ipc_socket_path="",
              ssd_prefetch_cooldown_sec=5, ssd_prefetch_dedup_ttl_sec=30, config=_REQUIRED):
        """Mooncake's setup(): connects to the master, mounts
        global_segment_size bytes of this process and maps the local buffer.
        Also setup(dict) or setup(config=dict) with the same keys (Mooncake's
        other overload, whose parameter is named config; it takes no other
        argument). Returns 0 or a negative code.
        The parameters are those of Mooncake's current binding, in its
        positional order; the first seven are required (TypeError without
        them) unless the only argument is a dict (Mooncake's other
        overload). ipc_socket_path and the two ssd_prefetch_* throttles of
        Mooncake's earlier versions are keyword-only here.
        Not applicable here, refused with -1011 (UNAVAILABLE_IN_CURRENT_MODE)
        and a RuntimeWarning naming the reason: enable_ssd_offload=True (an
        embedded client has no disk tier; crescent-node --ssd_path has one)
        and a tenant_id other than "default" (no multi-tenant isolation).
        ipc_socket_path (where Mooncake's real client serves dummy clients)
        is accepted and unused, with a RuntimeWarning when set.
        ssd_prefetch_cooldown_sec / ssd_prefetch_dedup_ttl_sec (Mooncake's
        throttle of the prefetch from its embedded SSD offload tier into
        memory; defaults 5 and 30, a negative value keeps the default) are
        checked (int) and have no effect: that prefetch belongs to
        enable_ssd_offload, which is not applicable here.
        enable_client_http_server / client_http_port / enable_embedded_master
        (keywords or dict keys; Mooncake's per-client HTTP metrics endpoint
        and in-process master for tests): False / 9300 / False are accepted;
        turning either feature on is not applicable here and returns -1011
        with a RuntimeWarning (crescent-master serves metrics; start one).
        The transfer port is chosen in 12300-14300 like Mooncake's
        (MC_LEGACY_RPC_PORT_BINDING=1 binds the port given in local_hostname);
        get_hostname() then returns "<local_hostname>:<port>"."""
        given = (metadata_server, global_segment_size, local_buffer_size, protocol,
                 rdma_devices, master_server_addr)
        if config is not _REQUIRED:  # Mooncake's setup(config: dict) overload by keyword
            if not isinstance(config, dict):
                raise TypeError("config must be a dict, not %s" % type(config).__name__)
            others = [local_hostname, *given]
            defaults = ((engine, None), (enable_ssd_offload, False), (ssd_offload_path, ""),
                        (tenant_id, "default"), (enable_client_http_server, False),
                        (client_http_port, 9300), (enable_embedded_master, False),
                        (ipc_socket_path, ""), (ssd_prefetch_cooldown_sec, 5),
                        (ssd_prefetch_dedup_ttl_sec, 30))
            if any(v is not _REQUIRED for v in others) or \
                    any(type(v) is not type(d) or v != d for v, d in defaults):
                raise TypeError("setup(config=...) takes no other argument")
            local_hostname = config
        elif local_hostname is _REQUIRED:
            raise TypeError("setup() missing required argument: local_hostname (or pass "
                            "one config dict)")
        if isinstance(local_hostname, dict) and all(v is _REQUIRED for v in given):
            d = dict(local_hostname)
            local_hostname = d.get("local_hostname", "localhost")
            metadata_server = d.get("metadata_server", "")
            global_segment_size = d.get("global_segment_size", 16 << 20)
            local_buffer_size = d.get("local_buffer_size", 16 << 20)
            protocol = d.get("protocol", "tcp")
            rdma_devices = d.get("rdma_devices", d.get("device_name", ""))
            master_server_addr = d.get("master_server_addr",
                                       d.get("master_server_address", "127.0.0.1:50051"))
            ipc_socket_path = d.get("ipc_socket_path", "")
            enable_ssd_offload = d.get("enable_ssd_offload", False)
            ssd_offload_path = d.get("ssd_offload_path", "")
            tenant_id = d.get("tenant_id", "default")
            ssd_prefetch_cooldown_sec = _dict_int(d, "ssd_prefetch_cooldown_sec", 5)
            ssd_prefetch_dedup_ttl_sec = _dict_int(d, "ssd_prefetch_dedup_ttl_sec", 30)
            enable_client_http_server = d.get("enable_client_http_server", False)
            client_http_port = _dict_int(d, "client_http_port", 9300)
            enable_embedded_master = d.get("enable_embedded_master", False)
        else:
            missing = [n for n, v in zip(_SETUP_REQUIRED, given) if v is _REQUIRED]
            if missing:
                raise TypeError("setup() missing required argument(s): %s (or pass one "
                                "config dict)" % ", ".join(missing))
        if metadata_server is None:
            metadata_server = ""
        if not isinstance(local_hostname, str):
            raise TypeError("local_hostname must be str, not %s" % type(local_hostname).__name__)
        for v, n in ((ipc_socket_path, "ipc_socket_path"), (ssd_offload_path, "ssd_offload_path"),
                     (tenant_id, "tenant_id")):
            if not isinstance(v, str):
                raise TypeError("%s must be str, not %s" % (n, type(v).__name__))
        _int(ssd_prefetch_cooldown_sec, "ssd_prefetch_cooldown_sec")
        _int(ssd_prefetch_dedup_ttl_sec, "ssd_prefetch_dedup_ttl_sec")
        _int(client_http_port, "client_http_port")
        flags = []
        for v, n in ((enable_ssd_offload, "enable_ssd_offload"),
                     (enable_client_http_server, "enable_client_http_server"),
                     (enable_embedded_master, "enable_embedded_master")):
            if isinstance(v, str):  # config files spell it "true"
                v = v.strip().lower() in ("1", "true", "yes", "on")
            if not isinstance(v, (bool, int)):
                raise TypeError("%s must be bool" % n)
            flags.append(bool(v))
        enable_ssd_offload, enable_client_http_server, enable_embedded_master = flags
        import warnings
        if enable_client_http_server or enable_embedded_master:
            warnings.warn("enable_client_http_server / enable_embedded_master: a crescent "
                          "store client serves no HTTP endpoint and embeds no master "
                          "(crescent-master has both); setup returns -1011",
                          RuntimeWarning, stacklevel=2)
            return UNAVAILABLE
        if enable_ssd_offload:
            warnings.warn("enable_ssd_offload: a crescent store client has no disk tier "
                          "(run crescent-node --ssd_path DIR); setup returns -1011",
                          RuntimeWarning, stacklevel=2)
            return UNAVAILABLE
        if tenant_id not in ("", "default"):
            warnings.warn("tenant_id %r: crescent has no multi-tenant isolation; setup "
                          "returns -1011" % tenant_id, RuntimeWarning, stacklevel=2)
            return UNAVAILABLE
        if ipc_socket_path:
            warnings.warn("ipc_socket_path is not used: crescent has no dummy-client IPC",
                          RuntimeWarning, stacklevel=2)
        if isinstance(protocol, str) and protocol.lower() in _HW_PROTOCOLS:
            return INTERNAL_ERROR  # hardware transport not built into crescent
        lbs = local_buffer_size
        zero_lbs = (isinstance(lbs, int) and not isinstance(lbs, bool) and lbs == 0) or \
            (isinstance(lbs, str) and lbs.strip() in ("0", "0B", "0b"))
        if zero_lbs:
            lbs = 64 << 10  # staging for the C client; copying calls still fail (below)
        host, _, _ = local_hostname.rpartition(":") if ":" in local_hostname else (
            local_hostname, "", "")
        if self._setup_failed:
            return UNAVAILABLE_IN_CURRENT_STATUS  # a failed setup is closed first
        legacy = os.environ.get("MC_LEGACY_RPC_PORT_BINDING", "")
        args = (local_hostname, metadata_server, global_segment_size, lbs, protocol,
                rdma_devices, master_server_addr, engine)
        rc = INTERNAL_ERROR
        if legacy and legacy != "0" and ":" in local_hostname:
            rc = super().setup(*args)
        else:
            lo, hi = PORT_RANGE
            for _ in range(24):
                rc = super().setup(*args, _te_port=random.randint(lo, hi))
                if rc != _EADDRINUSE:
                    break
            else:
                rc = super().setup(*args)  # range exhausted here: any free port
        if rc == 0:
            self._host = host or local_hostname
            self._no_local_buffer = zero_lbs
        elif not self._is_setup():
            self._setup_failed = True  # Mooncake: close() before the next setup
        return rc

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """Mooncake's dummy client attaches to a real client process through
        shared memory and IPC; crescent has no such daemon. Returns -1010
        when this store is set up already, else -1011 with a RuntimeWarning
        saying why and what to use instead."""
        _int(mem_pool_size, "mem_pool_size")
        _int(local_buffer_size, "local_buffer_size")
        if not isinstance(server_address, str):
            raise TypeError("server_address must be str")
        if self._is_setup():
            return UNAVAILABLE_IN_CURRENT_STATUS
        import warnings
        warnings.warn("setup_dummy(%r): crescent has no real-client daemon for a dummy client "
                      "to attach to over IPC; use setup() (a full client; global_segment_size=0 "
                      "contributes no memory); setup_dummy returns -1011" % server_address,
                      RuntimeWarning, stacklevel=2)
        return UNAVAILABLE

    def init_all(self, protocol, device_name, mount_segment_size=16 << 20):
        """Part of Mooncake's dummy-client setup: -1011 here with a
        RuntimeWarning (see setup_dummy)."""
        if not isinstance(protocol, str) or not isinstance(device_name, str):
            raise TypeError("protocol and device_name must be str")
        _int(mount_segment_size, "mount_segment_size")
        import warnings
        warnings.warn("init_all: crescent has no dummy client (see setup_dummy); use setup(); "
                      "init_all returns -1011", RuntimeWarning, stacklevel=2)
        return UNAVAILABLE

    # -- streaming reads (Mooncake's progressive_get / scatter read): the
    # ranges are read with one get_into_ranges when the call is made; the
    # handle then reports every chunk complete (or its error code).
    def alloc(self, size):
        """Registered memory of `size` bytes from a pool of this store, kept
        until close() (Mooncake's client memory pool); 0 on failure."""
        from crescent.buffer_pool import BufferPool
        if _int(size, "size") <= 0:
            return 0
        with self._regs_mu:
            if getattr(self, "_alloc_pool", None) is None:
                self._alloc_pool, self._alloc_leases = BufferPool(self, max_regions=256), []
            pool = self._alloc_pool
        try:
            lease = pool.acquire(size, block=False)
        except RuntimeError:
            return 0
        with self._regs_mu:
            self._alloc_leases.append(lease)
        return lease.ptr

    def _read_chunks(self, keys, buffer_ptr, dst_offsets, src_offsets, sizes):
        a, _ = _addr(buffer_ptr)
        groups = {}
        for i, (k, d, o, n) in enumerate(zip(keys, dst_offsets, src_offsets, sizes)):
            g = groups.setdefault(k, ([], [], [], []))
            g[0].append(i)
            g[1].append(d)
            g[2].append(o)
            g[3].append(n)
        ks = list(groups)
        res = self.get_into_ranges([a], [ks], [[groups[k][1] for k in ks]],
                                   [[groups[k][2] for k in ks]], [[groups[k][3] for k in ks]])
        out = [INVALID_PARAMS] * len(keys)
        for k, got in zip(ks, res[0]):
            for i, r, n in zip(groups[k][0], got, groups[k][3]):
                out[i] = 0 if r == n else (r if r < 0 else INVALID_PARAMS)
        return _ChunkReadHandle(out)

    def progressive_get(self, key, buffer_ptr, size, chunk_size):
        """Reads key's first `size` bytes into registered memory in chunks of
        chunk_size; returns a handle (num_chunks, completed_count,
        wait_chunk(i), is_chunk_ready(i), wait_all()), None for bad sizes."""
        if not isinstance(key, str):
            raise TypeError("key must be str")
        if _int(size, "size") <= 0 or _int(chunk_size, "chunk_size") <= 0:
            return None
        offs = list(range(0, size, chunk_size))
        return self._read_chunks([key] * len(offs), buffer_ptr, offs, offs,
                                 [min(chunk_size, size - o) for o in offs])

    def streaming_batch_get_buffer_ranges(self, keys, buffer_ptr, dest_offsets, src_offsets,
                                          sizes):
        """Scatter read: range i of keys[i] (src_offsets[i], sizes[i]) to
        buffer_ptr + dest_offsets[i]; a handle with one chunk per range, None
        when the lists differ in length or are empty."""
        keys = _keys(keys)
        lists = (dest_offsets, src_offsets, sizes)
        if not all(_is_seq(x) for x in lists) or not keys or \
                not all(len(x) == len(keys) for x in lists):
            return None
        for x in lists:
            for v in x:
                if _int(v, "offset/size") < 0:
                    return None
        return self._read_chunks(keys, buffer_ptr, list(dest_offsets), list(src_offsets),
                                 list(sizes))

    def progressive_put(self, key, total_size, num_chunks):
        """Not available: a progressive put lets readers see chunks of an
        object before its put ends; crescent shows whole versions only."""
        if not isinstance(key, str):
            raise TypeError("key must be str")
        _int(total_size, "total_size")
        _int(num_chunks, "num_chunks")
        raise RuntimeError("UNAVAILABLE_IN_CURRENT_MODE: crescent never shows an object before "
                           "its put ends, so chunks cannot be published progressively; put the "
                           "whole value (put_from / put_parts) or upsert it")

    def alloc_from_mem_pool(self, size):
        """Dummy-client shared pool allocation: 0 (failure) without one."""
        _int(size, "size")
        return 0

    def close(self):
        with self._regs_mu:
            leases, self._alloc_leases = getattr(self, "_alloc_leases", []), []
            apool, self._alloc_pool = getattr(self, "_alloc_pool", None), None
        for lease in leases:
            lease.release()
        if apool is not None:
            apool.close()
        with self._regs_mu:
            pool, self._tasks = self._tasks, None
        if pool is not None:
            pool.shutdown(wait=True)  # tasks in flight finish (or fail) first
        with self._sess_mu:
            self._sessions.clear()
            self._session_bytes = 0
        with self._regs_mu:
            self._regs.clear()
        rc = super().close()  # unmounts the extra segments too
        self._seg_unmap_all()
        if self._setup_failed:
            self._setup_failed = False
            return OK  # closing a store whose setup failed succeeds (Mooncake)
        return rc

    def get_hostname(self):
        """"<local_hostname>:<port>" of this client, as Mooncake returns it
        ("" before setup). Usable as preferred_segment and segment_name."""
        name = super().get_hostname()
        if not name:
            return ""
        port = name.rpartition(":")[2]
        return "%s:%s" % (self._host, port) if self._host else name

    def health_check(self):
        """0 when the store is set up and its master answers, else negative."""
        if not self._is_setup():
            return UNAVAILABLE_IN_CURRENT_STATUS
        rc = self.is_exist("__crescent_health_check__")
        return 0 if rc in (0, 1) else rc

    # camelCase spelling some Mooncake tools use
    def isExist(self, key):  # noqa: N802 - Mooncake's name
        return self.is_exist(key)

    # ---- registration ----------------------------------------------------------

    def register_buffer(self, buffer_ptr, size=None):
        if size is None:
            rc = super().register_buffer(buffer_ptr)
        else:
            rc = super().register_buffer(buffer_ptr, size)
        if rc == 0:
            try:
                a, n = _addr(buffer_ptr)
                n = size if size is not None else n
                if n:
                    with self._regs_mu:
                        self._regs[a] = n
            except (TypeError, ValueError):
                pass
        return rc

    def unregister_buffer(self, buffer_ptr):
        rc = super().unregister_buffer(buffer_ptr)
        if rc == 0:
            try:
                a, _ = _addr(buffer_ptr)
                with self._regs_mu:
                    self._regs.pop(a, None)
            except (TypeError, ValueError):
                pass
        return rc

    def _registered(self, ptr, length):
        with self._regs_mu:
            for a, n in self._regs.items():
                if a <= ptr and ptr + length <= a + n:
                    return True
        return False

    # ---- puts and gets that need translation -----------------------------------

    def put(self, key, value, config=None, _upsert=False):
        if self._no_local_buffer:
            return INVALID_PARAMS  # Mooncake: no local buffer to stage through
        try:
            return super().put(key, value, _cfg(config, _upsert))
        except _Unavailable:
            return UNAVAILABLE

    def put_parts(self, key, *parts, config=None, _upsert=False):
        if self._no_local_buffer:
            return INVALID_PARAMS
        try:
            return super().put_parts(key, *parts, config=_cfg(config, _upsert))
        except _Unavailable:
            return UNAVAILABLE

    def put_batch(self, keys, values, config=None, _upsert=False):
        if self._no_local_buffer:
            return INVALID_PARAMS
        try:
            return super().put_batch(keys, values, _cfg(config, _upsert))
        except _Unavailable:
            return UNAVAILABLE

    def put_from(self, key, buffer_ptr, size=None, config=None, _upsert=False):
        try:
            return super().put_from(key, buffer_ptr, size, _cfg(config, _upsert))
        except _Unavailable:
            return UNAVAILABLE

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None, _upsert=False):
        try:
            c = _cfg(config, _upsert)
        except _Unavailable:
            return [UNAVAILABLE] * len(_keys(keys))
        return super().batch_put_from(keys, buffer_ptrs, sizes, c)

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        try:
            c = _cfg(config)
        except _Unavailable:
            return [UNAVAILABLE] * len(_keys(keys))
        return super().batch_put_from_multi_buffers(keys, all_buffer_ptrs, all_sizes, c)

    def get(self, key):
        if self._no_local_buffer:
            if not isinstance(key, str):
                raise TypeError("key must be str")
            return b""
        return super().get(key)

    def get_batch(self, keys):
        if self._no_local_buffer:
            return [b""] * len(_keys(keys))
        return super().get_batch(keys)

    # local_cache: Mooncake's client-side cache of remote objects. Accepted
    # (a bool) and read through: crescent keeps no client copy, so a value
    # replaced by another client is never served stale; a "hit" is not
    # faster than a miss.
    def get_buffer(self, key, local_cache=False):
        _check_flag(local_cache, "local_cache")
        if self._no_local_buffer:
            if not isinstance(key, str):
                raise TypeError("key must be str")
            return None
        return super().get_buffer(key)

    def batch_get_buffer(self, keys, local_cache=False):
        """get_buffer() of each key: BufferHandle, or None for a missing key;
        one master round trip per 4096 keys (the C extension's batch)."""
        _check_flag(local_cache, "local_cache")
        keys = _keys(keys)
        if self._no_local_buffer:
            return [None] * len(keys)
        return super().batch_get_buffer(keys)

    def get_into(self, key, buffer_ptr, size=None, local_cache=False):
        """get_into(key, buffer_ptr, size=None, local_cache=False) -> bytes read or
        negative (size defaults to a buffer object's length)"""
        _check_flag(local_cache, "local_cache")
        if size is None:
            return super().get_into(key, buffer_ptr)
        return super().get_into(key, buffer_ptr, size)

    def batch_get_into(self, keys, buffer_ptrs, sizes, local_cache=False):
        """batch_get_into(keys, buffer_ptrs, sizes, local_cache=False) -> [bytes read or negative]"""
        _check_flag(local_cache, "local_cache")
        return super().batch_get_into(keys, buffer_ptrs, sizes)

    # Prefix matching and cost-aware routing are master features crescent's
    # master does not have: the calls answer as a Mooncake master started
    # without them (PREFIX_QUERY_DISABLED -1600, COST_QUERY_DISABLED -1700).
    def query_prefix_match(self, chain, avg_block_bytes=0):
        """-> (matched_blocks, candidates, query_lease_ms, err): here always
        (None, None, None, -1600) after the arguments are checked."""
        if not _is_seq(chain) or not all(isinstance(h, int) and not isinstance(h, bool)
                                         for h in chain):
            raise TypeError("chain must be a list of int")
        _int(avg_block_bytes, "avg_block_bytes")
        return None, None, None, PREFIX_QUERY_DISABLED

    def query_cost(self, segment_names, client_host="", client_zone="", request_size_bytes=0,
                   include_unmounted=False):
        """-> (ranked, err): here always (None, -1700) after the arguments are checked."""
        _keys(segment_names, "segment_names")
        for name, v in (("client_host", client_host), ("client_zone", client_zone)):
            if not isinstance(v, str):
                raise TypeError("%s must be str" % name)
        _int(request_size_bytes, "request_size_bytes")
        _check_flag(include_unmounted, "include_unmounted")
        return None, COST_QUERY_DISABLED

    def inflight_begin(self, segment_name):
        """-> (count, err): here always (None, -1700)."""
        if not isinstance(segment_name, str):
            raise TypeError("segment_name must be str")
        return None, COST_QUERY_DISABLED

    def inflight_end(self, segment_name):
        """-> (count, err): here always (None, -1700)."""
        return self.inflight_begin(segment_name)

    def put_from_with_metadata(self, key, buffer_ptr, metadata_buffer_ptr, size, metadata_size,
                               config=None):
        """Stores one object made of the metadata bytes followed by the data
        bytes, both read from registered memory. Returns 0 or negative."""
        for v, n in ((size, "size"), (metadata_size, "metadata_size")):
            _int(v, n)
            if v < 0:
                raise ValueError("%s must be >= 0" % n)
        ptrs, sizes = [], []
        if metadata_size:
            ptrs.append(metadata_buffer_ptr)
            sizes.append(metadata_size)
        if size:
            ptrs.append(buffer_ptr)
            sizes.append(size)
        if not ptrs:
            return INVALID_PARAMS
        r = self.batch_put_from_multi_buffers([key], [ptrs], [sizes], config)
        return r[0] if _is_seq(r) else r

    # ---- upserts -----------------------------------------------------------------
    # A put never replaces an existing object (Mooncake's rule); an upsert
    # does, as one store operation: the new version is written beside the
    # old one and the master swaps them at the end of the put (readers see
    # the old value or the new one, never neither, never a mix). -705 means
    # another upsert of the key is still being written.

    def upsert(self, key, value, config=None):
        return self.put(key, value, config, _upsert=True)

    def upsert_parts(self, key, *parts, config=None):
        return self.put_parts(key, *parts, config=config, _upsert=True)

    def upsert_batch(self, keys, values, config=None):
        return self.put_batch(keys, values, config, _upsert=True)

    def upsert_from(self, key, buffer_ptr, size=None, config=None):
        return self.put_from(key, buffer_ptr, size, config, _upsert=True)

    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        return self.batch_put_from(keys, buffer_ptrs, sizes, config, _upsert=True)

    # ---- ranged reads and put sessions --------------------------------------------

    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets,
                        all_sizes):
        """Reads fragments of objects into registered buffers (Mooncake's
        buffer-major layout). Returns results[i][j][k]: bytes read for
        fragment k of key j into buffer i, or a negative code."""
        tops = (buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets, all_sizes)
        if not all(_is_seq(x) for x in tops):
            raise TypeError("every argument must be a list")
        nb = len(buffer_ptrs)
        if any(len(x) != nb for x in tops[1:]):
            shape = all_keys if _is_seq(all_keys) else []
            return [[[INVALID_PARAMS] for _ in (ks if _is_seq(ks) else [])] for ks in shape]
        wanted = []
        for ks in all_keys:
            if not _is_seq(ks):
                raise TypeError("all_keys must be a list of lists of str")
            wanted += _keys(ks, "all_keys[i]")
        ready = self._is_setup()
        uniq = list(dict.fromkeys(wanted))
        handles = dict(zip(uniq, self.batch_get_buffer(uniq))) if uniq and ready else {}
        out = []
        for i in range(nb):
            dst = _int(buffer_ptrs[i], "buffer_ptrs[i]")
            ks, dos, sos, szs = all_keys[i], all_dst_offsets[i], all_src_offsets[i], all_sizes[i]
            if not (_is_seq(dos) and _is_seq(sos) and _is_seq(szs)) or \
                    not len(ks) == len(dos) == len(sos) == len(szs):
                out.append([[INVALID_PARAMS] for _ in ks])
                continue
            row = []
            for j, key in enumerate(ks):
                d, s, z = dos[j], sos[j], szs[j]
                if not (_is_seq(d) and _is_seq(s) and _is_seq(z)) or not len(d) == len(s) == len(z):
                    row.append([INVALID_PARAMS] * (len(z) if _is_seq(z) else 1))
                    continue
                h = handles.get(key)
                frs = []
                for k in range(len(z)):
                    do, so, sz = (_int(d[k], "dst offset"), _int(s[k], "src offset"),
                                  _int(z[k], "size"))
                    if do < 0 or so < 0 or sz < 0:
                        frs.append(INVALID_PARAMS)
                    elif not ready:  # no registrations either: -1010, not -600
                        frs.append(UNAVAILABLE_IN_CURRENT_STATUS)
                    elif h is None:
                        frs.append(OBJECT_NOT_FOUND)
                    elif so + sz > h.size() or not self._registered(dst + do, sz):
                        frs.append(INVALID_PARAMS)
                    else:
                        if sz:
                            ctypes.memmove(dst + do, h.ptr() + so, sz)
                        frs.append(sz)
                row.append(frs)
            out.append(row)
        return out

    def batch_get_into_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes,
                                           all_src_offsets):
        """For each key, reads object range [offsets[k], offsets[k]+sizes[k])
        into registered buffer ptrs[k]. Returns per key the bytes read or a
        negative code."""
        keys = _keys(keys)
        n = len(keys)
        all_offsets = all_src_offsets
        if not all(_is_seq(x) and len(x) == n for x in (all_buffer_ptrs, all_sizes, all_offsets)):
            return [INVALID_PARAMS] * n
        if not self._is_setup():
            return [UNAVAILABLE_IN_CURRENT_STATUS] * n
        out = []
        handles = dict(zip(dict.fromkeys(keys), self.batch_get_buffer(list(dict.fromkeys(keys)))))
        for i, key in enumerate(keys):
            ptrs, sizes, offs = all_buffer_ptrs[i], all_sizes[i], all_offsets[i]
            if not (_is_seq(ptrs) and _is_seq(sizes) and _is_seq(offs)) or \
                    not len(ptrs) == len(sizes) == len(offs):
                out.append(INVALID_PARAMS)
                continue
            h = handles.get(key)
            if h is None:
                out.append(OBJECT_NOT_FOUND)
                continue
            total, rc = 0, 0
            for p, z, o in zip(ptrs, sizes, offs):
                p, z, o = _int(p, "ptr"), _int(z, "size"), _int(o, "offset")
                if z < 0 or o < 0 or o + z > h.size() or not self._registered(p, z):
                    rc = INVALID_PARAMS
                    break
                ctypes.memmove(p, h.ptr() + o, z)
                total += z
            out.append(rc or total)
        return out

    def batch_put_session_start(self, keys, sizes, config=None):
        """Opens a put session per key: the object of sizes[i] bytes is
        assembled by batch_put_from_multi_buffer_ranges and stored by
        batch_put_session_end. Returns per key 0 or a negative code (-705
        when a session for the key is open already)."""
        keys = _keys(keys)
        if not _is_seq(sizes) or len(sizes) != len(keys):
            return [INVALID_PARAMS] * len(keys)
        if not self._is_setup():
            return [UNAVAILABLE_IN_CURRENT_STATUS] * len(keys)
        out = []
        with self._sess_mu:
            for k, z in zip(keys, sizes):
                z = _int(z, "size")
                if k in self._sessions:
                    out.append(-705)
                elif z <= 0 or not k:
                    out.append(INVALID_PARAMS)
                elif len(self._sessions) >= self.SESSION_MAX_KEYS or \
                        self._session_bytes + z > self.SESSION_MAX_BYTES:
                    out.append(NO_AVAILABLE_HANDLE)
                else:
                    self._sessions[k] = [bytearray(z), config]
                    self._session_bytes += z
                    out.append(0)
        return out

    def batch_put_from_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes,
                                           all_dst_offsets):
        """Writes into open put sessions: for key i, sizes[k] bytes from
        registered buffer ptrs[k] land at offsets[k] of the object. Returns
        per key the bytes written or a negative code."""
        all_offsets = all_dst_offsets
        keys = _keys(keys)
        n = len(keys)
        if not all(_is_seq(x) and len(x) == n for x in (all_buffer_ptrs, all_sizes, all_offsets)):
            return [INVALID_PARAMS] * n
        if not self._is_setup():  # close() dropped the sessions and registrations
            return [UNAVAILABLE_IN_CURRENT_STATUS] * n
        out = []
        for i, k in enumerate(keys):
            ptrs, sizes, offs = all_buffer_ptrs[i], all_sizes[i], all_offsets[i]
            with self._sess_mu:
                sess = self._sessions.get(k)
            if sess is None:
                out.append(OBJECT_NOT_FOUND)
                continue
            if not (_is_seq(ptrs) and _is_seq(sizes) and _is_seq(offs)) or \
                    not len(ptrs) == len(sizes) == len(offs):
                out.append(INVALID_PARAMS)
                continue
            buf, total, rc = sess[0], 0, 0
            for p, z, o in zip(ptrs, sizes, offs):
                p, z, o = _int(p, "ptr"), _int(z, "size"), _int(o, "offset")
                if z < 0 or o < 0 or o + z > len(buf) or not self._registered(p, z):
                    rc = INVALID_PARAMS
                    break
                buf[o:o + z] = ctypes.string_at(p, z)
                total += z
            out.append(rc or total)
        return out

    def batch_put_session_end(self, keys):
        """Stores the objects assembled in the keys' put sessions and closes
        them. Returns per key 0 or a negative code."""
        keys = _keys(keys)
        if not self._is_setup():
            return [UNAVAILABLE_IN_CURRENT_STATUS] * len(keys)
        out = []
        for k in keys:
            with self._sess_mu:
                sess = self._sessions.pop(k, None)
                if sess is not None:
                    self._session_bytes -= len(sess[0])
            out.append(OBJECT_NOT_FOUND if sess is None else self.put(k, sess[0], sess[1]))
        return out

    def batch_put_session_abort(self, keys):
        """Closes put sessions without storing anything."""
        keys = _keys(keys)
        if not self._is_setup():
            return [UNAVAILABLE_IN_CURRENT_STATUS] * len(keys)
        out = []
        for k in keys:
            with self._sess_mu:
                sess = self._sessions.pop(k, None)
                if sess is not None:
                    self._session_bytes -= len(sess[0])
            out.append(0 if sess is not None else OBJECT_NOT_FOUND)
        return out

    # Mooncake's later name for batch_put_session_abort.
    def batch_put_session_revoke(self, keys):
        """Closes put sessions without storing anything: per key 0, or -704
        when the key has no open session."""
        return self.batch_put_session_abort(keys)

    # ---- get sessions: Mooncake caches the replicas of the keys between
    # start and end; crescent locates them on every read (always current),
    # so a session only checks the keys exist.
    def batch_get_session_start(self, keys):
        """Per key 0 when the object exists, -704 when not (or the store's
        error code). Reads with batch_get_into_multi_buffer_ranges work with
        or without a session."""
        keys = _keys(keys)
        if not self._is_setup():
            return [UNAVAILABLE_IN_CURRENT_STATUS] * len(keys)
        return [0 if r == 1 else (OBJECT_NOT_FOUND if r == 0 else r)
                for r in self.batch_is_exist(keys)] if keys else []

    def batch_get_session_end(self, keys):
        """Ends a get session: 0 (nothing is cached to drop), -1010 when the
        store is not set up."""
        _keys(keys)
        return 0 if self._is_setup() else UNAVAILABLE_IN_CURRENT_STATUS

    # ---- existence ---------------------------------------------------------------------
    def is_exist(self, key, options=None):
        """1 if the object exists (completely written), 0 if not, negative on
        error. `options` is an ExistOptions (or None); its
        prefetch_to_memory is accepted and needs nothing here (see
        ExistOptions)."""
        _exist_options(options)
        return super().is_exist(key)

    def batch_is_exist(self, keys, options=None):
        """is_exist() for several keys: a list of 1, 0 or negative (every
        entry negative when the store is not set up)."""
        _exist_options(options)
        return super().batch_is_exist(keys)

    # ---- point-in-time existence without a read lease ------------------------------
    # Both probes ask through the extension's lease-free existence call
    # (cr_store_batch_probe); is_exist / batch_is_exist read-lease what they
    # find, as Mooncake's ExistKey does.
    def _probe(self, keys):
        return self._batch_probe(keys)

    def probe_key(self, key):
        """1 if the object existed at the call, 0 if not, negative on error.
        Unlike is_exist, no read lease is granted, so the object may be
        evicted or removed before a later get."""
        if not isinstance(key, str):
            raise TypeError("key must be str")
        return self._probe([key])[0]

    def batch_probe_key(self, keys, policy="none", candidate_size=1):
        """Existence of several keys without read leases (Mooncake's
        BatchProbeKey). policy "none" (default): per key 1, 0 or negative;
        candidate_size is not used. policy "LastHitOnly": the keys are
        consecutive candidates of candidate_size keys each (one checkpoint's
        keys); only the keys of the last candidate whose keys all exist are
        1, every other key 0 (0 = not selected, not necessarily missing);
        a key whose check failed keeps its negative code and its candidate
        is not selected. Mooncake grants the selected candidate's keys a
        read lease; crescent checks them again with batch_is_exist (which
        takes whatever lease is_exist takes) and selects an earlier
        candidate if one went missing meanwhile.
        ValueError for an unknown policy, or, with LastHitOnly and keys, a
        candidate_size of 0 or one that does not divide len(keys);
        TypeError for a negative candidate_size (Mooncake's is unsigned).
        A store not set up answers -1010 for every key, whatever the policy."""
        keys = _keys(keys)
        if not isinstance(policy, str):
            raise TypeError("policy must be str, not %s" % type(policy).__name__)
        _int(candidate_size, "candidate_size")
        if candidate_size < 0:
            raise TypeError("candidate_size must be a non-negative int")
        if policy not in _PROBE_POLICIES:
            raise ValueError("unknown batch_probe_key policy %r (expected one of %s)"
                             % (policy, ", ".join(_PROBE_POLICIES)))
        if policy == "none" or not keys:
            return self._probe(keys) if keys else []
        if candidate_size == 0 or len(keys) % candidate_size:
            raise ValueError("candidate_size must be > 0 and divide the number of keys "
                             "(%d keys, candidate_size %d)" % (len(keys), candidate_size))
        found = self._probe(keys)
        if all(r < 0 for r in found):
            return found
        out = [r if r < 0 else 0 for r in found]
        for start in range(len(keys) - candidate_size, -1, -candidate_size):
            end = start + candidate_size
            if any(r != 1 for r in found[start:end]):
                continue
            again = self.batch_is_exist(keys[start:end])
            if all(r == 1 for r in again):
                out[start:end] = again
                break
            for i, r in enumerate(again):
                if r < 0:
                    out[start + i] = r
        return out

    # ---- ranged reads through a reusable snapshot -------------------------------------
    def prepare_get_into_ranges_snapshot(self, keys):
        """A RangedReadSnapshot of the (deduplicated) keys for
        get_into_ranges_from_snapshot(). Mooncake caches the keys' replica
        metadata in it and refreshes it at the read-lease midpoint; crescent
        locates the replicas on every read, so a snapshot is never stale.
        RuntimeError when the store is not set up."""
        keys = _keys(keys)
        if not self._is_setup():
            raise RuntimeError("Client is not initialized")
        return RangedReadSnapshot._make(self, list(dict.fromkeys(keys)))

    def get_into_ranges_from_snapshot(self, snapshot, buffer_ptrs, all_keys, all_dst_offsets,
                                      all_src_offsets, all_sizes):
        """get_into_ranges() through a snapshot of this store (ValueError
        for a snapshot of another store, TypeError for a non-snapshot)."""
        if not isinstance(snapshot, RangedReadSnapshot):
            raise TypeError("snapshot must be a RangedReadSnapshot")
        if not self._is_setup():
            raise RuntimeError("Client is not initialized")
        if not snapshot._belongs_to(self):
            raise ValueError("Ranged-read snapshot belongs to another Store")
        return self.get_into_ranges(buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets,
                                    all_sizes)

    # ---- Mooncake features crescent does not have ------------------------------------
    def get_offload_rpc_read_count(self):
        """Reads Mooncake's client served through its SSD-offload RPC: 0, as
        for a Mooncake client without SSD offload (crescent's disk tier is
        crescent-node's and is read like memory)."""
        return 0

    def unmount_local_disk_segment(self, grace_period_seconds=0):
        """Mooncake unmounts the client's local-disk (SSD offload) segment;
        a crescent client has none: -1011 (UNAVAILABLE_IN_CURRENT_MODE),
        -1010 when not set up."""
        g = _int(grace_period_seconds, "grace_period_seconds")
        if g < 0:
            raise ValueError("grace_period_seconds must be >= 0")
        return UNAVAILABLE if self._is_setup() else UNAVAILABLE_IN_CURRENT_STATUS

    def begin_weight_snapshot(self, snapshot, adapter):
        """Mooncake opens a model-weight snapshot writer of its
        mooncake.reshard package, which crescent does not provide
        (crescent's weight upload is mooncake.weight_transfer.WeightStore)."""
        raise RuntimeError("UNAVAILABLE_IN_CURRENT_MODE: begin_weight_snapshot needs Mooncake's "
                           "mooncake.reshard package; use mooncake.weight_transfer.WeightStore")

    def _get_pyclient_capsule(self):
        """Mooncake's internal handle to its C++ PyClient (for EngramStore);
        crescent has no such object."""
        raise RuntimeError("UNAVAILABLE_IN_CURRENT_MODE: no C++ PyClient in crescent")

    # ---- replicas, tasks, segments -------------------------------------------------

    def get_replica_desc(self, key):
        """Descriptors of the replicas of key (list of ReplicaDescriptor;
        empty when the key does not exist). Takes a read lease like a get."""
        r = self._replica_desc(key)
        if isinstance(r, int):
            return []
        _, reps = r
        return [ReplicaDescriptor(rid, MemoryDescriptor([Descriptor(ln, addr, seg)
                                                         for seg, addr, ln in shards]))
                for rid, shards in reps]

    def batch_get_replica_desc(self, keys):
        """{key: [ReplicaDescriptor]} for the keys that exist."""
        out = {}
        for k in _keys(keys):
            d = self.get_replica_desc(k)
            if d:
                out[k] = d
        return out

    def batch_replica_clear(self, keys, segment_name=""):
        """Mooncake's batch_replica_clear: for each key whose read lease has
        expired, drops its replica on segment_name (every replica when
        empty; the object goes with its last replica). Returns the list of
        keys cleared; keys under a live lease, missing, or with no replica
        on that segment are skipped. A master operation (RPC 0x75)."""
        keys = _keys(keys)
        if not isinstance(segment_name, str):
            raise TypeError("segment_name must be str")
        if not keys:
            return []
        res = super()._replica_clear(keys, segment_name_of(segment_name) if segment_name else "")
        if isinstance(res, int):
            return []
        return [k for k, r in zip(keys, res) if r == 0]

    # Copy/move tasks: the master records the task and allocates the target
    # space (src/store/master/rtask.c); this client moves the bytes in a
    # background thread (cr_store_task_run) and the master then switches the
    # replica list. query_task() follows it: PENDING -> PROCESSING -> SUCCESS
    # or FAILED.
    _TASK_THREADS = 4

    def _task_pool(self):
        with self._regs_mu:
            if self._tasks is None:
                import concurrent.futures as cf
                self._tasks = cf.ThreadPoolExecutor(max_workers=self._TASK_THREADS,
                                                    thread_name_prefix="crescent-task")
            return self._tasks

    def _task_start(self, ttype, key, source, targets):
        if not self._is_setup():
            return (0, 0), UNAVAILABLE_IN_CURRENT_STATUS
        if not key or len(key.encode()) > 4096:
            return (0, 0), INVALID_PARAMS
        targets = [segment_name_of(t) for t in targets]
        tid = super()._task_create(ttype, key, segment_name_of(source), targets)
        if isinstance(tid, int):
            return (0, 0), tid
        try:
            self._task_pool().submit(super()._task_run, *tid)
        except RuntimeError:  # closing meanwhile: the master times the task out
            pass
        return tid, OK

    def create_copy_task(self, key, targets):
        """Copies key's bytes to the segments targets (names, or
        get_hostname() strings; segments already holding a replica are
        skipped). Returns (task_id, 0), or ((0, 0), error): -704 no such
        object, -600 unknown segment / empty targets / more than 7,
        -1401 too many tasks pending."""
        if not isinstance(key, str):
            raise TypeError("key must be str")
        targets = _keys(targets, "targets")
        if not targets or len(targets) > 7:
            return (0, 0), INVALID_PARAMS
        return self._task_start(0, key, "", targets)

    def create_move_task(self, key, source, target):
        """Moves key's replica on segment source to segment target. Returns
        (task_id, 0), or ((0, 0), error): -704 no such object, -600 unknown
        segment, source == target, or no replica on source."""
        for v, n in ((key, "key"), (source, "source"), (target, "target")):
            if not isinstance(v, str):
                raise TypeError("%s must be str" % n)
        if not source or not target or segment_name_of(source) == segment_name_of(target):
            return (0, 0), INVALID_PARAMS
        return self._task_start(1, key, source, [target])

    def query_task(self, task_id):
        """(QueryTaskResponse, 0) for a task of this cluster's master, or
        (None, -1400 TASK_NOT_FOUND)."""
        if not (_is_seq(task_id) and len(task_id) == 2 and
                all(isinstance(x, int) and not isinstance(x, bool) for x in task_id)):
            raise TypeError("task_id must be a (hi, lo) pair of int")
        hi, lo = task_id
        if not (0 <= hi < 1 << 64 and 0 <= lo < 1 << 64):
            return None, TASK_NOT_FOUND
        r = super()._task_query(hi, lo)
        if isinstance(r, int):
            return None, r
        ttype, status, created, updated, who, msg, err = r
        return QueryTaskResponse(id=(hi, lo), type=TaskType(ttype), status=TaskStatus(status),
                                 created_at_ms_epoch=created, last_updated_at_ms_epoch=updated,
                                 assigned_client=who,
                                 message=msg if not err else "%s (%d)" % (msg, err)), OK

    # ---- extra segments (Mooncake's mount_segment family) ---------------------------
    #
    # A client may contribute memory besides global_segment_size: a file
    # region it maps (mount_segment) or memory the store allocates
    # (allocate_and_mount_segment). Each becomes one more segment at the
    # master, named "<segment name>#<n>" (its id here, shown in replica
    # descriptors); the master places objects in it like in any segment.
    # Unmounting drops the replicas on it at once (objects with another
    # replica stay readable, the others are removed), keeps the memory
    # readable for grace_period_seconds for readers that located a replica
    # before, then unmaps it. Bounded: 64 extra segments per client.

    SEGMENT_ALLOC_ALIGN = 4 << 20  # allocate_and_mount_segment rounds up (Mooncake's slab)
    _SEG_MAX = 1 << 40
    _HW_LOCATIONS = ("cuda", "musa", "npu", "hip", "gpu", "ascend")

    def _seg_args(self, protocol, location, sizes):
        if not isinstance(protocol, str):
            raise TypeError("protocol must be str, not %s" % type(protocol).__name__)
        if not isinstance(location, str):
            raise TypeError("location must be str, not %s" % type(location).__name__)
        for v, n in sizes:
            if _int(v, n) < 0:
                raise ValueError("%s must be >= 0" % n)
        if not self._is_setup():
            return UNAVAILABLE_IN_CURRENT_STATUS
        if protocol.lower() in _HW_PROTOCOLS:
            return UNAVAILABLE  # a hardware transport crescent does not have
        loc = location.lower()
        if loc.startswith(self._HW_LOCATIONS):
            return UNAVAILABLE  # device memory: crescent segments are host memory
        if loc not in ("", "*", "cpu") and not re.fullmatch(r"cpu:\d+", loc):
            return INVALID_PARAMS
        return OK

    def _seg_add(self, kind, mm, size):
        """Mounts the mapping mm; returns (ret, [segment id])."""
        view = (ctypes.c_char * size).from_buffer(mm)
        addr = ctypes.addressof(view)
        del view  # the mapping stays; only the export is released
        r = self._seg_mount(addr, size)
        if isinstance(r, int):
            mm.close()
            return r, []
        with self._regs_mu:
            self._segs[r] = (kind, mm)
        return OK, [r]

    def mount_segment(self, path, size, offset=0, protocol="tcp", location=""):
        """Maps size bytes of the file path from offset (shared, read-write:
        e.g. a /dev/shm or hugetlbfs file) and mounts them as one more
        segment of this client. Returns {"ret": 0 or negative, "segment_ids":
        [id]}: -600 for size 0 or not a multiple of 4 KiB, an offset not
        page aligned, or a file shorter than offset + size; -1100 no such
        file, -1101 it cannot be opened read-write; -1010 not set up; -1011
        a device location or hardware protocol (not applicable here)."""
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise TypeError("path must be str, not %s" % type(path).__name__)
        ret = self._seg_args(protocol, location, ((size, "size"), (offset, "offset")))
        if ret == OK and (size == 0 or size % 4096 or size > self._SEG_MAX or
                          offset % mmap.ALLOCATIONGRANULARITY):
            ret = INVALID_PARAMS
        if ret != OK:
            return {"ret": ret, "segment_ids": []}
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return {"ret": FILE_NOT_FOUND, "segment_ids": []}
        except (OSError, ValueError):
            return {"ret": FILE_OPEN_FAIL, "segment_ids": []}
        try:
            if os.fstat(fd).st_size < offset + size:
                return {"ret": INVALID_PARAMS, "segment_ids": []}  # would fault past EOF
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                           offset=offset)
        except (OSError, ValueError, OverflowError):
            return {"ret": FILE_OPEN_FAIL, "segment_ids": []}
        finally:
            os.close(fd)
        ret, ids = self._seg_add("file", mm, size)
        return {"ret": ret, "segment_ids": ids}

    def allocate_and_mount_segment(self, size, protocol="tcp", location=""):
        """Allocates size bytes (rounded up to 4 MiB, Mooncake's slab) and
        mounts them as one more segment of this client. Returns {"ret",
        "segment_ids", "allocated_size"}; -600 for size 0 or over 1 TiB,
        -1 when the memory cannot be allocated, -1010 not set up."""
        ret = self._seg_args(protocol, location, ((size, "size"),))
        a = self.SEGMENT_ALLOC_ALIGN
        alloc = (size + a - 1) // a * a
        if ret == OK and (size == 0 or alloc > self._SEG_MAX):
            ret = INVALID_PARAMS
        if ret != OK:
            return {"ret": ret, "segment_ids": [], "allocated_size": 0}
        try:
            mm = mmap.mmap(-1, alloc)
        except (OSError, MemoryError, OverflowError):
            return {"ret": INTERNAL_ERROR, "segment_ids": [], "allocated_size": 0}
        ret, ids = self._seg_add("alloc", mm, alloc)
        return {"ret": ret, "segment_ids": ids, "allocated_size": alloc if ret == OK else 0}

    def _seg_remove(self, kind, segment_ids, grace_period_seconds):
        ids = _keys(segment_ids, "segment_ids")
        if _int(grace_period_seconds, "grace_period_seconds") < 0:
            raise ValueError("grace_period_seconds must be >= 0")
        if not self._is_setup():
            return UNAVAILABLE_IN_CURRENT_STATUS
        if not ids or len(set(ids)) != len(ids) or grace_period_seconds > 3600:
            return INVALID_PARAMS
        with self._regs_mu:
            for i in ids:
                if i not in self._segs:
                    return SEGMENT_NOT_FOUND
                if self._segs[i][0] != kind:
                    return INVALID_PARAMS  # mounted by the other call: use its counterpart
        for i in ids:
            rc = self._seg_unmount(i, grace_period_seconds * 1000)
            if rc != OK:
                return rc  # this one (and the rest) stay mounted
            with self._regs_mu:
                _, mm = self._segs.pop(i)
            mm.close()
        return OK

    def unmount_segment(self, segment_ids, grace_period_seconds=0):
        """Unmounts segments mount_segment mounted and unmaps them (the file
        keeps its bytes). 0, -101 unknown id, -600 empty or duplicate ids or
        an id of allocate_and_mount_segment, or a master error (the segment
        then stays mounted). All ids are checked before any is unmounted."""
        return self._seg_remove("file", segment_ids, grace_period_seconds)

    def unmount_and_free_segment(self, segment_ids, grace_period_seconds=0):
        """Unmounts segments allocate_and_mount_segment mounted and frees
        their memory; codes as unmount_segment."""
        return self._seg_remove("alloc", segment_ids, grace_period_seconds)

    def _seg_unmap_all(self):
        with self._regs_mu:
            segs, self._segs = self._segs, {}
        for _, mm in segs.values():
            mm.close()

    def __del__(self):
        # Unmount before the mappings go: deallocation would unmap them
        # before the native part unregisters them from the Transfer Engine.
        if getattr(self, "_segs", None):
            try:
                self.close()
            except Exception:  # noqa: BLE001 - finalizer
                pass

    # ---- KV sessions (Mooncake master feature crescent lacks) ------------------------

    def _no_sessions(self, *a, **k):
        raise RuntimeError("UNAVAILABLE_IN_CURRENT_MODE: crescent's master has no KV sessions")

    pin_kv_session = unpin_kv_session = attach_kv_session = get_kv_session = \
        close_kv_session = update_kv_session = list_kv_session_keys = _no_sessions

    # ---- tensors -------------------------------------------------------------------

    def _enc(self, tensor, layout=None):
        tc.torch()
        if layout is None:
            return tc.encode(tensor)
        return tc.encode(tensor, *layout)

    def _write_tensor(self, key, tensor, config, upsert, layout=None):
        """layout: (global shape, axes) of a shard (tensor_codec.encode)."""
        e = self._enc(tensor, layout)
        if e is None:
            return INVALID_PARAMS
        hdr, data, _keep = e
        if upsert:
            return self.upsert_parts(key, hdr, data, config=config)
        return self.put_parts(key, hdr, data, config=config)

    def _write_tensors(self, keys, tensors, config, upsert):
        keys = _keys(keys)
        if not _is_seq(tensors) or len(tensors) != len(keys) or not keys:
            return [INVALID_PARAMS] * len(keys)
        return [self._write_tensor(k, t, config, upsert) for k, t in zip(keys, tensors)]

    def put_tensor(self, key, tensor):
        """Stores a tensor (Mooncake's header + data). 0 or negative (-600 for
        a non-tensor, an unknown dtype, more than 8 dims). A tensor with no
        element is stored as the header alone, as Mooncake does; get_tensor
        returns an empty tensor of its dtype and shape."""
        return self._write_tensor(key, tensor, None, False)

    def pub_tensor(self, key, tensor, config=None):
        return self._write_tensor(key, tensor, config, False)

    def upsert_tensor(self, key, tensor):
        return self._write_tensor(key, tensor, None, True)

    def upsert_pub_tensor(self, key, tensor, config=None):
        return self._write_tensor(key, tensor, config, True)

    def batch_put_tensor(self, keys, tensors_list):
        return self._write_tensors(keys, tensors_list, None, False)

    def batch_pub_tensor(self, keys, tensors_list, config=None):
        return self._write_tensors(keys, tensors_list, config, False)

    def batch_upsert_tensor(self, keys, tensors_list):
        return self._write_tensors(keys, tensors_list, None, True)

    def batch_upsert_pub_tensor(self, keys, tensors_list, config=None):
        return self._write_tensors(keys, tensors_list, config, True)

    def get_tensor(self, key):
        """The tensor stored under key, or None (missing, not a tensor)."""
        tc.torch()
        h = self.get_buffer(key)
        if h is None:
            return None
        return tc.decode(h)

    def batch_get_tensor(self, keys):
        tc.torch()
        return [None if h is None else tc.decode(h) for h in self.batch_get_buffer(keys)]

    def get_tensor_into(self, key, buffer_ptr, size):
        """Reads the tensor into registered memory and returns a tensor
        sharing it (None on failure)."""
        tc.torch()
        n = self.get_into(key, buffer_ptr, size)
        if n <= 0:
            return None
        return tc.decode_at(_addr(buffer_ptr)[0], n)

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes):
        tc.torch()
        keys = _keys(keys)
        if not (_is_seq(buffer_ptrs) and _is_seq(sizes)) or \
                not len(keys) == len(buffer_ptrs) == len(sizes):
            return [None] * len(keys)
        res = self.batch_get_into(keys, buffer_ptrs, sizes)
        return [tc.decode_at(_addr(p)[0], n) if n > 0 else None for p, n in zip(buffer_ptrs, res)]

    def get_tensor_into_cuda(self, key, tensor):
        """Mooncake's read of a stored tensor's data into a destination tensor
        (a CUDA tensor there; here a contiguous CPU tensor, no GPUs). The
        header and data are read as one version first, then the destination
        is checked and filled, so an upsert in between never mixes versions.
        The destination must be what Mooncake's binding requires: an object
        whose class name contains "Tensor", contiguous, of the stored dtype
        and exactly the stored shape (so exactly the stored data size).
        Returns the bytes written; -704 missing key, -600 not a stored tensor
        or any other destination (another dtype or shape, a larger one, not
        contiguous, not CPU, not a tensor)."""
        if not isinstance(key, str):
            raise TypeError("key must be str")
        tc.torch()
        h = self.get_buffer(key)
        if h is None:
            return OBJECT_NOT_FOUND if self.is_exist(key) == 0 else INVALID_PARAMS
        mv = memoryview(h).cast("B")
        parsed = tc.parse(mv)
        if parsed is None:
            return INVALID_PARAMS
        dt, shape, off = parsed
        n = len(mv) - off
        if "Tensor" not in type(tensor).__name__:
            return INVALID_PARAMS  # Mooncake's test of a tensor: its class name
        try:
            ok = (bool(tensor.is_contiguous()) and tensor.device.type == "cpu"
                  and tensor.dtype == dt and list(tensor.shape) == list(shape)
                  and tensor.numel() * tensor.element_size() == n)
            dst = tensor.data_ptr() if ok else 0
        except Exception:  # Mooncake: an error inspecting it is an unsuitable destination
            return INVALID_PARAMS
        if not ok:
            return INVALID_PARAMS
        if n:
            ctypes.memmove(dst, (ctypes.c_ubyte * n).from_buffer_copy(mv[off:]), n)
        return n

    def batch_get_tensor_into_cuda(self, keys, tensors_list):
        """get_tensor_into_cuda() of each (key, tensor); one result per key."""
        keys = _keys(keys)
        if not _is_seq(tensors_list) or len(tensors_list) != len(keys):
            return [INVALID_PARAMS] * len(keys)
        return [self.get_tensor_into_cuda(k, t) for k, t in zip(keys, tensors_list)]

    def get_tensor_dim_selection_into(self, key, buffer_ptr, size, shape, dtype, dim=0,
                                      selections=(), data_offset=0):
        """Reads the rows of a fixed-shape tensor stored raw at data_offset of
        key's object (shape, dtype given by the caller, e.g. a
        remote_tensor_batch.TensorFieldRef), selected along dim by the
        selections (crescent.dim_select: select_idxs, slice, repeat, cat),
        into registered memory [buffer_ptr, buffer_ptr + size), contiguous.
        Returns the bytes written; -704 no such key, -10 buffer too small,
        -600 unregistered buffer, bad shape / dtype / dim / selection, or an
        object shorter than data_offset + the tensor."""
        from crescent import dim_select as ds
        if not isinstance(key, str):
            raise TypeError("key must be str")
        a, _ = _addr(buffer_ptr)
        if _int(size, "size") < 0 or _int(data_offset, "data_offset") < 0:
            raise ValueError("size and data_offset must be >= 0")
        _int(dim, "dim")
        if not _is_seq(shape) or not all(isinstance(d, int) and not isinstance(d, bool)
                                         for d in shape):
            raise TypeError("shape must be a list of int")
        if not _is_seq(selections):
            raise TypeError("selections must be a list of (op, value)")
        if not self._is_setup():
            return UNAVAILABLE_IN_CURRENT_STATUS
        try:
            elem = ds.dtype_size(dtype)
            full = ds.nbytes(shape, dtype)
            if not shape:
                raise ValueError("shape must have a dimension")
            d = dim + len(shape) if dim < 0 else dim
            if not 0 <= d < len(shape):
                raise ValueError("dim out of range")
            rows = ds.source_rows(shape[d], selections)
        except (ValueError, IndexError, TypeError, KeyError):
            return INVALID_PARAMS
        outer = 1
        for x in shape[:d]:
            outer *= x
        inner = elem
        for x in shape[d + 1:]:
            inner *= x
        out = outer * len(rows) * inner
        if out > ds.MAX_OUTPUT_BYTES:
            return INVALID_PARAMS
        if out > size:
            return BUFFER_OVERFLOW
        if out and (not a or not self._registered(a, out)):
            return INVALID_PARAMS  # only registered memory is written (as Mooncake requires)
        h = self.get_buffer(key)
        if h is None:
            ex = self.is_exist(key)
            return OBJECT_NOT_FOUND if ex == 0 else (ex if ex < 0 else INTERNAL_ERROR)
        if len(h) < data_offset + full:
            return INVALID_PARAMS
        if out == 0:
            return 0
        import numpy as np
        src = np.frombuffer(h, dtype=np.uint8, count=full, offset=data_offset)
        picked = src.reshape(outer, shape[d], inner)[:, rows, :]
        dst = (ctypes.c_uint8 * out).from_address(a)
        np.copyto(np.frombuffer(dst, dtype=np.uint8).reshape(picked.shape), picked)
        return out

    def _check_tensor_buf(self, ptr, size):
        """(tensor, 0) for the serialized tensor in registered memory at
        ptr, or (None, code): -1010 when the store is not set up or closed
        (its registrations went with it), -600 for memory not registered
        here (the only memory read, as Mooncake requires) or bytes that are
        not a serialized tensor."""
        a, _ = _addr(ptr)
        _int(size, "size")
        if not self._is_setup():
            return None, UNAVAILABLE_IN_CURRENT_STATUS
        if size < tc.MIN_HEADER or not a or not self._registered(a, size):
            return None, INVALID_PARAMS
        t = tc.decode_at(a, size)
        return t, 0 if t is not None else INVALID_PARAMS

    def put_tensor_from(self, key, buffer_ptr, size):
        """Stores a serialized tensor ([header][data], e.g. filled by
        get_tensor_into) from registered memory; -600 if it is not one."""
        tc.torch()
        rc = self._check_tensor_buf(buffer_ptr, size)[1]
        return rc or self.put_from(key, buffer_ptr, size)

    def upsert_tensor_from(self, key, buffer_ptr, size):
        tc.torch()
        rc = self._check_tensor_buf(buffer_ptr, size)[1]
        return rc or self.upsert_from(key, buffer_ptr, size)

    def _batch_tensor_from(self, keys, ptrs, sizes, upsert):
        tc.torch()
        keys = _keys(keys)
        if not (_is_seq(ptrs) and _is_seq(sizes)) or not len(keys) == len(ptrs) == len(sizes):
            return [INVALID_PARAMS] * len(keys)
        # Mooncake's binding parses every buffer before writing any: one that
        # is not a serialized tensor (here also: not in registered memory,
        # the only memory crescent reads) refuses the whole batch, -600 for
        # every key, nothing stored (-1010 when the store is not set up)
        for p, n in zip(ptrs, sizes):
            rc = self._check_tensor_buf(p, n)[1]
            if rc:
                return [rc] * len(keys)
        if not keys:
            return []
        fn = self.batch_upsert_from if upsert else self.batch_put_from
        return fn(keys, list(ptrs), list(sizes))

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
        """put_tensor_from() of each buffer, all or none checked first: a
        buffer that is not a serialized tensor in registered memory makes
        every result -600 and stores nothing (as Mooncake's binding)."""
        return self._batch_tensor_from(keys, buffer_ptrs, sizes, False)

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
        return self._batch_tensor_from(keys, buffer_ptrs, sizes, True)

    # -- tensor parallelism (Mooncake's key_tp_<rank> shards) --

    @staticmethod
    def _tp_args(tp_rank, tp_size, split_dim):
        for v, n in ((tp_rank, "tp_rank"), (tp_size, "tp_size"), (split_dim, "split_dim")):
            _int(v, n)

    def _put_tp(self, key, tensor, config, tp_rank, tp_size, split_dim, upsert):
        self._tp_args(tp_rank, tp_size, split_dim)
        tc.torch()
        if tp_size <= 1:
            return self._write_tensor(key, tensor, config, upsert)
        if not isinstance(tensor, tc.torch().Tensor):
            return INVALID_PARAMS
        chunks = tc.tp_chunks(tensor, tp_size, split_dim)
        if chunks is None:
            return INVALID_PARAMS
        full = list(tensor.shape)
        for r, c in enumerate(chunks):
            rc = self._write_tensor(tc.tp_key(key, r), c, config, upsert,
                                    (full, [("tp", r, tp_size, split_dim)]))
            if rc:
                return rc
        return 0

    def _batch_put_tp(self, keys, tensors, config, tp_rank, tp_size, split_dim, upsert):
        keys = _keys(keys, "base_keys")
        if not _is_seq(tensors) or len(tensors) != len(keys) or not keys:
            return [INVALID_PARAMS] * len(keys)
        return [self._put_tp(k, t, config, tp_rank, tp_size, split_dim, upsert)
                for k, t in zip(keys, tensors)]

    def put_tensor_with_tp(self, key, tensor, tp_rank=0, tp_size=1, split_dim=0):
        """Splits tensor with tensor.chunk(tp_size, split_dim) and stores every
        shard under key_tp_<rank> (tp_rank is not used, as in Mooncake)."""
        return self._put_tp(key, tensor, None, tp_rank, tp_size, split_dim, False)

    def pub_tensor_with_tp(self, key, tensor, config=None, tp_rank=0, tp_size=1, split_dim=0):
        return self._put_tp(key, tensor, config, tp_rank, tp_size, split_dim, False)

    def upsert_tensor_with_tp(self, key, tensor, tp_rank=0, tp_size=1, split_dim=0):
        return self._put_tp(key, tensor, None, tp_rank, tp_size, split_dim, True)

    def upsert_pub_tensor_with_tp(self, key, tensor, config=None, tp_rank=0, tp_size=1,
                                  split_dim=0):
        return self._put_tp(key, tensor, config, tp_rank, tp_size, split_dim, True)

    def batch_put_tensor_with_tp(self, base_keys, tensors_list, tp_rank=0, tp_size=1,
                                 split_dim=0):
        return self._batch_put_tp(base_keys, tensors_list, None, tp_rank, tp_size, split_dim,
                                  False)

    def batch_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank=0,
                                 tp_size=1, split_dim=0):
        return self._batch_put_tp(base_keys, tensors_list, config, tp_rank, tp_size, split_dim,
                                  False)

    def batch_upsert_tensor_with_tp(self, base_keys, tensors_list, tp_rank=0, tp_size=1,
                                    split_dim=0):
        return self._batch_put_tp(base_keys, tensors_list, None, tp_rank, tp_size, split_dim,
                                  True)

    def batch_upsert_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank=0,
                                        tp_size=1, split_dim=0):
        return self._batch_put_tp(base_keys, tensors_list, config, tp_rank, tp_size, split_dim,
                                  True)

    def get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        """Shard tp_rank of key (key itself when tp_size <= 1), or None."""
        self._tp_args(tp_rank, tp_size, split_dim)
        return self.get_tensor(key if tp_size <= 1 else tc.tp_key(key, tp_rank))

    def batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
        self._tp_args(tp_rank, tp_size, 0)
        keys = _keys(base_keys, "base_keys")
        return self.batch_get_tensor(keys if tp_size <= 1 else
                                     [tc.tp_key(k, tp_rank) for k in keys])

    def get_tensor_with_tp_into(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        self._tp_args(tp_rank, tp_size, split_dim)
        return self.get_tensor_into(key if tp_size <= 1 else tc.tp_key(key, tp_rank),
                                    buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1):
        self._tp_args(tp_rank, tp_size, 0)
        keys = _keys(base_keys, "base_keys")
        return self.batch_get_tensor_into(
            keys if tp_size <= 1 else [tc.tp_key(k, tp_rank) for k in keys], buffer_ptrs, sizes)

    def _tp_from(self, key, ptr, size, tp_rank, tp_size, split_dim, upsert):
        self._tp_args(tp_rank, tp_size, split_dim)
        tc.torch()
        if tp_size <= 1:
            return (self.upsert_tensor_from if upsert else self.put_tensor_from)(key, ptr, size)
        t, rc = self._check_tensor_buf(ptr, size)
        return rc or self._put_tp(key, t, None, tp_rank, tp_size, split_dim, upsert)

    # -- one rank's chunk of a tensor-parallel tensor (Mooncake's chunk API):
    # the shard under key_tp_<rank>, its place in key_tp_<rank>_meta (int64
    # start index, int64 length along split_dim) and, from rank 0, the whole
    # tensor's description in key_global_meta (int32 dtype code, ndim,
    # split_dim, tp_size; int64 x4 full shape, -1 padded), little-endian.
    def _put_chunk(self, key, chunk, tp_rank, tp_size, split_dim, full_shape):
        import struct
        self._tp_args(tp_rank, tp_size, split_dim)
        tc.torch()
        if not isinstance(key, str):
            raise TypeError("key must be str")
        if not tc.is_tensor(chunk):
            return INVALID_PARAMS
        if not _is_seq(full_shape) or not all(isinstance(d, int) and not isinstance(d, bool)
                                              and d >= 0 for d in full_shape):
            raise TypeError("full_shape must be a list of int >= 0")
        nd = len(full_shape)
        code = tc.dtype_code(chunk.dtype)
        if code is None or chunk.dim() != nd or not 0 < nd <= 4 or not 0 <= split_dim < nd or \
                not 0 <= tp_rank < tp_size:
            return INVALID_PARAMS
        step = -(-full_shape[split_dim] // tp_size)  # torch.chunk's split size
        start = tp_rank * step
        want = max(0, min(step, full_shape[split_dim] - start))
        # a chunk with no element (a 0 dimension, or a rank past the rows
        # tensor.chunk gives) is stored like any other, as Mooncake does
        if list(chunk.shape) != [want if d == split_dim else full_shape[d] for d in range(nd)]:
            return INVALID_PARAMS
        shard = tc.tp_key(key, tp_rank)
        rc = self._write_tensor(shard, chunk.contiguous(), None, True)
        if rc == 0:
            rc = self.upsert(shard + "_meta", struct.pack("<qq", start, want))
        if rc == 0 and tp_rank == 0:
            dims = list(full_shape) + [-1] * (4 - nd)
            rc = self.upsert(key + "_global_meta",
                             struct.pack("<iiii4q", code, nd, split_dim, tp_size, *dims))
        return rc

    def put_tensor_chunk_with_tp(self, key, chunk, tp_rank=0, tp_size=1, split_dim=0,
                                 full_shape=None):
        """Stores this rank's chunk (as tensor.chunk(tp_size, split_dim)[tp_rank]
        of a tensor of full_shape) with its metadata; -600 for a chunk that
        does not fit full_shape / split_dim / tp_size (nothing written)."""
        return self._put_chunk(key, chunk, tp_rank, tp_size, split_dim, full_shape)

    def batch_put_tensor_chunk_with_tp(self, keys, chunks, tp_rank=0, tp_size=1, split_dim=0,
                                       full_shapes=None):
        keys = _keys(keys)
        if not (_is_seq(chunks) and _is_seq(full_shapes)) or \
                not len(keys) == len(chunks) == len(full_shapes):
            return [INVALID_PARAMS] * len(keys)
        return [self._put_chunk(k, c, tp_rank, tp_size, split_dim, f)
                for k, c, f in zip(keys, chunks, full_shapes)]

    def put_tensor_chunk_with_tp_from(self, key, buffer_ptr, size, tp_rank=0, tp_size=1,
                                      split_dim=0, full_shape=None):
        """put_tensor_chunk_with_tp() of the serialized tensor (header + data,
        as put_tensor stores it) in registered memory at buffer_ptr."""
        tc.torch()
        t, rc = self._check_tensor_buf(buffer_ptr, size)
        return rc or self._put_chunk(key, t, tp_rank, tp_size, split_dim, full_shape)

    def batch_put_tensor_chunk_with_tp_from(self, keys, buffer_ptrs, sizes, tp_rank=0,
                                            tp_size=1, split_dim=0, full_shapes=None):
        keys = _keys(keys)
        if not (_is_seq(buffer_ptrs) and _is_seq(sizes) and _is_seq(full_shapes)) or \
                not len(keys) == len(buffer_ptrs) == len(sizes) == len(full_shapes):
            return [INVALID_PARAMS] * len(keys)
        return [self.put_tensor_chunk_with_tp_from(k, p, n, tp_rank, tp_size, split_dim, f)
                for k, p, n, f in zip(keys, buffer_ptrs, sizes, full_shapes)]

    def put_tensor_with_tp_from(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        """The full serialized tensor at buffer_ptr, split and stored like
        put_tensor_with_tp()."""
        return self._tp_from(key, buffer_ptr, size, tp_rank, tp_size, split_dim, False)

    def upsert_tensor_with_tp_from(self, key, buffer_ptr, size, tp_rank=0, tp_size=1,
                                   split_dim=0):
        return self._tp_from(key, buffer_ptr, size, tp_rank, tp_size, split_dim, True)

    def _batch_tp_from(self, keys, ptrs, sizes, tp_rank, tp_size, split_dim, upsert):
        self._tp_args(tp_rank, tp_size, split_dim)
        if tp_size <= 1:  # Mooncake: the whole-batch batch_*_tensor_from
            return self._batch_tensor_from(keys, ptrs, sizes, upsert)
        keys = _keys(keys, "base_keys")
        if not (_is_seq(ptrs) and _is_seq(sizes)) or not len(keys) == len(ptrs) == len(sizes):
            return [INVALID_PARAMS] * len(keys)
        return [self._tp_from(k, p, s, tp_rank, tp_size, split_dim, upsert)
                for k, p, s in zip(keys, ptrs, sizes)]

    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1,
                                      split_dim=0):
        return self._batch_tp_from(base_keys, buffer_ptrs, sizes, tp_rank, tp_size, split_dim,
                                   False)

    def batch_upsert_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank=0,
                                         tp_size=1, split_dim=0):
        return self._batch_tp_from(base_keys, buffer_ptrs, sizes, tp_rank, tp_size, split_dim,
                                   True)

    # -- unified parallelism --

    @staticmethod
    def _writer(w):
        """(rank, size, split_dim) of a writer_partition given as a tuple,
        dict or object; ValueError when malformed."""
        if isinstance(w, dict):
            vals = (w.get("rank"), w.get("size"), w.get("split_dim", 0))
        elif _is_seq(w):
            vals = tuple(w) + ((0,) if len(w) == 2 else ())
        else:
            vals = (getattr(w, "rank", None), getattr(w, "size", None),
                    getattr(w, "split_dim", 0))
        if len(vals) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            raise ValueError("writer_partition must be (rank, size, split_dim)")
        r, s, d = vals
        if s < 1 or not 0 <= r < s or d < 0:
            raise ValueError("writer_partition out of range: %r" % (vals,))
        return vals

    def _shard_plan(self, key, tensor, parallelism, writer_partition):
        """(store key, tensor to store) for one parallel write, or None."""
        torch = tc.torch()
        if not isinstance(tensor, torch.Tensor):
            return None
        if parallelism is not None and writer_partition is not None:
            raise ValueError("give parallelism or writer_partition, not both")
        if writer_partition is not None:
            r, s, d = self._writer(writer_partition)
            shard = tc.partition(tensor, r, s, d)
            return None if shard is None else (tc.tp_key(key, r), shard,
                                               (list(tensor.shape), [("tp", r, s, d)]))
        if parallelism is None or not parallelism.axes:
            return key, tensor, None
        if not isinstance(parallelism, TensorParallelism):
            raise TypeError("parallelism must be a TensorParallelism")
        axes = parallelism.axes
        for a in axes:
            if a.rank >= a.size:
                return None
        tp = [a for a in axes if a.kind == "tp"]
        lay = [(a.kind, a.rank, a.size, -1 if a.split_dim is None else a.split_dim)
               for a in axes[:tc.MAX_AXES]]
        if len(axes) > 1 and tp and tp[0].split_dim is not None:
            # TP inside a multi-axis layout: the caller passes the full tensor
            shard = tc.partition(tensor, tp[0].rank, tp[0].size, tp[0].split_dim)
            if shard is None:
                return None
            return tc.parallelism_key(key, axes), shard, (list(tensor.shape), lay)
        full = list(tensor.shape)  # shard input: the global shape as far as known
        for a in tp:
            if a.split_dim is not None and 0 <= a.split_dim < len(full):
                full[a.split_dim] *= a.size
        return tc.parallelism_key(key, axes), tensor, (full, lay)

    def _put_par(self, key, tensor, parallelism, config, writer_partition, upsert):
        if not isinstance(key, str):
            raise TypeError("key must be str")
        plan = self._shard_plan(key, tensor, parallelism, writer_partition)
        if plan is None:
            return INVALID_PARAMS
        return self._write_tensor(plan[0], plan[1], config, upsert, plan[2])

    def _batch_put_par(self, keys, tensors, parallelisms, config, writer_partitions, upsert):
        keys = _keys(keys)
        n = len(keys)
        if not _is_seq(tensors) or len(tensors) != n or \
                (parallelisms is not None and (not _is_seq(parallelisms) or len(parallelisms) != n)) \
                or (writer_partitions is not None and
                    (not _is_seq(writer_partitions) or len(writer_partitions) != n)):
            return [INVALID_PARAMS] * n
        return [self._put_par(k, t, parallelisms[i] if parallelisms is not None else None, config,
                              writer_partitions[i] if writer_partitions is not None else None,
                              upsert) for i, (k, t) in enumerate(zip(keys, tensors))]

    def put_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None,
                                    writer_partition=None):
        """Stores a full tensor (parallelism None) or the shard named by
        parallelism (a lone TP axis: shard input, key_tp_<rank>; TP inside a
        multi-axis layout: full input, the TP shard is cut here), or shard
        writer_partition=(rank, size, split_dim) of a full tensor."""
        return self._put_par(key, tensor, parallelism, config, writer_partition, False)

    def upsert_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None,
                                       writer_partition=None):
        return self._put_par(key, tensor, parallelism, config, writer_partition, True)

    def batch_put_tensor_with_parallelism(self, keys, tensors_list, parallelisms=None,
                                          config=None, writer_partitions=None):
        return self._batch_put_par(keys, tensors_list, parallelisms, config, writer_partitions,
                                   False)

    def batch_upsert_tensor_with_parallelism(self, keys, tensors_list, parallelisms=None,
                                             config=None, writer_partitions=None):
        return self._batch_put_par(keys, tensors_list, parallelisms, config, writer_partitions,
                                   True)

    def _par_from(self, key, ptr, size, parallelism, config, writer_partition, upsert):
        tc.torch()
        t, rc = self._check_tensor_buf(ptr, size)
        return rc or self._put_par(key, t, parallelism, config, writer_partition, upsert)

    def put_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None,
                                         config=None, writer_partition=None):
        return self._par_from(key, buffer_ptr, size, parallelism, config, writer_partition, False)

    def upsert_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None,
                                            config=None, writer_partition=None):
        return self._par_from(key, buffer_ptr, size, parallelism, config, writer_partition, True)

    def _batch_par_from(self, keys, ptrs, sizes, parallelisms, config, writers, upsert):
        keys = _keys(keys)
        n = len(keys)
        if not (_is_seq(ptrs) and _is_seq(sizes)) or not n == len(ptrs) == len(sizes) or \
                (parallelisms is not None and len(parallelisms) != n) or \
                (writers is not None and len(writers) != n):
            return [INVALID_PARAMS] * n
        return [self._par_from(k, ptrs[i], sizes[i],
                               parallelisms[i] if parallelisms is not None else None, config,
                               writers[i] if writers is not None else None, upsert)
                for i, k in enumerate(keys)]

    def batch_put_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None,
                                               config=None, writer_partitions=None):
        return self._batch_par_from(keys, buffer_ptrs, sizes, parallelisms, config,
                                    writer_partitions, False)

    def batch_upsert_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes,
                                                  parallelisms=None, config=None,
                                                  writer_partitions=None):
        return self._batch_par_from(keys, buffer_ptrs, sizes, parallelisms, config,
                                    writer_partitions, True)

    def _stored(self, key):
        """(tensor, layout) stored under key (tensor_codec.layout_of: None
        for a full tensor or an older layout), or (None, None)."""
        h = self.get_buffer(key)
        if h is None:
            return None, None
        mv = memoryview(h).cast("B")
        return tc.decode(mv), tc.layout_of(mv)

    @staticmethod
    def _tp_of(layout):
        """(shard count, split_dim) of the TP axis in a stored layout, or None."""
        for kind, _rank, count, split in (layout[1] if layout else []):
            if kind == "tp" and split >= 0:
                return count, split
        return None

    def _tp_full(self, key, axes, i, size=None, split=None):
        """The full tensor rebuilt from the TP shards of axis i (the other
        axes as given). The count and split_dim the shards were written with
        come from their layout metadata; size/split are the caller's guess."""
        def shard_key(r):
            ax = list(axes)
            ax[i] = ParallelAxis("tp", r, max(size or 1, r + 1))
            return tc.parallelism_key(key, ax)
        first, lay = self._stored(shard_key(0))
        if first is None:
            return None
        stored = self._tp_of(lay)
        if stored is not None:
            size, split = stored
        if size is None or split is None:
            return None
        parts = [first]
        for r in range(1, size):
            t, _ = self._stored(shard_key(r))
            if t is None:
                return None
            parts.append(t)
        try:
            return tc.torch().cat(parts, split)
        except RuntimeError:
            return None

    def _read_par(self, key, target):
        """The tensor a ReadTarget names. "shard" of a TP axis whose shards
        were written with another size is cut from the rebuilt full tensor
        (Mooncake's resharding read); "full" rebuilds from the shards."""
        if not isinstance(key, str):
            raise TypeError("key must be str")
        if target is not None and not isinstance(target, ReadTarget):
            raise TypeError("target must be a ReadTarget or None")
        if target is None or target.mode == "as_stored":
            return self.get_tensor(key)
        axes = list(target.parallelism.axes) if target.parallelism is not None else []
        tpi = [i for i, a in enumerate(axes) if a.kind == "tp"]
        if target.mode == "shard":
            if not axes:
                return None
            t, lay = self._stored(tc.parallelism_key(key, axes))
            if not tpi:
                return t
            a = axes[tpi[0]]
            stored = self._tp_of(lay)
            if t is not None and (stored is None or stored[0] == a.size):
                return t
            full = self._tp_full(key, axes, tpi[0], None, a.split_dim)
            split = a.split_dim if a.split_dim is not None else (stored or (None, None))[1]
            if full is None or split is None:
                return None
            chunks = full.chunk(a.size, split)
            return chunks[a.rank].contiguous() if a.rank < len(chunks) else None
        # full
        if not axes:
            t = self.get_tensor(key)
            if t is not None:
                return t
            # written as TP shards (writer_partition / put_tensor_with_tp)
            return self._tp_full(key, [ParallelAxis("tp", 0, 1)], 0)
        if not tpi:
            return self.get_tensor(tc.parallelism_key(key, axes))
        a = axes[tpi[0]]
        return self._tp_full(key, axes, tpi[0], a.size, a.split_dim)

    def get_tensor_with_parallelism(self, key, target=None):
        """The tensor a ReadTarget names: as stored (None target), one shard
        (resharded when the shards were written with another TP size), or
        the full tensor rebuilt from its TP shards (the shards' layout
        metadata names their count and split_dim)."""
        tc.torch()
        return self._read_par(key, target)

    def batch_get_tensor_with_parallelism(self, keys, targets=None):
        keys = _keys(keys)
        if targets is not None and (not _is_seq(targets) or len(targets) != len(keys)):
            return [None] * len(keys)
        return [self.get_tensor_with_parallelism(k, targets[i] if targets is not None else None)
                for i, k in enumerate(keys)]

    def get_tensor_with_parallelism_into(self, key, buffer_ptr, size, target=None):
        """Like get_tensor_with_parallelism(); the result is serialized into
        registered memory at buffer_ptr and returned as a tensor sharing it
        (a stored tensor read as stored goes there directly)."""
        tc.torch()
        if target is None or (isinstance(target, ReadTarget) and target.mode == "as_stored"):
            if not isinstance(key, str):
                raise TypeError("key must be str")
            return self.get_tensor_into(key, buffer_ptr, size)
        t = self.get_tensor_with_parallelism(key, target)
        if t is None:
            return None
        e = tc.encode(t)
        a, _ = _addr(buffer_ptr)
        n = len(e[0]) + e[1].nbytes
        _int(size, "size")
        if n > size or not self._registered(a, n):
            return None
        ctypes.memmove(a, e[0], len(e[0]))
        ctypes.memmove(a + len(e[0]), bytes(e[1]), e[1].nbytes)
        return tc.decode_at(a, n)

    def batch_get_tensor_with_parallelism_into(self, keys, buffer_ptrs, sizes, targets=None):
        keys = _keys(keys)
        n = len(keys)
        if not (_is_seq(buffer_ptrs) and _is_seq(sizes)) or not n == len(buffer_ptrs) == len(sizes) \
                or (targets is not None and len(targets) != n):
            return [None] * n
        return [self.get_tensor_with_parallelism_into(
            k, buffer_ptrs[i], sizes[i], targets[i] if targets is not None else None)
            for i, k in enumerate(keys)]

    # -- files --

    # ---- tensor files: Mooncake's store_file_io methods (what `import mooncake` attaches) --
    #
    # Local files only: filesystem "auto"/"file"/"local"/"localfs"/"posix" or a
    # file:// URI. Another filesystem (s3://, hdfs, ... through fsspec in
    # Mooncake) or non-empty storage_options is not applicable here: a save
    # returns -600, a load None.

    def _file_args(self, key, file_name, fmt, filesystem, storage_options, tensor_name):
        if key is not None and not isinstance(key, str):
            raise TypeError("key must be str")
        if tensor_name is not None and not isinstance(tensor_name, str):
            raise TypeError("tensor_name must be str")
        if not isinstance(fmt, str):
            raise TypeError("format must be str")
        if storage_options:
            raise ValueError("storage_options: only local files here")
        path = tc.local_path(file_name, filesystem)
        if not path:
            raise ValueError("file_name must not be empty")
        f = fmt.lower().replace("-", "_")
        if f == "auto":
            f = "safetensors" if path.lower().endswith(".safetensors") else "torch"
        elif f == "safe_tensors":
            f = "safetensors"
        elif f in ("pt", "pth", "standard", "standard_file"):
            f = "torch"
        if f not in ("safetensors", "torch"):
            raise ValueError("unsupported file format %r" % fmt)
        return path, f

    def save_tensor_to_file(self, key, file_name=None, format="auto", filesystem="auto",
                            storage_options=None, tensor_name=None):
        """Writes the tensor of key to file_name (default: the key) as
        "torch" (torch.save) or "safetensors" (tensor named tensor_name or
        the key); format "auto" goes by the .safetensors suffix. Missing
        directories are made. Returns 0; -1100 no tensor under key or a
        path that cannot exist; -600 bad format / filesystem; -1503 the
        file could not be written."""
        if not isinstance(key, str):
            raise TypeError("key must be str")
        try:
            path, fmt = self._file_args(key, key if file_name is None else file_name, format,
                                        filesystem, storage_options, tensor_name)
        except ValueError:
            return INVALID_PARAMS
        t = self.get_tensor(key)
        if t is None:
            return FILE_NOT_FOUND
        try:
            d = os.path.dirname(os.path.abspath(path))
            os.makedirs(d, exist_ok=True)
            if fmt == "safetensors":
                tc.safetensors_write(path, {tensor_name or key: t}, {"mooncake_key": key})
            else:
                tc.torch().save(t, path)
        except FileNotFoundError:
            return FILE_NOT_FOUND
        except ValueError:
            return INVALID_PARAMS
        except OSError:
            return PERSISTENT_FAIL
        return OK

    def load_tensor_from_file(self, key=None, file_name=None, format="auto", filesystem="auto",
                              storage_options=None, tensor_name=None, map_location=None):
        """Reads a tensor from file_name and stores it under key (default:
        the file name) with put_tensor; returns the tensor, or None when the
        file is missing or bad or the store refuses it. A safetensors file
        gives tensor_name, else the entry named like the key, else its first
        tensor. torch files are loaded with weights_only=True."""
        if file_name is None:
            return None
        try:
            path, fmt = self._file_args(key, file_name, format, filesystem, storage_options,
                                        tensor_name)
        except ValueError:
            return None
        if key is None:
            key = os.fspath(file_name)
        try:
            if fmt == "safetensors":
                t = None
                for name in (tensor_name, key):
                    if name:
                        try:
                            t = tc.safetensors_read(path, name)
                            break
                        except ValueError as e:
                            if "no tensor named" not in str(e):
                                raise
                if t is None:
                    t = tc.safetensors_read(path, None)
            else:
                t = tc.torch().load(path, map_location=map_location, weights_only=True)
        except (OSError, ValueError, RuntimeError, EOFError, TypeError):
            return None
        if not isinstance(t, tc.torch().Tensor):
            return None
        return t if self.put_tensor(key, t) == 0 else None

    def save_tensor_to_safetensor(self, key, file_name=None, filesystem="auto",
                                  storage_options=None, tensor_name=None):
        """save_tensor_to_file(..., format="safetensors")."""
        return self.save_tensor_to_file(key, file_name, "safetensors", filesystem,
                                        storage_options, tensor_name)

    def load_tensor_from_safetensor(self, key=None, file_name=None, filesystem="auto",
                                    storage_options=None, tensor_name=None):
        """load_tensor_from_file(..., format="safetensors")."""
        return self.load_tensor_from_file(key, file_name, "safetensors", filesystem,
                                          storage_options, tensor_name)

    save_kv_cache_to_file = save_tensor_to_file
    load_kv_cache_from_file = load_tensor_from_file


# ---- module-level helpers ------------------------------------------------------------

_libc = ctypes.CDLL(None)


def get_alloc_func_addr():
    """Address of a C ``void *alloc(size_t)`` for host buffers (glibc's
    valloc: page-aligned, never huge pages here)."""
    return ctypes.cast(_libc.valloc, ctypes.c_void_p).value


def get_free_func_addr():
    """Address of the matching ``void free(void *)``."""
    return ctypes.cast(_libc.free, ctypes.c_void_p).value


class MooncakeHostMemAllocator:
    """Host memory for store buffers: alloc(size) -> address (0 on failure),
    free(ptr) -> 0 (-600 for a pointer it did not allocate)."""

    def __init__(self):
        self._live = set()
        self._mu = threading.Lock()
        self._valloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(get_alloc_func_addr())
        self._free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(get_free_func_addr())

    def alloc(self, size):
        _int(size, "size")
        if size <= 0:
            return 0
        p = self._valloc(size) or 0
        if p:
            with self._mu:
                self._live.add(p)
        return p

    def free(self, ptr):
        _int(ptr, "ptr")
        with self._mu:
            if ptr not in self._live:
                return INVALID_PARAMS
            self._live.discard(ptr)
        self._free(ptr)
        return 0


def bind_to_numa_node(node):
    """Runs the calling thread on the CPUs of NUMA node `node` (from
    /sys/devices/system/node); warns and does nothing for an unknown node."""
    import warnings
    _int(node, "node")
    try:
        with open("/sys/devices/system/node/node%d/cpulist" % node) as f:
            spec = f.read().strip()
    except OSError:
        warnings.warn("NUMA node %d does not exist here; binding skipped" % node,
                      RuntimeWarning, stacklevel=2)
        return
    cpus = set()
    for part in spec.split(","):
        if "-" in part:
            a, b = part.split("-")
            cpus.update(range(int(a), int(b) + 1))
        elif part:
            cpus.add(int(part))
    if cpus:
        os.sched_setaffinity(0, cpus)
