"""``mooncake.remote_tensor_batch``: metadata-only batches of tensors that
live in the store, selected lazily along one dimension and materialized on
demand through ``get_tensor_dim_selection_into``.

crescent's own implementation of Mooncake's module (same names and
behaviour). A field is a fixed-shape tensor stored raw at ``data_offset`` of
an object (``TensorFieldRef``); a batch records index / slice / repeat / cat
selections on its batch dimension without moving data; the materializer
registers each destination buffer, reads only the selected rows into it and
unregisters it. Selection semantics: crescent/dim_select.py.
"""
import ctypes
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional, Tuple

from crescent import dim_select as _ds

__all__ = ["MAX_TENSOR_DIM_SELECTION_OUTPUT_BYTES", "DTYPE_BYTE_SIZES", "TensorFieldRef",
           "TensorDimSelection", "TensorReadRequest", "RemoteTensorBatch",
           "RemoteTensorBatchMaterializer", "WritableBufferRegion", "BytearrayBufferAllocator",
           "normalize_dtype_name", "dtype_byte_size", "tensor_nbytes", "normalize_indices",
           "selection_output_shape", "writable_buffer_region"]

MAX_TENSOR_DIM_SELECTION_OUTPUT_BYTES = _ds.MAX_OUTPUT_BYTES
DTYPE_BYTE_SIZES = dict(_ds.DTYPE_BYTE_SIZES)


def normalize_dtype_name(dtype):
    return _ds.dtype_name(dtype)


def dtype_byte_size(dtype):
    if hasattr(dtype, "itemsize") and not isinstance(dtype, str):  # a torch.dtype
        return int(dtype.itemsize)
    return _ds.dtype_size(dtype)


def tensor_nbytes(shape, dtype):
    if any(int(d) < 0 for d in shape):
        raise ValueError("shape dimensions must be non-negative")
    n = 1
    for d in shape:
        n *= int(d)
    return n * dtype_byte_size(dtype)


def normalize_indices(index):
    return _ds._plain_list(index)


def selection_output_shape(shape, selections, dim=0):
    shape = tuple(int(x) for x in shape)
    if not shape:
        raise ValueError("shape must have at least one dimension")
    d = dim + len(shape) if dim < 0 else dim
    if not 0 <= d < len(shape):
        raise ValueError("selection dim out of range")
    n = shape[d]
    for sel in selections:
        n = _length(n, sel)
    return shape[:d] + (n,) + shape[d + 1:]


def _length(n, sel):
    """Extent after one selection, from lengths only (no row lists)."""
    op, value = _ds.op_value(sel)
    if op == "select_idxs":
        idx = normalize_indices(value)
        if idx and all(isinstance(i, bool) for i in idx):
            if len(idx) != n:
                raise IndexError("bool mask length must match current dimension")
            return sum(idx)
        return len(idx)
    if op == "slice":
        return len(range(n)[slice(*value)])
    if op == "repeat":
        times = value[0]
        if times < 0:
            raise ValueError("repeat_times must be non-negative")
        return n * times
    if op == "cat":
        total = 0
        for group in value:
            m = n
            for s in group:
                m = _length(m, s)
            total += m
        return total
    raise ValueError("Unsupported tensor dimension selection op: %s" % op)


@dataclass(frozen=True)
class TensorFieldRef:
    """One fixed-shape tensor stored raw at data_offset of object key."""
    key: str
    shape: Tuple[int, ...]
    dtype: Any
    data_offset: int = 0

    @classmethod
    def from_tensor(cls, key, tensor, data_offset=0):
        return cls(key, tuple(int(d) for d in tensor.shape), normalize_dtype_name(tensor.dtype),
                   data_offset)

    def nbytes(self):
        return tensor_nbytes(self.shape, self.dtype)


@dataclass(frozen=True)
class TensorDimSelection:
    """One lazy selection on a tensor dimension."""
    op: str
    value: Any

    @staticmethod
    def select_idxs(index):
        return TensorDimSelection("select_idxs", normalize_indices(index))

    @staticmethod
    def slice(start=None, end=None, step=None):
        return TensorDimSelection("slice", (start, end, step))

    @staticmethod
    def repeat(times=2, interleave=True):
        return TensorDimSelection("repeat", (times, interleave))

    @staticmethod
    def cat(selection_groups):
        return TensorDimSelection("cat", tuple(tuple(g) for g in selection_groups))

    def as_tuple(self):
        if self.op == "cat":
            return self.op, tuple(tuple(s.as_tuple() for s in g) for g in self.value)
        return self.op, self.value


@dataclass(frozen=True)
class TensorReadRequest:
    name: str
    ref: TensorFieldRef
    dim: int = 0
    selections: Tuple[TensorDimSelection, ...] = ()
    device: Optional[Any] = None

    def output_shape(self):
        return selection_output_shape(self.ref.shape, self.selections, self.dim)

    def output_nbytes(self):
        return tensor_nbytes(self.output_shape(), self.ref.dtype)

    def store_selections(self):
        return [s.as_tuple() for s in self.selections]


@dataclass(frozen=True)
class RemoteTensorBatch:
    """Fields (name -> TensorFieldRef) sharing a batch dimension, with the
    selections recorded on it so far. Every method returns a new batch."""
    fields: Mapping[str, TensorFieldRef]
    batch_size: int
    dim: int = 0
    selections: Tuple[TensorDimSelection, ...] = ()
    device: Optional[Any] = None

    def __len__(self):
        return self.batch_size

    def keys(self):
        return list(self.fields)

    def clone(self):
        return replace(self, fields=dict(self.fields), selections=tuple(self.selections))

    def to(self, device):
        return replace(self, device=device)

    def select_fields(self, fields):
        if fields is None:
            return self.clone()
        return replace(self, fields={f: self.fields[f] for f in fields})

    def _add(self, sel, size):
        return replace(self, batch_size=size, selections=self.selections + (sel,))

    def select_indices(self, index):
        sel = TensorDimSelection.select_idxs(index)
        return self._add(sel, _length(self.batch_size, sel))

    def slice(self, start, end, step):
        sel = TensorDimSelection.slice(start, end, step)
        return self._add(sel, _length(self.batch_size, sel))

    def repeat(self, repeat_times=2, interleave=True):
        if repeat_times < 0:
            raise ValueError("repeat_times must be non-negative")
        return self._add(TensorDimSelection.repeat(repeat_times, interleave),
                         self.batch_size * repeat_times)

    def union(self, rhs):
        if (self.batch_size, self.selections, self.dim) != (rhs.batch_size, rhs.selections,
                                                            rhs.dim):
            raise ValueError("RemoteTensorBatch union requires matching batch metadata")
        dup = sorted(set(self.fields) & set(rhs.fields))
        if dup:
            raise ValueError("RemoteTensorBatch union has duplicate fields: %s" % dup)
        merged = dict(self.fields)
        merged.update(rhs.fields)
        return replace(self, fields=merged)

    @staticmethod
    def cat(batches):
        if not batches:
            raise ValueError("RemoteTensorBatch.cat requires non-empty batches")
        first = batches[0]
        for b in batches[1:]:
            if (b.fields, b.dim, b.device) != (first.fields, first.dim, first.device):
                raise ValueError("RemoteTensorBatch.cat requires matching fields, dim, and "
                                 "device")
        return replace(first, batch_size=sum(b.batch_size for b in batches),
                       selections=(TensorDimSelection.cat([b.selections for b in batches]),))

    def read_requests(self, fields=None):
        names = self.keys() if fields is None else list(fields)
        return [TensorReadRequest(n, self.fields[n], self.dim, self.selections, self.device)
                for n in names]


@dataclass
class WritableBufferRegion:
    """A writable Python buffer pinned for its address (ptr, size)."""
    buffer: Any
    view: memoryview
    c_buffer: Any
    ptr: int
    size: int
    closed: bool = field(default=False)

    def close(self):
        if not self.closed:
            self.c_buffer = None
            self.view.release()
            self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def writable_buffer_region(buffer):
    view = memoryview(buffer)
    if view.readonly:
        view.release()
        raise ValueError("buffer must be writable")
    if view.format != "B" or view.ndim != 1:
        flat = view.cast("B")
        view.release()
        view = flat
    try:
        c_buf = (ctypes.c_ubyte * view.nbytes).from_buffer(view)
    except BaseException:
        view.release()
        raise
    return WritableBufferRegion(buffer, view, c_buf, ctypes.addressof(c_buf), view.nbytes)


class BytearrayBufferAllocator:
    """Destination buffers as bytearrays."""

    def allocate(self, size):
        return writable_buffer_region(bytearray(size))


def _checked_nbytes(request):
    n = request.output_nbytes()
    if n > MAX_TENSOR_DIM_SELECTION_OUTPUT_BYTES:
        raise ValueError("selected tensor output exceeds %d bytes: %d"
                         % (MAX_TENSOR_DIM_SELECTION_OUTPUT_BYTES, n))
    return n


class RemoteTensorBatchMaterializer:
    """Reads RemoteTensorBatch requests into buffers through the store."""

    def __init__(self, store, buffer_allocator=None):
        self.store = store
        self.buffer_allocator = buffer_allocator or BytearrayBufferAllocator()

    def materialize_buffers(self, remote_batch, fields=None):
        """{field: (buffer, output shape, dtype)} for the selected fields."""
        requests = remote_batch.read_requests(fields)
        regions = {}
        try:
            for r in requests:
                regions[r.name] = self.buffer_allocator.allocate(_checked_nbytes(r))
            for r in requests:
                self.materialize_request_into_region(r, regions[r.name])
            return {r.name: (regions[r.name].buffer, r.output_shape(), r.ref.dtype)
                    for r in requests}
        finally:
            for region in regions.values():
                region.close()

    def materialize_requests_into(self, requests, buffers):
        return {r.name: self.materialize_request_into(r, buffers[r.name]) for r in requests}

    def materialize_request_into(self, request, buffer):
        with writable_buffer_region(buffer) as region:
            return self.materialize_request_into_region(request, region)

    def materialize_request_into_region(self, request, region):
        need = _checked_nbytes(request)
        if region.size < need:
            raise ValueError("buffer too small: need %d bytes, got %d" % (need, region.size))
        if need == 0:
            return 0
        rc = self.store.register_buffer(region.ptr, region.size)
        if rc != 0:
            raise RuntimeError("register_buffer failed with retcode %d" % rc)
        try:
            ret = self.store.get_tensor_dim_selection_into(
                request.ref.key, region.ptr, need, list(request.ref.shape),
                normalize_dtype_name(request.ref.dtype), request.dim,
                request.store_selections(), request.ref.data_offset)
            if ret < 0:
                raise RuntimeError("get_tensor_dim_selection_into failed with retcode %d" % ret)
            return int(ret)
        finally:
            rc = self.store.unregister_buffer(region.ptr)
            if rc != 0:
                raise RuntimeError("unregister_buffer failed with retcode %d" % rc)
