"""dtype names <-> torch dtypes, strides, child views, tensor allocation."""
import torch

dtype_map = {
    "bool": torch.bool, "float16": torch.float16, "float32": torch.float32,
    "float64": torch.float64, "half": torch.half, "float": torch.float,
    "double": torch.double, "bfloat16": torch.bfloat16, "int8": torch.int8,
    "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
    "long": torch.long, "int": torch.int, "short": torch.short,
    "complex64": torch.complex64, "complex128": torch.complex128,
}
for _n in ("uint16", "uint32", "uint64"):  # newer torch only
    if isinstance(getattr(torch, _n, None), torch.dtype):
        dtype_map[_n] = getattr(torch, _n)
if hasattr(torch, "complex"):
    dtype_map["complex"] = torch.complex


def shape_to_stride(shape):
    """Row-major strides (in elements) of ``shape``."""
    strides, prod = [], 1
    for d in reversed(list(shape)):
        strides.append(prod)
        prod *= int(d)
    return strides[::-1]


def get_child_tensor(tensor, shape, offset):
    """A contiguous ``shape`` view of ``tensor``'s storage at element ``offset``."""
    n = 1
    for d in shape:
        n *= int(d)
    st = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else tensor.storage()
    if offset < 0 or offset + n > st.nbytes() // tensor.element_size():
        raise ValueError("child tensor %s at offset %d exceeds the storage" % (list(shape), offset))
    return tensor.as_strided(list(shape), shape_to_stride(shape), storage_offset=offset)


def get_dtype(dtype):
    try:
        return dtype_map[dtype]
    except KeyError:
        raise KeyError("unknown dtype name %r" % (dtype,)) from None


def get_dtype_str(dtype):
    for k, v in dtype_map.items():
        if v == dtype:
            return k
    return None


def create_tensor(shape, dtype, gpu_id=0, device=None):
    """An empty tensor. Mooncake allocates on ``cuda:<gpu_id>``; crescent has no
    GPUs, so the default is the CPU (``device="cuda:0"`` raises torch's error)."""
    return torch.empty(list(shape), dtype=get_dtype(dtype), device=device or "cpu")
