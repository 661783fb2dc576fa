"""Tensor values as Mooncake lays them out, tensor-parallel splits and the
safetensors file format — crescent's own implementation.

A stored tensor is Mooncake's 40-byte ``TensorMetadata`` header followed by
the raw C-contiguous element bytes (little-endian host order)::

    int32 dtype   (Mooncake's TensorDtype numbering, below)
    int32 ndim    (0..4)
    int64 shape[4] (unused dimensions are -1)

so a tensor written by crescent reads back with Mooncake's ``get_tensor``
and the other way round. Tensors with no element or more than 4 dimensions
are refused (-600), as Mooncake does.

safetensors: 8-byte little-endian header length N, N bytes of JSON
(``{"name": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]},
"__metadata__": {...}}``, padded with spaces), then the data.
"""
import json
import os
import struct

HEADER = struct.Struct("<ii4q")
HEADER_SIZE = HEADER.size  # 40
MAX_DIMS = 4

# Mooncake's TensorDtype values -> torch dtype attribute names.
_CODES = {0: "float32", 1: "float64", 2: "int8", 3: "uint8", 4: "int16", 5: "uint16",
          6: "int32", 7: "uint32", 8: "int64", 9: "uint64", 10: "bool", 11: "float16",
          12: "bfloat16", 13: "float8_e4m3fn", 14: "float8_e5m2"}
_ST = {"float32": "F32", "float64": "F64", "int8": "I8", "uint8": "U8", "int16": "I16",
       "uint16": "U16", "int32": "I32", "uint32": "U32", "int64": "I64", "uint64": "U64",
       "bool": "BOOL", "float16": "F16", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3",
       "float8_e5m2": "F8_E5M2"}
_ST_BACK = {v: k for k, v in _ST.items()}
SAFETENSORS_HEADER_MAX = 100 << 20  # the reference implementation's bound

_torch_mod = None


def torch():
    """The torch module (Debian's python3-torch); RuntimeError without it."""
    global _torch_mod
    if _torch_mod is None:
        try:
            import torch as t
        except ImportError as e:  # pragma: no cover - depends on the machine
            raise RuntimeError("tensor calls need PyTorch (import torch failed: %s)" % e) from e
        _torch_mod = t
    return _torch_mod


def _dtype_table():
    t = torch()
    out = {}
    for code, name in _CODES.items():
        dt = getattr(t, name, None)
        if dt is not None:
            out[dt] = code
    return out


_by_dtype = None


def dtype_code(dtype):
    global _by_dtype
    if _by_dtype is None:
        _by_dtype = _dtype_table()
    return _by_dtype.get(dtype)


def is_tensor(obj):
    return type(obj).__name__.find("Tensor") >= 0 and hasattr(obj, "data_ptr") and \
        _torch_mod is not None and isinstance(obj, _torch_mod.Tensor)


def encode(tensor):
    """(header bytes, data buffer) of a tensor, or None when Mooncake refuses
    it (not a tensor, no element, unknown dtype, more than 4 dims)."""
    t = torch()
    if not isinstance(tensor, t.Tensor):
        return None
    code = dtype_code(tensor.dtype)
    if code is None or tensor.dim() > MAX_DIMS or tensor.numel() == 0:
        return None
    c = tensor.detach()
    if c.device.type != "cpu":
        c = c.to("cpu")
    c = c.contiguous()
    shape = list(c.shape) + [-1] * (MAX_DIMS - c.dim())
    hdr = HEADER.pack(code, c.dim(), *shape)
    raw = c.reshape(-1).view(t.uint8)
    return hdr, memoryview(raw.numpy()), c


def parse_header(buf):
    """(torch dtype, shape list, data bytes expected) from the first 40 bytes
    of buf, or None when they are not a valid tensor header."""
    if len(buf) < HEADER_SIZE:
        return None
    code, ndim, *shape = HEADER.unpack_from(buf)
    name = _CODES.get(code)
    if name is None or not 0 <= ndim <= MAX_DIMS:
        return None
    dt = getattr(torch(), name, None)
    if dt is None:
        return None
    shape = shape[:ndim]
    if any(d < 0 for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    esize = torch().empty(0, dtype=dt).element_size()
    return dt, shape, n * esize


def decode(buf, copy=True):
    """The tensor in buf (header + data), or None if buf is not one. With
    copy=False the tensor shares buf's memory (buf must be writable)."""
    t = torch()
    mv = memoryview(buf).cast("B") if not isinstance(buf, memoryview) or buf.format != "B" else buf
    h = parse_header(mv)
    if h is None:
        return None
    dt, shape, nbytes = h
    if nbytes == 0 or len(mv) - HEADER_SIZE != nbytes:
        return None
    data = mv[HEADER_SIZE:HEADER_SIZE + nbytes]
    if copy or data.readonly:
        data = bytearray(data)
    flat = t.frombuffer(data, dtype=t.uint8)
    return flat.view(dt).reshape(shape)


def decode_at(ptr, length):
    """decode() of `length` bytes at address ptr, sharing that memory."""
    import ctypes
    if length <= HEADER_SIZE:
        return None
    arr = (ctypes.c_ubyte * length).from_address(ptr)
    return decode(memoryview(arr).cast("B"), copy=False)


def tp_key(key, rank):
    """Mooncake's key of tensor-parallel shard `rank` of `key`."""
    return "%s_tp_%d" % (key, rank)


def tp_chunks(tensor, tp_size, split_dim):
    """tensor.chunk(tp_size, split_dim) made contiguous, or None when it does
    not give exactly tp_size chunks (Mooncake then fails with -600)."""
    try:
        chunks = tensor.chunk(tp_size, split_dim)
    except (RuntimeError, IndexError, TypeError):
        return None
    if len(chunks) != tp_size:
        return None
    return [c.contiguous() for c in chunks]


def partition(tensor, rank, size, split_dim):
    """Shard `rank` of `size` of a full tensor along split_dim (the first
    dim % size shards are one element longer), or None if out of range."""
    if not (0 <= rank < size) or not (0 <= split_dim < tensor.dim()):
        return None
    return tensor.tensor_split(size, split_dim)[rank].contiguous()


def parallelism_key(key, axes):
    """Key of the shard named by `axes` (ParallelAxis list). A lone TP axis
    keeps Mooncake's legacy name key_tp_<rank>."""
    if len(axes) == 1 and axes[0].kind == "tp":
        return tp_key(key, axes[0].rank)
    return key + "".join("_%s_%d" % (a.kind, a.rank) for a in axes)


# ---- safetensors ---------------------------------------------------------------


def local_path(filename, filesystem=None):
    """Path of a "file://" URI or plain path; ValueError for other schemes
    and filesystems (crescent reads and writes local files only)."""
    if isinstance(filename, os.PathLike):
        filename = os.fspath(filename)
    if not isinstance(filename, str):
        raise TypeError("file name must be str or a path, not %s" % type(filename).__name__)
    if filesystem is not None and not isinstance(filesystem, str):
        raise TypeError("filesystem must be str")
    if filesystem not in (None, "", "file", "local", "posix"):
        raise ValueError("filesystem %r is not supported (only local files)" % filesystem)
    if filename.startswith("file://"):
        from urllib.parse import unquote, urlparse
        return unquote(urlparse(filename).path)
    if "://" in filename:
        raise ValueError("%r: only file:// URIs are supported" % filename)
    return filename


def safetensors_write(path, tensors, metadata=None):
    """Writes {name: tensor} to path (atomically: temp file + rename)."""
    t = torch()
    header, blobs, off = {}, [], 0
    for name, ten in tensors.items():
        c = ten.detach().to("cpu").contiguous()
        st = _ST.get(str(c.dtype).replace("torch.", ""))
        if st is None:
            raise ValueError("dtype %s has no safetensors name" % c.dtype)
        raw = c.reshape(-1).view(t.uint8).numpy().tobytes() if c.numel() else b""
        header[name] = {"dtype": st, "shape": list(c.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def safetensors_read(path, name=None):
    """The tensor `name` of a safetensors file (the only / first tensor when
    name is None). Raises OSError / ValueError on a missing or bad file."""
    t = torch()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) != 8:
            raise ValueError("%s: not a safetensors file (too short)" % path)
        (n,) = struct.unpack("<Q", head)
        if n > SAFETENSORS_HEADER_MAX or 8 + n > size:
            raise ValueError("%s: header length %d out of bounds" % (path, n))
        header = json.loads(f.read(n))
        if not isinstance(header, dict):
            raise ValueError("%s: header is not an object" % path)
        names = [k for k in header if k != "__metadata__"]
        if name is None:
            if not names:
                raise ValueError("%s: holds no tensor" % path)
            name = names[0]
        info = header.get(name)
        if not isinstance(info, dict):
            raise ValueError("%s: no tensor named %r" % (path, name))
        dt_name = _ST_BACK.get(info.get("dtype"))
        shape = info.get("shape")
        offs = info.get("data_offsets")
        if dt_name is None or not isinstance(shape, list) or not isinstance(offs, list) or \
                len(offs) != 2 or not all(isinstance(x, int) and x >= 0 for x in shape + offs):
            raise ValueError("%s: bad entry for %r" % (path, name))
        dt = getattr(t, dt_name)
        count = 1
        for d in shape:
            count *= d
        b, e = offs
        if e < b or 8 + n + e > size or e - b != count * t.empty(0, dtype=dt).element_size():
            raise ValueError("%s: data_offsets of %r do not match its shape" % (path, name))
        f.seek(8 + n + b)
        data = bytearray(f.read(e - b))
    flat = t.frombuffer(data, dtype=t.uint8) if data else t.empty(0, dtype=t.uint8)
    return flat.view(dt).reshape(shape)
