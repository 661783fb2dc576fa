"""``mooncake._partial_read``: byte ranges for reading part of a row-major
matrix stored raw in an object (crescent's own version of Mooncake's helper).

``plan_matrix_read(shape, itemsize, rows, columns, max_ranges)`` returns a
``MatrixReadPlan(shape, nbytes, ranges)``: the output shape (len(rows),
selected columns), its byte size, and ``(src_offset, dst_offset, length)``
ranges that copy it into a dense output buffer (e.g. with
``get_into_ranges``). Whole rows are read, consecutive rows merged into one
range; a column slice (step 1) is one range per row. ``ranges`` is None
when more than ``max_ranges`` would be needed (read it all instead).
"""
import operator
import sys
from dataclasses import dataclass
from typing import Optional, Tuple

__all__ = ["MatrixReadPlan", "plan_matrix_read"]


@dataclass(frozen=True)
class MatrixReadPlan:
    shape: Tuple[int, int]
    nbytes: int
    ranges: Optional[Tuple[Tuple[int, int, int], ...]]


def _row_runs(rows):
    """(first row, output index, count) of each run of consecutive rows."""
    runs = []
    for out, row in enumerate(map(operator.index, rows)):
        if runs and row == runs[-1][0] + runs[-1][2]:
            first, at, n = runs[-1]
            runs[-1] = (first, at, n + 1)
        else:
            runs.append((row, out, 1))
    return runs


def plan_matrix_read(shape, itemsize, rows, columns, max_ranges):
    if len(shape) != 2:
        raise ValueError("matrix partial reads require a two-dimensional shape")
    n_rows, n_cols = (operator.index(v) for v in shape)
    if n_rows < 0 or n_cols < 0 or itemsize <= 0:
        raise ValueError("matrix shape and itemsize must be non-negative")
    if not isinstance(rows, (range, tuple)) or not isinstance(columns, slice):
        raise TypeError("matrix rows and columns have invalid types")
    if isinstance(rows, range) and rows.step <= 0:
        raise ValueError("rows range step must be positive")
    if len(rows):
        lo, hi = ((rows[0], rows[-1]) if isinstance(rows, range)
                  else (min(rows), max(rows)))
        if lo < 0 or hi >= n_rows:
            raise IndexError("row index out of range")
    start, stop, step = columns.indices(n_cols)
    if step != 1:
        raise ValueError("column slice step must be None or 1")
    width = max(0, stop - start)
    row_bytes, sel_bytes = n_cols * itemsize, width * itemsize
    total = len(rows) * sel_bytes
    if max(n_rows * row_bytes, total) > sys.maxsize:
        raise OverflowError("matrix byte size exceeds platform limits")
    out_shape = (len(rows), width)
    if total == 0:
        return MatrixReadPlan(out_shape, 0, ())
    if sel_bytes == row_bytes:
        runs = _row_runs(rows)
        if len(runs) > max_ranges:
            return MatrixReadPlan(out_shape, total, None)
        return MatrixReadPlan(out_shape, total, tuple(
            (first * row_bytes, at * row_bytes, n * row_bytes) for first, at, n in runs))
    if len(rows) > max_ranges:
        return MatrixReadPlan(out_shape, total, None)
    return MatrixReadPlan(out_shape, total, tuple(
        (operator.index(r) * row_bytes + start * itemsize, out * sel_bytes, sel_bytes)
        for out, r in enumerate(rows)))
