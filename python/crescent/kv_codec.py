"""Mooncake's KV codec (``mooncake._kv_codec``): FP16/BF16 tensors stored as
scaled FP8 (E4M3FN) records — crescent's own implementation (numpy).

Record, version 1, little-endian::

    0  magic "MCKVFP8\\0"      8 bytes
    8  version (1)             u16
    10 dtype (1 FP16, 2 BF16)  u8
    11 rank (1..8)             u8
    12 group_size              u32
    16 numel                   u64
    24 crc32                   u32  (CRC-32/IEEE of the whole record with
                                     these 4 bytes taken as zero)
    28 reserved (0)            u32
    32 shape[rank]             u64 each
       scales[ceil(numel / group_size)]   f32 each
       payload[numel]          E4M3FN codes

Each group of group_size consecutive (flattened) elements has one scale,
max|x| / 448 (1.0 for an all-zero group); an element is x / scale (FP32)
rounded to the nearest E4M3FN value, ties to even, saturating at 448.
Decoding multiplies back in double precision, clamps to the dtype's largest
finite value and rounds to FP16/BF16 (nearest, ties to even).

Errors as Mooncake's binding raises them: ValueError for bad arguments
(dtype, shape, sizes, non-finite input, a record of another dtype / shape /
group size), InvalidRecord (a ValueError) for a corrupt record; a failed
decode leaves the destination untouched.
"""
import enum
import struct
import zlib

import numpy as np

_MAGIC = b"MCKVFP8\0"
_HEADER = 32
_U32_MAX = 0xFFFFFFFF
_SIZE_MAX = (1 << 64) - 1
# E4M3FN magnitudes of codes 0..126 (127 is NaN): subnormals i/512, then
# (8 + mantissa) * 2^(exponent - 10)
_FP8 = np.array([i / 512.0 if i < 8 else (8 + (i & 7)) * 2.0 ** ((i >> 3) - 10)
                 for i in range(127)], dtype=np.float32)
_FP8_D = _FP8.astype(np.float64)
_BF16_MAX = float(np.frombuffer(struct.pack("<I", 0x7F7F0000), dtype=np.float32)[0])


class InvalidRecord(ValueError):
    """A record that is corrupt (header, checksum, scales, payload, length)."""


class Dtype(enum.Enum):
    """Element type of the tensor a record holds (Mooncake's values)."""
    FLOAT16 = 1
    BFLOAT16 = 2

    def __int__(self):
        return self.value

    def __index__(self):
        return self.value


def _byte_buffer(obj, writable):
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError("expected a buffer, not %s" % type(obj).__name__) from None
    if writable and mv.readonly:
        raise BufferError("destination buffer is read-only")
    if mv.ndim != 1 or mv.itemsize != 1 or not mv.c_contiguous:
        raise ValueError("Expected a contiguous one-dimensional byte buffer")
    return mv.cast("B") if mv.format != "B" else mv


def _dtype(dtype):
    if not isinstance(dtype, Dtype):
        raise TypeError("dtype must be a Dtype, not %s" % type(dtype).__name__)
    return dtype


def _shape(shape):
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError("shape must be a list of int")
    out = []
    for d in shape:
        if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d <= _SIZE_MAX:
            raise TypeError("shape must be a list of int in [0, 2^64)")
        out.append(d)
    return out


def _numel(dtype, shape):
    if dtype not in (Dtype.FLOAT16, Dtype.BFLOAT16):
        raise ValueError("Only FP16/BF16 tensors are supported")
    if not 1 <= len(shape) <= 8:
        raise ValueError("Tensor rank must be between 1 and 8")
    n = 1
    for d in shape:
        if d == 0 or d > _SIZE_MAX // 2 // n:
            raise ValueError("Empty or overflowing tensor shape")
        n *= d
    return n


def _crc(record):
    b = bytearray(record)
    b[24:28] = bytes(4)
    return zlib.crc32(b) & 0xFFFFFFFF


def _to_f32(raw, dtype):
    """FP16/BF16 element bytes -> float32 array (exact)."""
    if dtype is Dtype.FLOAT16:
        return np.frombuffer(raw, dtype="<f2").astype(np.float32)
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return bits.view(np.float32)


def _from_f32(values, dtype):
    """float32 array -> FP16/BF16 element bytes, round to nearest even."""
    if dtype is Dtype.FLOAT16:
        return values.astype("<f2").tobytes()
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    base = bits >> 16
    rem = bits & 0xFFFF
    up = (rem > 0x8000) | ((rem == 0x8000) & ((base & 1) == 1))
    return (base + up.astype(np.uint32)).astype("<u2").tobytes()


def _quantize(x, scale):
    """E4M3FN codes of x / scale (float32 division), ties to even code."""
    mag = np.minimum(np.abs(x / np.float32(scale)), np.float32(448.0)).astype(np.float32)
    code = np.searchsorted(_FP8, mag, side="left")
    m = mag.astype(np.float64)
    lower = np.maximum(code - 1, 0)
    low_d = m - _FP8_D[lower]
    high_d = _FP8_D[np.minimum(code, 126)] - m
    down = (code > 0) & ((low_d < high_d) | ((low_d == high_d) & ((code & 1) == 1)))
    code = np.where(down, code - 1, code).astype(np.uint8)
    return code | np.where(np.signbit(x), np.uint8(0x80), np.uint8(0))


class ScaledFp8Codec:
    """Mooncake's ScaledFp8Codec(group_size=128)."""

    def __init__(self, group_size=128):
        if not isinstance(group_size, int) or isinstance(group_size, bool) or \
                not 0 <= group_size <= _U32_MAX:
            raise TypeError("group_size must be an int in [0, 2^32)")
        if group_size == 0:
            raise ValueError("group_size must be positive")
        self._g = group_size

    @property
    def format_id(self):
        return "fp8-e4m3fn-v1-g%d" % self._g

    def _sizes(self, dtype, shape):
        n = _numel(dtype, shape)
        groups = (n - 1) // self._g + 1
        header = _HEADER + 8 * len(shape)
        if groups > (_SIZE_MAX - header - n) // 4:
            raise ValueError("Encoded tensor size overflows")
        return n, groups, header, header + 4 * groups + n

    def encoded_size(self, dtype, shape):
        """Bytes of the record of a tensor of this dtype and shape."""
        return self._sizes(_dtype(dtype), _shape(shape))[3]

    def encode(self, source, dtype, shape):
        """The record (bytes) of the FP16/BF16 element bytes in source."""
        dtype, shape = _dtype(dtype), _shape(shape)
        src = _byte_buffer(source, False)
        n, groups, header, size = self._sizes(dtype, shape)
        if len(src) != n * 2:
            raise ValueError("Invalid source size")
        x = _to_f32(src, dtype)
        if not np.isfinite(x).all():
            raise ValueError("Non-finite input is unsupported")
        g = self._g
        pad = groups * g - n
        ax = np.abs(np.concatenate([x, np.zeros(pad, np.float32)])).reshape(groups, g)
        mx = ax.max(axis=1)
        scales = np.where(mx == 0, np.float32(1.0), mx / np.float32(448.0)).astype(np.float32)
        per_elem = np.repeat(scales, g)[:n]
        codes = _quantize(x, per_elem)
        out = bytearray(size)
        out[0:8] = _MAGIC
        struct.pack_into("<HBBIQ", out, 8, 1, dtype.value, len(shape), g, n)
        struct.pack_into("<%dQ" % len(shape), out, _HEADER, *shape)
        out[header:header + 4 * groups] = scales.astype("<f4").tobytes()
        out[header + 4 * groups:] = codes.tobytes()
        struct.pack_into("<I", out, 24, _crc(out))
        return bytes(out)

    def decode_into(self, record, destination, dtype, shape):
        """Decodes record into destination (FP16/BF16 element bytes). The
        record must be bytes; nothing is written unless it is valid."""
        dst = _byte_buffer(destination, True)
        if not isinstance(record, bytes):
            raise TypeError("record must be bytes, not %s" % type(record).__name__)
        dtype, shape = _dtype(dtype), _shape(shape)
        n, groups, header, size = self._sizes(dtype, shape)
        if len(dst) < n * 2:
            raise ValueError("Output capacity is too small")
        src = record
        if len(src) < _HEADER or src[0:8] != _MAGIC or \
                struct.unpack_from("<H", src, 8)[0] != 1 or \
                struct.unpack_from("<I", src, 28)[0] != 0:
            raise InvalidRecord("Invalid record header or unsupported version")
        if struct.unpack_from("<I", src, 24)[0] != _crc(src):
            raise InvalidRecord("Record checksum mismatch")
        if src[10] != dtype.value or src[11] != len(shape) or \
                struct.unpack_from("<I", src, 12)[0] != self._g or \
                struct.unpack_from("<Q", src, 16)[0] != n:
            raise ValueError("Record dtype, shape or codec mismatch")
        if len(src) != size:
            raise InvalidRecord("Truncated record or trailing bytes")
        if list(struct.unpack_from("<%dQ" % len(shape), src, _HEADER)) != shape:
            raise ValueError("Record shape mismatch")
        scales = np.frombuffer(src, dtype="<f4", count=groups, offset=header)
        if not (np.isfinite(scales) & (scales > 0)).all():
            raise InvalidRecord("Invalid FP8 scale")
        codes = np.frombuffer(src, dtype=np.uint8, count=n, offset=header + 4 * groups)
        if ((codes & 127) == 127).any():
            raise InvalidRecord("Non-finite FP8 payload")
        limit = 65504.0 if dtype is Dtype.FLOAT16 else _BF16_MAX
        per_elem = np.repeat(scales.astype(np.float64), self._g)[:n]
        vals = np.minimum(_FP8_D[codes & 127] * per_elem, limit).astype(np.float32)
        vals = np.where((codes & 128) != 0, -vals, vals)
        dst[:n * 2] = _from_f32(vals, dtype)
