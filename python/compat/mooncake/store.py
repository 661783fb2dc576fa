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
                                     MemoryDescriptor, ObjectDataType, ParallelAxis,
                                     QueryTaskResponse, ReadTarget, ReplicaDescriptor,
                                     ReplicaStatus, ReplicateConfig, SoftPinAction, TaskStatus,
                                     TaskType, TensorParallelism)
from crescent.store import (BufferHandle, DistributedStore, MooncakeHostMemAllocator,
                            bind_to_numa_node, get_alloc_func_addr, get_free_func_addr)
from crescent.unsupported import (EngramStore, EngramStoreConfig, MooncakeDistributedNoFRegister,
                                  RangedReadSnapshot)


class MooncakeDistributedStore(DistributedStore):
    """Mooncake's MooncakeDistributedStore, implemented by crescent's Store client."""

    # the file methods Mooncake's `import mooncake` attaches are built in here
    _mooncake_file_io_patched = True


for _e in (ObjectDataType, ReplicaStatus, TaskType, TaskStatus):
    for _m in _e:
        globals()[_m.name] = _m
del _e, _m

__all__ = sorted([
    "RangedReadSnapshot", "ObjectDataType", "SoftPinAction", "ReplicateConfig", "ReplicaStatus",
    "MemoryDescriptor", "DiskDescriptor", "ReplicaDescriptor", "Descriptor", "TaskType",
    "TaskStatus", "QueryTaskResponse", "BufferHandle", "BufferLeaseView", "BufferLease",
    "BufferPool", "RegisteredBufferPool", "RegisteredBufferLease", "RegisteredBufferLeaseView",
    "MooncakeHostMemAllocator", "MooncakeDistributedNoFRegister", "MooncakeDistributedStore",
    "EngramStoreConfig", "EngramStore", "bind_to_numa_node", "get_alloc_func_addr",
    "get_free_func_addr", "ParallelAxis", "TensorParallelism", "ReadTarget", "AXIS_DP",
    "AXIS_TP", "AXIS_EP", "AXIS_PP", "READ_MODE_AS_STORED", "READ_MODE_SHARD", "READ_MODE_FULL",
    "UNKNOWN", "KVCACHE", "TENSOR", "WEIGHT", "SAMPLE", "ACTIVATION", "GRADIENT",
    "OPTIMIZER_STATE", "METADATA", "GENERAL", "UNDEFINED", "INITIALIZED", "PROCESSING",
    "COMPLETE", "REMOVED", "FAILED", "REPLICA_COPY", "REPLICA_MOVE", "PENDING", "SUCCESS"])
