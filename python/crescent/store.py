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
"""
import atexit
import struct
import weakref

from crescent import _crescent

__all__ = ["DistributedStore", "ReplicateConfig", "BufferHandle"]

BufferHandle = _crescent.BufferHandle


class ReplicateConfig:
    """How a put places its replicas (Mooncake's ReplicateConfig).

    Read by the store: replica_num, with_soft_pin, with_hard_pin,
    preferred_segments (or the single preferred_segment). Accepted and
    ignored: prefer_alloc_in_same_node, group_ids, and any other attribute
    newer Mooncake versions add (no __slots__, so setting one never fails)."""

    def __init__(self, replica_num=1, with_soft_pin=False, with_hard_pin=False,
                 preferred_segments=None, prefer_alloc_in_same_node=False, group_ids=None):
        self.replica_num = replica_num
        self.with_soft_pin = with_soft_pin
        self.with_hard_pin = with_hard_pin
        self.preferred_segments = list(preferred_segments or [])
        self.prefer_alloc_in_same_node = prefer_alloc_in_same_node
        self.group_ids = group_ids

    # Mooncake's single-segment spelling.
    @property
    def preferred_segment(self):
        return self.preferred_segments[0] if self.preferred_segments else ""

    @preferred_segment.setter
    def preferred_segment(self, seg):
        self.preferred_segments = [seg] if seg else []

    def __repr__(self):
        return ("ReplicateConfig(replica_num=%r, with_soft_pin=%r, with_hard_pin=%r, "
                "preferred_segments=%r)" % (self.replica_num, self.with_soft_pin,
                                            self.with_hard_pin, self.preferred_segments))


# Tensor objects: a 48-byte header then the raw C-contiguous data.
#   magic "CRTN", u32 version=1, i32 dtype, i32 ndim, i64 shape[4]
_TENSOR_HDR = struct.Struct("<4sIii4q")
_DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32",
           "int64", "bool"]


def _torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise RuntimeError("put_tensor/get_tensor need PyTorch (import torch failed)") from e
    return torch


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


class DistributedStore(_crescent.DistributedStore):
    """Mooncake-compatible store client (see the module doc)."""

    def __init__(self):
        super().__init__()
        _live.add(self)

    def batch_get_buffer(self, keys):
        """get_buffer() of each key: BufferHandle, or None for a missing key."""
        if isinstance(keys, (str, bytes)):
            raise TypeError("keys must be a list of str")
        return [self.get_buffer(k) for k in keys]

    def put_tensor(self, key, tensor, config=None):
        """Stores a CPU copy of a PyTorch tensor (header + data). Returns 0 or negative."""
        torch = _torch()
        if not isinstance(tensor, torch.Tensor):
            raise TypeError("tensor must be a torch.Tensor")
        t = tensor.detach().to("cpu").contiguous()
        name = str(t.dtype).replace("torch.", "")
        if name not in _DTYPES or t.dim() > 4:
            return -600
        shape = list(t.shape) + [-1] * (4 - t.dim())
        hdr = _TENSOR_HDR.pack(b"CRTN", 1, _DTYPES.index(name), t.dim(), *shape)
        flat = t.reshape(-1)  # 1-D first: view(dtype) refuses 0-d tensors
        raw = flat.view(torch.uint8) if t.dtype != torch.bool else flat.to(torch.uint8)
        data = raw.numpy().tobytes() if t.numel() else b""
        return self.put_parts(key, hdr, data, config=config)

    def pub_tensor(self, key, tensor, config=None):
        return self.put_tensor(key, tensor, config)

    def get_tensor(self, key):
        """The tensor stored by put_tensor(), or None when missing."""
        torch = _torch()
        buf = self.get(key)
        if len(buf) < _TENSOR_HDR.size:
            return None
        magic, ver, dt, ndim, *shape = _TENSOR_HDR.unpack_from(buf)
        if magic != b"CRTN" or ver != 1 or not 0 <= dt < len(_DTYPES) or not 0 <= ndim <= 4:
            return None
        import numpy as np
        dtype = getattr(torch, _DTYPES[dt])
        raw = torch.from_numpy(np.frombuffer(buf, dtype=np.uint8, offset=_TENSOR_HDR.size).copy())
        if dtype == torch.bool:
            return raw.to(torch.bool).reshape(shape[:ndim])
        return raw.view(dtype).reshape(shape[:ndim])

    def batch_put_tensor(self, keys, tensors_list):
        return [self.put_tensor(k, t) for k, t in zip(keys, tensors_list)]

    def batch_get_tensor(self, keys):
        return [self.get_tensor(k) for k in keys]
