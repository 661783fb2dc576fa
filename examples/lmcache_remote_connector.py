#!/usr/bin/python3
"""An LMCache-style remote connector (``mooncakestore://master:port/``) written
only against ``mooncake.store``, so it runs on Mooncake or on crescent.

LMCache offloads KV-cache chunks (one tensor per CacheEngineKey) to a remote
backend through an asyncio interface:

    await connector.exists(key) -> bool
    await connector.put(key, memory_obj)
    await connector.get(key) -> MemoryObj | None
    await connector.close()

As LMCache's Mooncake connector does, objects live in one pre-registered
arena (LMCache's local CPU buffer), so put/get are zero-copy (put_from /
get_into) and the blocking store calls run in a thread pool: the bindings
release the GIL, so the event loop keeps running while bytes move.

An object is stored as a 64-byte header (magic, dtype, shape) followed by the
raw tensor bytes, contiguous in the arena.

Run the self-check:
    PYTHONPATH=<build>/python:python/compat python3 examples/lmcache_remote_connector.py \
        --url mooncakestore://127.0.0.1:50051/ --metadata http://127.0.0.1:8080/metadata
"""
import argparse
import asyncio
import struct
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlparse

import numpy as np

from mooncake.store import MooncakeDistributedStore, ReplicateConfig

HEADER = struct.Struct("<4sB3x4q")  # magic, dtype code, pad, shape[4] (-1 = unused)
HEADER_BYTES = 64
DTYPES = [np.float16, np.float32, np.uint8, np.int8, np.int32, np.float64]


@dataclass(frozen=True)
class CacheEngineKey:
    fmt: str
    model_name: str
    world_size: int
    worker_id: int
    chunk_hash: str

    def to_string(self):
        return "%s@%s@%d@%d@%s" % (self.fmt, self.model_name, self.world_size, self.worker_id,
                                   self.chunk_hash)


class MemoryObj:
    """A tensor living in the arena at [offset, offset + HEADER_BYTES + nbytes)."""

    def __init__(self, allocator, offset, shape, dtype):
        self.allocator, self.offset = allocator, offset
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize

    @property
    def tensor(self):
        a = self.allocator.arena
        start = self.offset + HEADER_BYTES
        return a[start:start + self.nbytes].view(self.dtype).reshape(self.shape)

    @property
    def ptr(self):
        return self.allocator.arena.ctypes.data + self.offset

    @property
    def stored_bytes(self):
        return HEADER_BYTES + self.nbytes

    def write_header(self):
        if len(self.shape) > 4:
            raise ValueError("at most 4 dimensions")
        code = [np.dtype(d) for d in DTYPES].index(self.dtype)
        shape = list(self.shape) + [-1] * (4 - len(self.shape))
        hdr = HEADER.pack(b"LMCK", code, *shape)
        a = self.allocator.arena
        a[self.offset:self.offset + HEADER.size] = np.frombuffer(hdr, dtype=np.uint8)

    def free(self):
        self.allocator.free(self)


class ArenaAllocator:
    """First-fit allocator over one numpy arena (LMCache's local CPU buffer)."""

    def __init__(self, size):
        self.arena = np.zeros(size, dtype=np.uint8)
        self.free_list = [(0, size)]
        self.lock = threading.Lock()

    def allocate(self, shape, dtype, nbytes=None):
        need = HEADER_BYTES + (nbytes if nbytes is not None else
                               int(np.prod(shape)) * np.dtype(dtype).itemsize)
        need = (need + 63) & ~63
        with self.lock:
            for i, (off, ln) in enumerate(self.free_list):
                if ln >= need:
                    self.free_list[i] = (off + need, ln - need)
                    return MemoryObj(self, off, shape, dtype)
        return None

    def free(self, obj):
        need = (obj.stored_bytes + 63) & ~63
        with self.lock:
            self.free_list.append((obj.offset, need))
            self.free_list.sort()
            merged = []
            for off, ln in self.free_list:
                if merged and merged[-1][0] + merged[-1][1] == off:
                    merged[-1] = (merged[-1][0], merged[-1][1] + ln)
                elif ln:
                    merged.append((off, ln))
            self.free_list = merged


class MooncakeStoreConnector:
    """LMCache's RemoteConnector interface over MooncakeDistributedStore."""

    def __init__(self, url, loop, allocator, metadata_server, local_hostname="localhost",
                 global_segment_size="64MB", local_buffer_size="16MB", protocol="tcp",
                 device_name="", replica_num=1):
        u = urlparse(url)
        if u.scheme != "mooncakestore" or not u.hostname or not u.port:
            raise ValueError("expected mooncakestore://host:port/, got %r" % url)
        self.loop, self.allocator = loop, allocator
        self.store = MooncakeDistributedStore()
        rc = self.store.setup(local_hostname, metadata_server, global_segment_size,
                              local_buffer_size, protocol, device_name,
                              "%s:%d" % (u.hostname, u.port))
        if rc != 0:
            raise RuntimeError("setup failed: %d" % rc)
        rc = self.store.register_buffer(allocator.arena.ctypes.data, allocator.arena.nbytes)
        if rc != 0:
            raise RuntimeError("register_buffer failed: %d" % rc)
        self.config = ReplicateConfig()
        self.config.replica_num = replica_num
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="mooncake")

    def _run(self, fn, *args):
        return self.loop.run_in_executor(self.pool, fn, *args)

    async def exists(self, key):
        return await self._run(self.store.is_exist, key.to_string()) == 1

    async def put(self, key, memory_obj):
        memory_obj.write_header()
        rc = await self._run(self.store.put_from, key.to_string(), memory_obj.ptr,
                             memory_obj.stored_bytes, self.config)
        if rc not in (0, -705):  # -705: already stored by another worker
            raise RuntimeError("put %s failed: %d" % (key.to_string(), rc))

    def _get_blocking(self, key_str):
        size = self.store.get_size(key_str)
        if size < HEADER_BYTES:
            return None
        obj = self.allocator.allocate((size - HEADER_BYTES,), np.uint8)
        if obj is None:
            return None
        n = self.store.get_into(key_str, obj.ptr, obj.stored_bytes)
        if n != size:
            obj.free()
            return None
        a = self.allocator.arena
        magic, code, *shape = HEADER.unpack_from(a[obj.offset:obj.offset + HEADER.size].tobytes())
        if magic != b"LMCK" or code >= len(DTYPES):
            obj.free()
            return None
        obj.shape = tuple(d for d in shape if d >= 0)
        obj.dtype = np.dtype(DTYPES[code])
        obj.nbytes = int(np.prod(obj.shape)) * obj.dtype.itemsize
        return obj

    async def get(self, key):
        return await self._run(self._get_blocking, key.to_string())

    async def list(self):
        raise NotImplementedError("the Mooncake store has no key listing")

    async def close(self):
        self.pool.shutdown(wait=True)
        self.store.unregister_buffer(self.allocator.arena.ctypes.data)
        self.store.close()


async def self_check(args):
    loop = asyncio.get_running_loop()
    alloc = ArenaAllocator(64 << 20)
    conn = MooncakeStoreConnector(args.url, loop, alloc, args.metadata)
    try:
        rng = np.random.default_rng(0)
        shape = (2, 16, 8, 64)  # (k/v, tokens, heads, head_dim)
        keys, objs = [], []
        for i in range(args.chunks):
            key = CacheEngineKey("vllm", "demo-model", 1, 0, "%016x" % rng.integers(1 << 62))
            obj = alloc.allocate(shape, np.float16)
            obj.tensor[...] = rng.standard_normal(shape).astype(np.float16)
            keys.append(key)
            objs.append(obj)
        assert not any(await asyncio.gather(*(conn.exists(k) for k in keys)))
        await asyncio.gather(*(conn.put(k, o) for k, o in zip(keys, objs)))
        assert all(await asyncio.gather(*(conn.exists(k) for k in keys)))
        got = await asyncio.gather(*(conn.get(k) for k in keys))
        for o, g in zip(objs, got):
            assert g is not None, "chunk missing"
            assert g.shape == shape and g.dtype == np.float16
            assert np.array_equal(g.tensor.view(np.uint16), o.tensor.view(np.uint16))
            g.free()
        miss = CacheEngineKey("vllm", "demo-model", 1, 0, "nope")
        assert await conn.get(miss) is None and not await conn.exists(miss)
        print("lmcache_remote_connector: OK (%d chunks)" % args.chunks)
        return 0
    finally:
        await conn.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="mooncakestore://master_host:port/")
    ap.add_argument("--metadata", default="P2PHANDSHAKE")
    ap.add_argument("--chunks", type=int, default=16)
    sys.exit(asyncio.run(self_check(ap.parse_args())))
