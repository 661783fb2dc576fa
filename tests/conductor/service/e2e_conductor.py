#!/usr/bin/python3
"""End-to-end test of crescent-conductor with real ZMQ publishers.

Starts crescent-conductor on 127.0.0.1 (ephemeral HTTP port), two vLLM-style
KV event publishers (pyzmq XPUB sockets on 127.0.0.1, msgpack batches framed
as [topic, seq (8 bytes BE), payload] exactly like vLLM's ZmqEventPublisher),
registers them over HTTP, publishes BlockStored / BlockRemoved batches and
checks /query, /query_by_hash, /schedule (longest prefix wins; 429 under an
impossible SLO), bad input handling and /unregister.

Usage: e2e_conductor.py /path/to/crescent-conductor
Only loopback addresses are used.
"""
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

import msgpack
import zmq

try:
    import xxhash
except ImportError:  # python3-xxhash is in scripts/install-deps.sh
    xxhash = None

BS = 4  # tokens per block
# never route 127.0.0.1 through an http_proxy from the environment
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
DEADLINE_S = 30


def fail(msg):
    print("FAIL: " + msg, flush=True)
    raise SystemExit(1)


def check(cond, what, expected=None, got=None):
    if not cond:
        fail("%s: expected %r, got %r" % (what, expected, got))


class Conductor:
    def __init__(self, exe):
        env = dict(os.environ, CRESCENT_LOG="info")
        self.p = subprocess.Popen(
            [exe, "--host=127.0.0.1", "--port=0", "--block_size=%d" % BS,
             "--policy=global_cache", "--max_body=1MB",
             "--replay_timeout_ms=20000",  # generous: CI may be slow (ASan)
             "--endpoint_prefixes=tcp://127.0.0.1:"],  # loopback publishers only
            stdout=subprocess.PIPE, stderr=sys.stderr, env=env, text=True)
        line = self.p.stdout.readline()
        if "listening on 127.0.0.1:" not in line:
            fail("conductor did not start: %r" % line)
        self.port = int(line.strip().rsplit(":", 1)[1])
        self.base = "http://127.0.0.1:%d" % self.port

    def call(self, method, path, body=None, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with NO_PROXY.open(req, timeout=10) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        ctype_json = text.startswith("{") or text.startswith("[")
        return status, (json.loads(text) if ctype_json else text)

    def raw_status(self, head):
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sk:
            sk.sendall(head)
            data = b""
            while b"\r\n" not in data:
                chunk = sk.recv(4096)
                if not chunk:
                    break
                data += chunk
        parts = data.split(b" ", 2)
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                return self.p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
                fail("conductor did not stop on SIGTERM")
        return self.p.returncode


class Publisher:
    """vLLM ZmqEventPublisher framing; XPUB so we know when the SUB joined."""

    def __init__(self, ctx, replay=False):
        self.sock = ctx.socket(zmq.XPUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = "tcp://127.0.0.1:%d" % self.port
        self.seq = 0
        self.buffer = []  # (seq, payload) kept for replay, like vLLM's
        self.replay = None
        if replay:
            self.replay = ctx.socket(zmq.ROUTER)
            self.replay.setsockopt(zmq.LINGER, 0)
            rport = self.replay.bind_to_random_port("tcp://127.0.0.1")
            self.replay_endpoint = "tcp://127.0.0.1:%d" % rport
        self.replays_served = 0

    def service_replay(self):
        """vLLM ZmqEventPublisher._service_replay: [id, "", start] in,
        [id, "", seq, payload]... then [id, "", -1, ""] out."""
        while self.replay is not None and self.replay.poll(0):
            frames = self.replay.recv_multipart()
            check(len(frames) == 3 and frames[1] == b"" and len(frames[2]) == 8,
                  "replay request framing", "[id, '', seq8]", frames)
            start = int.from_bytes(frames[2], "big")
            for seq, buf in self.buffer:
                if seq >= start:
                    self.replay.send_multipart([frames[0], b"", seq.to_bytes(8, "big"), buf])
            self.replay.send_multipart([frames[0], b"", (-1).to_bytes(8, "big", signed=True),
                                        b""])
            self.replays_served += 1

    def wait_subscriber(self):
        if not self.sock.poll(DEADLINE_S * 1000):
            fail("conductor never subscribed to " + self.endpoint)
        msg = self.sock.recv()
        check(msg[:1] == b"\x01", "subscription message", b"\x01...", msg)

    def publish(self, events, dp_rank=0, skip_seq=False, lose=False):
        """lose: the batch is numbered and kept for replay, but the PUB send
        is dropped (as when the subscriber's queue overflowed)."""
        if skip_seq:
            self.seq += 1
        batch = [time.time(), events, dp_rank]
        payload = msgpack.packb(batch, use_bin_type=True)
        self.buffer.append((self.seq, payload))
        if not lose:
            self.sock.send_multipart([b"kv-events", struct.pack(">Q", self.seq), payload])
        self.seq += 1

    def send_raw(self, frames):
        self.sock.send_multipart(frames)


def stored(hashes, parent, tokens, medium="GPU"):
    return ["BlockStored", hashes, parent, tokens, BS, None, medium, None]


def removed(hashes, medium="GPU"):
    return ["BlockRemoved", hashes, medium]


def seq_hashes(tokens):
    out, prev = [], None
    for i in range(len(tokens) // BS):
        b = struct.pack("<%dI" % BS, *tokens[i * BS:(i + 1) * BS])
        h = xxhash.xxh3_64_intdigest(b, seed=0)
        prev = h if prev is None else xxhash.xxh3_64_intdigest(
            struct.pack("<QQ", prev, h), seed=0)
        out.append(prev)
    return out


def wait_batches(c, want, pubs=()):
    """Waits (bounded) until each instance applied at least want[id] batches,
    serving replay requests of pubs meanwhile."""
    end = time.monotonic() + DEADLINE_S
    while True:
        for p in pubs:
            p.service_replay()
        st, j = c.call("GET", "/instances")
        check(st == 200, "GET /instances status", 200, st)
        got = {i["instance_id"]: i["batches"] + i["bad_batches"] for i in j["instances"]}
        if all(got.get(k, 0) >= v for k, v in want.items()):
            return j
        if time.monotonic() > end:
            fail("batches not applied in time: want %r, got %r" % (want, got))
        time.sleep(0.05)


def metric(c, name):
    st, text = c.call("GET", "/metrics")
    check(st == 200, "GET /metrics status", 200, st)
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    fail("metric %s missing" % name)


def main():
    exe = sys.argv[1]
    ctx = zmq.Context()
    c = Conductor(exe)
    try:
        run(c, ctx)
    finally:
        rc = c.stop()
        ctx.destroy(linger=0)
    check(rc == 0, "conductor exit status after SIGTERM", 0, rc)
    print("PASS", flush=True)


def run(c, ctx):
    st, j = c.call("GET", "/health")
    check(st == 200 and j["status"] == "ok", "GET /health", "ok", j)

    pubs = {"p1": Publisher(ctx), "p2": Publisher(ctx)}
    for name, p in pubs.items():
        st, j = c.call("POST", "/register", {
            "endpoint": p.endpoint, "type": "vLLM", "modelname": "llama",
            "instance_id": name, "block_size": BS, "dp_rank": 0, "tenant_id": "default"})
        check(st == 200 and j["status"] == "registered successfully",
              "register " + name, "registered successfully", (st, j))
        p.wait_subscriber()

    # prompt of 5 blocks; p1 caches 4 of them (int hashes, GPU), p2 caches 2
    # on GPU and a third on CPU (bytes hashes like vLLM's sha256 block hashes)
    toks = list(range(1000, 1000 + 5 * BS))
    pubs["p1"].publish([stored([11, 12], None, toks[:2 * BS])])
    pubs["p1"].publish([stored([13, 14], 12, toks[2 * BS:4 * BS])])
    h = [bytes([k]) * 32 for k in (1, 2, 3)]
    pubs["p2"].publish([stored(h[:2], None, toks[:2 * BS]),
                        stored(h[2:], h[1], toks[2 * BS:3 * BS], medium="CPU")])
    wait_batches(c, {"p1": 2, "p2": 1})

    st, j = c.call("POST", "/query", {"model": "llama", "token_ids": toks})
    check(st == 200, "/query status", 200, (st, j))
    p1, p2 = j["default"]["p1"], j["default"]["p2"]
    check(p1["longest_matched"] == 4 * BS, "p1 longest_matched", 4 * BS, p1)
    check(p1["GPU"] == 4 * BS and p1["CPU"] == 0, "p1 tiers", "GPU 16 CPU 0", p1)
    check(p2["longest_matched"] == 3 * BS, "p2 longest_matched", 3 * BS, p2)
    check(p2["GPU"] == 2 * BS and p2["CPU"] == BS, "p2 tiers", "GPU 8 CPU 4", p2)
    check(p2["DP"] == {"0": 3 * BS}, "p2 DP", {"0": 3 * BS}, p2["DP"])

    if xxhash is not None:
        hs = seq_hashes(toks)
        st, j = c.call("POST", "/query_by_hash",
                       {"model": "llama", "seq_hashes": [str(x) for x in hs]})
        check(st == 200, "/query_by_hash status", 200, (st, j))
        check(j["default"]["p1"]["longest_matched"] == 4 * BS, "query_by_hash p1", 16, j)
        check(j["default"]["p2"]["longest_matched"] == 3 * BS, "query_by_hash p2", 12, j)
    else:
        print("note: python3-xxhash missing, /query_by_hash checked with p1 only", flush=True)

    # /schedule: p1 holds the longest prefix
    st, j = c.call("POST", "/schedule", {"model": "llama", "token_ids": toks, "dry_run": True})
    check(st == 200, "/schedule status", 200, (st, j))
    check(j["prefill"]["instance_id"] == "p1", "/schedule prefill", "p1", j)
    check(j["local_prefix_tokens"] == 4 * BS, "/schedule local prefix", 4 * BS, j)

    # p1 evicts its last two blocks: p2 now holds the longest prefix
    pubs["p1"].publish([removed([13, 14])])
    wait_batches(c, {"p1": 3})
    st, j = c.call("POST", "/query", {"model": "llama", "token_ids": toks, "instance_id": "p1"})
    check(j["default"]["p1"]["longest_matched"] == 2 * BS, "p1 after BlockRemoved", 8, j)
    st, j = c.call("POST", "/schedule", {"model": "llama", "token_ids": toks, "dry_run": True})
    check(st == 200 and j["prefill"]["instance_id"] == "p2", "/schedule after eviction", "p2",
          (st, j))

    # impossible SLO: 429
    st, j = c.call("POST", "/schedule",
                   {"model": "llama", "token_ids": toks, "ttft_slo_ms": 1e-6})
    check(st == 429, "/schedule under an impossible SLO", 429, (st, j))
    check(j.get("field") == "ttft_slo_ms", "429 names the SLO", "ttft_slo_ms", j)

    # bad input: HTTP 400 naming the field, nothing crashes
    st, j = c.call("POST", "/query", {"model": "llama", "token_ids": [1, -1]})
    check(st == 400 and j["field"] == "token_ids[1]", "negative token id", "400 token_ids[1]",
          (st, j))
    st, j = c.call("POST", "/query", raw=b"{\"model\": \"llama\", \"token_ids\": [1,")
    check(st == 400 and j["field"] == "body", "truncated JSON", "400 body", (st, j))
    st, j = c.call("POST", "/register", {"endpoint": "tcp://127.0.0.1:1", "modelname": "x",
                                         "instance_id": "q", "block_size": 4, "bogus": 1})
    check(st == 400 and j["field"] == "bogus", "unknown field", "400 bogus", (st, j))
    st, j = c.call("POST", "/register", {"endpoint": "tcp://no port here", "modelname": "x",
                                         "instance_id": "q", "block_size": 4})
    check(st == 400 and j["field"] == "endpoint", "bad endpoint", "400 endpoint", (st, j))
    st, j = c.call("POST", "/register", {"endpoint": "ipc:///nonexistent/cr-e2e", "modelname": "x",
                                         "instance_id": "q", "block_size": 4})
    check(st == 403 and j["field"] == "endpoint", "endpoint outside --endpoint_prefixes",
          "403 endpoint", (st, j))
    # a body announced larger than --max_body (1 MiB) is refused before it
    # is read: send only the headers and read the answer
    st = c.raw_status(b"POST /query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n")
    check(st == 413, "oversized body", 413, st)

    # bad events: malformed msgpack, a wrong field, bad framing, a seq gap
    pubs["p2"].send_raw([b"kv-events", struct.pack(">Q", pubs["p2"].seq), b"\xdd\xff\xff\xff\xff"])
    pubs["p2"].seq += 1
    pubs["p2"].publish([["BlockStored", [1], None, [1, 2, 3], BS, None, "GPU", None]])
    pubs["p2"].send_raw([b"a", b"b", b"c", b"d"])
    pubs["p2"].publish([removed([b"\x09" * 32])], skip_seq=True)
    wait_batches(c, {"p2": 4})
    check(metric(c, "crescent_conductor_bad_batches_msgpack_total") == 1, "msgpack errors", 1,
          None)
    check(metric(c, "crescent_conductor_bad_batches_field_total") == 1, "field errors", 1, None)
    check(metric(c, "crescent_conductor_bad_frames_total") == 1, "bad frames", 1, None)
    check(metric(c, "crescent_conductor_event_seq_gaps_total") == 1, "seq gaps", 1, None)
    st, j = c.call("POST", "/query", {"model": "llama", "token_ids": toks, "instance_id": "p2"})
    check(j["default"]["p2"]["longest_matched"] == 3 * BS, "p2 unchanged by bad batches", 12, j)

    # replay: p3 registers its ROUTER replay endpoint; batch 1 is lost on the
    # PUB socket, batch 2 (chained to batch 1's block) reveals the gap, the
    # conductor fetches 1..2 from the replay socket and applies them in order
    p3 = Publisher(ctx, replay=True)
    st, j = c.call("POST", "/register", {
        "endpoint": p3.endpoint, "replay_endpoint": p3.replay_endpoint, "type": "vLLM",
        "modelname": "llama", "instance_id": "p3", "block_size": BS, "dp_rank": 0})
    check(st == 200, "register p3 with replay_endpoint", 200, (st, j))
    p3.wait_subscriber()
    p3.publish([stored([31], None, toks[:BS])])
    p3.publish([stored([32], 31, toks[BS:2 * BS])], lose=True)
    p3.publish([stored([33], 32, toks[2 * BS:3 * BS])])
    j = wait_batches(c, {"p3": 3}, pubs=[p3])
    inst = [i for i in j["instances"] if i["instance_id"] == "p3"][0]
    check(p3.replays_served == 1, "replay requests served", 1, p3.replays_served)
    check(inst["seq_gaps"] == 0 and inst["last_seq"] == 2 and inst["bad_batches"] == 0,
          "p3 after replay", "no gap, last_seq 2", inst)
    st, j = c.call("POST", "/query", {"model": "llama", "token_ids": toks, "instance_id": "p3"})
    check(j["default"]["p3"]["longest_matched"] == 3 * BS, "p3 chain after replay", 3 * BS, j)
    check(metric(c, "crescent_conductor_orphan_blocks_total") == 0, "orphans after replay", 0,
          None)
    p3.sock.close(linger=0)
    p3.replay.close(linger=0)
    st, j = c.call("POST", "/unregister", {"instance_id": "p3"})
    check(st == 200, "unregister p3", 200, (st, j))

    # a Mooncake Store publisher (host/disk pools) for instance p1: topic
    # "mooncake", BlockStoreEvent with replicas; p1's answer gains CPU/DISK
    # counts and the blocks p1 evicted from its GPU come back via the store
    ms = Publisher(ctx)
    st, j = c.call("POST", "/register", {
        "endpoint": ms.endpoint, "type": "Mooncake", "modelname": "llama",
        "instance_id": "p1", "block_size": BS, "dp_rank": 1})
    check(st == 200, "register the Mooncake store publisher", 200, (st, j))
    ms.wait_subscriber()
    mem, disk = ["memory", "tcp://127.0.0.1:1"], ["disk", "/data/k"]
    payload = msgpack.packb([time.time(), [
        ["BlockStoreEvent", "k0", [mem, disk], "llama", BS, "0x10", "", toks[:BS]],
        ["BlockStoreEvent", "k1", [mem], "llama", BS, "0x11", "0x10", toks[:2 * BS]],
        ["BlockStoreEvent", "k2", [disk], "llama", BS, "0x12", "0x11", toks[2 * BS:3 * BS]],
        ["BlockStoreEvent", "k3", [mem], "llama", BS, "0x13", "0x12", toks[3 * BS:4 * BS]],
    ]], use_bin_type=True)
    ms.sock.send_multipart([b"mooncake", struct.pack(">Q", 0), payload])
    end = time.monotonic() + DEADLINE_S
    while True:
        st, j = c.call("POST", "/query", {"model": "llama", "token_ids": toks,
                                          "instance_id": "p1"})
        if j["default"]["p1"]["longest_matched"] == 4 * BS or time.monotonic() > end:
            break
        time.sleep(0.05)
    p1 = j["default"]["p1"]
    check(p1["longest_matched"] == 4 * BS, "p1 with the store's blocks", 4 * BS, p1)
    check(p1["GPU"] == 2 * BS and p1["CPU"] == 3 * BS and p1["DISK"] == 2 * BS,
          "p1 tiers with the store", "GPU 8 CPU 12 DISK 8", p1)
    check(p1["DP"] == {"0": 2 * BS, "1": 4 * BS}, "p1 per publisher (dp rank)",
          {"0": 8, "1": 16}, p1["DP"])
    ms.sock.close(linger=0)
    st, j = c.call("POST", "/unregister", {"instance_id": "p1", "dp_rank": 1})
    check(st == 200 and j["removed_instances"] == ["p1|default|1"], "unregister the store",
          ["p1|default|1"], (st, j))

    # unregister p2: gone from answers, its later events are not applied
    st, j = c.call("POST", "/unregister", {"instance_id": "p2", "type": "vLLM",
                                           "modelname": "llama", "block_size": BS})
    check(st == 200 and j["removed_instances"] == ["p2|default|0"], "unregister", "p2", j)
    pubs["p2"].publish([stored([99], None, toks[:BS])])
    st, j = c.call("POST", "/query", {"model": "llama", "token_ids": toks})
    check(list(j["default"].keys()) == ["p1"], "instances after unregister", ["p1"], j)
    st, j = c.call("GET", "/health")
    check(j["instances"] == 1, "health instances", 1, j)
    for p in pubs.values():
        p.sock.close(linger=0)


if __name__ == "__main__":
    main()
