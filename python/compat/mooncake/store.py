"""``mooncake.store`` on crescent: every public name of Mooncake's module.

Enum members are also module-level names (pybind11's export_values()):
ReplicaStatus's first, then TaskType's and TaskStatus's, so PROCESSING and
FAILED are TaskStatus members here, as in Mooncake.
"""
from crescent.buffer_pool import (BufferLease, BufferLeaseView, BufferPool,
                                  RegisteredBufferLease, RegisteredBufferLeaseView,
                                  RegisteredBufferPool)
from crescent.mooncake_types import (AXIS_DP, AXIS_EP, AXIS_PP, AXIS_TP, READ_MODE_AS_STORED,
                                     READ_MODE_FULL, READ_MODE_SHARD, Descriptor, DiskDescriptor,
                                     ExistOptions, MemoryDescriptor, ObjectDataType, ParallelAxis,
                                     QueryTaskResponse, ReadTarget, ReplicaDescriptor,
                                     ReplicaStatus, ReplicateConfig, SoftPinAction, TaskStatus,
                                     TaskType, TensorParallelism)
from crescent.store import (BufferHandle, DistributedStore, MooncakeHostMemAllocator,
                            bind_to_numa_node, get_alloc_func_addr, get_free_func_addr)
from crescent import tensor_codec as _tc
from crescent.unsupported import (EngramStore, EngramStoreConfig, MooncakeDistributedNoFRegister,
                                  RangedReadSnapshot)


class MooncakeDistributedStore(DistributedStore):
    """Mooncake's MooncakeDistributedStore, implemented by crescent's Store client."""

    # the file methods Mooncake's `import mooncake` attaches are built in here
    _mooncake_file_io_patched = True


def _tensor_metadata_size():
    """Size of the serialized tensor metadata in front of a stored tensor's
    data (Mooncake's TensorMetadata: 304 bytes)."""
    return _tc.HEADER_SIZE


def _serialize_tensor(tensor):
    """(metadata bytes, data pointer, data size, owner) of a CPU tensor as
    put_tensor stores it; owner is the contiguous tensor the pointer lives
    in (keep it while using the pointer). ValueError for what put_tensor
    refuses."""
    enc = _tc.encode(tensor) if _tc.is_tensor(tensor) else None
    if enc is None:
        raise ValueError("unsupported tensor for Mooncake tensor serialization")
    hdr, data, owner = enc
    return hdr, owner.data_ptr(), len(data), owner


def _deserialize_tensor(data):
    """The tensor of a stored object's bytes (metadata + data), a copy;
    ValueError when the bytes are not a stored tensor."""
    t = _tc.decode(bytes(data))
    if t is None:
        raise ValueError("bytes are not a serialized Mooncake tensor")
    return t


def _get_pyclient_from_wrapper(wrapper):
    """Mooncake's internal capsule of a store's C++ PyClient (for its
    EngramStore); crescent has no such object."""
    raise RuntimeError("UNAVAILABLE_IN_CURRENT_MODE: no C++ PyClient in crescent")


# ---- the Store-RS backend's module functions (MOONCAKE_STORE_BACKEND=rs in
# Mooncake: tracing and a per-process Prometheus endpoint of its Rust client).
# crescent has one client whatever MOONCAKE_STORE_BACKEND says; its metrics are
# served by crescent-master (--metrics_port), not by client processes.

def init_tracing(filter=None):
    """Mooncake-RS's tracing setup: accepted (filter: str or None) and
    without effect; crescent's client logs to stderr as configured by the
    daemons' --log_level. Returns None."""
    if filter is not None and not isinstance(filter, str):
        raise TypeError("filter must be str or None")
    return None


def metrics_text():
    """Not applicable here: a crescent client process keeps no Prometheus
    registry (crescent-master serves /metrics). RuntimeError."""
    raise RuntimeError("UNAVAILABLE_IN_CURRENT_MODE: no client metrics registry in crescent; "
                       "scrape crescent-master's /metrics")


def start_metrics_server(bind_addr="127.0.0.1:0"):
    """Not applicable here (see metrics_text): RuntimeError."""
    if not isinstance(bind_addr, str):
        raise TypeError("bind_addr must be str")
    raise RuntimeError("UNAVAILABLE_IN_CURRENT_MODE: a crescent client serves no metrics "
                       "endpoint; crescent-master does (--metrics_port)")


def stop_metrics_server():
    """No client metrics server runs here: nothing to stop, returns None."""
    return None


def metrics_server_address():
    """None: no client metrics server runs (start_metrics_server is not
    applicable here)."""
    return None


for _e in (ObjectDataType, ReplicaStatus, TaskType, TaskStatus):
    for _m in _e:
        globals()[_m.name] = _m
del _e, _m

__all__ = sorted([
    "RangedReadSnapshot", "ObjectDataType", "SoftPinAction", "ReplicateConfig", "ExistOptions",
    "ReplicaStatus",
    "MemoryDescriptor", "DiskDescriptor", "ReplicaDescriptor", "Descriptor", "TaskType",
    "TaskStatus", "QueryTaskResponse", "BufferHandle", "BufferLeaseView", "BufferLease",
    "BufferPool", "RegisteredBufferPool", "RegisteredBufferLease", "RegisteredBufferLeaseView",
    "MooncakeHostMemAllocator", "MooncakeDistributedNoFRegister", "MooncakeDistributedStore",
    "EngramStoreConfig", "EngramStore", "bind_to_numa_node", "get_alloc_func_addr",
    "get_free_func_addr", "ParallelAxis", "TensorParallelism", "ReadTarget", "AXIS_DP",
    "AXIS_TP", "AXIS_EP", "AXIS_PP", "READ_MODE_AS_STORED", "READ_MODE_SHARD", "READ_MODE_FULL",
    "UNKNOWN", "KVCACHE", "TENSOR", "WEIGHT", "SAMPLE", "ACTIVATION", "GRADIENT",
    "OPTIMIZER_STATE", "METADATA", "GENERAL", "UNDEFINED", "INITIALIZED", "PROCESSING",
    "COMPLETE", "REMOVED", "FAILED", "REPLICA_COPY", "REPLICA_MOVE", "PENDING", "SUCCESS",
    "init_tracing", "metrics_text", "start_metrics_server", "stop_metrics_server",
    "metrics_server_address"])
