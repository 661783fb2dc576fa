#!/usr/bin/python3
"""Transfer Engine benchmarks: crescent next to a reference measured in the
same run on the same machine, with ratios (crescent / reference).

Cases (each figure is the median over --reps runs of --seconds each):
  a  TCP loopback, 4 MiB and 1 MiB requests, READ and WRITE  vs  iperf3 -l 1M
  b  TCP loopback, 64 KiB requests, READ and WRITE vs  iperf3 -l 64K on loopback
     (a, b, e: iperf3 and crescent run back to back in every repetition; the
     ratio is the median of per-repetition ratios, shown with its min-max, and
     CPU per byte is user+sys of both processes of each side over bytes moved;
     crescent's initiator threads wait for each batch with cr_xfer_batch_wait,
     as an application does, not by polling its status)
  c  shm, 16 MiB requests, READ and WRITE          vs  single-thread memcpy of 16 MiB
  d  4 KiB requests in batches of 128 (tcp and shm): requests/s and p99 latency
     (reference: none; iperf3 has no request notion)
  e  TCP between two network namespaces over a veth pair, 4 MiB and 1 MiB READ/WRITE
     vs iperf3 between the same namespaces (created here and always deleted;
     addresses only inside them; needs root, skipped otherwise)

Usage: bench/te/run.sh [--build build] [--reps 5] [--seconds 3] [--cases abcde]
                       [--base OLD-crescent-bench]
                       [--out results.md]
Prints a markdown table (also written to --out). Never fails on timing; exits
non-zero only if a tool fails to run.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (ROOT, cleanup, cleanup_on_signals, free_port, log, procs,  # noqa: E402
                      stop, veth_pair)


def parse_result(text):
    for line in text.splitlines():
        if line.startswith("RESULT "):
            return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    return None


def start_target(bench, args, prefix=()):
    rf = tempfile.mktemp(prefix="crescent-bench-ready-")
    cmd = list(prefix) + [bench, "--mode", "target", "--ready_file", rf] + list(args)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    deadline = time.time() + 60
    while time.time() < deadline:
        if os.path.exists(rf):
            name = open(rf).read().strip()
            os.unlink(rf)
            return p, name
        if p.poll() is not None:
            raise RuntimeError("target exited: %s" % p.stderr.read())
        time.sleep(0.05)
    raise RuntimeError("target did not become ready: %s" % " ".join(cmd))


def run_initiator(bench, args, secs, prefix=()):
    cmd = list(prefix) + [bench, "--mode", "initiator", "--duration", str(secs)] + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=secs * 4 + 60)
    res = parse_result(r.stdout)
    if r.returncode != 0 or not res:
        raise RuntimeError("initiator failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr))
    return res


# The reference socket uses the congestion control crescent's tcp transport
# uses (cubic unless CRESCENT_TCP_CC says otherwise), so the comparison is
# like for like: the system default here is BBR, which paces every packet
# without an fq qdisc and roughly halves loopback/veth throughput.
TCP_CC = os.environ.get("CRESCENT_TCP_CC") or "cubic"


CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu(p):
    """user+sys CPU seconds a running process has used so far (all threads)."""
    with open("/proc/%d/stat" % p.pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def iperf3(host, port, length, secs, client_prefix=(), server=None):
    """One iperf3 run: (GB/s, CPU seconds of client + server, bytes received)."""
    cmd = list(client_prefix) + ["iperf3", "-c", host, "-p", str(port), "-l", length, "-t",
                                 str(secs), "-J"]
    if TCP_CC != "default":
        cmd += ["-C", TCP_CC]
    c0, s0 = children_cpu(), proc_cpu(server) if server else 0.0
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=secs * 4 + 30)
    c1, s1 = children_cpu(), proc_cpu(server) if server else 0.0
    if r.returncode != 0:
        raise RuntimeError("iperf3 failed: %s\n%s%s" % (" ".join(cmd), r.stdout[-500:], r.stderr))
    j = json.loads(r.stdout)
    rx = j["end"]["sum_received"]
    return rx["bits_per_second"] / 8 / 1e9, (c1 - c0) + (s1 - s0), rx["bytes"]


def start_iperf3_server(port, prefix=()):
    p = subprocess.Popen(list(prefix) + ["iperf3", "-s", "-p", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(p)
    time.sleep(0.5)
    return p


def med(xs):
    return statistics.median(xs) if xs else float("nan")


class Table:
    def __init__(self):
        self.rows = []

    def add(self, case, what, ref_name, ref, ours, unit="GB/s", extra="", ratio=None):
        if ratio is None:
            ratio = (ours / ref) if ref and ref == ref and ref > 0 else None
        self.rows.append((case, what, ref_name, ref, ours, unit, ratio, extra))
        log("  %-4s %-34s ref=%s crescent=%.3f %s %s %s" % (
            case, what, "-" if ref is None else "%.3f" % ref, ours, unit,
            "" if ratio is None else "ratio=%.2f" % ratio, extra))

    def markdown(self):
        out = ["| case | crescent run | reference run | reference | crescent | unit | ratio | notes |",
               "|---|---|---|---|---|---|---|---|"]
        for case, what, ref_name, ref, ours, unit, ratio, extra in self.rows:
            fmt = "%.0f" if unit == "req/s" else "%.3f"
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                case, what, ref_name or "-", "-" if ref is None else "%.3f" % ref, fmt % ours, unit,
                "-" if ratio is None else "%.2f" % ratio, extra))
        return "\n".join(out)


def bench_pair(bench, seg, base_args, ops, reps, secs, prefix=()):
    """Runs the initiator for each op reps times; returns {op: [results]}."""
    out = {}
    for op in ops:
        out[op] = []
        for _ in range(reps):
            out[op].append(run_initiator(bench, ["--segment", seg, "--operation", op] + base_args,
                                         secs, prefix))
    return out


def crescent_run(bench, tgt, seg, args, secs, prefix=()):
    """One initiator run: (GB/s, CPU seconds of initiator + target, bytes, result)."""
    t0 = proc_cpu(tgt)
    r = run_initiator(bench, ["--segment", seg] + args, secs, prefix)
    t1 = proc_cpu(tgt)
    return float(r["gbps"]), float(r["cpu_s"]) + (t1 - t0), int(r["bytes"]), r


def interleaved(t, case, reps, ref_name, ref_fn, runs):
    """Runs the reference and each crescent variant back to back in every
    repetition; the ratio is the median of the per-repetition ratios (the VM's
    speed drifts within minutes), with its spread, and CPU per byte of both
    sides (user+sys of both processes over bytes moved)."""
    refs, ours = [], {label: [] for label, _ in runs}
    for i in range(reps):
        refs.append(ref_fn())
        for label, fn in runs:
            ours[label].append(fn())
        log("  rep %d: ref %.2f GB/s, %s" % (i + 1, refs[-1][0], ", ".join(
            "%s %.2f" % (label, ours[label][-1][0]) for label, _ in runs)))
    ref_cpb = med([r[1] / r[2] * 1e9 for r in refs])  # CPU seconds per GB
    for label, _ in runs:
        rs = ours[label]
        ratios = [o[0] / r[0] for o, r in zip(rs, refs)]
        cpb = med([o[1] / o[2] * 1e9 for o in rs])
        cpu_ratios = [(o[1] / o[2]) / (r[1] / r[2]) for o, r in zip(rs, refs)]
        # initiator's voluntary context switches per MiB moved (sleeps and
        # wakeups: a design figure the machine's load barely moves)
        csw = [float(o[3]["vcsw"]) / (o[2] / 2**20) for o in rs if "vcsw" in o[3]]
        t.add(case, label, ref_name, med([r[0] for r in refs]), med([o[0] for o in rs]),
              ratio=med(ratios),
              extra="ratio min-max %.2f-%.2f; CPU s/GB %.3f vs %.3f (x%.2f, min-max %.2f-%.2f); "
                    "initiator vcsw/MiB %s; batch p99 %.0f us" % (
                  min(ratios), max(ratios), cpb, ref_cpb, med(cpu_ratios), min(cpu_ratios),
                  max(cpu_ratios), "%.2f" % med(csw) if csw else "-",
                  med([float(o[3]["batch_p99_us"]) for o in rs])))


def tcp_cases(t, reps, secs, case, where, blocks, host, port, srv, targets, nic_args=(),
              prefix=()):
    """targets: [(label prefix, crescent-bench, target process, segment)]; with
    --base the previous build runs interleaved too, for a before/after in one run."""
    runs = []
    for block, batch in blocks:
        for (tag, bench, tgt, seg), op in [(x, op) for op in ("read", "write") for x in targets]:
            # --wait block: each initiator thread sleeps in cr_xfer_batch_wait
            # until its batch is done, as an application (and the store
            # client) waits, and as iperf3 sleeps in send()/recv(); polling
            # the status every 20 us (--wait poll, for per-request latency)
            # burned as much CPU again as the transfer itself
            args = list(nic_args) + ["--protocol", "tcp", "--block_size", block, "--batch_size",
                                     str(batch), "--threads", "2", "--operation", op,
                                     "--wait", "block"]
            runs.append(("%stcp %s %s %s x%d" % (tag, where, block, op.upper(), batch),
                         lambda a=args, b=bench, tg=tgt, sg=seg: crescent_run(b, tg, sg, a, secs,
                                                                              prefix)))
    iperf_len = "64K" if blocks[0][0] == "64KiB" else "1M"
    interleaved(t, case, reps, "iperf3 -l %s -C %s %s" % (iperf_len, TCP_CC, where),
                lambda: iperf3(host, port, iperf_len, secs, prefix, srv), runs)


def start_targets(benches, args, prefix=()):
    out = []
    for tag, bench in benches:
        tgt, seg = start_target(bench, args, prefix)
        out.append((tag, bench, tgt, seg))
    return out


def case_tcp(t, benches, reps, secs, case, blocks):
    port = free_port()
    srv = start_iperf3_server(port)
    targets = []
    try:
        targets = start_targets(benches, ["--protocol", "tcp", "--buffer_size", "512MiB"])
        tcp_cases(t, reps, secs, case, "loopback", blocks, "127.0.0.1", port, srv, targets)
    finally:
        for x in targets:
            stop(x[2])
        stop(srv)


def case_shm(t, bench, memcpy_ref, reps, secs):
    refs = []
    for _ in range(reps):
        r = subprocess.run([memcpy_ref, "--block", str(16 << 20), "--span", str(512 << 20),
                            "--seconds", str(secs)], capture_output=True, text=True, timeout=secs * 4 + 30)
        refs.append(float(parse_result(r.stdout)["gbps"]))
    ref = med(refs)
    tgt, seg = start_target(bench, ["--protocol", "shm", "--buffer_size", "512MiB"])
    try:
        res = bench_pair(bench, seg, ["--protocol", "shm", "--block_size", "16MiB",
                                      "--batch_size", "4", "--threads", "1"],
                         ["read", "write"], reps, secs)
    finally:
        stop(tgt)
    for op, rs in res.items():
        t.add("c", "shm 16MiB %s x4, 1 thread" % op.upper(), "memcpy 16MiB, 1 thread", ref,
              med([float(r["gbps"]) for r in rs]), extra="transport=%s" % rs[0]["transport"])


def case_small(t, bench, reps, secs):
    for proto in ("tcp", "shm"):
        tgt, seg = start_target(bench, ["--protocol", proto, "--buffer_size", "64MiB"])
        try:
            res = bench_pair(bench, seg, ["--protocol", proto, "--block_size", "4KiB",
                                          "--batch_size", "128", "--threads", "1"],
                             ["read", "write"], reps, secs)
        finally:
            stop(tgt)
        for op, rs in res.items():
            t.add("d", "%s 4KiB %s x128, 1 thread" % (proto, op.upper()), None, None,
                  med([float(r["req_per_s"]) for r in rs]), unit="req/s",
                  extra="p99 %.0f us/req, batch p99 %.0f us" % (
                      med([float(r["p99_us"]) for r in rs]),
                      med([float(r["batch_p99_us"]) for r in rs])))


def case_netns(t, benches, reps, secs):
    if os.geteuid() != 0 or not shutil.which("ip"):
        log("  e: skipped (needs root and iproute2)")
        return
    pa, pb, ipa, ipb = veth_pair("crb", 213)
    port = 5201
    srv = start_iperf3_server(port, pb)
    targets = []
    try:
        targets = start_targets(benches, ["--protocol", "tcp", "--nics", ipb, "--buffer_size",
                                          "512MiB"], pb)
        tcp_cases(t, reps, secs, "e", "netns/veth", [("4MiB", 8), ("1MiB", 32)], ipb, port,
                  srv, targets, ["--nics", ipa], pa)
    finally:
        for x in targets:
            stop(x[2])
        stop(srv)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--cases", default="abcde")
    ap.add_argument("--out", default="")
    ap.add_argument("--base", default="",
                    help="another crescent-bench binary (e.g. a copy from before a change): its "
                         "tcp cases run interleaved with this build's, rows prefixed 'base '")
    a = ap.parse_args()
    bench = os.path.join(a.build, "tools", "crescent-bench", "crescent-bench")
    if not os.access(bench, os.X_OK):
        sys.exit("crescent-bench not found at %s (build first: scripts/build.sh)" % bench)
    memcpy_ref = os.path.join(a.build, "bench-te-memcpy_ref")
    if "c" in a.cases:
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", memcpy_ref,
                        os.path.join(ROOT, "bench", "te", "memcpy_ref.c")], check=True)
    if "a" in a.cases or "b" in a.cases or "e" in a.cases:
        if not shutil.which("iperf3"):
            sys.exit("iperf3 not installed (scripts/install-deps.sh)")
    benches = [("", bench)] + ([("base ", a.base)] if a.base else [])
    cleanup_on_signals()
    t = Table()
    secs = a.seconds
    try:
        if "a" in a.cases:
            log("a: tcp loopback 4 MiB and 1 MiB vs iperf3 -l 1M, interleaved")
            case_tcp(t, benches, a.reps, secs, "a", [("4MiB", 8), ("1MiB", 32)])
        if "b" in a.cases:
            log("b: tcp loopback 64 KiB vs iperf3 -l 64K, interleaved")
            case_tcp(t, benches, a.reps, secs, "b", [("64KiB", 128)])
        if "c" in a.cases:
            log("c: shm 16 MiB vs memcpy")
            case_shm(t, bench, memcpy_ref, a.reps, secs)
        if "d" in a.cases:
            log("d: 4 KiB requests, batches of 128")
            case_small(t, bench, a.reps, secs)
        if "e" in a.cases:
            log("e: tcp between network namespaces vs iperf3")
            case_netns(t, benches, a.reps, secs)
    finally:
        cleanup()
    md = ("Transfer Engine benchmark, %s, %d cores, median of %d x %.0fs; GB/s = 1e9 bytes/s; "
          "ratio = crescent / reference\n\n" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                               os.cpu_count(), a.reps, secs)) + t.markdown()
    print(md)
    if a.out:
        with open(a.out, "w") as f:
            f.write(md + "\n")


if __name__ == "__main__":
    main()
