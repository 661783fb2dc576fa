#!/usr/bin/python3
"""End-to-end KV benchmark through the Mooncake Python API, in the style of
Mooncake's store_kv_bench.py (same flags and I/O modes), run on crescent.

  --io-api plain   put / get / put_batch / get_batch (copies through the local buffer)
  --io-api zcopy   put_from / get_into / batch_put_from / batch_get_into on memory from
                   get_alloc_func_addr() / get_free_func_addr(), registered once
  --io-api pool    the same zero-copy calls on leases of a mooncake.store.BufferPool

Scenarios: verify_write (write then read back and compare), fill (write, objects
kept for a later --prepare-mode none run), write_perf (write, timed), read_perf
(prepare, then timed reads), mixed_rw (--rwmixread % reads). Mooncake's other
flags work too: --iodepth (threads per job), --runtime (seconds, cycling over
the objects), --write-objects / --prepare-objects / --object-id-start,
--pattern, --prepare-mode, --phase-gap-mode sleep|manual|file, --log-level. Prints one RESULT line per phase: requests, keys,
failures, misses, verify failures, ops/s and MB/s, p50/p99 latency.

    PYTHONPATH=build/python:python/compat /usr/bin/python3 bench/python/store_kv_bench.py \\
        --scenario verify_write --io-api zcopy --master-server 127.0.0.1:50051 \\
        --metadata-server http://127.0.0.1:8080/metadata --nr-objects 256 --value-size 4096
"""
import argparse
import ctypes
import logging
import os
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
    ap.add_argument("--iodepth", type=int, default=1,
                    help="requests in flight per job (one thread each)")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--runtime", type=int, default=0,
                    help="seconds of the timed phase, cycling over its objects; "
                         "0 = one pass over them")
    ap.add_argument("--nr-objects", type=int, default=128)
    ap.add_argument("--write-objects", type=int, default=0,
                    help="objects written by write phases (0 = --nr-objects)")
    ap.add_argument("--prepare-objects", type=int, default=0,
                    help="objects written by the prepare phase (0 = --nr-objects)")
    ap.add_argument("--object-id-start", type=int, default=0)
    ap.add_argument("--key-prefix", default="kvbench")
    ap.add_argument("--key-size", type=int, default=20)
    ap.add_argument("--value-size", type=int, default=4096)
    ap.add_argument("--memory-replica-num", type=int, default=1)
    ap.add_argument("--nof-replica-num", type=int, default=0)
    ap.add_argument("--rwmixread", type=int, default=70)
    ap.add_argument("--rand-seed", type=int, default=1)
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--pattern", default="",
                    help="payload pattern repeated to --value-size: text, or hex after 0x "
                         "(default: every byte is the object id & 0xff)")
    ap.add_argument("--prepare-mode", choices=["auto", "none", "write"], default="auto",
                    help="read_perf / mixed_rw: write the objects first (auto, write) or "
                         "read what is already stored (none)")
    ap.add_argument("--phase-gap-mode", choices=["none", "sleep", "manual", "file"],
                    default="none", help="wait between the prepare and the timed phase")
    ap.add_argument("--phase-gap-sec", type=int, default=0)
    ap.add_argument("--phase-gap-file", default="")
    ap.add_argument("--phase-gap-timeout-sec", type=int, default=600)
    ap.add_argument("--log-level", default="INFO")
    a = ap.parse_args(argv)
    for name in ("numjobs", "iodepth", "batch_size"):
        if getattr(a, name) < 1:
            ap.error("--%s must be at least 1" % name.replace("_", "-"))
    for name in ("nr_objects", "write_objects", "prepare_objects", "object_id_start",
                 "runtime", "phase_gap_sec", "phase_gap_timeout_sec"):
        if getattr(a, name) < 0:
            ap.error("--%s must not be negative" % name.replace("_", "-"))
    if a.value_size < 1:
        ap.error("--value-size must be at least 1")
    if a.key_size < 16:
        ap.error("--key-size=%d is smaller than the 16-digit object id" % a.key_size)
    if a.phase_gap_mode == "file" and not a.phase_gap_file:
        ap.error("--phase-gap-mode file needs --phase-gap-file")
    try:
        a.pattern_bytes = parse_pattern(a.pattern)
    except ValueError as e:
        ap.error("--pattern: %s" % e)
    return a


def parse_pattern(text):
    if not text:
        return b""
    if text.startswith("0x"):
        return bytes.fromhex(text[2:])  # ValueError for odd length / non-hex
    return text.encode("utf-8")


def make_key(a, oid):
    suffix = "%016d" % oid
    room = max(0, a.key_size - len(suffix))
    return a.key_prefix[:room].ljust(room, "_") + suffix


def payload(a, oid):
    if a.pattern_bytes:
        p = a.pattern_bytes
        return (p * (a.value_size // len(p) + 1))[:a.value_size]
    return bytes([oid & 0xFF]) * a.value_size


def phase_gap(a):
    """Mooncake's --phase-gap-mode: a pause between prepare and the timed phase
    (e.g. to restart or drain something), bounded by --phase-gap-timeout-sec."""
    if a.phase_gap_mode == "sleep":
        time.sleep(a.phase_gap_sec)
    elif a.phase_gap_mode == "manual":
        print("phase gap: press Enter to start the timed phase", flush=True)
        import select
        ready, _, _ = select.select([sys.stdin], [], [], a.phase_gap_timeout_sec)
        if not ready:
            raise TimeoutError("phase gap: no Enter within %ds" % a.phase_gap_timeout_sec)
        sys.stdin.readline()
    elif a.phase_gap_mode == "file":
        deadline = time.monotonic() + a.phase_gap_timeout_sec
        while not os.path.exists(a.phase_gap_file):
            if time.monotonic() > deadline:
                raise TimeoutError("phase gap: %s did not appear within %ds"
                                   % (a.phase_gap_file, a.phase_gap_timeout_sec))
            time.sleep(0.1)


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


def run_phase(name, a, store, cfg, ids, mode, timed=False):
    ph = Phase(name)
    chunks = [ids[i:i + a.batch_size] for i in range(0, len(ids), a.batch_size)]
    rng = random.Random(a.rand_seed)
    modes = [mode if mode != "mixed" else ("read" if rng.randrange(100) < a.rwmixread else "write")
             for _ in chunks]
    nxt = [0]
    mu = threading.Lock()
    # --runtime: the timed phase cycles over its chunks until the time is up
    deadline = time.perf_counter() + a.runtime if timed and a.runtime and chunks else None

    def worker():
        bufs = Buffers(a, store)
        try:
            while True:
                with mu:
                    if deadline is not None:
                        if time.perf_counter() >= deadline:
                            return
                    elif nxt[0] >= len(chunks):
                        return
                    c, m = chunks[nxt[0] % len(chunks)], modes[nxt[0] % len(chunks)]
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
    ts = [threading.Thread(target=worker) for _ in range(a.numjobs * a.iodepth)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ph.t1 = time.perf_counter()
    return ph.report()


def main(argv=None):
    a = parse_args(argv)
    logging.basicConfig(level=getattr(logging, a.log_level.upper(), logging.INFO))
    store = MooncakeDistributedStore()
    rc = store.setup(a.local_hostname, a.metadata_server, a.global_segment_size,
                     a.local_buffer_size, a.protocol, a.device_name, a.master_server)
    if rc != 0:
        sys.exit("setup failed: %d" % rc)
    cfg = ReplicateConfig()
    cfg.replica_num = a.memory_replica_num
    cfg.nof_replica_num = a.nof_replica_num
    first = a.object_id_start
    ids = list(range(first, first + a.nr_objects))
    written = list(range(first, first + (a.write_objects or a.nr_objects)))
    prepared = list(range(first, first + (a.prepare_objects or a.nr_objects)))
    bad = 0
    try:
        if a.scenario in ("verify_write", "fill", "write_perf"):
            bad += run_phase("write", a, store, cfg, written, "write",
                             timed=a.scenario == "write_perf")
        if a.scenario == "verify_write":
            a.verify = True
            bad += run_phase("read", a, store, cfg, written, "read")
        if a.scenario in ("read_perf", "mixed_rw"):
            if a.prepare_mode != "none":
                bad += run_phase("prepare", a, store, cfg, prepared, "write")
            phase_gap(a)
            bad += run_phase("read" if a.scenario == "read_perf" else "mixed", a, store, cfg,
                             ids, "read" if a.scenario == "read_perf" else "mixed", timed=True)
    finally:
        if a.scenario != "fill":  # fill leaves its objects for a later run to read
            store.batch_remove([make_key(a, o) for o in sorted(set(ids + written + prepared))],
                               force=True)
        store.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
