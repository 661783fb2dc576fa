#!/usr/bin/python3
"""Cost of security: the same benchmarks with security off and on, measured
in one run, interleaved rep by rep (off, on, off, on, ...) so that load from
other work on the machine hits both sides alike. Security is switched for
every process (master, node, bench target/initiator/client) by
CRESCENT_CLUSTER_KEY_FILE, the way library users turn it on.

Rows (each figure: median over --reps):
  te-1M-read / te-1M-write    TCP loopback, 1 MiB requests, GB/s
  te-4K-read                  TCP loopback, 4 KiB requests in batches of 128, req/s
  store-1M put / get          crescent-bench store putget, 1 MiB values, GB/s (4 threads)
  store-4K put p50            crescent-bench store putget, 4 KiB values, p50 latency of put
  master RPC ping / put p50   crescent-master-bench, 1 thread: one RPC / PutStart+PutEnd
                              (what TLS adds per control-plane call)
The ratio column is on/off (1.00 = free). Security costs a handshake per
connection, signatures on metadata and, on the store's data path, a
per-object capability with every TE request (80 bytes, one HMAC per grant
on the node, one per shard on the master).

Two more modes isolate parts of "on" (store rows only: the TE rows use raw
engines, which carry no capabilities):
  nocap   the key, but the master grants no capabilities
          (CRESCENT_MASTER_CAPABILITIES=false): column on/nocap = their cost
  nocrc   security on, the end-to-end checksum off for the bench client
          (CRESCENT_STORE_CHECKSUM=0): column on/nocrc = the checksum's cost

A third mode, "tls" (TLS with mutual certificates on the control plane,
CRESCENT_TLS_CERT/KEY/CA for every process, certificates made with the
openssl CLI), runs the store rows only (TLS does not touch the TE ports);
its ratio column is TLS/off. --no-tls leaves it out.

Usage: bench/security/run.sh [--build build] [--reps 3] [--seconds 3] [--out results.md]
Never fails on timing; exits non-zero only if a tool fails to run."""
import argparse
import importlib.util
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


te = load("te_bench_run", os.path.join(ROOT, "bench", "te", "run.py"))
sb = load("store_bench_run", os.path.join(ROOT, "bench", "store", "run.py"))


TLS_ENV = ("CRESCENT_TLS_CERT", "CRESCENT_TLS_KEY", "CRESCENT_TLS_CA")


def set_security(on, key, tls=None, caps=True, crc=True):
    if on:
        os.environ["CRESCENT_CLUSTER_KEY_FILE"] = key
    else:
        os.environ.pop("CRESCENT_CLUSTER_KEY_FILE", None)
    os.environ["CRESCENT_MASTER_CAPABILITIES"] = "true" if caps else "false"
    os.environ["CRESCENT_STORE_CHECKSUM"] = "1" if crc else "0"
    for k in TLS_ENV:
        if tls:
            os.environ[k] = tls[k]
        else:
            os.environ.pop(k, None)


def make_pki(d):
    """A cluster CA and one member certificate (tests/security/tlsutil.py)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "security"))
    import tlsutil
    return tlsutil.tls_env(tlsutil.make_pki(d))


def te_case(bench, block, op, batch, secs):
    t, name = te.start_target(bench, ["--protocol", "tcp", "--buffer_size", "256MiB"])
    try:
        r = te.run_initiator(bench, ["--segment", name, "--protocol", "tcp", "--operation", op,
                                     "--block_size", block, "--batch_size", str(batch),
                                     "--threads", "2"], secs)
    finally:
        te.stop(t)
    return r


def store_case(build, size, ops):
    c = sb.Cluster(build, nodes=1, seg="1GB", proto="tcp")
    try:
        return sb.crescent(build, c.addr, ["--op", "putget", "--value_size", size, "--threads", "4",
                                           "--ops", str(ops), "--protocol", "tcp"])
    finally:
        c.close()


def rpc_rows(build, secs, mode, add):
    import subprocess
    tool = os.path.join(build, "tools", "crescent-master", "crescent-master-bench")
    c = sb.Cluster(build, nodes=0)
    try:
        for op, name in (("ping", "master RPC ping p50"), ("put", "master RPC put p50 (2 RPCs)")):
            out = subprocess.run([tool, "--master", c.addr, "--op", op, "--threads", "1",
                                  "--seconds", str(secs)], capture_output=True, text=True,
                                 timeout=120)
            line = [l for l in out.stdout.splitlines() if l.startswith("RESULT")]
            if not line:
                raise SystemExit("crescent-master-bench failed: " + out.stderr[-400:])
            kv = dict(f.split("=", 1) for f in line[0].split()[2:])
            add(name, mode, float(kv["p50_us"]), "us")
    finally:
        c.close()


def te_rows(bench, secs, mode, add):
    r = te_case(bench, "1MiB", "read", 16, secs)
    add("TE tcp 1 MiB READ", mode, float(r["gbps"]), "GB/s")
    r = te_case(bench, "1MiB", "write", 16, secs)
    add("TE tcp 1 MiB WRITE", mode, float(r["gbps"]), "GB/s")
    r = te_case(bench, "4KiB", "read", 128, secs)
    add("TE tcp 4 KiB READ", mode, float(r["req_per_s"]), "req/s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--out")
    ap.add_argument("--no-tls", action="store_true", help="leave the TLS mode out")
    ap.add_argument("--modes", help="comma list of modes to run (default: all of off,on,nocap,nocrc,tls "
                                    "that the other flags leave in)")
    ap.add_argument("--no-parts", action="store_true",
                    help="leave the nocap/nocrc modes (cost of capabilities, checksum) out")
    a = ap.parse_args()
    bench = os.path.join(a.build, "tools", "crescent-bench", "crescent-bench")
    d = tempfile.mkdtemp(prefix="crescent-sec-bench-")
    key = os.path.join(d, "cluster.key")
    with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    sb.LEASE_WAIT_S = getattr(sb, "LEASE_WAIT_S", 0)
    tls = None if a.no_tls else make_pki(d)
    modes = ("off", "on") + (() if a.no_parts else ("nocap", "nocrc")) + \
        (() if a.no_tls else ("tls",))
    if a.modes:
        modes = tuple(m for m in a.modes.split(",") if m in ("off", "on", "nocap", "nocrc", "tls"))
    rows = {}  # name -> {"off": [...], "on": [...], "tls": [...]}, unit

    def add(name, mode, val, unit):
        rows.setdefault(name, ({m: [] for m in modes}, unit))[0][mode].append(val)

    try:
        for rep in range(a.reps):
            for mode in modes:
                set_security(mode in ("on", "nocap", "nocrc"), key, tls if mode == "tls" else None,
                             caps=mode != "nocap", crc=mode != "nocrc")
                te.log("rep %d security %s" % (rep + 1, mode))
                if mode in ("off", "on"):
                    te_rows(bench, a.seconds, mode, add)
                if mode in ("off", "on", "tls"):
                    rpc_rows(a.build, a.seconds, mode, add)
                r = store_case(a.build, "1MB", 50)
                add("store 1 MiB put", mode, float(r["put"]["gbps"]), "GB/s")
                add("store 1 MiB get", mode, float(r["get"]["gbps"]), "GB/s")
                r = store_case(a.build, "4KB", 500)
                add("store 4 KiB put p50", mode, float(r["put"]["p50_us"]), "us")
                add("store 4 KiB get p50", mode, float(r["get"]["p50_us"]), "us")
    finally:
        set_security(False, key)
        os.environ.pop("CRESCENT_MASTER_CAPABILITIES", None)
        os.environ.pop("CRESCENT_STORE_CHECKSUM", None)
        te.cleanup()
        sb.cleanup()
    names = {"off": "security off", "on": "security on (key)", "nocap": "on, no capabilities",
             "nocrc": "on, no checksum", "tls": "TLS"}
    ratios = [("on/off", "on", "off"), ("on/nocap", "on", "nocap"), ("on/nocrc", "on", "nocrc"),
              ("TLS/off", "tls", "off")]
    ratios = [r for r in ratios if r[1] in modes and r[2] in modes]
    out = ["| benchmark | %s | unit | %s |" % (" | ".join(names[m] for m in modes),
                                              " | ".join(r[0] for r in ratios)),
           "|---|%s---|%s" % ("---|" * len(modes), "---|" * len(ratios))]
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    for name, (v, unit) in rows.items():
        m = {k: med(v.get(k, [])) for k in modes}
        fmt = "%.0f" if unit == "req/s" else "%.3f" if unit == "GB/s" else "%.1f"
        cell = lambda x: fmt % x if x == x else "-"
        ratio = lambda x, y: ("%.3f" % (x / y)) if y and x == x and y == y else "-"
        out.append("| %s | %s | %s | %s |" % (name, " | ".join(cell(m[k]) for k in modes), unit,
                                              " | ".join(ratio(m[a], m[b]) for _, a, b in ratios)))
    text = "\n".join(out)
    print(text)
    if a.out:
        open(a.out, "w").write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
