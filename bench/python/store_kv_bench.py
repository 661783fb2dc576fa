#!/usr/bin/python3
"""End-to-end KV benchmark through the Mooncake Python API, in the style of
Mooncake's store_kv_bench.py (same flags and I/O modes), run on crescent.

  --io-api plain   put / get / put_batch / get_batch (copies through the local buffer)
  --io-api zcopy   put_from / get_into / batch_put_from / batch_get_into on memory from
                   get_alloc_func_addr() / get_free_func_addr(), registered once
  --io-api pool    the same zero-copy calls on leases of a mooncake.store.BufferPool

Scenarios: verify_write (write then read back and compare), fill (write),
write_perf (write, timed), read_perf (prepare, then timed reads), mixed_rw
(--rwmixread % reads). Prints one RESULT line per phase: requests, keys,
failures, misses, verify failures, ops/s and MB/s, p50/p99 latency.

    PYTHONPATH=build/python:python/compat /usr/bin/python3 bench/python/store_kv_bench.py \\
        --scenario verify_write --io-api zcopy --master-server 127.0.0.1:50051 \\
        --metadata-server http://127.0.0.1:8080/metadata --nr-objects 256 --value-size 4096
"""
import argparse
import ctypes
import random
import statistics
import sys
import threading
import time
from collections import Counter

from mooncake.store import (BufferPool, MooncakeDistributedStore, ReplicateConfig,
                            get_alloc_func_addr, get_free_func_addr)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", required=True,
                    choices=["verify_write", "fill", "write_perf", "read_perf", "mixed_rw"])
    ap.add_argument("--local-hostname", default="127.0.0.1")
    ap.add_argument("--metadata-server", default="http://127.0.0.1:8080/metadata")
    ap.add_argument("--master-server", default="127.0.0.1:50051")
    ap.add_argument("--protocol", default="tcp")
    ap.add_argument("--device-name", default="")
    ap.add_argument("--global-segment-size", type=int, default=64 << 20)
    ap.add_argument("--local-buffer-size", type=int, default=32 << 20)
    ap.add_argument("--io-api", choices=["plain", "zcopy", "pool"], default="plain")
    ap.add_argument("--numjobs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--nr-objects", type=int, default=128)
    ap.add_argument("--key-prefix", default="kvbench")
    ap.add_argument("--key-size", type=int, default=24)
    ap.add_argument("--value-size", type=int, default=4096)
    ap.add_argument("--memory-replica-num", type=int, default=1)
    ap.add_argument("--nof-replica-num", type=int, default=0)
    ap.add_argument("--rwmixread", type=int, default=70)
    ap.add_argument("--rand-seed", type=int, default=1)
    ap.add_argument("--verify", action="store_true")
    return ap.parse_args(argv)


def make_key(a, oid):
    suffix = "%016d" % oid
    room = max(0, a.key_size - len(suffix))
    return a.key_prefix[:room].ljust(room, "_") + suffix


def payload(a, oid):
    return bytes([oid & 0xFF]) * a.value_size


class Buffers:
    """batch_size slots of value_size bytes in registered memory."""

    def __init__(self, a, store):
        self.a, self.store, self.n = a, store, a.batch_size * a.value_size
        self.lease = self.ptr = None
        if a.io_api == "zcopy":
            self._alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(get_alloc_func_addr())
            self._free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(get_free_func_addr())
            self.ptr = self._alloc(self.n)
            if not self.ptr or store.register_buffer(self.ptr, self.n) != 0:
                raise RuntimeError("zcopy buffer allocation/registration failed")
        elif a.io_api == "pool":
            self.pool = BufferPool(store, min_size_class=4096, alignment=4096)
            self.lease = self.pool.acquire(self.n)
            self.ptr = self.lease.ptr

    def slot(self, i):
        return self.ptr + i * self.a.value_size

    def fill(self, i, data):
        ctypes.memmove(self.slot(i), data, len(data))

    def read(self, i, n):
        return ctypes.string_at(self.slot(i), n)

    def close(self):
        if self.a.io_api == "zcopy":
            self.store.unregister_buffer(self.ptr)
            self._free(self.ptr)
        elif self.a.io_api == "pool":
            self.lease.release()
            self.pool.close()


class Phase:
    def __init__(self, name):
        self.name, self.lat, self.req, self.keys, self.fail, self.miss = name, [], 0, 0, 0, 0
        self.verify_fail, self.bytes, self.errors = 0, 0, Counter()
        self.mu = threading.Lock()
        self.t0 = self.t1 = 0.0

    def report(self):
        secs = max(self.t1 - self.t0, 1e-9)
        lat = sorted(self.lat) or [0.0]
        print("RESULT phase=%s requests=%d keys=%d failures=%d misses=%d verify_failures=%d "
              "ops_per_s=%.0f mb_per_s=%.1f p50_us=%.1f p99_us=%.1f errors=%s"
              % (self.name, self.req, self.keys, self.fail, self.miss, self.verify_fail,
                 self.keys / secs, self.bytes / secs / 1e6, statistics.median(lat) * 1e6,
                 lat[max(0, int(len(lat) * 0.99) - 1)] * 1e6, dict(self.errors)), flush=True)
        return self.fail + self.verify_fail


def do_put(a, store, bufs, cfg, oids):
    keys = [make_key(a, o) for o in oids]
    vals = [payload(a, o) for o in oids]
    if a.io_api == "plain":
        if len(keys) == 1 and a.batch_size == 1:
            return [store.put(keys[0], vals[0], cfg)]
        rc = store.put_batch(keys, vals, cfg)
        return [rc] * len(keys)
    for i, v in enumerate(vals):
        bufs.fill(i, v)
    ptrs = [bufs.slot(i) for i in range(len(keys))]
    if len(keys) == 1 and a.batch_size == 1:
        return [store.put_from(keys[0], ptrs[0], a.value_size, cfg)]
    return store.batch_put_from(keys, ptrs, [a.value_size] * len(keys), cfg)


def do_get(a, store, bufs, oids, ph):
    keys = [make_key(a, o) for o in oids]
    if a.io_api == "plain":
        vals = [store.get(keys[0])] if len(keys) == 1 and a.batch_size == 1 else \
            store.get_batch(keys)
        lens = [len(v) if v else -704 for v in vals]
    else:
        ptrs = [bufs.slot(i) for i in range(len(keys))]
        lens = [store.get_into(keys[0], ptrs[0], a.value_size)] if len(keys) == 1 and \
            a.batch_size == 1 else store.batch_get_into(keys, ptrs, [a.value_size] * len(keys))
        vals = [bufs.read(i, n) if n > 0 else b"" for i, n in enumerate(lens)]
    ok = 0
    for k, o, n, v in zip(keys, oids, lens, vals):
        if n <= 0:
            if store.isExist(k) == 0:
                ph.miss += 1
            ph.errors[n] += 1
            continue
        if a.verify and v != payload(a, o):
            ph.verify_fail += 1
            continue
        ok += 1
    return ok


def run_phase(name, a, store, cfg, ids, mode):
    ph = Phase(name)
    chunks = [ids[i:i + a.batch_size] for i in range(0, len(ids), a.batch_size)]
    rng = random.Random(a.rand_seed)
    modes = [mode if mode != "mixed" else ("read" if rng.randrange(100) < a.rwmixread else "write")
             for _ in chunks]
    nxt = [0]
    mu = threading.Lock()

    def worker():
        bufs = Buffers(a, store)
        try:
            while True:
                with mu:
                    if nxt[0] >= len(chunks):
                        return
                    c, m = chunks[nxt[0]], modes[nxt[0]]
                    nxt[0] += 1
                t0 = time.perf_counter()
                if m == "write":
                    res = do_put(a, store, bufs, cfg, c)
                    good = sum(1 for r in res if r == 0)
                    errs = [r for r in res if r != 0]
                else:
                    good = do_get(a, store, bufs, c, ph)
                    errs = []
                dt = time.perf_counter() - t0
                with ph.mu:
                    ph.lat.append(dt)
                    ph.req += 1
                    ph.keys += len(c)
                    ph.fail += len(c) - good
                    ph.bytes += good * a.value_size
                    for e in errs:
                        ph.errors[e] += 1
        finally:
            bufs.close()

    ph.t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(a.numjobs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ph.t1 = time.perf_counter()
    return ph.report()


def main(argv=None):
    a = parse_args(argv)
    store = MooncakeDistributedStore()
    rc = store.setup(a.local_hostname, a.metadata_server, a.global_segment_size,
                     a.local_buffer_size, a.protocol, a.device_name, a.master_server)
    if rc != 0:
        sys.exit("setup failed: %d" % rc)
    cfg = ReplicateConfig()
    cfg.replica_num = a.memory_replica_num
    cfg.nof_replica_num = a.nof_replica_num
    ids = list(range(a.nr_objects))
    bad = 0
    try:
        if a.scenario in ("verify_write", "fill", "write_perf"):
            bad += run_phase("write", a, store, cfg, ids, "write")
        if a.scenario == "verify_write":
            a.verify = True
            bad += run_phase("read", a, store, cfg, ids, "read")
        if a.scenario in ("read_perf", "mixed_rw"):
            bad += run_phase("prepare", a, store, cfg, ids, "write")
            bad += run_phase("read" if a.scenario == "read_perf" else "mixed", a, store, cfg,
                             ids, "read" if a.scenario == "read_perf" else "mixed")
    finally:
        store.batch_remove([make_key(a, o) for o in ids], force=True)
        store.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
