#!/usr/bin/python3
"""Disk tier benchmark, every figure next to its reference from the same run:

1. gets served from a node's disk tier (crescent-bench tier: batches of QD
   keys in a fresh random order each round, and single gets) vs fio
   reading the node's own data file with O_DIRECT, io_uring, the same
   block size and queue depth (randread); with --ref_build, a second
   build's cluster is read in the same rounds (paths ref:local,
   ref:server) for before/after figures;
2. write-through offload rate vs fio sequential O_DIRECT writes of the same
   block size and queue depth in the same directory;
3. hit rate vs DRAM capacity with and without a disk tier on a replay of the
   shared conversation trace (vendored in data/traces), all 12,031 requests,
   through the real store (crescent-bench tier --phase replay: a request
   reads the prefix blocks the store holds, then puts the blocks it had to
   compute; 16 KiB per 512-token block, arrival times / --speedup).

4. gets served from the shared-file-system tier (crescent-master
   --root_fs_dir: every put persisted as a file; the cluster is then stopped
   and started again on the directory, so every timed get reads a file) vs
   fio randread with O_DIRECT, io_uring, the same block size and queue depth
   on a file of the same total size in the same directory.

Usage: bench/tier/run.py [--build build] [--dir /tmp] [--quick] [--skip get,offload,replay,fs]
"""
import argparse
import json
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MiB = 1 << 20


class Cluster:
    def __init__(self, build, ssd_dir, dram, ssd, master_args=(), qd=16):
        self.procs = []
        self.build = build
        m = self.start([self.exe("crescent-master"), "--rpc_port=0", "--rpc_address=127.0.0.1",
                        "--enable_http_metadata_server=true",
                        "--http_metadata_server_host=127.0.0.1",
                        "--http_metadata_server_port=0", "--metrics_address=127.0.0.1",
                        "--metrics_port=0"] + list(master_args))
        g = self.wait(m, r"listening rpc=(\d+) metrics=(\d+) http_metadata=(\d+)")
        self.master = "127.0.0.1:%s" % g.group(1)
        self.metrics_port = int(g.group(2))
        self.metadata = "http://127.0.0.1:%s/metadata" % g.group(3)
        argv = [self.exe("crescent-node"), "--master_server_address", self.master,
                "--metadata_server", self.metadata, "--local_hostname", "127.0.0.1",
                "--global_segment_size", str(dram)]
        if ssd_dir:
            argv += ["--ssd_path", ssd_dir, "--ssd_capacity", str(ssd),
                     "--ssd_queue_depth", str(qd)]
        n = self.start(argv)
        self.wait(n, r"ready segment=")

    def exe(self, name):
        return os.path.join(self.build, "tools", name, name)

    def start(self, argv):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    @staticmethod
    def wait(p, pat, timeout=30):
        buf = b""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r, _, _ = select.select([p.stdout], [], [], 0.2)
            if r:
                c = os.read(p.stdout.fileno(), 4096)
                if not c:
                    break
                buf += c
                m = re.search(pat, buf.decode(errors="replace"))
                if m:
                    return m
        raise RuntimeError("no %r in %r" % (pat, buf[-500:]))

    def settle(self):
        """waits (up to 120 s) until the master's tier tasks are done"""
        end = time.monotonic() + 120
        while time.monotonic() < end:
            m = self.metrics()
            if m["tier_tasks_queued"] == 0 and m["tier_tasks_running"] == 0:
                return
            time.sleep(0.1)

    def dram_resident(self, n):
        """how many of tier-0..tier-<n-1> have a replica that is not on disk"""
        left = 0
        for k in range(n):
            r = urllib.request.urlopen("http://127.0.0.1:%d/query_key?key=tier-%d"
                                       % (self.metrics_port, k), timeout=10)
            reps = json.loads(r.read()).get("replicas", [])
            left += any(x.get("tier") != "ssd" for x in reps)
        return left

    def metrics(self):
        t = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port).read()
        out = {}
        for line in t.decode().splitlines():
            if line.startswith("crescent_master_"):
                k, v = line.split()
                out[k[16:]] = int(v)
        return out

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


HUGE = "/proc/sys/vm/nr_hugepages"


def fio(path, rw, bs, qd, size, runtime, huge=False, extra=()):
    """fio with its default (malloc, 4 KiB page) buffers, or with huge=True
    its buffers in huge pages (--iomem=shmhuge: a direct I/O into 4 KiB pages
    is one DMA segment per page, and virtio-blk takes 254 per request, so
    on this machine the huge-page fio is 3-5x faster at 1 MiB). The huge
    pages are reserved for the run (root) and given back after it; None if
    they cannot be. extra: more fio options (e.g. --verify=crc32c)."""
    cmd = ["fio", "--name=ref", "--filename=" + path, "--rw=" + rw, "--bs=%d" % bs,
           "--iodepth=%d" % qd, "--direct=1", "--ioengine=io_uring", "--size=%d" % size,
           "--runtime=%d" % runtime, "--time_based", "--output-format=json"] + list(extra)
    old = None
    if huge:
        try:
            with open(HUGE) as f:
                old = int(f.read())
            with open(HUGE, "w") as f:
                f.write(str(old + qd * bs // (2 << 20) + 16))
        except OSError:
            return None
        cmd.append("--iomem=shmhuge")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    finally:
        if old is not None:
            with open(HUGE, "w") as f:
                f.write(str(old))
    j = json.loads(out.stdout)["jobs"][0]
    side = j["read"] if "read" in rw else j["write"]
    pct = side["clat_ns"].get("percentile", {})
    cpu_s = (j["usr_cpu"] + j["sys_cpu"]) / 100.0 * j["elapsed"]
    return {"gbps": side["bw_bytes"] / 1e9, "cpu_s_per_gb": cpu_s / (side["io_bytes"] / 1e9),
            "p50_us": pct.get("50.000000", 0) / 1e3, "p99_us": pct.get("99.000000", 0) / 1e3}


def bench_result(line):
    return {k: v for k, v in re.findall(r"(\w+)=(\S+)", line)}


def proc_cpu_s(pid):
    """user + system CPU seconds of a running process (all its threads)."""
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def huge_gbps(f, kind="huge"):
    return f[kind]["gbps"] if f.get(kind) else float("nan")


def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def get_bench(a, vs, keys, qd, shapes, paths):
    """a.reps interleaved rounds: crescent gets for each read path and
    shape (threads, batch) (--rounds passes over the disk-resident keys; T
    threads issue batches of B keys each; B = qd/T keeps at most qd reads
    outstanding, like fio's iodepth, and drains the node's queue between
    batches; a larger B keeps the node's queue of qd full across a batch),
    then fio on the node's data file right after."""
    d = tempfile.mkdtemp(prefix="crescent-tierbench-", dir=a.dir)
    # paths "ref:local"/"ref:server" read from a second cluster of the
    # --ref_build binaries (its own data file in the same directory)
    d2 = tempfile.mkdtemp(prefix="crescent-tierbench-ref-", dir=a.dir) if a.ref_build else None
    clusters = []
    try:
        for build, dd in ((a.build, d), (a.ref_build, d2)):
            if not dd:
                continue
            # every get of the timed rounds is a disk read: no promotion to DRAM
            c = Cluster(build, dd, 64 * MiB, 2048 * MiB, ["--tier_promote=false"], qd=qd)
            clusters.append(c)
            # the puts (and the offloads they cause) before any timed round,
            # then until the master's tier tasks are done. Puts only: a get
            # of an old key still in DRAM (its offload not done yet) would
            # make it the most recently used, so it would stay in DRAM and
            # the timed rounds would read some keys from memory
            env = dict(os.environ, CRESCENT_TIER_LOCAL="1")
            subprocess.run([c.exe("crescent-bench"), "tier", "--master_server_address", c.master,
                            "--metadata_server", c.metadata, "--value_size", str(vs), "--keys",
                            str(keys), "--qd", str(qd), "--rounds", "1", "--phase", "put"],
                           capture_output=True, text=True, timeout=600, env=env, check=True)
            c.settle()
            # the timed keys (the oldest half) must be on disk only: an old
            # key whose offload was still running when the pool needed room
            # keeps its DRAM copy (newer ones were demoted instead), and a
            # get of it would read memory. Newer keys are put until none is
            # left (each run a DRAM's worth)
            for base in range(1, 6):
                if c.dram_resident(keys // 2) == 0:
                    break
                subprocess.run([c.exe("crescent-bench"), "tier", "--master_server_address",
                                c.master, "--metadata_server", c.metadata, "--value_size",
                                str(vs), "--keys", str(64 * MiB // vs + 1), "--key_base",
                                str(base * 100000), "--phase", "put"],
                               capture_output=True, text=True, timeout=600, env=env, check=True)
                c.settle()
            left = c.dram_resident(keys // 2)
            if left:
                print("# %d of the %d timed keys still have a DRAM copy" % (left, keys // 2))
        c = clusters[0]
        before = c.metrics()
        vfile = os.path.join(d, "fio-verify.data")
        reps, gets = [], 0
        for rep in range(a.reps):
            rs = {}
            # every other round in reverse order: no path always runs first
            for path in (paths if rep % 2 == 0 else paths[::-1]):
                cc = clusters[1] if path.startswith("ref:") else clusters[0]
                env = dict(os.environ, CRESCENT_TIER_LOCAL="1" if path.endswith("local") else "0")
                for th, bt in shapes:
                    cpu0 = [proc_cpu_s(cc.procs[1].pid), proc_cpu_s(cc.procs[0].pid)]
                    ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    out = subprocess.run([cc.exe("crescent-bench"), "tier", "--master_server_address",
                                          cc.master, "--metadata_server", cc.metadata, "--value_size",
                                          str(vs), "--keys", str(keys), "--qd", str(qd), "--rounds",
                                          str(a.rounds), "--threads", str(th),
                                          "--batch", str(bt), "--phase", "read"],
                                         capture_output=True, text=True, timeout=600, env=env)
                    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT")]
                    if not line:
                        raise RuntimeError(out.stdout + out.stderr)
                    r = rs[(path, th, bt)] = bench_result(line[0])
                    ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    # the whole bench run (its untimed checking round, timed rounds and
                    # single gets; each of the first and the last reads keys // 2 values):
                    # per GB read by it
                    gb = (int(r["gets"]) + keys) * vs / 1e9
                    r["node_cpu"] = (proc_cpu_s(cc.procs[1].pid) - cpu0[0]) / gb
                    r["master_cpu"] = (proc_cpu_s(cc.procs[0].pid) - cpu0[1]) / gb
                    r["client_cpu"] = (ch1.ru_utime + ch1.ru_stime - ch0.ru_utime - ch0.ru_stime) / gb
                    r["cpu_s_per_gb"] = r["node_cpu"] + r["master_cpu"] + r["client_cpu"]
                    if cc is c:
                        gets += int(r["gets"]) + keys
            m = c.metrics()
            used = max(m["tier_ssd_used_bytes"], 64 * MiB)
            data = os.path.join(d, "crescent-ssd.data")
            f = fio(data, "randread", vs, qd, used, a.fio_s)
            f["huge"] = fio(data, "randread", vs, qd, used, a.fio_s, huge=True)
            # a reader that checks every byte too: fio with huge-page buffers
            # verifying each block's crc32c (its own header in each block) on
            # a file of the same size that fio wrote with --verify=crc32c
            if not os.path.exists(vfile):
                subprocess.run(["fio", "--name=prep", "--filename=" + vfile, "--rw=write",
                                "--bs=%d" % vs, "--size=%d" % used, "--direct=1",
                                "--ioengine=io_uring", "--iodepth=%d" % qd, "--verify=crc32c",
                                "--do_verify=0", "--verify_state_save=0"],
                               capture_output=True, check=True)
            f["verify"] = fio(vfile, "randread", vs, qd, used, a.fio_s, huge=True,
                              extra=["--verify=crc32c", "--verify_state_save=0"])
            reps.append((rs, f))
        m = c.metrics()
        disk = (m["tier_ssd_hits_total"] - before.get("tier_ssd_hits_total", 0)) / max(gets, 1)
        f1 = fio(os.path.join(d, "crescent-ssd.data"), "randread", vs, 1, used, a.fio_s)
        return reps, disk, f1
    finally:
        for c in clusters:
            c.stop()
        shutil.rmtree(d, ignore_errors=True)
        if d2:
            shutil.rmtree(d2, ignore_errors=True)


def fs_bench(a, vs, keys, qd, shapes):
    """a.reps interleaved rounds of crescent gets from the shared-FS tier
    (every get a file: the cluster was restarted on the directory, so no
    DRAM copy exists) and fio randread on one file of the same size in the
    same directory."""
    d = tempfile.mkdtemp(prefix="crescent-fsbench-", dir=a.dir)
    fs_args = ["--root_fs_dir", d, "--cluster_id", "bench"]
    c = Cluster(a.build, None, 64 * MiB, 0, fs_args)
    try:
        subprocess.run([c.exe("crescent-bench"), "tier", "--master_server_address", c.master,
                        "--metadata_server", c.metadata, "--value_size", str(vs), "--keys",
                        str(keys), "--qd", str(qd), "--rounds", "1", "--phase", "get"],
                       capture_output=True, text=True, timeout=600, check=True)
    finally:
        c.stop()
    c = Cluster(a.build, None, 64 * MiB, 0, fs_args)  # adopts the files
    fio_file = os.path.join(d, "fio-read.dat")
    try:
        before = c.metrics()
        assert before["tier_fs_only_objects"] >= keys, before
        reps, gets = [], 0
        for rep in range(a.reps):
            rs = {}
            for th, bt in shapes:
                ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu0 = proc_cpu_s(c.procs[0].pid)
                out = subprocess.run([c.exe("crescent-bench"), "tier", "--master_server_address",
                                      c.master, "--metadata_server", c.metadata, "--value_size",
                                      str(vs), "--keys", str(keys), "--qd", str(qd), "--rounds",
                                      str(a.rounds), "--threads", str(th), "--batch", str(bt),
                                      "--phase", "read"],
                                     capture_output=True, text=True, timeout=600)
                line = [l for l in out.stdout.splitlines() if l.startswith("RESULT")]
                if not line:
                    raise RuntimeError(out.stdout + out.stderr)
                r = rs[(th, bt)] = bench_result(line[0])
                ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                gb = (int(r["gets"]) + keys) * vs / 1e9
                r["master_cpu"] = (proc_cpu_s(c.procs[0].pid) - cpu0) / gb
                r["client_cpu"] = (ch1.ru_utime + ch1.ru_stime - ch0.ru_utime - ch0.ru_stime) / gb
                gets += int(r["gets"]) + keys
            f = fio(fio_file, "randread", vs, qd, keys // 2 * vs, a.fio_s)
            f["huge"] = fio(fio_file, "randread", vs, qd, keys // 2 * vs, a.fio_s, huge=True)
            reps.append((rs, f))
        m = c.metrics()
        share = (m["tier_fs_hits_total"] - before.get("tier_fs_hits_total", 0)) / gets
        return reps, share
    finally:
        c.stop()
        shutil.rmtree(d, ignore_errors=True)


def offload_bench(a, vs, keys, qd):
    """Write-through: every put is copied to disk. The puts (one value for
    all keys, as fast as one writer goes) run ahead of the disk; the offload
    rate is the drain rate of the backlog left when the last put returns
    (objects offloaded after that / time until the last one is on disk)."""
    d = tempfile.mkdtemp(prefix="crescent-tierbench-", dir=a.dir)
    c = Cluster(a.build, d, (keys + 64) * vs, 2048 * MiB, ["--tier_offload_watermark=0"], qd=qd)
    try:
        p = subprocess.Popen([c.exe("crescent-bench"), "tier", "--phase", "offload",
                              "--master_server_address", c.master, "--metadata_server", c.metadata,
                              "--value_size", str(vs), "--keys", str(keys)],
                             stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        t_end = time.monotonic()
        at_end = c.metrics()["tier_ssd_offloads_total"]
        n = at_end
        while n < keys and time.monotonic() - t_end < 300:
            time.sleep(0.01)
            n = c.metrics()["tier_ssd_offloads_total"]
        el = time.monotonic() - t_end
        p.wait()
        r = bench_result(line)
        r["backlog"] = keys - at_end
        r["drain_s"] = el
        r["offload_gbps"] = (keys - at_end) * vs / el / 1e9 if keys > at_end else float("nan")
        f = fio(os.path.join(d, "fio-write.dat"), "write", vs, qd, keys * vs, a.fio_s)
        f["huge"] = fio(os.path.join(d, "fio-write.dat"), "write", vs, qd, keys * vs, a.fio_s,
                        huge=True)
        return r, f
    finally:
        c.stop()
        shutil.rmtree(d, ignore_errors=True)


def replay(a, dram, ssd, block):
    """The whole conversation trace through the real store (crescent-bench
    tier --phase replay: batch_is_exist + batch_get_into of each request's
    prefix blocks, puts of the rest, every block read checked), each
    request at its timestamp / a.speedup."""
    d = tempfile.mkdtemp(prefix="crescent-tierbench-", dir=a.dir) if ssd else None
    c = Cluster(a.build, d, dram, ssd)
    try:
        argv = [c.exe("crescent-bench"), "tier", "--phase", "replay", "--master_server_address",
                c.master, "--metadata_server", c.metadata, "--value_size", str(block),
                "--speedup", str(a.speedup), "--requests", str(a.requests),
                "--trace", os.path.join(ROOT, "data", "traces", "conversation_trace.jsonl")]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
        line = [l for l in out.stdout.splitlines() if l.startswith("RESULT")]
        if not line:
            raise RuntimeError(out.stdout + out.stderr)
        r = bench_result(line[0])
        r["dropped"] = c.metrics().get("tier_dram_dropped_total", 0) if ssd else 0
        return r
    finally:
        c.stop()
        if d:
            shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dir", default="/tmp", help="file system for the disk tier and fio")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fio_s", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5, help="interleaved crescent/fio pairs")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip", default="", help="comma list of get,offload,replay,fs")
    ap.add_argument("--paths", default="local,server",
                    help="get read paths: local,server (and ref:local,ref:server with --ref_build)")
    ap.add_argument("--ref_build", default="",
                    help="a second build (e.g. before a change) read in the same rounds as the "
                         "ref:* paths, from its own cluster and data file in --dir")
    ap.add_argument("--shapes", default="1x16,4x4,1x64",
                    help="get shapes THREADSxBATCH (keys per batch get); the node's and fio's "
                         "queue depth is 16: 1x16 drains the node's queue between batches, 4x4 "
                         "keeps ~16 in flight from 4 threads, 1x64 keeps it full across a batch")
    ap.add_argument("--speedup", type=int, default=40, help="replay: trace time / this")
    ap.add_argument("--requests", type=int, default=0, help="replay: first N requests (0 = all)")
    a = ap.parse_args()
    skip = set(a.skip.split(","))
    shapes = [tuple(int(x) for x in sh.split("x")) for sh in a.shapes.split(",") if sh]
    print("# machine shared by other helpers while this ran; ratios are same-run, same file system")
    if "get" not in skip:
        qd = 16
        paths = [p for p in a.paths.split(",") if p]
        for vs, keys in ((1 * MiB, 256), (4 * MiB, 96)):
            reps, disk, f1 = get_bench(a, vs, keys, qd, shapes, paths)
            for i, (rs, fq) in enumerate(reps):
                print("  rep %d value=%dMiB: " % (i, vs // MiB) + "; ".join(
                    "crescent %s %dx%d %.3f GB/s (batch p50 %s us, p99 %s us; errors %s wrong %s)"
                    % (p, th, bt, float(r["gbps"]), r["batch_p50_us"], r["batch_p99_us"],
                       r["errors"], r["wrong"]) for (p, th, bt), r in rs.items()) +
                    " | fio qd%d %.3f GB/s (p50 %.0f us p99 %.0f us), huge-page buffers %.3f GB/s, "
                    "checking crc32c %.3f GB/s"
                    % (qd, fq["gbps"], fq["p50_us"], fq["p99_us"], huge_gbps(fq),
                       huge_gbps(fq, "verify")))
            for path in paths:
                for th, bt in shapes:
                    rr = [(rs[(path, th, bt)], f) for rs, f in reps]
                    later = [r for r, _ in rr]
                    print("GET value=%dMiB qd=%d path=%s, %d thread(s) x batches of %d, medians of %d "
                          "interleaved rounds: crescent %.2f GB/s (batch p50 %.0f us p99 %.0f us; "
                          "single get p50 %.0f us p99 %.0f us) | fio randread iodepth=%d %.2f GB/s "
                          "(p50 %.0f us p99 %.0f us per I/O; qd1 p50 %.0f us p99 %.0f us) | median "
                          "ratio %.2f | fio with huge-page buffers %.2f GB/s, median ratio %.2f | "
                          "fio with huge-page buffers checking crc32c %.2f GB/s, median ratio %.2f | "
                          "CPU s per GB read: crescent %.2f (node %.2f, master %.2f, "
                          "bench client incl. its byte checks %.2f), fio %.2f | %.0f%% served from "
                          "disk, errors %d, wrong %d"
                          % (vs // MiB, qd, path, th, bt, len(rr),
                             med([float(r["gbps"]) for r, _ in rr]),
                             med([float(r["batch_p50_us"]) for r, _ in rr]),
                             med([float(r["batch_p99_us"]) for r, _ in rr]),
                             med([float(r["get_p50_us"]) for r, _ in rr]),
                             med([float(r["get_p99_us"]) for r, _ in rr]), qd,
                             med([f["gbps"] for _, f in rr]), med([f["p50_us"] for _, f in rr]),
                             med([f["p99_us"] for _, f in rr]), f1["p50_us"], f1["p99_us"],
                             med([float(r["gbps"]) / f["gbps"] for r, f in rr]),
                             med([huge_gbps(f) for _, f in rr]),
                             med([float(r["gbps"]) / huge_gbps(f) for r, f in rr]),
                             med([huge_gbps(f, "verify") for _, f in rr]),
                             med([float(r["gbps"]) / huge_gbps(f, "verify") for r, f in rr]),
                             med([r["cpu_s_per_gb"] for r in later]),
                             med([r["node_cpu"] for r in later]),
                             med([r["master_cpu"] for r in later]),
                             med([r["client_cpu"] for r in later]),
                             med([f["cpu_s_per_gb"] for _, f in rr]), 100 * disk,
                             sum(int(r["errors"]) for r, _ in rr), sum(int(r["wrong"]) for r, _ in rr)))
            sys.stdout.flush()
    if "offload" not in skip:
        res = []
        for rep in range(a.reps):
            r, f = offload_bench(a, MiB, 512, 16)
            res.append((r, f))
            print("  rep %d OFFLOAD value=1MiB write-through, 512 puts at %.2f GB/s: backlog of %d "
                  "objects at the last put drained in %.3f s = %.2f GB/s | fio write iodepth=16 "
                  "bs=1M %.2f GB/s (huge-page buffers %.2f) | ratio %.2f (%.2f)"
                  % (rep, float(r["put_gbps"]), r["backlog"], r["drain_s"], r["offload_gbps"],
                     f["gbps"], huge_gbps(f), r["offload_gbps"] / f["gbps"],
                     r["offload_gbps"] / huge_gbps(f)))
            sys.stdout.flush()
        ok = [(r, f) for r, f in res if r["backlog"] >= 64]  # a backlog worth timing
        if ok:
            print("OFFLOAD value=1MiB write-through, medians of %d rounds with a backlog >= 64: "
                  "drain %.2f GB/s | fio write iodepth=16 bs=1M %.2f GB/s | median ratio %.2f | "
                  "fio with huge-page buffers %.2f GB/s, median ratio %.2f"
                  % (len(ok), med([r["offload_gbps"] for r, _ in ok]),
                     med([f["gbps"] for _, f in ok]),
                     med([r["offload_gbps"] / f["gbps"] for r, f in ok]),
                     med([huge_gbps(f) for _, f in ok]),
                     med([r["offload_gbps"] / huge_gbps(f) for r, f in ok])))
    if "fs" not in skip:
        qd = 16
        for vs, keys in ((1 * MiB, 256), (4 * MiB, 96)):
            reps, share = fs_bench(a, vs, keys, qd, shapes)
            for i, (rs, fq) in enumerate(reps):
                print("  rep %d FS value=%dMiB: " % (i, vs // MiB) + "; ".join(
                    "crescent %dx%d %.3f GB/s (batch p50 %s us p99 %s us; errors %s wrong %s)"
                    % (th, bt, float(r["gbps"]), r["batch_p50_us"], r["batch_p99_us"], r["errors"],
                       r["wrong"]) for (th, bt), r in rs.items()) +
                    " | fio qd%d %.3f GB/s (p50 %.0f us p99 %.0f us), huge-page buffers %.3f GB/s"
                    % (qd, fq["gbps"], fq["p50_us"], fq["p99_us"], huge_gbps(fq)))
            for th, bt in shapes:
                rr = [(rs[(th, bt)], f) for rs, f in reps]
                print("FS GET value=%dMiB qd=%d, %d thread(s) x batches of %d, medians of %d "
                      "interleaved rounds: crescent %.2f GB/s (batch p50 %.0f us p99 %.0f us; single "
                      "get p50 %.0f us p99 %.0f us) | fio randread iodepth=%d %.2f GB/s (p50 %.0f us "
                      "p99 %.0f us per I/O) | median ratio %.2f | fio with huge-page buffers "
                      "%.2f GB/s, median ratio %.2f | CPU s per GB read: client %.2f "
                      "master %.3f, fio %.2f | %.0f%% served from files, errors %d, wrong %d"
                      % (vs // MiB, qd, th, bt, len(rr),
                         med([float(r["gbps"]) for r, _ in rr]),
                         med([float(r["batch_p50_us"]) for r, _ in rr]),
                         med([float(r["batch_p99_us"]) for r, _ in rr]),
                         med([float(r["get_p50_us"]) for r, _ in rr]),
                         med([float(r["get_p99_us"]) for r, _ in rr]), qd,
                         med([f["gbps"] for _, f in rr]), med([f["p50_us"] for _, f in rr]),
                         med([f["p99_us"] for _, f in rr]),
                         med([float(r["gbps"]) / f["gbps"] for r, f in rr]),
                         med([huge_gbps(f) for _, f in rr]),
                         med([float(r["gbps"]) / huge_gbps(f) for r, f in rr]),
                         med([r["client_cpu"] for r, _ in rr]),
                         med([r["master_cpu"] for r, _ in rr]),
                         med([f["cpu_s_per_gb"] for _, f in rr]), 100 * share,
                         sum(int(r["errors"]) for r, _ in rr), sum(int(r["wrong"]) for r, _ in rr)))
            sys.stdout.flush()
    if "replay" not in skip:
        block = 16384
        drams = (32, 64) if a.quick else (32, 64, 128, 256)
        for dram in drams:
            r0 = replay(a, dram * MiB, 0, block)
            r1 = replay(a, dram * MiB, 4 * dram * MiB, block)
            print("REPLAY conversation trace, %s requests (%s blocks of %d KiB), time / %d: "
                  "dram=%dMiB hit rate DRAM only %.4f | DRAM + disk(%dMiB) %.4f | x%.2f | put "
                  "failures %s / %s, wrong %s / %s, objects DRAM dropped uncopied %d, replay %s s / "
                  "%s s" % (r0["requests"], r0["blocks"], block // 1024, a.speedup, dram,
                            float(r0["hit_rate"]), 4 * dram, float(r1["hit_rate"]),
                            float(r1["hit_rate"]) / max(float(r0["hit_rate"]), 1e-9),
                            r0["put_failures"], r1["put_failures"], r0["wrong"], r1["wrong"],
                            r1["dropped"], r0["seconds"], r1["seconds"]))
            sys.stdout.flush()

if __name__ == "__main__":
    main()
