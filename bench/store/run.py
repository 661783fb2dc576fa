#!/usr/bin/python3
"""Store benchmark: crescent next to Redis measured in the same run on the
same machine, with ratios (crescent / Redis).

Cases (each figure is the median over --reps runs; for a and b each
repetition runs Redis and crescent back to back and the ratio is the median
of the per-repetition ratios, after one unmeasured warm-up of each):
  a  same host: redis-server on a private loopback port, `redis-benchmark -t
     set,get -d <size> -c <clients> -P 1`, vs crescent put/get (zero-copy
     put_from/get_into, <clients> threads of one client) against a local
     cluster (crescent-master + 2 crescent-node) for 1 MiB and 4 MiB values.
     crescent is measured with the default same-host path (protocol
     "tcp,shm": the TE picks shm for same-host peers) and with tcp only.
     Like redis-benchmark, which sends the same payload buffer with every
     request, each crescent client thread reuses one value buffer
     (crescent-bench --slots 1); the "distinct buffers" rows give every key
     its own buffer (--slots 0), so each put reads memory no cache holds.
  b  across network namespaces (veth pair, created here and always deleted;
     needs root): redis-server / crescent-master + nodes in namespace B,
     redis-benchmark / the crescent client in namespace A; tcp; buffer
     reused and distinct buffers as in a.
  c  batch_is_exist of 128 keys per call: keys/s (no Redis counterpart).
  d  4 KiB put/get latency p50/p99, one client thread, vs redis-benchmark
     -d 4096 -c 1 p50/p99; puts with the one-round-trip reserved put on and
     off (CRESCENT_PUT_RESERVE=0), interleaved in every repetition; and the
     CPU the master spends per operation against redis-server's per request
     (both busy-poll or not as they do by default: crescent-master's
     --rpc_spin_us, the client's CRESCENT_RPC_SPIN_US).
  e  the same as d across network namespaces (the namespaces of b; tcp):
     Redis and the crescent cluster in B, redis-benchmark and the crescent
     client in A; each repetition runs Redis and then crescent.
  In d and e every repetition also measures one bare tcp round trip
  between two processes on the same path (bench/store/rt_floor.c, built
  here with cc: 64 bytes out, 4 KiB back, like a get's; both sides
  busy-polling as crescent's do, and both sleeping as Redis's do). A
  crescent put or get over tcp is two round trips (master, node), Redis's
  one: the "bare round trips" rows say how many polling round trips each
  tcp operation costs.

Usage: bench/store/run.sh [--build build] [--reps 5] [--clients 4] [--cases abcde]
                          [--base-env VAR=VALUE[,...]] (d, e: the client also with these)
                          [--out results.md]
Prints a markdown table (also written to --out). Never fails on timing; exits
non-zero only if a tool fails to run.
"""
import argparse
import atexit
import csv
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (ROOT, cleanup, cleanup_on_signals, emit, free_port, log, procs,  # noqa: E402
                      stop, veth_pair)


# crescent-master's default --default_kv_lease_ttl is 5000 ms; wait a little longer
LEASE_WAIT_S = 6.0


def med(v):
    return statistics.median(v) if v else 0.0


def wait_file(path, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + path)


class Cluster:
    """crescent-master + n crescent-node processes (optionally in a netns)."""

    def __init__(self, build, host="127.0.0.1", prefix=(), nodes=2, seg="2GB", proto="tcp,shm"):
        self.dir = tempfile.mkdtemp(prefix="crescent-store-bench-")
        master = os.path.join(build, "tools", "crescent-master", "crescent-master")
        node = os.path.join(build, "tools", "crescent-node", "crescent-node")
        pf = os.path.join(self.dir, "master.port")
        self.procs = []
        p = subprocess.Popen(list(prefix) + [master, "--rpc_address", host, "--rpc_port", "0",
                                             "--metrics_port", "-1", "--port_file", pf],
                             stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "master.log"), "w"))
        procs.append(p)
        self.procs.append(p)
        line = wait_file(pf)
        self.port = int(line.split("rpc=")[1].split()[0])
        self.addr = "%s:%d" % (host, self.port)
        for i in range(nodes):
            rf = os.path.join(self.dir, "node%d.ready" % i)
            p = subprocess.Popen(list(prefix) + [node, "--master_server_address", self.addr,
                                                 "--global_segment_size", seg, "--local_hostname", host,
                                                 "--protocol", proto, "--ready_file", rf],
                                 stdout=subprocess.DEVNULL,
                                 stderr=open(os.path.join(self.dir, "node%d.log" % i), "w"))
            procs.append(p)
            self.procs.append(p)
            wait_file(rf, 120)

    def close(self):
        for p in reversed(self.procs):
            stop(p)
            if p in procs:
                procs.remove(p)
        shutil.rmtree(self.dir, ignore_errors=True)


def parse_results(text):
    out = []
    for line in text.splitlines():
        if line.startswith("RESULT "):
            out.append(dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv))
        elif line.startswith(("TEREF ", "TERPC ")):  # --te_ref(_rpc): "teref:<op>", "terpc:<op>"
            d = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
            d["op"] = line[:5].lower() + ":" + d.get("op", "")
            out.append(d)
    return out


def crescent(build, addr, args, prefix=(), env=None):
    """One crescent-bench store run; env: extra environment variables (e.g.
    {"CRESCENT_PUT_RESERVE": "0"} for the two-round-trip put)."""
    bench = os.path.join(build, "tools", "crescent-bench", "crescent-bench")
    cmd = list(prefix) + [bench, "store", "--master_server_address", addr] + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **env) if env else None)
    res = parse_results(r.stdout)
    if not res:
        raise RuntimeError("crescent-bench store failed: %s\n%s" % (" ".join(cmd), r.stderr[-2000:]))
    for x in res:
        if x.get("te_errors", "0") != "0":  # --te_ref: the reference's batches failed
            raise RuntimeError("crescent-bench store: %s raw TE batches failed: %s"
                               % (x["te_errors"], " ".join(cmd)))
        if x.get("errors", "0") != "0":
            # a failed op is cheap, so a run with errors would flatter the figure:
            # it is not a measurement
            raise RuntimeError("crescent-bench store: %s errors in %s (pool full of space that is "
                               "still quarantined?): %s" % (x["errors"], x["op"], " ".join(cmd)))
    # the bench removes its keys at the end; the master keeps removed space out of
    # reuse until every lease that may cover it has expired (stale-read guard), so
    # let that pass before the next run reuses the pool
    time.sleep(LEASE_WAIT_S)
    return {x["op"]: x for x in res}


def redis_start(host, prefix=()):
    port = free_port()
    p = subprocess.Popen(list(prefix) + ["redis-server", "--port", str(port), "--bind", host,
                                         "--save", "", "--appendonly", "no", "--protected-mode", "no"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(p)
    deadline = time.time() + 10
    while time.time() < deadline:
        r = subprocess.run(list(prefix) + ["redis-cli", "-h", host, "-p", str(port), "ping"],
                           capture_output=True, text=True)
        if "PONG" in r.stdout:
            return p, port
        time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


RT_FLOOR = {}


def rt_floor_bin():
    """bench/store/rt_floor.c built once per run (None without a C compiler)."""
    if "bin" not in RT_FLOOR:
        cc = shutil.which("cc") or shutil.which("gcc")
        d = tempfile.mkdtemp(prefix="crescent-rt-floor-")
        atexit.register(shutil.rmtree, d, True)
        out = os.path.join(d, "rt_floor")
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rt_floor.c")
        ok = cc and subprocess.run([cc, "-O2", "-o", out, src]).returncode == 0
        RT_FLOOR["bin"] = out if ok else None
        if not ok:
            log("rt_floor: no C compiler or build failed: bare round trips not measured")
    return RT_FLOOR["bin"]


def rt_floor_start(host, prefix=()):
    """The bare round trip's server on host (in prefix's namespace); its port,
    or None."""
    b = rt_floor_bin()
    if not b:
        return None
    port = free_port()
    procs.append(subprocess.Popen(list(prefix) + [b, "serve", host, str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(0.3)
    return port


def rt_floor_ping(host, port, spin, prefix=(), size=4096):
    """p50 / p99 (us) of 20,000 round trips, 64 B out and size bytes back."""
    r = subprocess.run(list(prefix) + [rt_floor_bin(), "ping", host, str(port), "20000", "64",
                                       str(size), str(spin)],
                       capture_output=True, text=True, timeout=120)
    kv = dict(x.split("=", 1) for x in r.stdout.split() if "=" in x)
    if r.returncode != 0 or "p50_us" not in kv:
        raise RuntimeError("rt_floor ping failed: %s" % r.stderr[-500:])
    return float(kv["p50_us"]), float(kv["p99_us"])


def redis_bench(host, port, size, clients, n, prefix=()):
    r = subprocess.run(list(prefix) + ["redis-benchmark", "-h", host, "-p", str(port), "-t", "set,get",
                                       "-d", str(size), "-c", str(clients), "-n", str(n), "-P", "1",
                                       "--csv"], capture_output=True, text=True, timeout=600)
    out = {}
    for row in csv.DictReader(io.StringIO(r.stdout)):
        out[row["test"].lower()] = {"rps": float(row["rps"]), "p50_ms": float(row["p50_latency_ms"]),
                                    "p99_ms": float(row["p99_latency_ms"])}
    if "set" not in out or "get" not in out:
        raise RuntimeError("redis-benchmark failed: " + r.stderr[-1000:])
    return out


class Table:
    def __init__(self):
        self.rows = []

    def add(self, case, what, ref_name, ref, val, unit, ratio=None):
        if ratio is None:
            ratio = val / ref if ref else None
        ratio = ("%.2fx" % ratio) if ratio else "-"
        self.rows.append((case, what, ref_name, ref, val, unit, ratio))
        log("  %-44s ref %10.3f  crescent %10.3f %s  %s" % (what, ref, val, unit, ratio))

    def markdown(self):
        s = "| case | crescent | reference | reference value | crescent value | unit | ratio |\n"
        s += "|---|---|---|---|---|---|---|\n"
        for c, w, rn, r, v, u, ra in self.rows:
            s += "| %s | %s | %s | %.3f | %.3f | %s | %s |\n" % (c, w, rn, r, v, u, ra)
        return s


def case_throughput(t, build, case, addr, host, rport, clients, reps, variants, prefix=(), rprefix=()):
    """variants: (protocol, slots) pairs. slots 1: each client thread puts from
    and gets into one buffer it reuses, as redis-benchmark reuses its payload
    buffer for every request (like for like); slots 0: a distinct buffer per
    key, so every put reads memory that is not in any cache."""
    # The machine's speed drifts (shared VM: the same run varies by +-25 %
    # within minutes), so each repetition runs Redis and then crescent back to
    # back, and the ratio reported is the median of the per-repetition ratios.
    # One unmeasured warm-up of each comes first (fresh connections, first
    # touch of the servers' memory).
    for size, n in ((1 << 20, 2000), (4 << 20, 500)):
        mib = size >> 20

        def cres(v):
            proto, slots = v
            return crescent(build, addr, ["--op", "putget", "--value_size", str(size),
                                          "--threads", str(clients), "--ops", str(max(1, n // clients)),
                                          "--slots", str(slots),
                                          "--protocol", proto, "--local_hostname", host_of(prefix)],
                            prefix)
        redis_bench(host, rport, size, clients, n // 4, rprefix)
        for v in variants:
            cres(v)
        ref, runs = [], {v: [] for v in variants}
        for _ in range(reps):
            ref.append(redis_bench(host, rport, size, clients, n, rprefix))
            line = "    rep: redis SET %.2f GET %.2f GB/s" % (ref[-1]["set"]["rps"] * size / 1e9,
                                                          ref[-1]["get"]["rps"] * size / 1e9)
            for v in variants:
                runs[v].append(cres(v))
                line += "; %s slots %d put %s get %s" % (v[0], v[1], runs[v][-1]["put"]["gbps"],
                                                         runs[v][-1]["get"]["gbps"])
            log(line)
        for v in variants:
            proto, slots = v
            what = proto + (", buffer reused" if slots == 1 else ", distinct buffers" if slots == 0
                            else ", %d buffers" % slots)
            for op in ("set", "get"):
                mine = "put" if op == "set" else "get"
                refgb = [r[op]["rps"] * size / 1e9 for r in ref]
                gb = [float(r[mine]["gbps"]) for r in runs[v]]
                t.add(case, "%s %d MiB x%d clients (%s)" % (mine, mib, clients, what),
                      "redis %s -d %d -c %d" % (op.upper(), size, clients), med(refgb), med(gb), "GB/s",
                      ratio=med([g / r for g, r in zip(gb, refgb) if r > 0]))


def cpu_s(pid):
    """user + system CPU seconds of process pid so far (None if unreadable)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def case_latency(t, build, case, addr, host, rport, reps, protos, prefix=(), rprefix=(), where="",
                 mpid=None, rpid=None, fport=None):
    """4 KiB put/get p50/p99 of one client thread vs redis-benchmark -c 1;
    each repetition runs Redis and then crescent (each protocol, with the
    one-round-trip put through a reservation and with it off,
    CRESCENT_PUT_RESERVE=0) back to back; figures are medians of the
    repetitions, with the min-max of the crescent figure. With mpid / rpid
    (the master's and redis-server's pids), also the server CPU per
    operation (user + system, /proc; 10 ms ticks over ~10,000 operations)."""
    variants = [(p, r) for p in protos for r in ("on", "off") + (("base",) if BASE_ENV else ())]
    ref, res = [], {v: [] for v in variants}
    floor = {1: [], 0: []}  # bare round trip p50, polling / sleeping (rt_floor.c)
    rcpu, mcpu = [], {v: [] for v in variants}
    for _ in range(reps):
        c0 = cpu_s(rpid) if rpid else None
        ref.append(redis_bench(host, rport, 4096, 1, 20000, rprefix))
        c1 = cpu_s(rpid) if rpid else None
        if c0 is not None and c1 is not None:
            rcpu.append((c1 - c0) * 1e6 / 40000)  # -t set,get: 2 x 20000 requests
        if fport:
            for spin in (1, 0):
                floor[spin].append(rt_floor_ping(host, fport, spin, rprefix)[0])
        for proto, rsv in variants:
            m0 = cpu_s(mpid) if mpid else None
            res[(proto, rsv)].append(
                crescent(build, addr, ["--op", "putget", "--value_size", "4KB",
                                       "--threads", "1", "--ops", "5000",
                                       "--protocol", proto,
                                       "--local_hostname", host_of(prefix)],
                         prefix, env=dict({"CRESCENT_PUT_RESERVE": "0" if rsv == "off" else "1"},
                                          **(BASE_ENV if rsv == "base" else {}))))
            m1 = cpu_s(mpid) if mpid else None
            if m0 is not None and m1 is not None:
                # the 5000 puts, 5000 gets and the bench's 5000 removes
                mcpu[(proto, rsv)].append((m1 - m0) * 1e6 / 15000)
    for proto, rsv in variants:
        if mcpu[(proto, rsv)] and rcpu:
            v = mcpu[(proto, rsv)]
            t.add(case, "master CPU per op: put, get or remove (%s%s, reserve %s) [min-max %.1f-%.1f; redis %.1f-%.1f]"
                  % (proto, where, rsv if rsv != "base" else "on, " + ",".join(
                      "%s=%s" % kv for kv in sorted(BASE_ENV.items())), min(v), max(v),
                     min(rcpu), max(rcpu)),
                  "redis-server CPU per SET or GET", med(rcpu), med(v), "us")
    if floor[1]:
        for spin, how in ((1, "both sides busy-polling"), (0, "both sides sleeping")):
            v = floor[spin]
            t.add(case, "bare tcp round trip p50, %s%s [min-max %.1f-%.1f]"
                  % (how, where, min(v), max(v)),
                  "redis GET p50", med([r["get"]["p50_ms"] * 1000 for r in ref]), med(v), "us")
        for proto, rsv in variants:
            if proto != "tcp" or rsv != "on":
                continue
            for op in ("put", "get"):
                vals = [float(x[op]["p50_us"]) for x in res[(proto, rsv)]]
                t.add(case, "%s 4 KiB p50 (tcp%s) in bare polling round trips" % (op, where),
                      "bare round trip p50", med(floor[1]), med(vals), "us")
    for proto, rsv in variants:
        for op, rop in (("put", "set"), ("get", "get")):
            if op == "get" and rsv == "off":
                continue  # the reservation changes puts only; gets run in both
            for pct in ("p50", "p99"):
                vals = [float(x[op][pct + "_us"]) for x in res[(proto, rsv)]]
                rvals = [r[rop][pct + "_ms"] * 1000 for r in ref]
                label = "%s 4 KiB %s (%s%s%s%s)" % (
                    op, pct, proto, where,
                    ", reserve %s" % ("on" if rsv == "base" else rsv) if op == "put" else "",
                    ", " + ",".join("%s=%s" % kv for kv in sorted(BASE_ENV.items()))
                    if rsv == "base" else "")
                t.add(case, label + " [min-max %.0f-%.0f; redis %.0f-%.0f]"
                      % (min(vals), max(vals), min(rvals), max(rvals)),
                      "redis %s %s" % (rop.upper(), pct), med(rvals), med(vals), "us")


HOSTS = {}
BASE_ENV = {}  # --base-env: cases d and e also run the reserve-on client with these variables


def host_of(prefix):
    return HOSTS.get(tuple(prefix), "127.0.0.1")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--cases", default="abcd")
    ap.add_argument("--out", default="")
    ap.add_argument("--base-env", default="",
                    help="VAR=VALUE[,VAR=VALUE]: cases d and e also run the client (reserve on) "
                         "with these variables in every repetition, e.g. CRESCENT_LOCATION_CACHE=0")
    a = ap.parse_args()
    for kv in filter(None, a.base_env.split(",")):
        k, _, v = kv.partition("=")
        BASE_ENV[k] = v
    for tool in ("redis-server", "redis-benchmark", "redis-cli"):
        if not shutil.which(tool):
            sys.exit("%s not installed (scripts/install-deps.sh)" % tool)
    cleanup_on_signals()
    t = Table()
    try:
        if "a" in a.cases or "c" in a.cases or "d" in a.cases:
            rp, rport = redis_start("127.0.0.1")
            fport = rt_floor_start("127.0.0.1") if "d" in a.cases else None
            cl = Cluster(a.build)
            try:
                if "a" in a.cases:
                    log("a: same host, 1 and 4 MiB, %d clients" % a.clients)
                    case_throughput(t, a.build, "a", cl.addr, "127.0.0.1", rport, a.clients, a.reps,
                                    (("tcp,shm", 1), ("tcp", 1), ("tcp,shm", 0)))
                if "c" in a.cases:
                    log("c: batch_is_exist, 128 keys per call")
                    vals = [float(crescent(a.build, cl.addr, ["--op", "exist", "--batch", "128", "--threads", "1",
                                                            "--ops", "2000", "--keys", "256",
                                                            "--value_size", "4KB"])["exist"]["keys_per_s"])
                            for _ in range(a.reps)]
                    t.add("c", "batch_is_exist 128 keys/call x1 thread", "-", 0, med(vals), "keys/s")
                if "d" in a.cases:
                    log("d: 4 KiB put/get latency, 1 client")
                    case_latency(t, a.build, "d", cl.addr, "127.0.0.1", rport, a.reps,
                                 ("tcp,shm", "tcp"), mpid=cl.procs[0].pid, rpid=rp.pid,
                                 fport=fport)
            finally:
                cl.close()
                stop(rp)
        if "b" in a.cases or "e" in a.cases:
            if os.geteuid() != 0 or not shutil.which("ip"):
                log("b, e: skipped (needs root and iproute2)")
            else:
                log("b, e: across network namespaces (veth), tcp")
                pa, pb, ipa, ipb = veth_pair("crs", 214)
                HOSTS[pa] = ipa
                rp, rport = redis_start(ipb, pb)
                fport = rt_floor_start(ipb, pb) if "e" in a.cases else None
                cl = Cluster(a.build, host=ipb, prefix=pb, proto="tcp")
                try:
                    if "b" in a.cases:
                        case_throughput(t, a.build, "b", cl.addr, ipb, rport, a.clients, a.reps,
                                        (("tcp", 1), ("tcp", 0)),
                                        prefix=pa, rprefix=pa)
                    if "e" in a.cases:
                        log("e: 4 KiB put/get latency across namespaces, 1 client")
                        case_latency(t, a.build, "e", cl.addr, ipb, rport, a.reps, ("tcp",),
                                     prefix=pa, rprefix=pa, where=", across namespaces",
                                     fport=fport)
                finally:
                    cl.close()
                    stop(rp)
    finally:
        cleanup()
    md = ("Store benchmark, %s, %d cores, median of %d; GB/s = 1e9 bytes/s; ratio = crescent / Redis "
          "(cases a, b: median of the per-repetition ratios)\n\n"
          % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(), a.reps)) + t.markdown()
    emit(md, a.out)


if __name__ == "__main__":
    main()
