#!/usr/bin/python3
"""batch_get_into / batch_put_from from Python vs the C benchmark.

Measures the Python binding's overhead: the same work (one client, one
thread, --op get: batch_get_into of --batch keys of --value-size bytes into
registered memory; --op put: batch_put_from of --batch new keys from
registered memory; --iters timed calls) through

  * Python:  mooncake.store.MooncakeDistributedStore.batch_get_into / batch_put_from
  * C:       crescent-bench store --op batch_get / batch_put
             (cr_store_batch_get_into / cr_store_batch_put_from)

against the same cluster, one after the other, and prints both and the ratio
Python/C (goal >= 0.9). By default it starts its own cluster on 127.0.0.1
(crescent-master with embedded HTTP metadata + one crescent-node holding the
pages); --master/--metadata use an existing one.

    PYTHONPATH=<build>/python:python/compat python3 bench/python/bench_batch_get_into.py
"""
import argparse
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import time

import numpy as np

import crescent
from mooncake.store import MooncakeDistributedStore


def wait_line(p, pattern, timeout=30):
    buf, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.2)
        if r:
            chunk = os.read(p.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            m = re.search(pattern, buf.decode(errors="replace"))
            if m:
                return m
    raise RuntimeError("no %r from %s: %r" % (pattern, p.args[0], buf[-500:]))


def exe(name):
    p = crescent.find_executable(name)
    if not p:
        sys.exit("cannot find %s (build crescent; CRESCENT_BIN_DIR)" % name)
    return p


def start_cluster(procs, node_size, p2p):
    m = subprocess.Popen([exe("crescent-master"), "--rpc_port=0", "--rpc_address=127.0.0.1",
                          "--enable_http_metadata_server=true",
                          "--http_metadata_server_host=127.0.0.1", "--http_metadata_server_port=0",
                          "--metrics_port=0", "--metrics_address=127.0.0.1"],
                         stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    procs.append(m)
    g = wait_line(m, r"listening rpc=(\d+) .*http_metadata=(\d+)")
    master = "127.0.0.1:%s" % g.group(1)
    meta = "p2p" if p2p else "http://127.0.0.1:%s/metadata" % g.group(2)
    n = subprocess.Popen([exe("crescent-node"), "--master_server_address", master,
                          "--metadata_server", meta, "--local_hostname", "127.0.0.1",
                          "--global_segment_size", node_size],
                         stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    procs.append(n)
    wait_line(n, r"ready segment=")
    return master, meta


def bench_python(master, meta, batch, size, iters, warmup, op="get"):
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE" if meta == "p2p" else meta, 0, "16MB", "tcp", "", master)
    if rc != 0:
        sys.exit("setup failed: %d %s" % (rc, crescent.strerror(rc)))
    buf = np.empty(batch * size, dtype=np.uint8)
    buf[:] = 0x5A
    assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    keys = ["pybench-%d-%d" % (os.getpid(), i) for i in range(batch)]
    ptrs = [buf.ctypes.data + i * size for i in range(batch)]
    sizes = [size] * batch
    lat = []
    if op == "put":
        # each call stores `batch` new keys from the same registered slots
        # (crescent-bench store --op batch_put --slots batch does the same)
        done = []
        for it in range(warmup + iters):
            ks = ["%s-%d" % (k, it) for k in keys]
            t0 = time.perf_counter_ns()
            res = s.batch_put_from(ks, ptrs, sizes)
            dt = time.perf_counter_ns() - t0
            if any(r != 0 for r in res):
                sys.exit("batch_put_from failed: %r" % [r for r in res if r != 0][:4])
            done += ks
            if it >= warmup:
                lat.append(dt)
        s.batch_remove(done, force=True)
        s.unregister_buffer(buf.ctypes.data)
        s.close()
        secs = sum(lat) / 1e9
        return {"gbps": batch * size * iters / secs / 1e9,
                "p50_us": statistics.median(lat) / 1e3,
                "p99_us": sorted(lat)[max(0, int(len(lat) * 0.99) - 1)] / 1e3}
    res = s.batch_put_from(keys, ptrs, sizes)
    if any(r != 0 for r in res):
        sys.exit("prefill failed: %r" % res[:4])
    for it in range(warmup + iters):
        t0 = time.perf_counter_ns()
        res = s.batch_get_into(keys, ptrs, sizes)
        dt = time.perf_counter_ns() - t0
        if any(r != size for r in res):
            sys.exit("batch_get_into failed: %r" % [r for r in res if r != size][:4])
        if it >= warmup:
            lat.append(dt)
    for k in keys:
        s.remove(k, force=True)
    s.unregister_buffer(buf.ctypes.data)
    s.close()
    secs = sum(lat) / 1e9
    return {"gbps": batch * size * iters / secs / 1e9,
            "p50_us": statistics.median(lat) / 1e3,
            "p99_us": sorted(lat)[max(0, int(len(lat) * 0.99) - 1)] / 1e3}


def bench_c(master, meta, batch, size, iters, op="get"):
    r = subprocess.run([exe("crescent-bench"), "store", "--master_server_address", master,
                        "--metadata_server", meta, "--op", "batch_" + op, "--value_size", str(size),
                        "--threads", "1", "--batch", str(batch), "--keys", str(batch),
                        "--slots", str(batch), "--ops", str(iters)],
                       capture_output=True, text=True, timeout=600)
    m = re.search((r"RESULT .*op=batch_%s .* gbps=([\d.]+) .* p50_us=([\d.]+) p99_us=([\d.]+)"
                   r".* errors=(\d+)") % op, r.stdout)
    if r.returncode != 0 or not m or m.group(4) != "0":
        sys.exit("crescent-bench store failed (%d):\n%s\n%s" % (r.returncode, r.stdout, r.stderr))
    return {"gbps": float(m.group(1)), "p50_us": float(m.group(2)), "p99_us": float(m.group(3))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--op", choices=["get", "put"], default="get",
                    help="get: batch_get_into; put: batch_put_from of new keys")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--value-size", type=int, default=1 << 20)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=0,
                    help="untimed Python calls first (the C benchmark has none)")
    ap.add_argument("--rounds", type=int, default=7,
                    help="alternate C and Python runs this many times; the median of the per-round ratios is reported")
    ap.add_argument("--master", help="existing master host:port (default: start a cluster)")
    ap.add_argument("--metadata", help="metadata server of the existing cluster")
    ap.add_argument("--p2p", action="store_true",
                    help="P2P handshake instead of the master's HTTP metadata server")
    a = ap.parse_args()
    procs = []
    try:
        if a.master:
            master, meta = a.master, a.metadata or "p2p"
        else:
            # python's and C's keys, and the previous round's in quarantine
            # (removed keys are reused only after the read lease ends)
            need = a.batch * a.value_size * 8
            if a.op == "put":
                need = a.batch * a.value_size * (a.iters + a.warmup) * 3
            master, meta = start_cluster(procs, "%dMB" % max(256, need >> 20), a.p2p)
        pys, cs = [], []
        for r in range(a.rounds):  # alternate so drift on a busy machine hits both
            cs.append(bench_c(master, meta, a.batch, a.value_size, a.iters, a.op))
            pys.append(bench_python(master, meta, a.batch, a.value_size, a.iters, a.warmup, a.op))
            for name, res in (("c", cs[-1]), ("python", pys[-1])):
                print("RESULT bench=python_batch_%s impl=%s round=%d batch=%d value_size=%d "
                      "iters=%d gbps=%.3f p50_us=%.1f p99_us=%.1f"
                      % ("get_into" if a.op == "get" else "put_from", name, r, a.batch, a.value_size, a.iters, res["gbps"], res["p50_us"],
                         res["p99_us"]), flush=True)
        # this VM's speed drifts within minutes: each round runs C then Python
        # back to back and the ratio is the median of the per-round ratios
        py = statistics.median(x["gbps"] for x in pys)
        c = statistics.median(x["gbps"] for x in cs)
        ratio = statistics.median(p_["gbps"] / c_["gbps"] for p_, c_ in zip(pys, cs))
        print("RATIO op=%s value_size=%d python/c gbps=%.3f (median of %d per-round ratios; medians python %.3f, "
              "c %.3f GB/s; goal >= 0.9)" % (a.op, a.value_size, ratio, len(pys), py, c))
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
