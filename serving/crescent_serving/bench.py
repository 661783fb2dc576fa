"""The whole serving path on a multi-turn conversation workload, measured.

    bench/serving/run.sh [--requests 24] [--prefill 2] [--decode 2] [--netns] [--json out.json]

Starts a cluster (crescent-master, crescent-node, crescent-conductor, P prefill
and D decode workers; with --netns across network namespaces i15-*), then:

  1. goal: 2,048-token prompts, the 4-layer d=512 model: TTFT of a prompt
     whose first 7/8 is in the store, computed without reuse (reuse=False)
     and with reuse; the store's share of the reuse TTFT; the same bytes
     copied by memcpy (torch) in this run as the reference for the load.
  2. saving: fresh 2,048-token prompts with layer-wise saving and with the
     whole KV saved at the end (alternating rounds): TTFT and exposed save.
  2b. handoff: a 2,048-token prompt's KV to the decode worker through the
     store vs P2P through the Transfer Engine, memcpy as the reference.
  3. workload: N requests of the earliest multi-turn conversations of
     data/traces' conversation trace (vendored) (its hash_ids give the shared
     prefixes; requests agreeing on the first two are one conversation's
     turns), in trace order, 512-token trace blocks
     scaled to 32 tokens (1/16), prompts capped at 2,048 tokens, output at 16
     tokens; run with reuse, then without: TTFT, hit rate, bytes moved,
     transfer share of TTFT.

TTFT = from the router's request to the prefill worker's answer: first token
computed and the prompt's KV stored and committed for the decode side.
"""
import argparse
import json
import os
import random
import statistics
import sys
import time

import torch

from .cluster import Cluster
from .model import BENCH, ModelConfig, set_deterministic_threads
from .router import Router

TRACE = os.environ.get("CRESCENT_TRACE", os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "data", "traces", "conversation_trace.jsonl"))
SCALE = 16                    # trace tokens per our token
BLOCK_TOKENS = 512 // SCALE   # one trace block = 32 tokens


def _rand_tokens(seed, n, vocab):
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


def _store_time(pre):
    p = pre["kv_transfer_params"]
    return pre["t_lookup"] + p["t_load"] + p["t_save_wait"] + p["t_commit"]


def goal(router, cfg, rounds, log):
    rows = []
    for r in range(rounds):
        base = _rand_tokens("goal-a-%d" % r, 2048, cfg.vocab)
        keep = 2048 * 7 // 8
        router.generate("goal-warm-%d" % r, base, 1)                       # stores A's blocks
        b = base[:keep] + _rand_tokens("goal-b-%d" % r, 2048 - keep, cfg.vocab)
        c = base[:keep] + _rand_tokens("goal-c-%d" % r, 2048 - keep, cfg.vocab)
        no = router.generate("goal-noreuse-%d" % r, b, 1, reuse=False)
        yes = router.generate("goal-reuse-%d" % r, c, 1, reuse=True)
        p = yes["prefill"]["kv_transfer_params"]
        nbytes = p["bytes_loaded"]
        src = torch.empty(nbytes // 4)
        src.fill_(1.0)
        dst = torch.empty_like(src)
        dst.fill_(0.0)
        t0 = time.perf_counter()
        dst.copy_(src)
        t_memcpy = time.perf_counter() - t0
        row = {"ttft_noreuse": no["ttft"], "ttft_reuse": yes["ttft"],
               "speedup": no["ttft"] / yes["ttft"], "hit_tokens": p["hit_tokens"],
               "bytes_loaded": nbytes, "t_load": p["t_load"], "t_memcpy_same_bytes": t_memcpy,
               "store_share_reuse": _store_time(yes["prefill"]) / yes["ttft"],
               "store_share_noreuse": _store_time(no["prefill"]) / no["ttft"],
               "compute_reuse": yes["prefill"]["t_compute"], "compute_noreuse": no["prefill"]["t_compute"]}
        rows.append(row)
        log("goal round %d: TTFT no reuse %.3fs, reuse %.3fs (x%.2f), hit %d tokens, load %.1f MB in %.4fs "
            "(memcpy of the same bytes %.4fs), store share of TTFT %.1f%%"
            % (r, row["ttft_noreuse"], row["ttft_reuse"], row["speedup"], row["hit_tokens"],
               nbytes / 1e6, row["t_load"], t_memcpy, 100 * row["store_share_reuse"]))
    return rows


def saving(router, cfg, rounds, log):
    rows = []
    for r in range(rounds):
        for lw in (True, False) if r % 2 == 0 else (False, True):
            toks = _rand_tokens("save-%d-%d" % (r, lw), 2048, cfg.vocab)
            g = router.generate("save-%d-%d" % (r, lw), toks, 1, reuse=False, layer_wise=lw)
            pre = g["prefill"]
            rows.append({"layer_wise": lw, "ttft": g["ttft"], "t_first": pre["t_first"],
                         "exposed_save": pre["t_ready"] - pre["t_first"],
                         "t_save_wait": pre["kv_transfer_params"]["t_save_wait"],
                         "bytes_saved": pre["kv_transfer_params"]["bytes_saved"]})
            log("saving round %d %s: TTFT %.3fs, first token at %.3fs, save exposed after it %.4fs, %.1f MB"
                % (r, "layer-wise" if lw else "whole-KV ", g["ttft"], pre["t_first"],
                   rows[-1]["exposed_save"], rows[-1]["bytes_saved"] / 1e6))
    return rows


def handoff(router, cfg, rounds, log):
    """Prefill -> decode handoff of a 2,048-token prompt's KV: decode reading
    the store (HiCache batch_get_v1) vs the prefill worker writing into the
    decode worker's blocks through the Transfer Engine (P2P); memcpy of the
    same bytes in this process as the reference."""
    rows = []
    for r in range(rounds):
        toks = _rand_tokens("handoff-%d" % r, 2048, cfg.vocab)
        s = router.generate("handoff-store-%d" % r, toks, 2)
        toks2 = _rand_tokens("handoff-p2p-%d" % r, 2048, cfg.vocab)
        p = router.generate("handoff-p2p-%d" % r, toks2, 2, p2p=True)
        nbytes = s["decode"]["bytes_loaded"]
        src = torch.ones(nbytes // 4)
        dst = torch.zeros_like(src)
        t0 = time.perf_counter()
        dst.copy_(src)
        t_mem = time.perf_counter() - t0
        rows.append({"bytes": nbytes, "store_decode_load": s["decode"]["t_load"],
                     "p2p_push": p["prefill"]["t_push"], "p2p_decode_wait": p["decode"]["t_load"],
                     "memcpy": t_mem})
        log("handoff round %d: %.1f MB, decode load from the store %.4fs, P2P push %.4fs "
            "(+ notify wait %.4fs), memcpy %.4fs"
            % (r, nbytes / 1e6, s["decode"]["t_load"], p["prefill"]["t_push"], p["decode"]["t_load"], t_mem))
    return rows


def load_trace(n, vocab, max_tokens=2048, max_out=16, max_turns=3):
    """Multi-turn conversations of the trace: requests whose first two
    hash_ids agree are turns of one conversation. Takes the earliest
    conversations with >= 2 turns (at most max_turns each) until n requests,
    in trace (timestamp) order, so turns of different conversations
    interleave as they arrived."""
    with open(TRACE) as f:
        trace = [json.loads(line) for line in f]
    convs = {}
    for i, r in enumerate(trace):
        if len(r["hash_ids"]) >= 2:
            convs.setdefault(tuple(r["hash_ids"][:2]), []).append(i)
    picked = []
    for k in sorted((k for k, v in convs.items() if len(v) >= 2), key=lambda k: convs[k][0]):
        if len(picked) >= n:
            break
        picked += convs[k][:min(max_turns, n - len(picked))]
    reqs = []
    for i in sorted(picked):
        r = trace[i]
        n_in = min(max_tokens, max(2, (r["input_length"] + SCALE - 1) // SCALE))
        toks = []
        for h in r["hash_ids"]:
            toks += _rand_tokens(h, BLOCK_TOKENS, vocab)
            if len(toks) >= n_in:
                break
        toks = toks[:n_in]
        reqs.append((toks, max(1, min(max_out, (r["output_length"] + SCALE - 1) // SCALE))))
    return reqs


def workload(router, reqs, reuse, log, tag):
    rows = []
    for i, (toks, n_out) in enumerate(reqs):
        g = router.generate("%s-%d" % (tag, i), toks, n_out, reuse=reuse)
        pre = g["prefill"]
        p = pre["kv_transfer_params"]
        rows.append({"prompt": len(toks), "hit": p["hit_tokens"], "ttft": g["ttft"],
                     "bytes_loaded": p["bytes_loaded"], "bytes_saved": p["bytes_saved"],
                     "decode_bytes": g["decode"]["bytes_loaded"], "store_time": _store_time(pre),
                     "prefill_worker": g["prefill_worker"], "decode_worker": g["decode_worker"]})
    tok = sum(r["prompt"] for r in rows)
    summ = {"requests": len(rows), "prompt_tokens": tok,
            "hit_rate": sum(r["hit"] for r in rows) / tok,
            "ttft_mean": statistics.mean(r["ttft"] for r in rows),
            "ttft_p50": statistics.median(r["ttft"] for r in rows),
            "ttft_p90": sorted(r["ttft"] for r in rows)[int(0.9 * (len(rows) - 1))],
            "bytes_loaded_prefill": sum(r["bytes_loaded"] for r in rows),
            "bytes_saved_prefill": sum(r["bytes_saved"] for r in rows),
            "bytes_loaded_decode": sum(r["decode_bytes"] for r in rows),
            "transfer_share_of_ttft": sum(r["store_time"] for r in rows) / sum(r["ttft"] for r in rows),
            "prefill_workers_used": sorted({r["prefill_worker"] for r in rows})}
    log("workload %s: %d requests, %d prompt tokens, hit rate %.1f%%, TTFT mean %.3fs p50 %.3fs p90 %.3fs, "
        "prefill loaded %.1f MB saved %.1f MB, decode loaded %.1f MB, transfer share of TTFT %.1f%%"
        % ("with reuse" if reuse else "no reuse  ", summ["requests"], tok, 100 * summ["hit_rate"],
           summ["ttft_mean"], summ["ttft_p50"], summ["ttft_p90"], summ["bytes_loaded_prefill"] / 1e6,
           summ["bytes_saved_prefill"] / 1e6, summ["bytes_loaded_decode"] / 1e6,
           100 * summ["transfer_share_of_ttft"]))
    return summ, rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--prefill", type=int, default=2)
    ap.add_argument("--decode", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--netns", action="store_true", help="across network namespaces (needs root)")
    ap.add_argument("--protocol", default="tcp", help="store protocol of the workers (tcp, tcp,shm)")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: goal,saving,handoff,workload")
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args(argv)
    set_deterministic_threads()
    cfg = ModelConfig(name="crescent-gpt-bench", **BENCH)
    skip = set(filter(None, a.skip.split(",")))

    def log(s):
        print(s, flush=True)

    out = {"model": cfg.shape(), "netns": a.netns, "protocol": a.protocol,
           "host": os.uname().nodename, "nproc": os.cpu_count(), "loadavg_start": os.getloadavg()}
    log("model %s, %s, loadavg %.1f (machine shared by 8 helpers)"
        % (cfg.shape(), "network namespaces" if a.netns else "127.0.0.1", os.getloadavg()[0]))
    with Cluster(cfg, a.prefill, a.decode, netns=a.netns, node_size="2GB", worker_blocks=160,
                 protocol=a.protocol) as c:
        r = Router(c.conductor, cfg.name, rpc_timeout_s=600)
        r.attach(c.endpoints())
        if "goal" not in skip:
            out["goal"] = goal(r, cfg, a.rounds, log)
        if "saving" not in skip:
            out["saving"] = saving(r, cfg, a.rounds * 2, log)
        if "handoff" not in skip:
            out["handoff"] = handoff(r, cfg, a.rounds, log)
        if "workload" not in skip:
            reqs = load_trace(a.requests, cfg.vocab)
            out["workload_reuse"], _ = workload(r, reqs, True, log, "wl-reuse")
            out["workload_noreuse"], _ = workload(r, reqs, False, log, "wl-noreuse")
    if "goal" in out:
        g = out["goal"]
        log("GOAL: 7/8 prefix reuse at 2k tokens: TTFT x%.2f (median of %d rounds; goal >= 2.5), "
            "store share of TTFT with reuse %.1f%%"
            % (statistics.median(x["speedup"] for x in g), len(g),
               100 * statistics.median(x["store_share_reuse"] for x in g)))
    if "saving" in out:
        s = out["saving"]
        for lw in (True, False):
            xs = [x for x in s if x["layer_wise"] == lw]
            log("SAVING %s: TTFT median %.3fs, save exposed after the first token median %.4fs"
                % ("layer-wise" if lw else "whole-KV  ", statistics.median(x["ttft"] for x in xs),
                   statistics.median(x["exposed_save"] for x in xs)))
    if "handoff" in out:
        h = out["handoff"]
        log("HANDOFF %.1f MB: decode load from the store median %.4fs, P2P push median %.4fs, memcpy %.4fs"
            % (h[0]["bytes"] / 1e6, statistics.median(x["store_decode_load"] for x in h),
               statistics.median(x["p2p_push"] for x in h), statistics.median(x["memcpy"] for x in h)))
    if "workload_reuse" in out:
        w, n = out["workload_reuse"], out["workload_noreuse"]
        log("WORKLOAD: TTFT mean with reuse %.3fs vs without %.3fs (x%.2f), hit rate %.1f%%"
            % (w["ttft_mean"], n["ttft_mean"], n["ttft_mean"] / w["ttft_mean"], 100 * w["hit_rate"]))
    out["loadavg_end"] = os.getloadavg()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
