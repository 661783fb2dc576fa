#!/usr/bin/python3
"""Loopback benchmark of crescent-conductor (run once; not a test).

1. KV event ingestion: one vLLM-style publisher sends pre-packed msgpack
   batches ([topic, seq, payload] over ZMQ PUB) as fast as it can; we time
   from the first send until /instances reports every batch applied. Two
   variants: BlockStored with token_ids (the conductor hashes the tokens and
   chains the parent) and without (engine hashes used as-is).
2. /query latency: with the index populated, sequential POST /query over one
   keep-alive HTTP connection (python http.client, so client overhead is
   included), prompts of --query_blocks blocks, p50/p90/p99.

Usage: bench_conductor.py /path/to/crescent-conductor [--batches N] [--events_per_batch K]
       [--blocks_per_event B] [--block_size S] [--queries Q] [--query_blocks M]
Only 127.0.0.1 is used.
"""
import argparse
import http.client
import json
import os
import signal
import struct
import subprocess
import sys
import time

import msgpack
import zmq


def start(exe, bs):
    p = subprocess.Popen([exe, "--host=127.0.0.1", "--port=0", "--block_size=%d" % bs],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    if "listening on" not in line:
        raise SystemExit("conductor did not start: %r" % line)
    return p, int(line.strip().rsplit(":", 1)[1])


class Http:
    def __init__(self, port):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def call(self, method, path, body=None):
        data = json.dumps(body) if body is not None else None
        self.c.request(method, path, body=data,
                       headers={"Content-Type": "application/json"} if data else {})
        r = self.c.getresponse()
        return r.status, json.loads(r.read())


def ingest(h, ctx, name, batches, epb, bpe, bs, with_tokens, base):
    pub = ctx.socket(zmq.XPUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.setsockopt(zmq.LINGER, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    st, j = h.call("POST", "/register", {"endpoint": "tcp://127.0.0.1:%d" % port,
                                         "modelname": "bench", "instance_id": name,
                                         "block_size": bs})
    assert st == 200, j
    if not pub.poll(30000):
        raise SystemExit("no subscriber")
    pub.recv()
    payloads, hid = [], base
    for b in range(batches):
        evs = []
        for e in range(epb):
            hashes = list(range(hid, hid + bpe))
            toks = list(range(hid * bs, (hid + bpe) * bs)) if with_tokens else []
            # each event continues the previous one's chain, like a long prompt
            parent = hid - 1 if (with_tokens and hid > base) else None
            evs.append(["BlockStored", hashes, parent, toks, bs, None, "GPU", None])
            hid += bpe
        payloads.append(msgpack.packb([time.time(), evs, 0], use_bin_type=True))
    t0 = time.perf_counter()
    for i, p in enumerate(payloads):
        pub.send_multipart([b"kv", struct.pack(">Q", i), p])
    while True:
        st, j = h.call("GET", "/instances")
        n = sum(i["batches"] + i["bad_batches"] for i in j["instances"] if i["instance_id"] == name)
        if n >= batches:
            break
        time.sleep(0.002)
    dt = time.perf_counter() - t0
    pub.close()
    return dt, hid - base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--events_per_batch", type=int, default=8)
    ap.add_argument("--blocks_per_event", type=int, default=4)
    ap.add_argument("--block_size", type=int, default=16)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--query_blocks", type=int, default=128)
    a = ap.parse_args()
    proc, port = start(a.exe, a.block_size)
    ctx = zmq.Context()
    try:
        h = Http(port)
        ev = a.batches * a.events_per_batch
        for name, tok in (("with-tokens", True), ("hashes-only", False)):
            dt, blocks = ingest(h, ctx, name, a.batches, a.events_per_batch,
                                a.blocks_per_event, a.block_size, tok, 1 + (0 if tok else 10**9))
            print("ingest %-12s %6d batches %7d events %8d blocks in %.3f s: "
                  "%9.0f events/s %9.0f blocks/s %8.0f batches/s"
                  % (name, a.batches, ev, blocks, dt, ev / dt, blocks / dt, a.batches / dt))
        # /query: prompt = the first query_blocks blocks stored by "with-tokens"
        toks = list(range(1 * a.block_size, (1 + a.query_blocks) * a.block_size))
        lat = []
        for i in range(a.queries):
            t = time.perf_counter()
            st, j = h.call("POST", "/query", {"model": "bench", "token_ids": toks})
            lat.append(time.perf_counter() - t)
            assert st == 200
        got = j["default"]["with-tokens"]["longest_matched"]
        lat.sort()
        q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] * 1e6
        print("query %d tokens (%d blocks, matched %d tokens), %d requests: "
              "p50 %.0f us  p90 %.0f us  p99 %.0f us  (%.0f req/s sequential)"
              % (len(toks), a.query_blocks, got, a.queries, q(0.5), q(0.9), q(0.99),
                 len(lat) / sum(lat)))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        ctx.destroy(linger=0)


if __name__ == "__main__":
    main()
