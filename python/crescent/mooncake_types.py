"""Value types of Mooncake's ``mooncake.store`` module, implemented by crescent.

Enums keep Mooncake's names and numeric values; like pybind11's
``export_values()`` their members are also module-level names of
``mooncake.store`` (ReplicaStatus first, then TaskType and TaskStatus, so
``PROCESSING`` and ``FAILED`` name TaskStatus members there, as in Mooncake).
``ReplicateConfig`` has every field of Mooncake's and refuses unknown ones.
"""
import enum
import socket

__all__ = ["ReplicaStatus", "SoftPinAction", "ObjectDataType", "TaskType", "TaskStatus",
           "ReplicateConfig", "ExistOptions", "Descriptor", "MemoryDescriptor",
           "DiskDescriptor",
           "ReplicaDescriptor", "QueryTaskResponse", "ParallelAxis", "TensorParallelism",
           "ReadTarget", "AXIS_DP", "AXIS_TP", "AXIS_EP", "AXIS_PP", "READ_MODE_AS_STORED",
           "READ_MODE_SHARD", "READ_MODE_FULL", "segment_name_of"]


class ReplicaStatus(enum.IntEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class SoftPinAction(enum.IntEnum):
    """What a put/upsert does to an object's soft pin: PRESERVE keeps what
    ``with_soft_pin`` says (for an upsert: the existing object's pin),
    ENABLE pins, DISABLE unpins."""
    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(enum.IntEnum):
    """Advisory tag of what an object holds (accepted, not interpreted)."""
    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class TaskType(enum.IntEnum):
    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(enum.IntEnum):
    PENDING = 0
    PROCESSING = 1
    SUCCESS = 2
    FAILED = 3


def _check_bool(name, v):
    if not isinstance(v, (bool, int)):
        raise TypeError("%s must be bool, not %s" % (name, type(v).__name__))
    return bool(v)


def _check_uint(name, v):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("%s must be int, not %s" % (name, type(v).__name__))
    if v < 0:
        raise ValueError("%s must be >= 0" % name)
    return v


def _check_strs(name, v):
    if v is None:
        return []
    if isinstance(v, (str, bytes)):
        raise TypeError("%s must be a list of str" % name)
    out = list(v)
    for s in out:
        if not isinstance(s, str):
            raise TypeError("%s must hold str, not %s" % (name, type(s).__name__))
    return out


class ReplicateConfig:
    """How a put places its replicas (Mooncake's ReplicateConfig).

    Read by crescent's store: replica_num, with_soft_pin / soft_pin_action,
    with_hard_pin, preferred_segments (or the single preferred_segment; a
    "host:port" whose host is a name is resolved to the segment name
    "ip:port"). Accepted with Mooncake's meaning but without effect here:
    prefer_alloc_in_same_node (one segment per client already), group_ids,
    data_type, soft_pin_ttl_ms (the master's --default_kv_soft_pin_ttl
    applies), kv_sessions. nof_replica_num / dfs_replica_num /
    preferred_nof_segments ask for NVMe-oF and DFS replicas, which crescent
    does not have: a put with a non-zero count fails with -1011
    (UNAVAILABLE_IN_CURRENT_MODE). Setting an attribute Mooncake does not
    have raises AttributeError."""

    __slots__ = ("_replica_num", "_with_soft_pin", "_with_hard_pin", "_preferred_segments",
                 "_prefer_alloc_in_same_node", "group_ids", "_soft_pin_action",
                 "_soft_pin_ttl_ms", "_nof_replica_num", "_dfs_replica_num",
                 "_preferred_nof_segments", "_data_type", "kv_sessions")

    def __init__(self, replica_num=1, with_soft_pin=False, with_hard_pin=False,
                 preferred_segments=None, prefer_alloc_in_same_node=False, group_ids=None):
        self.replica_num = replica_num
        self.with_soft_pin = with_soft_pin
        self.with_hard_pin = with_hard_pin
        self.preferred_segments = preferred_segments
        self.prefer_alloc_in_same_node = prefer_alloc_in_same_node
        self.group_ids = group_ids
        self._soft_pin_action = SoftPinAction.PRESERVE
        self._soft_pin_ttl_ms = 0
        self._nof_replica_num = 0
        self._dfs_replica_num = 0
        self._preferred_nof_segments = []
        self._data_type = ObjectDataType.UNKNOWN
        self.kv_sessions = None

    def _prop(attr, check):  # noqa: N805 - property factory
        def get(self):
            return getattr(self, attr)

        def set_(self, v):
            setattr(self, attr, check(attr[1:], v))
        return property(get, set_)

    replica_num = _prop("_replica_num", _check_uint)
    with_soft_pin = _prop("_with_soft_pin", _check_bool)
    with_hard_pin = _prop("_with_hard_pin", _check_bool)
    preferred_segments = _prop("_preferred_segments", _check_strs)
    soft_pin_ttl_ms = _prop("_soft_pin_ttl_ms", _check_uint)
    nof_replica_num = _prop("_nof_replica_num", _check_uint)
    dfs_replica_num = _prop("_dfs_replica_num", _check_uint)
    preferred_nof_segments = _prop("_preferred_nof_segments", _check_strs)
    del _prop

    @property
    def prefer_alloc_in_same_node(self):
        return self._prefer_alloc_in_same_node

    @prefer_alloc_in_same_node.setter
    def prefer_alloc_in_same_node(self, v):
        # Mooncake's docs once showed the string "True"; accept str and bool.
        self._prefer_alloc_in_same_node = (v.lower() in ("1", "true", "yes")
                                           if isinstance(v, str) else _check_bool(
                                               "prefer_alloc_in_same_node", v))

    @property
    def soft_pin_action(self):
        return self._soft_pin_action

    @soft_pin_action.setter
    def soft_pin_action(self, v):
        self._soft_pin_action = SoftPinAction(v)

    @property
    def data_type(self):
        return self._data_type

    @data_type.setter
    def data_type(self, v):
        self._data_type = ObjectDataType(v)

    @property
    def preferred_segment(self):
        return self._preferred_segments[0] if self._preferred_segments else ""

    @preferred_segment.setter
    def preferred_segment(self, seg):
        if seg is not None and not isinstance(seg, str):
            raise TypeError("preferred_segment must be str, not %s" % type(seg).__name__)
        self._preferred_segments = [seg] if seg else []

    def _soft_pin(self):
        a = self._soft_pin_action
        if a == SoftPinAction.ENABLE:
            return True
        if a == SoftPinAction.DISABLE:
            return False
        return self._with_soft_pin

    def __str__(self):
        return ("ReplicateConfig(replica_num=%d, with_soft_pin=%s, with_hard_pin=%s, "
                "preferred_segments=%r, soft_pin_action=%s, nof_replica_num=%d, "
                "dfs_replica_num=%d)" % (self._replica_num, self._with_soft_pin,
                                         self._with_hard_pin, self._preferred_segments,
                                         self._soft_pin_action.name, self._nof_replica_num,
                                         self._dfs_replica_num))

    __repr__ = __str__


class ExistOptions:
    """Options of is_exist / batch_is_exist (Mooncake's ExistOptions).

    prefetch_to_memory (bool, default False): Mooncake then starts a
    best-effort promotion of keys held only by its client-side SSD offload
    tier back to DRAM; the answer (1 / 0 / negative) does not change, and
    without SSD offload the request does nothing. crescent accepts it with
    that meaning and nothing to do: its disk tier is crescent-node's, whose
    objects are read from disk directly and promoted to memory by the reads
    themselves (crescent-node --tier_promote). Setting an attribute Mooncake
    does not have raises AttributeError."""

    __slots__ = ("_prefetch_to_memory",)

    def __init__(self, prefetch_to_memory=False):
        self.prefetch_to_memory = prefetch_to_memory

    @property
    def prefetch_to_memory(self):
        return self._prefetch_to_memory

    @prefetch_to_memory.setter
    def prefetch_to_memory(self, v):
        self._prefetch_to_memory = _check_bool("prefetch_to_memory", v)

    def __repr__(self):
        return "ExistOptions(prefetch_to_memory=%s)" % self._prefetch_to_memory


def segment_name_of(name):
    """Mooncake names a client "<local_hostname>:<port>"; crescent's segments
    are "<ip>:<port>". Maps the former to the latter (resolving the host);
    returns name unchanged when it is not host:port or does not resolve."""
    if not isinstance(name, str):
        return name
    host, sep, port = name.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return name
    try:
        socket.inet_aton(host)
        return name
    except OSError:
        pass
    try:
        ip = socket.gethostbyname(host)
    except OSError:
        return name
    return "%s:%s" % (ip, port)


class _Plain:
    __slots__ = ()

    def __repr__(self):
        return "<%s %s>" % (type(self).__name__, " ".join(
            "%s=%r" % (k, getattr(self, k)) for k in self.__slots__))


class Descriptor(_Plain):
    """One allocated buffer: size, buffer_address, transport_endpoint
    (the segment name holding it)."""
    __slots__ = ("size", "buffer_address", "transport_endpoint")

    def __init__(self, size=0, buffer_address=0, transport_endpoint=""):
        self.size = size
        self.buffer_address = buffer_address
        self.transport_endpoint = transport_endpoint


class MemoryDescriptor(_Plain):
    """A memory replica: buffer_descriptor (its first shard) and
    buffer_descriptors (every shard, in value order)."""
    __slots__ = ("buffer_descriptor", "buffer_descriptors")

    def __init__(self, buffer_descriptors=()):
        self.buffer_descriptors = list(buffer_descriptors)
        self.buffer_descriptor = self.buffer_descriptors[0] if self.buffer_descriptors else Descriptor()


class DiskDescriptor(_Plain):
    __slots__ = ("file_path", "object_size")

    def __init__(self, file_path="", object_size=0):
        self.file_path = file_path
        self.object_size = object_size


class ReplicaDescriptor(_Plain):
    """One replica of an object. crescent keeps replicas in memory only."""
    __slots__ = ("status", "replica_id", "_mem")

    def __init__(self, replica_id, mem, status=ReplicaStatus.COMPLETE):
        self.replica_id = replica_id
        self._mem = mem
        self.status = status

    def is_memory_replica(self):
        return True

    def is_disk_replica(self):
        return False

    def is_local_disk_replica(self):
        return False

    def get_memory_descriptor(self):
        return self._mem

    def get_disk_descriptor(self):
        raise RuntimeError("replica %d is a memory replica (crescent keeps no disk replicas)"
                           % self.replica_id)

    def __repr__(self):
        return "<ReplicaDescriptor status=%s %r>" % (self.status.name, self._mem)


class QueryTaskResponse(_Plain):
    __slots__ = ("id", "type", "status", "created_at_ms_epoch", "last_updated_at_ms_epoch",
                 "assigned_client", "message")

    def __init__(self, id=(0, 0), type=TaskType.REPLICA_COPY, status=TaskStatus.PENDING,
                 created_at_ms_epoch=0, last_updated_at_ms_epoch=0, assigned_client="",
                 message=""):
        self.id = id
        self.type = type
        self.status = status
        self.created_at_ms_epoch = created_at_ms_epoch
        self.last_updated_at_ms_epoch = last_updated_at_ms_epoch
        self.assigned_client = assigned_client
        self.message = message


# ---- unified parallel tensor IO ------------------------------------------------

AXIS_DP, AXIS_TP, AXIS_EP, AXIS_PP = "dp", "tp", "ep", "pp"
READ_MODE_AS_STORED, READ_MODE_SHARD, READ_MODE_FULL = "as_stored", "shard", "full"
_KINDS = (AXIS_DP, AXIS_TP, AXIS_EP, AXIS_PP)
_MODES = (READ_MODE_AS_STORED, READ_MODE_SHARD, READ_MODE_FULL)


class ParallelAxis:
    """One axis of a shard identity: kind ("tp", "dp", "ep", "pp"), rank,
    size, split_dim (for layout-sharding axes such as TP), expert_id (EP),
    stage_id (PP)."""
    __slots__ = ("_kind", "_rank", "_size", "split_dim", "expert_id", "stage_id")

    def __init__(self, kind="tp", rank=0, size=1, split_dim=None, expert_id=None, stage_id=None):
        self.kind = kind
        self.rank = rank
        self.size = size
        self.split_dim = split_dim
        self.expert_id = expert_id
        self.stage_id = stage_id

    @property
    def kind(self):
        return self._kind

    @kind.setter
    def kind(self, v):
        if not isinstance(v, str) or v.lower() not in _KINDS:
            raise ValueError("ParallelAxis.kind must be one of %s, not %r" % (_KINDS, v))
        self._kind = v.lower()

    @property
    def rank(self):
        return self._rank

    @rank.setter
    def rank(self, v):
        self._rank = _check_uint("rank", v)

    @property
    def size(self):
        return self._size

    @size.setter
    def size(self, v):
        v = _check_uint("size", v)
        if v < 1:
            raise ValueError("size must be >= 1")
        self._size = v

    def __repr__(self):
        return "ParallelAxis(kind=%r, rank=%d, size=%d, split_dim=%r)" % (
            self._kind, self._rank, self._size, self.split_dim)


class TensorParallelism:
    """Ordered list of ParallelAxis identifying a stored or requested shard."""
    __slots__ = ("_axes",)

    def __init__(self, axes=None):
        self.axes = axes or []

    @property
    def axes(self):
        return self._axes

    @axes.setter
    def axes(self, v):
        v = list(v)
        for a in v:
            if not isinstance(a, ParallelAxis):
                raise TypeError("axes must hold ParallelAxis, not %s" % type(a).__name__)
        kinds = [a.kind for a in v]
        if len(set(kinds)) != len(kinds):
            raise ValueError("an axis kind appears twice in %r" % kinds)
        self._axes = v

    def __repr__(self):
        return "TensorParallelism(axes=%r)" % (self._axes,)


class ReadTarget:
    """What a read materialises: mode "as_stored", "shard" (the shard given
    by parallelism) or "full" (the reconstructed tensor)."""
    __slots__ = ("_mode", "_parallelism")

    def __init__(self, mode=READ_MODE_AS_STORED, parallelism=None):
        self.mode = mode
        self.parallelism = parallelism

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, v):
        if not isinstance(v, str) or v.lower() not in _MODES:
            raise ValueError("ReadTarget.mode must be one of %s, not %r" % (_MODES, v))
        self._mode = v.lower()

    @property
    def parallelism(self):
        return self._parallelism

    @parallelism.setter
    def parallelism(self, v):
        if v is not None and not isinstance(v, TensorParallelism):
            raise TypeError("parallelism must be a TensorParallelism or None")
        self._parallelism = v

    def __repr__(self):
        return "ReadTarget(mode=%r, parallelism=%r)" % (self._mode, self._parallelism)
