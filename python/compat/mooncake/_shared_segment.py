"""mooncake.engine.SharedSegment on crescent: one memory region shared by the
ranks of a host, set up in two phases (Mooncake's protocol, crescent's code).

    seg, blob = SharedSegment.create(name, size, world_size, rank_id,
                                     owner_rank=0, device_id=0, mmap=True)
    blobs = all_gather(blob)          # the caller's collective, indexed by rank
    seg.complete(blobs)
    seg.ready(), seg.base_addr(), seg.size()

``mmap=True`` is host shared memory: the owner rank creates a file in
/dev/shm of ``size`` bytes (mode 0600, a random name) and its blob names it;
``complete`` maps the owner's file in every rank. The owner unlinks the file
when its segment is released (``close()`` or garbage collection); mappings
made by the other ranks stay valid. ``hugetlb=True`` (with ``mmap=True``)
backs the segment with HugeTLB pages instead: the owner creates a memfd with
MFD_HUGETLB (the size rounded up to the huge page size) and the other ranks
open it through ``/proc/<owner pid>/fd/<fd>``; ``create`` raises RuntimeError
when the HugeTLB pool (``vm.nr_hugepages``) cannot hold it, as Mooncake's
does. ``mmap=False`` is Mooncake's device
backend (CUDA / Ascend IPC handles): not supported here, ``supported()``
says False and ``create`` raises RuntimeError as a Mooncake build without
that backend does.
"""
import json
import mmap as _mmap
import os
import re
import secrets
import threading

_MAX_SEGMENT_BYTES = 1 << 40  # 1 TiB
_MAX_BLOB_BYTES = 4096
_MAX_WORLD = 1 << 16
_SHM_DIR = "/dev/shm"
_BLOB_MAGIC = "crescent-shared-segment-1"


def _check_uint(what, v, limit):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("SharedSegment: %s must be an int, got %r" % (what, v))
    if v < 0 or v >= limit:
        raise RuntimeError("Invalid argument: SharedSegment %s %d out of range [0, %d)"
                           % (what, v, limit))
    return v


def _hugepage_size():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("Hugepagesize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _hugetlb_memfd(name, size):
    """A memfd of HugeTLB pages holding `size` bytes (rounded up to the huge
    page size), its pages reserved; RuntimeError when the pool cannot."""
    hp = _hugepage_size()
    flag = getattr(os, "MFD_HUGETLB", None)
    if not hp or flag is None:
        raise RuntimeError("Not implemented: this kernel offers no HugeTLB pages")
    length = -(-size // hp) * hp
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64] or "seg"
    fd = os.memfd_create("crescent-seg-" + tag, os.MFD_CLOEXEC | flag)
    try:
        os.ftruncate(fd, length)
        # The mapping reserves the pages: an empty pool fails here, not later.
        _mmap.mmap(fd, length, _mmap.MAP_SHARED, _mmap.PROT_READ | _mmap.PROT_WRITE).close()
    except OSError as e:
        os.close(fd)
        raise RuntimeError("Resource exhausted: the HugeTLB pool cannot hold %d bytes (%s); "
                           "set vm.nr_hugepages, or use hugetlb=False" % (length, e)) from None
    return fd


class SharedSegment:
    """A region shared across the ranks of one host (see the module doc)."""

    def __init__(self, *a, **kw):
        raise TypeError("SharedSegment has no constructor; use SharedSegment.create()")

    @staticmethod
    def supported(mmap=False, host_register=False, hugetlb=False):
        """Whether this build can share memory across processes in that mode
        (a property of the build, as Mooncake's: whether the machine has a
        HugeTLB pool shows in create()): host memory (mmap=True), with
        transparent huge pages advised or with HugeTLB pages (hugetlb=True);
        not device memory, not cudaHostRegister (host_register)."""
        return bool(mmap) and not host_register

    @classmethod
    def create(cls, name, size, world_size, rank_id, owner_rank=0, device_id=0, mmap=False,
               hugetlb=False, host_register=False):
        """Phase one: returns (segment, blob); all-gather the blobs, then complete()."""
        if not isinstance(name, str):
            raise TypeError("SharedSegment: name must be a str")
        if not mmap:
            raise RuntimeError("Not implemented: this build has no device shared segment "
                               "backend (CUDA / Ascend); use mmap=True for host memory")
        if host_register:
            raise RuntimeError("Not implemented: host_register needs CUDA (cudaHostRegister); "
                               "no GPUs here")
        if isinstance(world_size, bool) or not isinstance(world_size, int):
            raise TypeError("SharedSegment: world_size must be an int")
        if world_size < 1 or world_size > _MAX_WORLD:
            raise RuntimeError("Invalid argument: SharedSegment world_size must be in "
                               "[1, %d]" % _MAX_WORLD)
        _check_uint("rank_id", rank_id, world_size)
        _check_uint("owner_rank", owner_rank, world_size)
        if isinstance(device_id, bool) or not isinstance(device_id, int):
            raise TypeError("SharedSegment: device_id must be an int")
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError("SharedSegment: size must be an int")
        if size <= 0 or size > _MAX_SEGMENT_BYTES:
            raise RuntimeError("Invalid argument: Shared segment size must be in (0, %d]"
                               % _MAX_SEGMENT_BYTES)
        seg = object.__new__(cls)
        seg._name, seg._size, seg._world, seg._rank, seg._owner = \
            name, size, world_size, rank_id, owner_rank
        seg._map = None
        seg._path = None
        seg._hfd = None
        seg._hugetlb = bool(hugetlb)
        seg._lock = threading.Lock()
        info = {"magic": _BLOB_MAGIC, "rank": rank_id, "owner": owner_rank, "size": size,
                "name": name, "hugetlb": seg._hugetlb}
        if hugetlb and rank_id == owner_rank:
            seg._hfd = _hugetlb_memfd(name, size)
            info["pid"], info["fd"] = os.getpid(), seg._hfd
        elif rank_id == owner_rank:
            tag = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64] or "seg"
            path = os.path.join(_SHM_DIR, "crescent-seg-%s-%s" % (tag, secrets.token_hex(8)))
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, size)
            except OSError:
                os.close(fd)
                os.unlink(path)
                raise
            os.close(fd)
            seg._path = path
            info["path"] = path
        return seg, json.dumps(info, sort_keys=True).encode()

    def complete(self, blobs):
        """Phase two: ``blobs[r]`` is rank r's blob from create(); maps the owner's memory."""
        if isinstance(blobs, (bytes, str)) or not hasattr(blobs, "__len__"):
            raise TypeError("SharedSegment.complete: blobs must be a list of bytes")
        if len(blobs) != self._world:
            raise RuntimeError("Invalid argument: got %d blobs for world_size %d"
                               % (len(blobs), self._world))
        with self._lock:
            if self._map is not None:
                raise RuntimeError("Invalid argument: SharedSegment already complete")
            raw = blobs[self._owner]
            if not isinstance(raw, (bytes, bytearray)) or len(raw) > _MAX_BLOB_BYTES:
                raise RuntimeError("Invalid argument: owner blob is not a shared segment blob")
            try:
                info = json.loads(bytes(raw))
            except ValueError:
                info = None
            if (not isinstance(info, dict) or info.get("magic") != _BLOB_MAGIC
                    or info.get("rank") != self._owner or info.get("size") != self._size
                    or info.get("name") != self._name):
                raise RuntimeError("Invalid argument: owner blob does not describe this "
                                   "segment (name, size or owner differ)")
            if info.get("hugetlb", False) is not self._hugetlb:
                raise RuntimeError("Invalid argument: owner blob's hugetlb differs from this "
                                   "rank's")
            fd = self._open_hugetlb(info) if self._hugetlb else self._open_shm(info)
            try:
                if os.fstat(fd).st_size < self._size:
                    raise RuntimeError("Invalid argument: shared segment file is shorter "
                                       "than the segment")
                try:
                    self._map = _mmap.mmap(fd, os.fstat(fd).st_size if self._hugetlb
                                           else self._size, _mmap.MAP_SHARED,
                                           _mmap.PROT_READ | _mmap.PROT_WRITE)
                except OSError as e:
                    raise RuntimeError("Resource exhausted: mapping the shared segment "
                                       "failed: %s" % e) from None
                if not self._hugetlb and hasattr(_mmap, "MADV_HUGEPAGE"):
                    try:  # transparent huge pages for /dev/shm, where the kernel allows
                        self._map.madvise(_mmap.MADV_HUGEPAGE)
                    except OSError:
                        pass
            finally:
                os.close(fd)
            import ctypes
            self._addr = ctypes.addressof(ctypes.c_char.from_buffer(self._map))

    @staticmethod
    def _open_shm(info):
        path = info.get("path")
        if (not isinstance(path, str) or os.path.dirname(path) != _SHM_DIR
                or not os.path.basename(path).startswith("crescent-seg-")):
            raise RuntimeError("Invalid argument: owner blob names no shared segment file")
        return os.open(path, os.O_RDWR | os.O_NOFOLLOW)

    def _open_hugetlb(self, info):
        if self._hfd is not None:  # the owner: its own memfd
            return os.dup(self._hfd)
        pid, fd = info.get("pid"), info.get("fd")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                   for v in (pid, fd)):
            raise RuntimeError("Invalid argument: owner blob names no HugeTLB segment")
        path = "/proc/%d/fd/%d" % (pid, fd)
        try:
            target = os.readlink(path)
            if not target.startswith("/memfd:crescent-seg-"):
                raise RuntimeError("Invalid argument: %s is not a crescent HugeTLB segment"
                                   % path)
            return os.open(path, os.O_RDWR)
        except OSError as e:
            raise RuntimeError("Invalid argument: cannot open the owner's HugeTLB segment "
                               "(%s): %s" % (path, e)) from None

    def ready(self):
        return self._map is not None

    def base_addr(self):
        """Address of the shared memory in this process (0 before complete())."""
        return self._addr if self._map is not None else 0

    def device_addr(self):
        """0: host memory, no device mapping."""
        return 0

    def size(self):
        return self._size

    def close(self):
        """Release this rank's side; the owner removes the /dev/shm file.
        (The mapping stays until the object is garbage collected, so
        base_addr() never points at unmapped memory while it is alive.)"""
        hfd, self._hfd = getattr(self, "_hfd", None), None
        if hfd is not None:
            os.close(hfd)
        path, self._path = getattr(self, "_path", None), None
        if path:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def __del__(self):
        self.close()

    def __repr__(self):
        return "<SharedSegment %r size=%d rank=%d/%d ready=%s>" % (
            self._name, self._size, self._rank, self._world, self.ready())
