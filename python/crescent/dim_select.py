"""Lazy selections along one tensor dimension (Mooncake's
``get_tensor_dim_selection_into`` and ``mooncake.remote_tensor_batch``).

A selection is ``(op, value)`` (or a mapping with "op" and "value", or an
object with .op and .value):

  ("select_idxs", [i, ...])         indices (negative count from the end) or a
                                    bool mask as long as the current extent
  ("slice", (start, end, step))     Python slice semantics
  ("repeat", (times, interleave))   interleave: a a b b; else a b a b
  ("cat", ((sel, ...), (sel, ...))) each group applied to the current rows,
                                    results concatenated

Selections apply in order; ``source_rows`` returns, for every output row,
the source row it copies. Bad selections raise ValueError / IndexError.
"""
import math

__all__ = ["DTYPE_BYTE_SIZES", "MAX_OUTPUT_BYTES", "op_value", "source_rows", "selected_length",
           "dtype_name", "dtype_size", "nbytes"]

MAX_OUTPUT_BYTES = 64 << 30  # one materialized selection
MAX_ROWS = 1 << 26           # output rows one selection may produce

DTYPE_BYTE_SIZES = {
    "bool": 1, "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4,
    "int64": 8, "uint64": 8, "float64": 8,
}


def dtype_name(dtype):
    """"float32" for torch.float32, "torch.float32" or "float32"."""
    return str(dtype).lower().split("torch.", 1)[-1]


def dtype_size(dtype):
    n = DTYPE_BYTE_SIZES.get(dtype_name(dtype))
    if n is None:
        raise ValueError("unsupported dtype %r" % (dtype,))
    return n


def nbytes(shape, dtype):
    if any(int(d) < 0 for d in shape):
        raise ValueError("negative dimension in %r" % (shape,))
    return math.prod(int(d) for d in shape) * dtype_size(dtype)


def _plain_list(index):
    if hasattr(index, "detach"):  # a torch tensor
        index = index.detach().cpu()
    if hasattr(index, "tolist"):
        index = index.tolist()
    if isinstance(index, (bool, int)):
        return [index]
    return list(index)


def op_value(sel):
    if isinstance(sel, dict):
        return str(sel["op"]), sel["value"]
    if hasattr(sel, "op") and hasattr(sel, "value"):
        return sel.op, sel.value
    op, value = sel
    return op, value


def _apply(rows, sel):
    op, value = op_value(sel)
    if op == "select_idxs":
        idx = _plain_list(value)
        if idx and all(isinstance(i, bool) for i in idx):
            if len(idx) != len(rows):
                raise IndexError("bool mask of %d for an extent of %d" % (len(idx), len(rows)))
            return [r for r, keep in zip(rows, idx) if keep]
        out = []
        for i in idx:
            if isinstance(i, bool) or not isinstance(i, int):
                raise ValueError("indices must be ints or a bool mask")
            if not -len(rows) <= i < len(rows):
                raise IndexError("index %d out of range for an extent of %d" % (i, len(rows)))
            out.append(rows[i])
        return out
    if op == "slice":
        start, end, step = value
        if step == 0:
            raise ValueError("slice step must not be zero")
        return rows[slice(start, end, step)]
    if op == "repeat":
        times, interleave = value
        if isinstance(times, bool) or not isinstance(times, int) or times < 0:
            raise ValueError("repeat times must be an int >= 0")
        if len(rows) * times > MAX_ROWS:
            raise ValueError("selection too large")
        if interleave:
            return [r for r in rows for _ in range(times)]
        return list(rows) * times
    if op == "cat":
        out = []
        for group in value:
            part = rows
            for s in group:
                part = _apply(part, s)
            out.extend(part)
            if len(out) > MAX_ROWS:
                raise ValueError("selection too large")
        return out
    raise ValueError("unsupported selection op %r" % (op,))


def source_rows(extent, selections):
    """Source row of every output row after the selections."""
    if extent > MAX_ROWS:
        raise ValueError("extent too large")
    rows = list(range(extent))
    for sel in selections:
        rows = _apply(rows, sel)
    return rows


def selected_length(extent, selections):
    return len(source_rows(extent, selections))
