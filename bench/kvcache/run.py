#!/usr/bin/python3
"""vLLM-like KV-cache save and load: --objects objects (default 8,192, a
4k-token prompt of a 32-layer model at one object per 16-token page per
layer) of 64 KiB and of 16 KiB, saved with cr_store_batch_put_from and loaded
with cr_store_batch_get_into in calls of --batch keys (default 256: one
layer's pages), each object from/into its own registered buffer, one client
thread, against a local cluster (crescent-master + --nodes crescent-node,
default 2).

Reference, measured in the same run: the raw Transfer Engine moving the same
bytes in the same shape -- the same number of blocks of the same size, in
batches of the same size, each from/into its own local block
(crescent-bench --objects), one initiator thread waiting for each batch
with cr_xfer_batch_wait as the store client does -- to a crescent-bench
target: WRITE for the save, READ for the load. Both over the same transport:
"tcp" (store client --protocol tcp, TE --protocol tcp) and "shm" (store
client --protocol tcp,shm, which picks shm for the same-host nodes; TE
--protocol shm).

Every repetition runs TE WRITE, the store save+load, TE READ back to back;
the ratio (store / raw TE) is the median of the per-repetition ratios, shown
with its min-max. One unmeasured warm-up of each comes first.

With --base-env VAR=VALUE (e.g. CRESCENT_PUT_RESERVE=0) the base client is
this build (or --base) run with those variables: an A/B of a switch.

With --base OLD-BUILD-DIR the store client of an older build
(OLD-BUILD-DIR/tools/crescent-bench/crescent-bench, same cluster, same
target) runs right after the new one in every repetition: a before/after of
the client in one run, each against the same raw TE figures (the cluster's
RPC protocol must be the same).

With --nodes 1 the cluster has one node: every object lands on it, as the
raw TE's blocks land on its one target (with 2, the client's reservations
alternate between two target processes; measured in docs/benchmarks.md,
session of 2026-11-30 15:17 UTC).

With --passes P every repetition saves (and loads) the --objects P times,
timed as one, on both sides: the raw TE moves the same local blocks P times
(crescent-bench --passes), the store client saves P x --objects distinct keys
from the same --objects buffers (its --ops). One pass of 64 KiB objects
takes ~0.1 s here, shorter than many of this machine's hiccups; P passes
average over them (the repetitions stay interleaved, TE and store back to
back).

With --interleave the raw TE runs inside the store client's process
(crescent-bench store --te_ref, the target above): in every repetition
blocks of 2 store calls alternate with 2 TE batches of the same shape from
the same buffers, and both sides are the mean times of their calls; no
separate TE runs, no CPU columns. Both then see the same moments of the
machine, whose fast and slow phases last seconds (docs/benchmarks.md,
session of 2026-11-30 17:20 UTC); but the two engines share the process,
so one's idle threads sit next to the other's work.

With --floor (and --interleave) a third arm joins the rotation
(crescent-bench store --te_ref_rpc --te_ref_crc): the same TE batch, its
bytes hashed as the store's end-to-end check hashes them, followed by one
master lookup of the call's --batch keys -- the least a store that checks
its bytes and tells its master about every call must add to the raw TE.
Extra rows give the store against that floor (docs/benchmarks.md, session
of 2026-11-30 22:09 UTC).

With --warmup N the store client first makes N untimed batch_put +
batch_get calls of its own keys in the thread that is then timed (its
master connection, the nodes' connections and segment mappings, its
reservations), as the TE initiator makes an untimed warm-up batch after
opening its segment: the figures are then those of a long-lived client (a
vLLM worker's), not of a client's first calls. 8 calls (32 MiB of 16 KiB
values) reach both nodes of the local cluster (reservations of 16 MiB
alternate between them). The --base client gets the same flag (a build
older than the flag rejects it).

Usage: bench/kvcache/run.sh [--build build] [--reps 5] [--objects 8192]
                            [--sizes 64KiB,16KiB] [--batch 256]
                            [--protocols tcp,shm] [--shm-memory shared|anon] [--nodes 2]
                            [--passes 1] [--interleave [--floor]]
                            [--base OLD-BUILD-DIR] [--warmup N]
                            [--out results.md]
Prints a markdown table (also written to --out). Never fails on timing; exits
non-zero only if a tool fails to run.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchlib import ROOT, cleanup, cleanup_on_signals, load_module, log  # noqa: E402


store = load_module("store_run", os.path.join(os.path.dirname(HERE), "store", "run.py"))
te = load_module("te_run", os.path.join(os.path.dirname(HERE), "te", "run.py"))

SIZES = {"64KiB": 64 << 10, "16KiB": 16 << 10, "4KiB": 4 << 10, "256KiB": 256 << 10,
         "1MiB": 1 << 20}


def med(v):
    return statistics.median(v) if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--objects", type=int, default=8192)
    ap.add_argument("--sizes", default="64KiB,16KiB")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--protocols", default="tcp,shm")
    ap.add_argument("--base", default="", help="older build dir: its store client runs too")
    ap.add_argument("--base-env", default="",
                    help="VAR=VALUE[,VAR=VALUE]: the base client (--base, or this build) runs "
                         "with these variables, e.g. CRESCENT_PUT_RESERVE=0")
    ap.add_argument("--shm-memory", default="shared", choices=("shared", "anon"),
                    help="memory of the nodes' segments and of the TE target (both alike): "
                         "shared (a memfd, the default: shm copies through a mapping of it) "
                         "or anon (CRESCENT_SEGMENT_SHARED=0: shm copies with process_vm_*)")
    ap.add_argument("--warmup", type=int, default=0,
                    help="untimed warm-up calls of the store client (crescent-bench store --warmup)")
    ap.add_argument("--nodes", type=int, default=2, help="crescent-node processes in the cluster")
    ap.add_argument("--interleave", action="store_true",
                    help="the raw TE inside the store client's process (crescent-bench store "
                         "--te_ref): blocks of 2 store calls alternate with 2 TE batches of the "
                         "same shape; no separate TE runs")
    ap.add_argument("--floor", action="store_true",
                    help="with --interleave: a third arm, the TE batch hashed as the store's "
                         "check does plus one master lookup of its keys (--te_ref_rpc "
                         "--te_ref_crc); extra rows compare the store with it")
    ap.add_argument("--passes", type=int, default=1,
                    help="saves/loads of --objects per repetition, timed as one (TE --passes; "
                         "the store client's --ops): a longer measurement of the same shape")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if not 1 <= a.nodes <= 8:
        sys.exit("--nodes: 1 to 8")
    if a.objects % a.batch:
        sys.exit("--objects must be a multiple of --batch")
    if a.interleave and (a.base or a.base_env):
        sys.exit("--interleave runs no --base client")
    if a.floor and not a.interleave:
        sys.exit("--floor needs --interleave")
    if not 1 <= a.passes <= 16:
        sys.exit("--passes: 1 to 16")
    sizes = [s for s in a.sizes.split(",") if s]
    for s in sizes:
        if s not in SIZES:
            sys.exit("unknown size %s (one of %s)" % (s, ", ".join(SIZES)))
    protos = [p for p in a.protocols.split(",") if p]
    for p in protos:
        if p not in ("tcp", "shm"):
            sys.exit("--protocols: tcp and/or shm")
    base_env = dict(kv.split("=", 1) for kv in a.base_env.split(",") if kv)
    if base_env and not a.base:
        a.base = a.build
    bench = os.path.join(a.build, "tools", "crescent-bench", "crescent-bench")
    if not os.access(bench, os.X_OK):
        sys.exit("crescent-bench not found at %s (build first: scripts/build.sh)" % bench)
    span = max(SIZES[s] for s in sizes) * a.objects
    cleanup_on_signals()
    rows = []
    try:
        # every node able to hold every object (the master may place all on one)
        seg_mib = max(2048, (span >> 20) * a.passes * 2)
        if a.shm_memory == "anon":
            os.environ["CRESCENT_SEGMENT_SHARED"] = "0"  # the nodes' segments
        cl = store.Cluster(a.build, seg="%dMB" % seg_mib, nodes=a.nodes)
        tgt, seg = te.start_target(bench, ["--protocol", "auto", "--target_memory",
                                           "auto" if a.shm_memory == "shared" else "anon",
                                           "--buffer_size", "%dMiB" % max(64, span >> 20)])
        try:
            for size in sizes:
                for proto in protos:
                    # --wait block: the TE batch is waited on as the store client
                    # waits for its own (cr_xfer_transfer_sync), not polled
                    te_args = ["--segment", seg, "--protocol", proto, "--block_size", size,
                               "--batch_size", str(a.batch), "--threads", "1",
                               "--objects", str(a.objects), "--passes", str(a.passes),
                               "--duration", "600",
                               "--wait", "block"]
                    st_args = ["--op", "batch_putget", "--value_size", str(SIZES[size]),
                               "--threads", "1", "--batch", str(a.batch),
                               "--ops", str(a.objects // a.batch * a.passes),
                               "--slots", str(a.objects),
                               "--protocol", "tcp" if proto == "tcp" else "tcp,shm"]
                    if a.warmup:
                        st_args += ["--warmup", str(a.warmup)]
                    if a.interleave:
                        st_args += ["--te_ref", seg, "--te_ref_protocol", proto, "--ab_block", "2"]
                    if a.floor:
                        st_args += ["--te_ref_rpc", str(a.batch), "--te_ref_crc"]
                    call_bytes = SIZES[size] * a.batch

                    def te_run(op):
                        r = te.run_initiator(bench, te_args + ["--operation", op], 600)
                        if r.get("transport") != proto:
                            raise RuntimeError("TE used %s, not %s" % (r.get("transport"), proto))
                        # initiator CPU per block (us): the client side's cost, which the
                        # machine's load barely moves
                        cpu[op].append(float(r.get("cpu_s", "nan")) * 1e6 / (a.objects * a.passes))
                        return float(r["gbps"])

                    def ccpu(res, phase):
                        return float(res[phase].get("client_cpu_us_per_key", "nan"))

                    cpu = {"write": [], "read": [], "put": [], "get": [], "bput": [], "bget": []}
                    log("%s %s: warm-up" % (size, proto))
                    if not a.interleave:
                        te_run("write")
                    store.crescent(a.build, cl.addr, st_args)
                    if not a.interleave:
                        te_run("read")
                    if a.base:
                        store.crescent(a.base, cl.addr, st_args, env=base_env)
                    w, r, p, g, bp, bg = [], [], [], [], [], []
                    fw, fr = [], []  # --floor: the floor's GB/s, save and load shape
                    for k in cpu:
                        cpu[k] = []
                    for i in range(a.reps):
                        if a.interleave:
                            # both sides from the TEREF lines: mean call times of the
                            # store calls and of the TE batches between them
                            res = store.crescent(a.build, cl.addr, st_args)
                            for ph, lst_s, lst_t, lst_f in (("batch_put", p, w, fw),
                                                            ("batch_get", g, r, fr)):
                                x = res["teref:" + ph]
                                lst_s.append(call_bytes / float(x["store_us_per_call"]) / 1e3)
                                lst_t.append(call_bytes / float(x["te_us_per_call"]) / 1e3)
                                if a.floor:
                                    y = res["terpc:" + ph]
                                    lst_f.append(call_bytes / float(y["te_rpc_us_per_call"]) / 1e3)
                            for k in ("put", "get", "write", "read"):
                                cpu[k].append(float("nan"))
                            log("  rep %d: save %.3f vs TE WRITE %.3f GB/s; load %.3f vs TE READ "
                                "%.3f GB/s (interleaved)" % (i + 1, p[-1], w[-1], g[-1], r[-1]))
                            continue
                        w.append(te_run("write"))
                        res = store.crescent(a.build, cl.addr, st_args)
                        p.append(float(res["batch_put"]["gbps"]))
                        g.append(float(res["batch_get"]["gbps"]))
                        cpu["put"].append(ccpu(res, "batch_put"))
                        cpu["get"].append(ccpu(res, "batch_get"))
                        if a.base:
                            res = store.crescent(a.base, cl.addr, st_args, env=base_env)
                            bp.append(float(res["batch_put"]["gbps"]))
                            bg.append(float(res["batch_get"]["gbps"]))
                            cpu["bput"].append(ccpu(res, "batch_put"))
                            cpu["bget"].append(ccpu(res, "batch_get"))
                        r.append(te_run("read"))
                        log("  rep %d: save %.3f vs TE WRITE %.3f GB/s; load %.3f vs TE READ %.3f GB/s%s"
                            % (i + 1, p[-1], w[-1], g[-1], r[-1],
                               "; before: save %.3f load %.3f" % (bp[-1], bg[-1]) if a.base else ""))
                    for what, ours, base, ref, refname, ck, bk, tk, flo in (
                            ("save: batch_put_from", p, bp, w, "TE WRITE", "put", "bput", "write", fw),
                            ("load: batch_get_into", g, bg, r, "TE READ", "get", "bget", "read", fr)):
                        if flo:
                            # the floor against the raw TE, then the store against the floor
                            fr_te = [f / x for f, x in zip(flo, ref) if x > 0]
                            rows.append((size, proto, "floor: %s, checked, + one %d-key lookup"
                                         % (refname, a.batch), refname, med(ref), med(flo),
                                         med(fr_te), min(fr_te), max(fr_te), float("nan"),
                                         float("nan")))
                            st_f = [o / f for o, f in zip(ours, flo) if f > 0]
                            rows.append((size, proto, what + " against the floor", "the floor",
                                         med(flo), med(ours), med(st_f), min(st_f), max(st_f),
                                         float("nan"), float("nan")))
                        if base:
                            br = [o / x for o, x in zip(base, ref) if x > 0]
                            rows.append((size, proto, what + " (before: --base %s)" % (a.base_env or a.base),
                                         refname, med(ref),
                                         med(base), med(br), min(br), max(br),
                                         med(cpu[tk]), med(cpu[bk])))
                        ratios = [o / x for o, x in zip(ours, ref) if x > 0]
                        rows.append((size, proto, what, refname, med(ref), med(ours), med(ratios),
                                     min(ratios), max(ratios), med(cpu[tk]), med(cpu[ck])))
                        log("  %s %s %s: %.3f vs %s %.3f GB/s, ratio %.2f (%.2f-%.2f)" % (
                            size, proto, what, med(ours), refname, med(ref), med(ratios),
                            min(ratios), max(ratios)))
        finally:
            te.stop(tgt)
            cl.close()
    finally:
        cleanup()
    load = os.getloadavg()
    md = ("KV-cache save/load benchmark, %s, %d cores, load average %.1f at the end, median of %d; "
          "%d objects per save/load, %d save(s)/load(s) per repetition, %d keys per batch call, "
          "1 client thread, %d node(s); shm memory: %s; "
          "store client warm-up calls: %d; raw TE: %s; GB/s = 1e9 bytes/s; "
          "ratio = store / raw TE (median of per-repetition ratios, min-max); CPU: user+sys of "
          "the TE initiator process / the store client process in the timed phase (a store "
          "client with --base older than this column prints nan)\n\n"
          % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(), load[0], a.reps,
             a.objects, a.passes, a.batch, a.nodes, a.shm_memory, a.warmup,
             "in the store client's process, interleaved (--te_ref)" if a.interleave
             else "its own process (crescent-bench --objects)"))
    md += ("| object | transport | store call | reference | reference GB/s | store GB/s | ratio | "
           "min-max | TE initiator CPU us/block | store client CPU us/key |\n")
    md += "|---|---|---|---|---|---|---|---|---|---|\n"
    for size, proto, what, refname, ref, ours, ra, lo, hi, tcpu, scpu in rows:
        md += "| %s | %s | %s | %s | %.3f | %.3f | %.2f | %.2f-%.2f | %.1f | %.1f |\n" % (
            size, proto, what, refname, ref, ours, ra, lo, hi, tcpu, scpu)
    print(md)
    if a.out:
        with open(a.out, "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
