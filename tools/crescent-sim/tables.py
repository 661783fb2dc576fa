#!/usr/bin/python3
"""Markdown tables for docs/scheduling.md from the CSVs eval.sh / tune.sh write.
   /usr/bin/python3 tools/crescent-sim/tables.py DIR"""
import csv, os, sys

d = sys.argv[1]

def rows(p):
    with open(os.path.join(d, p)) as f:
        return list(csv.DictReader(f))

def pct(a, b):
    return 100.0 * (float(a) / float(b) - 1)

def classes(p, title):
    print(f"\n**{title}: avg TTFT (s) by prompt length**\n")
    rs = rows(p)
    r0 = rs[0]
    print(f"| policy | < 8k tokens ({r0['n_lt8k']} req.) | 8k-32k ({r0['n_8k_32k']}) | >= 32k ({r0['n_ge32k']}) |")
    print("|---|---|---|---|")
    for r in rs:
        print(f"| {r['policy']} | {float(r['ttft_lt8k']):.3f} | {float(r['ttft_8k_32k']):.3f} | {float(r['ttft_ge32k']):.3f} |")

def summary(p, title):
    print(f"\n**{title}**\n")
    print("| policy | avg TTFT (s) | p50 | p90 | p99 | TBT mean (ms) | hand-off p99 (ms) | hit local / remote | prefill GPU·s | pipelined |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows(p):
        print(f"| {r['policy']} | {float(r['ttft_mean']):.3f} | {float(r['ttft_p50']):.3f} | {float(r['ttft_p90']):.3f} | "
              f"{float(r['ttft_p99']):.3f} | {1e3*float(r['tbt_mean']):.1f} | {1e3*float(r['handoff_p99']):.1f} | "
              f"{100*float(r['hit_local']):.1f} % / {100*float(r['hit_remote']):.1f} % | {float(r['prefill_gpu_s']):,.0f} | {r['pipelined']} |")

which = sys.argv[2] if len(sys.argv) > 2 else "all"
if which in ("all", "fig5"):
    summary("fig5/summary.csv", "Whole trace, exact estimates")
    rs = {r['policy']: float(r['ttft_mean']) for r in rows("fig5/summary.csv")}
    g = rs['global_cache']
    print(f"\nratios: random/global {rs['random']/g:.2f}, lb/global {rs['load_balance']/g:.2f}, "
          f"local/global {rs['local_cache']/g:.2f}; global vs local {pct(g, rs['local_cache']):+.1f} %; "
          f"late vs global {pct(rs['late'], g):+.1f} %")
    print("\n| cache blocks / node | LB routing | local cache-aware | global pool | global / LB | global / local |")
    print("|---|---|---|---|---|---|")
    for r in rows("fig5/hitrate.csv"):
        lb, lo, gl = float(r['load_balance']), float(r['local_cache']), float(r['global_cache'])
        print(f"| {r['cache_blocks']} | {lb:.3f} | {lo:.3f} | {gl:.3f} | {gl/lb:.2f} | {gl/lo:.2f} |")
if which in ("all", "heldout"):
    for e in ("0", "0.3"):
        summary(f"heldout_err{e}/summary.csv", f"Held-out half (requests 6000-12030), x1, estimation error sigma {e}")
        classes(f"heldout_err{e}/summary.csv", f"Held-out half, x1, sigma {e}")
if which in ("all", "margin"):
    print("\n| error sigma | load | global avg TTFT (s) | late avg TTFT (s) | **change** | global p50 / late p50 | global p99 / late p99 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows("margin/margin.csv"):
        print(f"| {float(r['err_sigma']):.1f} | x{float(r['load']):g} | {float(r['base_avg']):.3f} | {float(r['ours_avg']):.3f} | "
              f"**{float(r['margin_pct']):+.1f} %** | {float(r['base_p50']):.3f} / {float(r['ours_p50']):.3f} | "
              f"{float(r['base_p99']):.2f} / {float(r['ours_p99']):.2f} |")
    print("\n| systematic bias | predictor | load | global avg TTFT (s) | late avg TTFT (s) | **change** | learned factor (late's run) |")
    print("|---|---|---|---|---|---|---|")
    for b in ("0.7", "1.5"):
        for l in ("true", "false"):
            p = f"bias{b}_learn_{l}/margin.csv"
            if not os.path.exists(os.path.join(d, p)):
                continue
            for r in rows(p):
                print(f"| x{b} | {'learning' if l == 'true' else 'prior only'} | x{float(r['load']):g} | {float(r['base_avg']):.3f} | "
                      f"{float(r['ours_avg']):.3f} | **{float(r['margin_pct']):+.1f} %** | {float(r['pred_factor']):.3f} |")
if which in ("all", "margin") and os.path.exists(os.path.join(d, "margin_cost_fetch/margin.csv")):
    print("\n| error sigma | load | global avg TTFT (s) | cost_fetch avg TTFT (s) | change |")
    print("|---|---|---|---|---|")
    for r in rows("margin_cost_fetch/margin.csv"):
        print(f"| {float(r['err_sigma']):.1f} | x{float(r['load']):g} | {float(r['base_avg']):.3f} | {float(r['ours_avg']):.3f} | {float(r['margin_pct']):+.1f} % |")
if which in ("all", "ablation"):
    print("\n| late variant | error sigma | load | global avg TTFT (s) | variant avg TTFT (s) | change |")
    print("|---|---|---|---|---|---|")
    for name, p in (("FIFO late binding (aging 1000)", "ablation_fifo/margin.csv"),
                    ("late without pipelining", "ablation_nopipe/margin.csv")):
        if not os.path.exists(os.path.join(d, p)):
            continue
        for r in rows(p):
            print(f"| {name} | {float(r['err_sigma']):.1f} | x{float(r['load']):g} | {float(r['base_avg']):.3f} | {float(r['ours_avg']):.3f} | {float(r['margin_pct']):+.1f} % |")
if which in ("all", "capacity"):
    print("\n| TBT threshold | global, exact | late, exact | change | global, 30 % error | late, 30 % error | **change** |")
    print("|---|---|---|---|---|---|---|")
    c0 = rows("capacity_err0/capacity.csv")
    c3 = rows("capacity_err0.3/capacity.csv")
    def f(x):
        return "unreachable" if x == "" else f"{float(x):.2f}"
    def ch(a, b):
        return "—" if a == "" or b == "" else f"{pct(b, a):+.1f} %"
    for a, b in zip(c0, c3):
        print(f"| {float(a['tbt_slo'])*1e3:.0f} ms | {f(a['global_cache'])} | {f(a['late'])} | {ch(a['global_cache'], a['late'])} | "
              f"{f(b['global_cache'])} | {f(b['late'])} | **{ch(b['global_cache'], b['late'])}** |")
if which in ("all", "tune"):
    g = sorted(rows("tune_global.csv"), key=lambda r: float(r['mean_avg_ttft']))
    l = sorted(rows("tune_late.csv"), key=lambda r: float(r['mean_avg_ttft']))
    print(f"\nglobal: {len(g)} settings; best 5 (mean of avg TTFT at x1 and x1.5, first half, sigma 0.3):\n")
    print("| pipe_min_s | pipe_max | pipe_idle_s | pipe_reserve | mean avg TTFT (s) |")
    print("|---|---|---|---|---|")
    for r in g[:5]:
        print(f"| {r['pipe_min_s']} | {r['pipe_max']} | {r['pipe_idle_s']} | {r['pipe_reserve']} | {float(r['mean_avg_ttft']):.3f} |")
    print(f"\nlate: {len(l)} settings; best 5:\n")
    print("| late_aging | pipe_min_s | pipe_max | pipe_reserve | mean avg TTFT (s) |")
    print("|---|---|---|---|---|")
    for r in l[:5]:
        print(f"| {r['late_aging']} | {r['pipe_min_s']} | {r['pipe_max']} | {r['pipe_reserve']} | {float(r['mean_avg_ttft']):.3f} |")
if which in ("all", "fair") and os.path.exists(os.path.join(d, "fair/margin_fifo/margin.csv")):
    # baseline engines with and without each mechanism (eval.sh step "fair")
    print("\n| error sigma | load | global, FIFO engines | global, SPF engines (default) | late | late vs FIFO | **late vs SPF** |")
    print("|---|---|---|---|---|---|---|")
    fifo = {(r['err_sigma'], r['load']): r for r in rows("fair/margin_fifo/margin.csv")}
    for r in rows("margin/margin.csv"):
        k = (r['err_sigma'], r['load'])
        if k not in fifo:
            continue
        fb = float(fifo[k]['base_avg'])
        print(f"| {float(r['err_sigma']):.1f} | x{float(r['load']):g} | {fb:.3f} | {float(r['base_avg']):.3f} | {float(r['ours_avg']):.3f} | "
              f"{pct(r['ours_avg'], fb):+.1f} % | **{float(r['margin_pct']):+.1f} %** |")
    def capcol(p, pol):
        if not os.path.exists(os.path.join(d, p)):
            return None
        return {r['tbt_slo']: r[pol] for r in rows(p)}
    def f(x):
        return "unreachable" if x in ("", None) else f"{float(x):.2f}"
    late = capcol("capacity_err0.3/capacity.csv", "late")
    nosh = capcol("fair/capacity_late_noshed/capacity.csv", "late")
    print("\n| TBT threshold | global FIFO | global FIFO + shed | global SPF | global SPF + shed | late (sheds) | late without shedding |")
    print("|---|---|---|---|---|---|---|")
    cols = [capcol(f"fair/capacity_{q}_shed_{s}/capacity.csv", "global_cache")
            for q in ("fifo", "spf") for s in ("false", "true")]
    for t in late:
        print(f"| {float(t)*1e3:.0f} ms | " + " | ".join(f(c[t]) if c else "—" for c in cols) +
              f" | {f(late[t])} | {f(nosh[t]) if nosh else '—'} |")
    print("\nlate's capacity change against each baseline (30 % error):\n")
    print("| TBT threshold | vs FIFO | vs FIFO + shed | vs SPF | vs SPF + shed | late without shedding vs FIFO | vs SPF + shed |")
    print("|---|---|---|---|---|---|---|")
    def ch(a, b):
        return "—" if a in ("", None) or b in ("", None) else f"{pct(b, a):+.1f} %"
    for t in late:
        print(f"| {float(t)*1e3:.0f} ms | " + " | ".join(ch(c[t], late[t]) if c else "—" for c in cols) +
              f" | {ch(cols[0][t], nosh[t]) if nosh else '—'} | {ch(cols[3][t], nosh[t]) if nosh else '—'} |")
    e0 = capcol("fair/capacity_err0_spf_shed_true/capacity.csv", "global_cache")
    l0 = capcol("capacity_err0/capacity.csv", "late")
    if e0 and l0:
        print("\nexact estimates, global SPF + shed vs late: " +
              ", ".join(f"{float(t)*1e3:.0f} ms {f(e0[t])} -> {f(l0[t])} ({ch(e0[t], l0[t])})" for t in e0))
