"""mooncake._fast_copy: copy a list of ndarrays back to back into raw memory.

crescent's own version of Mooncake's helper (Mooncake ships it as a small C
extension). ``ctypes.memmove`` releases the GIL while it copies, so several
Python threads can copy at once; ``nthreads`` is accepted for the signature
and the copy runs in the calling thread.

Like Mooncake's, ``dest_ptr`` is a raw address the caller owns (a registered
buffer, a BufferPool lease): it must hold the sum of the arrays' bytes.
"""
import ctypes

__all__ = ["concat_arrays_into"]


def concat_arrays_into(arrays, dest_ptr, dest_size=None, start=0, count=-1, nthreads=1):
    """Copy ``arrays[start:start+count]`` into ``dest_ptr`` (``dest_size``
    bytes there); returns the bytes copied.

    Mooncake's current signature: ``dest_size`` is the destination's
    capacity (ValueError "destination buffer too small" when the arrays need
    more; None skips the check). ``start`` is clamped to the list, a
    negative or too large ``count`` means "to the end", 0 copies nothing.
    Raises TypeError for a non-list or a non-ndarray item and ValueError for
    an array that is not C-contiguous (nothing is copied then).
    """
    import numpy as np

    if not isinstance(arrays, list):
        raise TypeError("concat_arrays_into: arrays must be a list, not %s"
                        % type(arrays).__name__)
    for name, val in (("dest_ptr", dest_ptr), ("start", start), ("count", count),
                      ("nthreads", nthreads)) + ((("dest_size", dest_size),)
                                                 if dest_size is not None else ()):
        if isinstance(val, bool) or not isinstance(val, int):
            raise TypeError("concat_arrays_into: %s must be an int" % name)
    if dest_ptr < 0 or dest_ptr >= 1 << 64:
        raise OverflowError("concat_arrays_into: dest_ptr out of range")
    n = len(arrays)
    start = min(max(start, 0), n)
    if count < 0 or start + count > n:
        count = n - start
    picked = arrays[start:start + count]
    for i, arr in enumerate(picked):
        if not isinstance(arr, np.ndarray):
            raise TypeError("arrays[%d] is not an ndarray" % (start + i))
        if not arr.flags.c_contiguous:
            raise ValueError("arrays[%d] is not C-contiguous" % (start + i))
    total = sum(int(a.nbytes) for a in picked)
    if dest_size is not None and total > dest_size:
        raise ValueError("concat_arrays_into: destination buffer too small (%d bytes for %d)"
                         % (dest_size, total))
    if total and dest_ptr == 0:
        raise ValueError("concat_arrays_into: dest_ptr is NULL")
    off = 0
    for arr in picked:
        nb = int(arr.nbytes)
        if nb:
            ctypes.memmove(dest_ptr + off, arr.ctypes.data, nb)
            off += nb
    return off
