#!/usr/bin/python3
"""Cost of the end-to-end value checksum: store put/get with checksums on
(the default) and off (CRESCENT_STORE_CHECKSUM=0 for the benchmark client:
its puts carry no crc, so its gets check nothing) in one run, interleaved
rep by rep (off, on, off, on, ...) so that other load hits both alike.

Rows (median over --reps; crescent-bench store putget, 4 threads, tcp, one
node): 1 MiB put / get GB/s, 4 KiB put / get p50 latency. The ratio column
is on/off.

Usage: bench/security/checksum.py [--build build] [--reps 5] [--out FILE]
Never fails on timing."""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run as sec  # noqa: E402  (bench/security/run.py: store_case, loaders)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(sec.ROOT, "build"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = {}

    def add(name, mode, val, unit):
        rows.setdefault(name, ({"off": [], "on": []}, unit))[0][mode].append(val)

    try:
        for rep in range(a.reps):
            for mode in ("off", "on"):
                os.environ["CRESCENT_STORE_CHECKSUM"] = "1" if mode == "on" else "0"
                sec.te.log("rep %d checksum %s" % (rep + 1, mode))
                r = sec.store_case(a.build, "1MB", 50)
                add("store 1 MiB put", mode, float(r["put"]["gbps"]), "GB/s")
                add("store 1 MiB get", mode, float(r["get"]["gbps"]), "GB/s")
                r = sec.store_case(a.build, "4KB", 500)
                add("store 4 KiB put p50", mode, float(r["put"]["p50_us"]), "us")
                add("store 4 KiB get p50", mode, float(r["get"]["p50_us"]), "us")
    finally:
        os.environ.pop("CRESCENT_STORE_CHECKSUM", None)
        sec.sb.cleanup()
    out = ["| benchmark | checksum off | checksum on | unit | on/off |", "|---|---|---|---|---|"]
    for name, (v, unit) in rows.items():
        off, on = statistics.median(v["off"]), statistics.median(v["on"])
        fmt = "%.3f" if unit == "GB/s" else "%.1f"
        out.append("| %s | %s | %s | %s | %.2f |" % (name, fmt % off, fmt % on, unit,
                                                     on / off if off else float("nan")))
    text = "\n".join(out)
    print(text)
    if a.out:
        open(a.out, "w").write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
