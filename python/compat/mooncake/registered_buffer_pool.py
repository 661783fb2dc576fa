"""``mooncake.registered_buffer_pool``: a bounded pool of registered scratch
buffers (crescent's own implementation of Mooncake's module; same names,
signatures and counters).

Regions are anonymous mappings aligned to ``alignment``, registered with the
store once and reused: a request takes a free region of its size class (the
next power of two >= ``min_size_class``), or registers a new one while the
pool's bytes stay within ``max_bytes`` (free regions of other classes are
unregistered to make room). Requests above ``max_size_class`` get an exact
region unregistered on release. When full, ``acquire`` waits (``block``,
``timeout`` -> TimeoutError) or raises RuntimeError "exhausted". Store
registration runs outside the pool's lock, so a release never waits for a
slow registration. ``try_register_external`` registers caller memory for one
transfer (None when the store refuses). ``mooncake.buffer_pool.BufferPool``
is the other, simpler pool (leases of the store's registered memory).
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from crescent.buffer_pool import BufferLeaseView, _Region

__all__ = ["RegisteredBufferPool", "RegisteredBufferPoolConfig", "RegisteredBufferPoolStats",
           "RegisteredBufferLease", "ExternalRegisteredBufferLease"]


@dataclass(frozen=True)
class RegisteredBufferPoolConfig:
    max_bytes: int
    min_size_class: int = 64 * 1024
    max_size_class: Optional[int] = None
    alignment: int = 8 * 1024 * 1024
    block_on_exhaustion: bool = True
    default_timeout: Optional[float] = None
    max_regions: Optional[int] = None
    prewarm_size: Optional[int] = None
    prewarm_count: int = 0


@dataclass(frozen=True)
class RegisteredBufferPoolStats:
    size_classes: dict
    free_regions: int
    in_use_regions: int
    total_regions: int
    total_bytes: int
    free_bytes: int
    in_use_bytes: int
    acquire_count: int
    reuse_count: int
    allocate_count: int
    oversize_allocate_count: int
    wait_count: int
    release_count: int
    register_s: float
    unregister_s: float


class RegisteredBufferLease:
    """A region lent out: ``ptr``, ``size`` (as asked), ``buffer``; release()
    or ``with`` gives it back (a second release raises RuntimeError)."""

    def __init__(self, pool, region, size):
        self.pool, self.region, self.requested_size, self.closed = pool, region, size, False

    @property
    def ptr(self) -> int:
        return self.region.ptr

    @property
    def size(self) -> int:
        return self.requested_size

    @property
    def buffer(self):
        return self.view_region().buffer

    def view_region(self) -> BufferLeaseView:
        return BufferLeaseView(self.region.ptr, self.requested_size)

    def release(self) -> None:
        self.pool.release(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class ExternalRegisteredBufferLease:
    """Caller-owned memory registered through the pool until release()."""

    def __init__(self, pool, ptr, size):
        self.pool, self.ptr, self.size, self.closed = pool, ptr, size, False

    def release(self) -> None:
        self.pool.unregister_external(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class RegisteredBufferPool:
    def __init__(self, store: Any, max_bytes: int, *, min_size_class: int = 64 * 1024,
                 max_size_class: Optional[int] = None, alignment: int = 8 * 1024 * 1024,
                 block_on_exhaustion: bool = True, default_timeout: Optional[float] = None,
                 max_regions: Optional[int] = None, prewarm_size: Optional[int] = None,
                 prewarm_count: int = 0) -> None:
        for name, v in (("max_bytes", max_bytes), ("min_size_class", min_size_class),
                        ("alignment", alignment)):
            if not isinstance(v, int) or v <= 0:
                raise ValueError("%s must be a positive int" % name)
        if alignment & (alignment - 1) or alignment > 1 << 30:
            raise ValueError("alignment must be a power of two up to 1 GiB")
        if prewarm_count and prewarm_size is None:
            raise ValueError("prewarm_size is required when prewarm_count is positive")
        self.store = store
        self.max_bytes = max_bytes
        self.min_size_class = min_size_class
        self.max_size_class = min(int(max_size_class or max_bytes), max_bytes)
        self.alignment = alignment
        self.block_on_exhaustion = bool(block_on_exhaustion)
        self.default_timeout = default_timeout
        self.max_regions = max_regions
        self._cv = threading.Condition()
        self._free = defaultdict(deque)  # size -> free regions
        self._in_use = {}  # ptr -> region
        self._external = set()
        self._total = self._reserved = 0
        self._closed = False
        self._n = dict.fromkeys(("acquire", "reuse", "allocate", "oversize", "wait", "release"), 0)
        self._reg_s = self._unreg_s = 0.0
        if prewarm_count:
            self.prewarm(prewarm_size, prewarm_count)

    @classmethod
    def from_config(cls, store: Any, config: RegisteredBufferPoolConfig) -> "RegisteredBufferPool":
        return cls(store, config.max_bytes, min_size_class=config.min_size_class,
                   max_size_class=config.max_size_class, alignment=config.alignment,
                   block_on_exhaustion=config.block_on_exhaustion,
                   default_timeout=config.default_timeout, max_regions=config.max_regions,
                   prewarm_size=config.prewarm_size, prewarm_count=config.prewarm_count)

    # -- sizes --------------------------------------------------------------------

    def _size_class(self, size: int) -> int:
        if size > self.max_size_class:
            return size  # an exact, one-off region
        c = self.min_size_class
        while c < size:
            c <<= 1
        return min(c, self.max_size_class) if c > self.max_size_class else c

    def iter_transfer_groups(self, sizes: Sequence[int]) -> list:
        """Indexes of ``sizes`` grouped so a group's bytes fit one
        ``max_size_class`` buffer (an item larger than that alone; 0 skipped)."""
        groups, cur, acc = [], [], 0
        for i, n in enumerate(sizes):
            n = int(n)
            if n < 0:
                raise ValueError("transfer sizes must be non-negative")
            if n == 0:
                continue
            if cur and acc + n > self.max_size_class:
                groups.append(cur)
                cur, acc = [], 0
            cur.append(i)
            acc += n
        if cur:
            groups.append(cur)
        return groups

    # -- regions ------------------------------------------------------------------

    def _register(self, size: int):
        """A new registered region (outside the lock); RuntimeError if refused."""
        r = _Region(size, self.alignment)
        t0 = time.perf_counter()
        rc = self.store.register_buffer(r.ptr, r.size)
        with self._cv:
            self._reg_s += time.perf_counter() - t0
        if rc != 0:
            r.mm.close()
            raise RuntimeError("register_buffer of a %d-byte region failed: %s" % (r.size, rc))
        return r

    def _unregister(self, r) -> None:
        t0 = time.perf_counter()
        rc = self.store.unregister_buffer(r.ptr)
        with self._cv:
            self._unreg_s += time.perf_counter() - t0
        if rc != 0:
            raise RuntimeError("unregister_buffer failed with retcode %s" % rc)
        r.mm.close()

    def _room_locked(self, size: int):
        """True if a new region of ``size`` fits now; free regions of other
        classes are taken out (returned, to unregister) to make room."""
        victims = []
        count = lambda: sum(len(q) for q in self._free.values()) + len(self._in_use)
        while self._total + self._reserved + size > self.max_bytes or \
                (self.max_regions is not None and count() >= self.max_regions):
            other = next((q for c, q in self._free.items() if q and c != size), None)
            if other is None:
                return False, victims
            r = other.popleft()
            self._total -= r.cls
            victims.append(r)
        return True, victims

    def _raise_if_impossible(self, size: int) -> None:
        if size < 0:
            raise ValueError("size must be non-negative")
        if size > self.max_bytes:
            raise RuntimeError("request of %d bytes exceeds the pool's capacity %d"
                               % (size, self.max_bytes))

    # -- leases -------------------------------------------------------------------

    def acquire(self, size: int, *, block: Optional[bool] = None,
                timeout: Optional[float] = None) -> RegisteredBufferLease:
        self._raise_if_impossible(size)
        cls = self._size_class(max(size, 1))
        block = self.block_on_exhaustion if block is None else block
        timeout = self.default_timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._cv:
                if self._closed:
                    raise RuntimeError("registered buffer pool is closed")
                if self._free[cls] and cls <= self.max_size_class:
                    r = self._free[cls].popleft()
                    self._in_use[r.ptr] = r
                    self._n["acquire"] += 1
                    self._n["reuse"] += 1
                    return RegisteredBufferLease(self, r, size)
                ok, victims = self._room_locked(cls)
                if ok:
                    self._reserved += cls
                elif not victims:
                    if not block:
                        raise RuntimeError("registered buffer pool is exhausted")
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError("timed out waiting for registered buffer")
                    self._n["wait"] += 1
                    self._cv.wait(left)
                    continue
            for v in victims:
                self._unregister(v)
            if not ok:
                continue
            try:
                r = self._register(cls)
            except BaseException:
                with self._cv:
                    self._reserved -= cls
                    self._cv.notify_all()
                raise
            with self._cv:
                self._reserved -= cls
                self._total += r.cls
                self._in_use[r.ptr] = r
                self._n["acquire"] += 1
                self._n["oversize" if cls > self.max_size_class else "allocate"] += 1
                self._cv.notify_all()
                return RegisteredBufferLease(self, r, size)

    def try_acquire(self, size: int) -> RegisteredBufferLease:
        return self.acquire(size, block=False)

    def buffer(self, size: int, *, timeout: Optional[float] = None) -> RegisteredBufferLease:
        return self.acquire(size, timeout=timeout)

    def release(self, lease: RegisteredBufferLease) -> None:
        with self._cv:
            if lease.closed:
                raise RuntimeError("registered buffer lease released twice")
            r = self._in_use.pop(lease.region.ptr, None)
            if r is None or lease.pool is not self:
                raise RuntimeError("registered buffer lease does not belong to this pool or "
                                   "is not active")
            lease.closed = True
            drop = self._closed or r.cls > self.max_size_class
            if drop:
                self._total -= r.cls
            else:
                self._free[r.cls].append(r)
            self._n["release"] += 1
            self._cv.notify_all()
        if drop:
            self._unregister(r)

    def try_register_external(self, ptr: int, size: int):
        if size < 0:
            raise ValueError("size must be non-negative")
        with self._cv:
            if self._closed:
                raise RuntimeError("registered buffer pool is closed")
            if size == 0:
                return ExternalRegisteredBufferLease(self, ptr, 0)
            if ptr in self._external:
                raise RuntimeError("external buffer is already registered through this pool")
            self._external.add(ptr)
        t0 = time.perf_counter()
        rc = self.store.register_buffer(ptr, size)
        with self._cv:
            self._reg_s += time.perf_counter() - t0
            if rc != 0:
                self._external.discard(ptr)
                return None
        return ExternalRegisteredBufferLease(self, ptr, size)

    def unregister_external(self, lease: ExternalRegisteredBufferLease) -> None:
        with self._cv:
            if lease.closed:
                raise RuntimeError("external registered buffer lease released twice")
            lease.closed = True
            if lease.size == 0:
                return
            if lease.ptr not in self._external:
                lease.closed = False
                raise RuntimeError("external registered buffer lease does not belong to this "
                                   "pool or is not active")
        t0 = time.perf_counter()
        rc = self.store.unregister_buffer(lease.ptr)
        with self._cv:
            self._unreg_s += time.perf_counter() - t0
            if rc != 0:
                lease.closed = False
                raise RuntimeError("unregister_buffer failed with retcode %s" % rc)
            self._external.discard(lease.ptr)
            self._cv.notify_all()

    def prewarm(self, size: int, count: int) -> None:
        """Register ``count`` more free regions of ``size``'s class."""
        if count < 0:
            raise ValueError("count must be non-negative")
        for _ in range(count):
            self._add_free(self._size_class(max(size, 1)))

    def ensure_prewarmed(self, size: int, count: int) -> None:
        """Register regions until ``count`` of ``size``'s class are free."""
        if count < 0:
            raise ValueError("count must be non-negative")
        cls = self._size_class(max(size, 1))
        while True:
            with self._cv:
                if len(self._free[cls]) >= count:
                    return
            self._add_free(cls)

    def _add_free(self, cls: int) -> None:
        if cls > self.max_size_class:
            raise ValueError("cannot prewarm above max_size_class")
        with self._cv:
            if self._closed:
                raise RuntimeError("registered buffer pool is closed")
            ok, victims = self._room_locked(cls)
            if ok:
                self._reserved += cls
        for v in victims:
            self._unregister(v)
        if not ok:
            raise RuntimeError("registered buffer pool is exhausted")
        try:
            r = self._register(cls)
        finally:
            with self._cv:
                self._reserved -= cls
        with self._cv:
            self._total += r.cls
            self._free[cls].append(r)
            self._cv.notify_all()

    def stats(self) -> RegisteredBufferPoolStats:
        with self._cv:
            free = {c: len(q) for c, q in self._free.items() if q}
            free_bytes = sum(r.cls for q in self._free.values() for r in q)
            in_use = sum(r.cls for r in self._in_use.values())
            n = self._n
            return RegisteredBufferPoolStats(
                size_classes=free, free_regions=sum(free.values()),
                in_use_regions=len(self._in_use) + len(self._external),
                total_regions=sum(free.values()) + len(self._in_use), total_bytes=self._total,
                free_bytes=free_bytes, in_use_bytes=in_use, acquire_count=n["acquire"],
                reuse_count=n["reuse"], allocate_count=n["allocate"],
                oversize_allocate_count=n["oversize"], wait_count=n["wait"],
                release_count=n["release"], register_s=self._reg_s, unregister_s=self._unreg_s)

    def close(self) -> None:
        """Unregister the free regions; RuntimeError while leases are active
        (waits for registrations in flight first)."""
        with self._cv:
            if self._closed:
                return
            while self._reserved:
                self._cv.wait()
            if self._in_use or self._external:
                raise RuntimeError("cannot close registered buffer pool with %d active leases"
                                   % (len(self._in_use) + len(self._external)))
            self._closed = True
            regions = [r for q in self._free.values() for r in q]
            self._free.clear()
            self._total = 0
        errors = []
        for r in regions:
            try:
                self._unregister(r)
            except RuntimeError as e:
                errors.append(e)
        if errors:
            raise errors[0]
