#!/usr/bin/python3
"""A/B of crescent-bench variants (options, environment) against iperf3 in
the same run, tcp loopback: every repetition runs iperf3 and then each
variant back to back; ratios, CPU per byte and context switches as in
run.py (its functions are used).

Usage: bench/te/variants.py --bench new=build/tools/crescent-bench/crescent-bench
           [--bench old=OTHER-crescent-bench] [--bench hot=PATH@16MiB]
           --variant "LABEL|[ENV=VALUE ...] crescent-bench initiator options" ...
           [--reps 3] [--secs 2] [--len 1M] [--tbuf 512MiB]
e.g. --variant "W4M ww1M|CRESCENT_TCP_WRITE_WINDOW=1M --operation write
     --block_size 4MiB --batch_size 8 --threads 2"
Every variant runs with --protocol tcp --wait block; each --bench gets its
own target (--buffer_size --tbuf, or the size after "@" in its --bench:
the same binary twice with a small and a large target buffer compares
memory footprints in one run). Prints a markdown table.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import run as R  # noqa: E402
from benchlib import cleanup, cleanup_on_signals, free_port, stop  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", action="append", required=True, help="TAG=path of crescent-bench")
    ap.add_argument("--variant", action="append", required=True, help="LABEL|[ENV=V ...] options")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--secs", type=float, default=2)
    ap.add_argument("--len", default="1M", help="iperf3 -l")
    ap.add_argument("--tbuf", default="512MiB", help="target --buffer_size")
    a = ap.parse_args()
    cleanup_on_signals()
    port = free_port()
    srv = R.start_iperf3_server(port)
    targets = []
    t = R.Table()
    try:
        for b in a.bench:
            tag, path = b.split("=", 1)
            path, _, tbuf = path.partition("@")
            targets += R.start_targets([(tag, path)], ["--protocol", "tcp", "--buffer_size",
                                                       tbuf or a.tbuf])
        runs = []
        for tag, bench, tgt, seg in targets:
            for v in a.variant:
                label, opts = v.split("|", 1)
                toks = opts.split()
                env = [x for x in toks if x[:1].isupper() and "=" in x]
                args = [x for x in toks if x not in env] + ["--protocol", "tcp", "--wait", "block"]
                pre = tuple(["env"] + env) if env else ()
                runs.append(("%s %s" % (tag, label),
                             lambda a_=args, b=bench, tg=tgt, sg=seg, pr=pre:
                             R.crescent_run(b, tg, sg, a_, a.secs, pr)))
        R.interleaved(t, "x", a.reps, "iperf3 -l %s -C %s" % (a.len, R.TCP_CC),
                      lambda: R.iperf3("127.0.0.1", port, a.len, a.secs, (), srv), runs)
    finally:
        for x in targets:
            stop(x[2])
        stop(srv)
        cleanup()
    print(t.markdown())
    print("load average at the end: %.1f" % os.getloadavg()[0])


if __name__ == "__main__":
    main()
