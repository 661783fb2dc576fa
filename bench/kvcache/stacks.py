#!/usr/bin/python3
"""Before/after of the whole store (master, nodes and client) in the
vLLM-like save/load of run.py: two clusters, one from each build
(--base, --new: build directories holding tools/crescent-{master,node,bench}),
and one raw Transfer Engine target. Every repetition runs TE WRITE, the
save+load on both stores (which one first alternates), then TE READ; the
ratio is store / raw TE of the same repetition, median (min-max) of the
per-repetition ratios, as in run.py (whose --base swaps only the client).
The end-to-end checksum follows the environment (CRESCENT_STORE_CHECKSUM=0
turns it off in both clients).

Usage: bench/kvcache/stacks.py --base OLD-BUILD --new NEW-BUILD [--reps 5]
       [--size 16384] [--protos tcp,shm] [--objects 8192] [--batch 256]
Prints one line per repetition and a markdown table: object bytes,
transport, build, call, reference GB/s, store GB/s, ratio (min-max),
TE initiator CPU us/block, store client CPU us/key. Never fails on timing."""
import argparse, os, statistics, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import importlib.util
def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); return mod
from benchlib import cleanup, cleanup_on_signals
store = _load("store_run", os.path.join(os.path.dirname(HERE), "store", "run.py"))
te = _load("te_run", os.path.join(os.path.dirname(HERE), "te", "run.py"))
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--base", required=True); ap.add_argument("--new", required=True); ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--size", type=int, default=16384); ap.add_argument("--protos", default="tcp,shm")
ap.add_argument("--objects", type=int, default=8192); ap.add_argument("--batch", type=int, default=256)
a = ap.parse_args()
cleanup_on_signals()
def med(v): return statistics.median(v)
span = a.size * a.objects
try:
    seg_mib = max(2048, (span >> 20) * 2)
    cls = {"base": store.Cluster(a.base, seg="%dMB" % seg_mib), "new": store.Cluster(a.new, seg="%dMB" % seg_mib)}
    bench = os.path.join(a.new, "tools/crescent-bench/crescent-bench")
    tgt, seg = te.start_target(bench, ["--protocol", "auto", "--buffer_size", "%dMiB" % max(64, span >> 20)])
    for proto in a.protos.split(","):
        te_args = ["--segment", seg, "--protocol", proto, "--block_size", str(a.size), "--batch_size", str(a.batch),
                   "--threads", "1", "--objects", str(a.objects), "--duration", "600", "--wait", "block"]
        st_args = ["--op", "batch_putget", "--value_size", str(a.size), "--threads", "1", "--batch", str(a.batch),
                   "--ops", str(a.objects // a.batch), "--slots", str(a.objects), "--protocol", "tcp" if proto == "tcp" else "tcp,shm"]
        def te_run(op):
            r = te.run_initiator(bench, te_args + ["--operation", op], 600)
            if r.get("transport") != proto:
                raise RuntimeError("TE used %s, not %s" % (r.get("transport"), proto))
            return float(r["gbps"]), float(r.get("cpu_s", "nan")) * 1e6 / a.objects
        res = {k: {"put": [], "get": [], "pr": [], "gr": [], "pc": [], "gc": []} for k in cls}
        ref = {"w": [], "r": [], "wc": [], "rc": []}
        te_run("write")
        for k in cls:
            store.crescent(a.new if k == "new" else a.base, cls[k].addr, st_args)
        te_run("read")
        for i in range(a.reps):
            w, wc = te_run("write")
            order = ["base", "new"] if i % 2 == 0 else ["new", "base"]
            out = {}
            for k in order:
                out[k] = store.crescent(a.new if k == "new" else a.base, cls[k].addr, st_args)
            r, rc = te_run("read")
            ref["w"].append(w); ref["r"].append(r); ref["wc"].append(wc); ref["rc"].append(rc)
            for k in cls:
                p = float(out[k]["batch_put"]["gbps"]); g = float(out[k]["batch_get"]["gbps"])
                res[k]["put"].append(p); res[k]["get"].append(g); res[k]["pr"].append(p / w); res[k]["gr"].append(g / r)
                res[k]["pc"].append(float(out[k]["batch_put"].get("client_cpu_us_per_key", "nan")))
                res[k]["gc"].append(float(out[k]["batch_get"].get("client_cpu_us_per_key", "nan")))
            print("rep %d %s: TE W %.3f R %.3f | base put %.3f get %.3f | new put %.3f get %.3f" % (
                i + 1, proto, w, r, res["base"]["put"][-1], res["base"]["get"][-1], res["new"]["put"][-1], res["new"]["get"][-1]), flush=True)
        for k in ("base", "new"):
            x = res[k]
            print("| %d | %s | %s | save | TE WRITE %.3f | %.3f | **%.2f** (%.2f-%.2f) | %.1f | %.1f |" % (
                a.size, proto, k, med(ref["w"]), med(x["put"]), med(x["pr"]), min(x["pr"]), max(x["pr"]), med(ref["wc"]), med(x["pc"])))
            print("| %d | %s | %s | load | TE READ %.3f | %.3f | **%.2f** (%.2f-%.2f) | %.1f | %.1f |" % (
                a.size, proto, k, med(ref["r"]), med(x["get"]), med(x["gr"]), min(x["gr"]), max(x["gr"]), med(ref["rc"]), med(x["gc"])))
        sys.stdout.flush()
    te.stop(tgt)
    for c in cls.values(): c.close()
finally:
    cleanup()
print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
