"""Registered host-buffer pool for zero-copy store calls (Mooncake's BufferPool).

    pool = BufferPool(store, min_size_class=4096, alignment=4096)
    lease = pool.acquire(1 << 20)          # lease.ptr is registered with store
    store.get_into(key, lease.ptr, lease.size)
    data = bytes(lease.buffer)
    lease.release()
    pool.close()

Memory comes in regions: one anonymous mmap per buffer of a power-of-two
size class (>= min_size_class), registered with the store once and reused
through the class's free list after release. The pool is bounded: at most
max_regions regions; acquire() then waits for a release (block=True,
optional timeout, GIL released while waiting) or raises RuntimeError
("... exhausted"). Every lease starts at a multiple of `alignment` (a power
of two up to 2 MiB). region_size and max_size_class are accepted for
Mooncake's signature.
"""
import ctypes
import mmap
import sys
import threading

__all__ = ["BufferPool", "RegisteredBufferPool", "BufferLease", "BufferLeaseView",
           "RegisteredBufferLease", "RegisteredBufferLeaseView"]


class BufferLeaseView:
    """A read/write view of part of a lease: ptr, size, buffer."""
    __slots__ = ("ptr", "size", "_arr", "__weakref__")

    def __init__(self, ptr, size):
        self.ptr = ptr
        self.size = size
        self._arr = (ctypes.c_ubyte * size).from_address(ptr) if size else bytearray()

    @property
    def buffer(self):
        return memoryview(self._arr).cast("B")


class BufferLease:
    """One acquired buffer: ptr (registered address), size (bytes asked
    for), buffer (memoryview). release() returns it; a lease whose
    memoryviews are still alive refuses (RuntimeError "exported views")."""

    def __init__(self, pool, ptr, size, cls_size, region):
        self._pool = pool
        self.ptr = ptr
        self.size = size
        self._cls = cls_size
        self._region = region
        self._arr = (ctypes.c_ubyte * size).from_address(ptr) if size else (ctypes.c_ubyte * 0)()
        self._base_refs = sys.getrefcount(self._arr)
        self._released = False

    @property
    def buffer(self):
        if self._released:
            raise RuntimeError("lease was released")
        return memoryview(self._arr).cast("B")

    def view(self, offset=0, size=None):
        size = self.size - offset if size is None else size
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError("view out of the lease's range")
        return BufferLeaseView(self.ptr + offset, size)

    def release(self):
        if self._released:
            return
        if sys.getrefcount(self._arr) > self._base_refs:
            raise RuntimeError("lease has exported views (memoryviews of lease.buffer are alive)")
        self._released = True
        self._pool._give_back(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        try:
            if not self._released:
                self._released = True
                self._pool._give_back(self)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class _Region:
    """One registered buffer of a size class, reused lease after lease."""
    __slots__ = ("mm", "ptr", "size", "cls")

    def __init__(self, cls, alignment=mmap.PAGESIZE):
        size = (cls + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        # mmap gives page alignment; a larger one maps `alignment` more and
        # starts the region at the first aligned address inside
        pad = alignment if alignment > mmap.PAGESIZE else 0
        self.mm = mmap.mmap(-1, size + pad)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        self.ptr = (base + pad - 1) // alignment * alignment if pad else base
        self.size = size
        self.cls = cls


class BufferPool:
    """See the module doc. store needs register_buffer/unregister_buffer."""

    def __init__(self, store, region_size=None, *, min_size_class=4096, max_size_class=None,
                 alignment=4096, prewarm_size=0, prewarm_count=0, max_regions=1024,
                 block_on_exhaustion=True):
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1) or \
                alignment > 2 << 20:
            raise RuntimeError("alignment must be a power of two up to 2 MiB, not %r" % (alignment,))
        if not isinstance(min_size_class, int) or min_size_class <= 0:
            raise RuntimeError("min_size_class must be a positive int")
        self._store = store
        self._align = alignment
        self._min = 1 << max(min_size_class - 1, 63).bit_length()
        self._max_regions = int(max_regions)
        self._block = bool(block_on_exhaustion)
        self._regions = []
        self._free = {}
        self._active = 0
        self._closed = False
        self._cv = threading.Condition()
        self.prewarm(int(prewarm_size), int(prewarm_count))

    def prewarm(self, size, count):
        """Registers `count` regions of size's class ahead of use (they go to
        the free list). RuntimeError when the pool cannot hold them (nothing
        is kept then: the regions made so far stay free for later leases)."""
        if not isinstance(size, int) or not isinstance(count, int) or size < 0 or count < 0:
            raise ValueError("size and count must be non-negative ints")
        warm = []
        try:
            for _ in range(count):
                warm.append(self.acquire(size, block=False))
        finally:
            for lease in warm:
                lease.release()

    def _class_of(self, size):
        c = self._min
        while c < size:
            c <<= 1
        return c

    def _new_region_locked(self, cls):
        if len(self._regions) >= self._max_regions:
            return None
        r = _Region(cls, self._align)
        rc = self._store.register_buffer(r.ptr, r.size)
        if rc != 0:
            r.mm.close()
            raise RuntimeError("register_buffer of a %d-byte pool region failed: %d" % (r.size, rc))
        self._regions.append(r)
        return r

    def acquire(self, size, block=None, timeout=None):
        """A lease of `size` bytes (0 allowed). RuntimeError when the pool is
        closed, the size overflows, or it is exhausted without blocking."""
        if not isinstance(size, int) or size < 0:
            raise ValueError("size must be a non-negative int")
        if size > 1 << 40:
            raise RuntimeError("size %d overflows the pool's capacity" % size)
        block = self._block if block is None else block
        cls = self._class_of(max(size, 1))
        with self._cv:
            while True:
                if self._closed:
                    raise RuntimeError("pool is closed")
                free = self._free.get(cls)
                r = free.pop() if free else self._new_region_locked(cls)
                if r is not None:
                    self._active += 1
                    return BufferLease(self, r.ptr, size, cls, r)
                if not block:
                    raise RuntimeError("buffer pool exhausted (%d regions)" % len(self._regions))
                if not self._cv.wait(timeout):
                    raise RuntimeError("buffer pool exhausted: no release within %ss" % timeout)

    def _give_back(self, lease):
        with self._cv:
            self._free.setdefault(lease._cls, []).append(lease._region)
            self._active -= 1
            self._cv.notify()

    @property
    def active_leases(self):
        return self._active

    def close(self):
        """Unregisters and frees every region; RuntimeError with active leases."""
        with self._cv:
            if self._active:
                raise RuntimeError("pool has %d active leases" % self._active)
            regions, self._regions, self._free = self._regions, [], {}
            self._closed = True
            self._cv.notify_all()
        for r in regions:
            try:
                self._store.unregister_buffer(r.ptr)
            except Exception:  # noqa: BLE001 - a closed store unregistered everything
                pass
            try:
                r.mm.close()
            except BufferError:
                pass


RegisteredBufferPool = BufferPool
RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = BufferLeaseView
