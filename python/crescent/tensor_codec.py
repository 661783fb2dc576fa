"""Tensor values as Mooncake lays them out, tensor-parallel splits and the
safetensors file format — crescent's own implementation.

A stored tensor is Mooncake's current 304-byte ``TensorMetadata`` followed
by the raw C-contiguous element bytes (little-endian)::

    TensorObjectHeader (40 bytes)
      uint32 magic 0x4d4f4f4e, uint16 version 1, uint16 header_size 304,
      int32 dtype (Mooncake's TensorDtype numbering, below), int32 ndim,
      uint32 layout_kind (0 FULL, 1 SHARD), uint32 reserved_flags,
      uint64 data_offset (304), uint64 data_bytes
    TensorLayoutMetadata (264 bytes)
      int64 global_shape[8], int64 local_shape[8] (unused dims -1),
      uint32 axis_count, uint32 reserved,
      4 x {int32 kind (DP 0, TP 1, EP 2, PP 3), axis_index, shard_rank,
           shard_count, split_dim, reserved; int64 reserved}

so a tensor written by crescent reads back with Mooncake's ``get_tensor``
and the other way round; the checks on read are Mooncake's
(ValidateTensorMetadata). Mooncake's older 40-byte header (int32 dtype,
int32 ndim, int64 shape[4]) is still read. A tensor with no element (a
dimension of 0) is stored as the header alone (data_bytes 0) and reads back
as an empty tensor of its dtype and shape, as in Mooncake's current binding;
tensors of more than 8 dimensions or an unknown dtype are refused (-600).

safetensors: 8-byte little-endian header length N, N bytes of JSON
(``{"name": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]},
"__metadata__": {...}}``, padded with spaces), then the data.
"""
import json
import os
import struct

MAGIC = 0x4d4f4f4e
VERSION = 1
MAX_DIMS = 8
MAX_AXES = 4
OBJ_HEADER = struct.Struct("<IHHiiIIQQ")              # TensorObjectHeader, 40 bytes
LAYOUT = struct.Struct("<8q8qII" + "6iq" * MAX_AXES)  # TensorLayoutMetadata, 264 bytes
HEADER_SIZE = OBJ_HEADER.size + LAYOUT.size            # 304
LEGACY = struct.Struct("<ii4q")                        # Mooncake's first layout, 40 bytes
LEGACY_DIMS = 4
MIN_HEADER = LEGACY.size
FULL, SHARD = 0, 1
AXIS_KINDS = {"dp": 0, "tp": 1, "ep": 2, "pp": 3}

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


def _dims(shape):
    return list(shape) + [-1] * (MAX_DIMS - len(shape))


def encode(tensor, global_shape=None, axes=()):
    """(header bytes, data buffer, contiguous tensor) of a tensor, or None
    when Mooncake refuses it (not a tensor, unknown dtype, more than 8
    dims). A tensor with no element gives empty data. A shard names the full tensor's global_shape and its axes:
    (kind "tp"/"dp"/"ep"/"pp", shard_rank, shard_count, split_dim or -1)."""
    t = torch()
    if not isinstance(tensor, t.Tensor):
        return None
    code = dtype_code(tensor.dtype)
    if code is None or tensor.dim() > MAX_DIMS:
        return None
    c = tensor.detach()
    if c.device.type != "cpu":
        c = c.to("cpu")
    c = c.contiguous()
    local = list(c.shape)
    gshape = list(global_shape) if global_shape is not None else local
    if len(gshape) != len(local) or len(axes) > MAX_AXES:
        return None
    nbytes = c.numel() * c.element_size()
    hdr = OBJ_HEADER.pack(MAGIC, VERSION, HEADER_SIZE, code, c.dim(), SHARD if axes else FULL, 0,
                          HEADER_SIZE, nbytes)
    flat = []
    for i in range(MAX_AXES):
        if i < len(axes):
            kind, rank, count, split_dim = axes[i]
            flat += [AXIS_KINDS[kind], i, rank, count, split_dim, 0, 0]
        else:
            flat += [0] * 7
    hdr += LAYOUT.pack(*_dims(gshape), *_dims(local), len(axes), 0, *flat)
    if nbytes == 0:
        return hdr, memoryview(b""), c
    raw = c.reshape(-1).view(t.uint8)
    return hdr, memoryview(raw.numpy()), c


def _dtype_of(code):
    name = _CODES.get(code)
    return getattr(torch(), name, None) if name is not None else None


def _count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def parse(buf):
    """(torch dtype, local shape, data offset) of a whole stored tensor (the
    header and exactly its data), or None when buf is not one. Checks what
    Mooncake's ValidateTensorMetadata checks, and that the data length fits
    the shape."""
    n = len(buf)
    if n >= HEADER_SIZE and OBJ_HEADER.unpack_from(buf)[0] == MAGIC:
        magic, ver, hsize, code, ndim, kind, _flags, off, nbytes = OBJ_HEADER.unpack_from(buf)
        lay = LAYOUT.unpack_from(buf, OBJ_HEADER.size)
        gshape, local, n_axes = lay[0:8], lay[8:16], lay[16]
        if ver != VERSION or hsize != HEADER_SIZE or not 0 <= ndim <= MAX_DIMS or \
                n_axes > MAX_AXES or kind > SHARD or not HEADER_SIZE <= off <= n or \
                nbytes != n - off:
            return None
        # a dimension of 0 is a tensor with no element (Mooncake's current
        # binding stores and reads those); a negative one is malformed
        if any(gshape[i] < 0 or local[i] < 0 for i in range(ndim)) or \
                any(gshape[i] != -1 or local[i] != -1 for i in range(ndim, MAX_DIMS)):
            return None
        for i in range(n_axes):
            k, _idx, rank, count, split, _r0, _r1 = lay[18 + 7 * i:25 + 7 * i]
            if not 0 <= k <= 4 or count <= 0 or not 0 <= rank < count or not -1 <= split < ndim:
                return None
        shape = list(local[:ndim])
    elif n >= LEGACY.size:  # Mooncake's first layout
        code, ndim, *dims = LEGACY.unpack_from(buf)
        if not 0 <= ndim <= LEGACY_DIMS or any(d < 0 for d in dims[:ndim]):
            return None
        shape, off = list(dims[:ndim]), LEGACY.size
    else:
        return None
    dt = _dtype_of(code)
    if dt is None:
        return None
    esize = torch().empty(0, dtype=dt).element_size()
    if (n - off) != _count(shape) * esize:
        return None
    return dt, shape, off


def layout_of(buf):
    """(global shape, [(kind, rank, count, split_dim)]) of a stored tensor in
    Mooncake's current layout, or None (another layout, or not a tensor)."""
    if parse(buf) is None or len(buf) < HEADER_SIZE or OBJ_HEADER.unpack_from(buf)[0] != MAGIC:
        return None
    ndim = OBJ_HEADER.unpack_from(buf)[4]
    lay = LAYOUT.unpack_from(buf, OBJ_HEADER.size)
    kinds = {v: k for k, v in AXIS_KINDS.items()}
    axes = [(kinds.get(lay[18 + 7 * i], "reserved"),) + tuple(lay[20 + 7 * i:23 + 7 * i])
            for i in range(lay[16])]
    return list(lay[:ndim]), axes


def decode(buf, copy=True):
    """The tensor in buf (header + data), or None if buf is not one. With
    copy=False the tensor shares buf's memory (buf must be writable)."""
    t = torch()
    mv = memoryview(buf).cast("B") if not isinstance(buf, memoryview) or buf.format != "B" else buf
    h = parse(mv)
    if h is None:
        return None
    dt, shape, off = h
    if _count(shape) == 0:
        return t.empty(shape, dtype=dt)  # no element: nothing to share or copy
    data = mv[off:]
    if copy or data.readonly:
        data = bytearray(data)
    flat = t.frombuffer(data, dtype=t.uint8)
    return flat.view(dt).reshape(shape)


def decode_at(ptr, length):
    """decode() of `length` bytes at address ptr, sharing that memory."""
    import ctypes
    if length < MIN_HEADER:
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
    """Shard `rank` of `size` of a full tensor along split_dim, as
    tensor.chunk() cuts it (Mooncake's rule), or None if out of range."""
    if not (0 <= rank < size) or not (0 <= split_dim < tensor.dim()):
        return None
    chunks = tensor.chunk(size, split_dim)
    return chunks[rank].contiguous() if rank < len(chunks) else None


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
    if filesystem is not None and filesystem.lower().replace("-", "_") not in (
            "", "auto", "file", "local", "localfs", "posix"):
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


def _st_header(f, path):
    """(header dict, header length, file size) of an open safetensors file."""
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
    return header, n, size


def safetensors_names(path):
    """Names of the tensors in a safetensors file, in header order."""
    with open(path, "rb") as f:
        header, _, _ = _st_header(f, path)
    return [k for k in header if k != "__metadata__"]


def safetensors_read(path, name=None):
    """The tensor `name` of a safetensors file (the only / first tensor when
    name is None). Raises OSError / ValueError on a missing or bad file."""
    t = torch()
    with open(path, "rb") as f:
        header, n, size = _st_header(f, path)
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
