#!/usr/bin/python3
"""A minimal SGLang-HiCache-style L3 storage backend over the Mooncake store API.

SGLang's hierarchical cache keeps KV pages in a host-memory pool (L2) and
offloads them to a storage backend (L3) under page-sized keys (a hash of the
page's token prefix). Its Mooncake backend uses exactly these calls, written
here only against ``mooncake.store`` so it runs unchanged on Mooncake or on
crescent:

    exists(key) / batch_exists(keys)    -> how many leading pages are stored
    batch_set(keys, host_indices)       zero-copy from the registered host pool
    batch_get(keys, host_indices)       zero-copy into the registered host pool

Configuration comes from the environment, as in SGLang (MOONCAKE_MASTER,
MOONCAKE_TE_META_DATA_SERVER, MOONCAKE_GLOBAL_SEGMENT_SIZE,
MOONCAKE_LOCAL_BUFFER_SIZE, MOONCAKE_PROTOCOL, MOONCAKE_DEVICE,
MOONCAKE_LOCAL_HOSTNAME) or from command-line flags.

Run the self-check (needs a master with its HTTP metadata server):
    PYTHONPATH=<build>/python:python/compat python3 examples/sglang_hicache_backend.py \
        --master 127.0.0.1:50051 --metadata http://127.0.0.1:8080/metadata
"""
import argparse
import hashlib
import os
import sys

import numpy as np

from mooncake.store import MooncakeDistributedStore


class HostKVPool:
    """L2: a host-memory pool of KV pages (one contiguous numpy array), as
    SGLang's MHATokenToKVPoolHost: page i holds the K half then the V half."""

    def __init__(self, num_pages, page_bytes):
        assert page_bytes % 2 == 0
        self.page_bytes = page_bytes
        self.buffer = np.zeros((num_pages, page_bytes), dtype=np.uint8)

    def page_ptr(self, index):
        return self.buffer.ctypes.data + index * self.page_bytes

    def kv_ptrs(self, index):
        """(k_ptr, v_ptr, half_size) of page `index`."""
        half = self.page_bytes // 2
        p = self.page_ptr(index)
        return p, p + half, half


class MooncakeHiCacheStore:
    """The L3 backend: each page is stored as two objects, "<key>_k" and
    "<key>_v" (SGLang's MHA layout)."""

    def __init__(self, pool, master=None, metadata=None, global_segment_size=None,
                 local_buffer_size=None, protocol=None, device=None, local_hostname=None):
        env = os.environ.get
        self.pool = pool
        self.store = MooncakeDistributedStore()
        rc = self.store.setup(
            local_hostname or env("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata or env("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size or env("MOONCAKE_GLOBAL_SEGMENT_SIZE", "64MB"),
            local_buffer_size or env("MOONCAKE_LOCAL_BUFFER_SIZE", "16MB"),
            protocol or env("MOONCAKE_PROTOCOL", "tcp"),
            device if device is not None else env("MOONCAKE_DEVICE", ""),
            master or env("MOONCAKE_MASTER", "127.0.0.1:50051"))
        if rc != 0:
            raise RuntimeError("MooncakeDistributedStore.setup failed: %d" % rc)
        # zero-copy: the whole host pool is registered once
        rc = self.store.register_buffer(pool.buffer.ctypes.data, pool.buffer.nbytes)
        if rc != 0:
            raise RuntimeError("register_buffer failed: %d" % rc)

    @staticmethod
    def _kv_keys(keys):
        out = []
        for k in keys:
            out += [k + "_k", k + "_v"]
        return out

    def exists(self, key):
        return self.batch_exists([key]) == 1

    def batch_exists(self, keys):
        """Number of leading pages whose K and V objects are both stored."""
        res = self.store.batch_is_exist(self._kv_keys(keys))
        for i in range(len(keys)):
            if res[2 * i] != 1 or res[2 * i + 1] != 1:
                return i
        return len(keys)

    def _ptrs(self, host_indices):
        ptrs, sizes = [], []
        for idx in host_indices:
            k, v, half = self.pool.kv_ptrs(idx)
            ptrs += [k, v]
            sizes += [half, half]
        return ptrs, sizes

    def batch_set(self, keys, host_indices):
        """Stores pages (skipping the ones already stored, as SGLang does).
        Returns True when every page is stored afterwards."""
        present = self.store.batch_is_exist(self._kv_keys(keys))
        todo = [i for i in range(len(keys)) if present[2 * i] != 1 or present[2 * i + 1] != 1]
        if not todo:
            return True
        ptrs, sizes = self._ptrs([host_indices[i] for i in todo])
        res = self.store.batch_put_from(self._kv_keys([keys[i] for i in todo]), ptrs, sizes)
        # -705: another writer stored the same page meanwhile; fine
        return all(r == 0 or r == -705 for r in res)

    def batch_get(self, keys, host_indices):
        """Loads pages into the pool. Returns how many leading pages arrived."""
        ptrs, sizes = self._ptrs(host_indices)
        res = self.store.batch_get_into(self._kv_keys(keys), ptrs, sizes)
        for i in range(len(keys)):
            if res[2 * i] != sizes[2 * i] or res[2 * i + 1] != sizes[2 * i + 1]:
                return i
        return len(keys)

    def close(self):
        self.store.unregister_buffer(self.pool.buffer.ctypes.data)
        self.store.close()


def page_key(token_ids, prior=""):
    """SGLang-style page hash: chained SHA-256 of the page's tokens."""
    h = hashlib.sha256(prior.encode())
    h.update(np.asarray(token_ids, dtype=np.int64).tobytes())
    return h.hexdigest()


def self_check(args):
    page_tokens, page_bytes, pages = 16, args.page_kib * 1024, args.pages
    pool = HostKVPool(pages * 2, page_bytes)
    l3 = MooncakeHiCacheStore(pool, master=args.master, metadata=args.metadata)
    try:
        rng = np.random.default_rng(0)
        tokens = rng.integers(0, 32000, pages * page_tokens)
        keys, prior = [], ""
        for i in range(pages):
            prior = page_key(tokens[i * page_tokens:(i + 1) * page_tokens], prior)
            keys.append(prior)
        pool.buffer[:pages] = rng.integers(0, 256, (pages, page_bytes), dtype=np.uint8)
        assert l3.batch_exists(keys) == 0, "fresh keys already exist"
        assert l3.batch_set(keys, list(range(pages))), "batch_set failed"
        assert l3.batch_exists(keys) == pages
        assert l3.exists(keys[0])
        assert l3.batch_set(keys[:2], [0, 1]), "re-setting stored pages must succeed"
        # load into the other half of the pool and compare
        got = l3.batch_get(keys, list(range(pages, 2 * pages)))
        assert got == pages, "batch_get returned %d of %d pages" % (got, pages)
        assert np.array_equal(pool.buffer[:pages], pool.buffer[pages:]), "page content differs"
        # a prefix that stops at a missing page
        missing = keys[:3] + ["0" * 64] + keys[4:]
        assert l3.batch_exists(missing) == 3
        assert l3.batch_get(missing, list(range(pages, 2 * pages))) == 3
        print("sglang_hicache_backend: OK (%d pages of %d KiB)" % (pages, args.page_kib))
        return 0
    finally:
        l3.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--master", default=None, help="master host:port ($MOONCAKE_MASTER)")
    ap.add_argument("--metadata", default=None,
                    help="metadata server ($MOONCAKE_TE_META_DATA_SERVER)")
    ap.add_argument("--pages", type=int, default=32)
    ap.add_argument("--page-kib", type=int, default=64)
    sys.exit(self_check(ap.parse_args()))
