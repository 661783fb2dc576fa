#!/usr/bin/python3
"""Latency of one small Transfer Engine request over tcp against one bare tcp
round trip, measured in the same run.

crescent: crescent-bench --wait sync (cr_xfer_transfer_sync of one request,
what the store client calls for a single put or get: the tcp transport runs
it in the calling thread and busy-polls its reply; the target busy-polls for
the next request), --size bytes (default 4 KiB), READ and WRITE, one
initiator thread against a crescent-bench target on loopback, --seconds per
run. Reference: bench/store/rt_floor.c between two processes on the same
path (64 bytes out, --size bytes back), both sides busy-polling as
crescent's do.
With --base OLD-BUILD-DIR the older build's initiator and target run right
after the new ones in every repetition (a before/after in one run).

Every repetition runs the reference, then each build's READ and WRITE; the
figures are medians of the per-repetition p50s, with their min-max.

Usage: bench/te/sync_latency.sh [--build build] [--base DIR] [--reps 5]
                                [--size 4096] [--seconds 2] [--out FILE]
Prints a markdown table (also written to --out). Never fails on timing.
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchlib import ROOT, cleanup, cleanup_on_signals, emit, load_module, log, stop  # noqa: E402


store = load_module("store_run", os.path.join(os.path.dirname(HERE), "store", "run.py"))
te = load_module("te_run", os.path.join(HERE, "run.py"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--base", default="")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--seconds", type=int, default=2)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if not 1 <= a.size <= 1 << 20:
        sys.exit("--size: 1 .. 1048576 bytes")
    builds = [("new", a.build)] + ([("base", a.base)] if a.base else [])
    benches = [(tag, os.path.join(b, "tools", "crescent-bench", "crescent-bench")) for tag, b in builds]
    for tag, b in benches:
        if not os.access(b, os.X_OK):
            sys.exit("crescent-bench not found at %s (build first)" % b)
    cleanup_on_signals()
    floor, res = [], {(tag, op): [] for tag, _ in benches for op in ("read", "write")}
    try:
        fport = store.rt_floor_start("127.0.0.1")
        if not fport:
            sys.exit("rt_floor could not be built (needs cc)")
        targets = te.start_targets(benches, ["--protocol", "tcp", "--buffer_size", "64MiB"])
        for rep in range(a.reps + 1):  # the first is an unmeasured warm-up
            f = store.rt_floor_ping("127.0.0.1", fport, 1, size=a.size)[0]
            row = {}
            for tag, bench, _tgt, seg in targets:
                for op in ("read", "write"):
                    r = te.run_initiator(bench, ["--segment", seg, "--protocol", "tcp",
                                                 "--block_size", str(a.size), "--batch_size", "1",
                                                 "--threads", "1", "--operation", op,
                                                 "--wait", "sync"], a.seconds)
                    if r.get("errors", "0") != "0":
                        raise RuntimeError("%s %s: %s errors" % (tag, op, r["errors"]))
                    row[(tag, op)] = float(r["p50_us"])
            if rep == 0:
                continue
            floor.append(f)
            for k, v in row.items():
                res[k].append(v)
            log("rep %d: bare %.1f us; %s" % (rep, f, ", ".join(
                "%s %s %.1f" % (k[0], k[1], v) for k, v in sorted(row.items()))))
        for _tag, _b, tgt, _seg in targets:
            stop(tgt)
    finally:
        cleanup()
    fm = statistics.median(floor)
    md = ("Transfer Engine sync latency, %d-byte requests over tcp loopback, one thread, medians of %d "
          "repetitions (min-max); reference: one bare tcp round trip, both sides busy-polling "
          "(bench/store/rt_floor.c), %.1f us (%.1f-%.1f)\n\n"
          % (a.size, a.reps, fm, min(floor), max(floor)))
    md += "| build | op | p50 us (min-max) | in bare round trips |\n|---|---|---|---|\n"
    for (tag, op), v in res.items():
        m = statistics.median(v)
        md += "| %s | %s | %.1f (%.1f-%.1f) | %.2f |\n" % (tag, op.upper(), m, min(v), max(v), m / fm)
    emit(md, a.out)


if __name__ == "__main__":
    main()
