"""Bad input and failures on the KV path, each with real processes and the
real store: a block evicted between exists and get, a decode worker killed
mid-load, a prefill worker killed mid-save, mismatched model shapes."""
import dataclasses
import re
import signal
import threading

import msgpack
import pytest
import torch
import zmq

from conftest import CFG, prompt, wait_indexed
from crescent_serving.cluster import Cluster, _wait_line
from crescent_serving.engine import PrefillEngine, Reference
from crescent_serving.hashing import prefix_hashes
from crescent_serving.kvstore import KVStore, block_page, layer_key, marker_key, open_store
from crescent_serving.model import ModelConfig, ModelMismatch
from crescent_serving.router import Router
from crescent_serving.rpc import MAX_REQUEST, RpcError, call


def _t(b):
    return torch.frombuffer(bytearray(b), dtype=torch.float32)


def _same_logits(got, ref):
    assert len(got) == len(ref)
    for i, (g, r) in enumerate(zip(got, ref)):
        g = _t(g) if isinstance(g, (bytes, bytearray)) else g
        assert torch.equal(g, r), "logits %d differ by %g" % (i, (g - r).abs().max().item())


@pytest.fixture(scope="module")
def bare():
    """master, node, conductor; each test starts the workers it needs."""
    with Cluster(CFG, n_prefill=0, n_decode=0, node_size="128MB", worker_blocks=256) as c:
        yield c


@pytest.fixture(scope="module")
def store(bare):
    s = open_store("127.0.0.1", bare.metadata, bare.master)
    yield s
    s.close()


def test_block_evicted_between_exists_and_get(bare, store):
    """The lookup sees 6 committed blocks; before the load, block 4's marker
    and one layer object of block 2 are removed (as an eviction would). The
    load keeps blocks 0-1, recomputes from block 2, and the logits equal the
    in-process computation split at block 2: never KV of a missing block."""
    p = prompt(10, 100)
    kv = KVStore(store, CFG)
    first = PrefillEngine(CFG, kv, 64)
    r0 = first.prefill("evict-0", p)
    hs = prefix_hashes(p, CFG.block_size)
    assert kv.committed_prefix(hs) == 6

    eng = PrefillEngine(CFG, KVStore(store, CFG), 64)
    removed = []

    def evict(point, m):
        if point == "after_markers":
            nonces = KVStore(store, CFG).read_markers(hs[:3])
            assert len(nonces) == 3
            removed.append(store.remove(marker_key(kv.ns, hs[4]), True))
            removed.append(store.remove(layer_key(kv.ns, block_page(hs[2], nonces[2]), 1), True))
    eng.conn.fault_hook = evict
    r = eng.prefill("evict-1", p)
    assert removed == [0, 0]
    params = r["kv_transfer_params"]
    assert params["hit_tokens"] == 32 and r["computed_from"] == 32, params
    assert params["load_errors"] == 4
    ref = Reference(CFG)
    ref.run(p, 0, 1)
    _, lr = ref.run(p, 32, 1, store=False)
    _same_logits([r["logits"]], lr)
    # the stale marker of block 2 was dropped and the blocks committed anew
    assert kv.committed_prefix(hs) == 6
    third = PrefillEngine(CFG, KVStore(store, CFG), 64)
    r2 = third.prefill("evict-2", p)
    assert r2["kv_transfer_params"]["hit_tokens"] == 96
    for e in (first, eng, third):
        e.close()
    assert r0["first_token"] == r["first_token"] == r2["first_token"]


def test_decode_killed_mid_load(bare, store):
    """d0 stops after reading the first 2 of 7 pages and is SIGKILLed; the
    router sees the connection drop, marks d0 dead and decodes on d1 from
    the same pages; the output equals the in-process computation."""
    p_ep = bare.start_worker("prefill", "pk")
    d0 = bare.start_worker("decode", "dk0", env={"CRESCENT_SERVING_PAUSE": "decode_mid_load",
                                                "LOAD_BATCH_PAGES": "2"})
    r = Router(bare.conductor, CFG.name, rpc_timeout_s=120)
    r.attach([p_ep, d0])
    p = prompt(20, 100)
    out = {}
    th = threading.Thread(target=lambda: out.update(r.generate("killdec", p, 6)))
    th.start()
    _wait_line(bare.workers["dk0"][0], r"PAUSED decode_mid_load", "dk0")
    d1 = bare.start_worker("decode", "dk1")
    r.attach([d1])
    bare.kill("dk0")
    th.join(120)
    assert not th.is_alive()
    assert out["decode_worker"] == "dk1" and "dk0" in r.dead
    ref = Reference(CFG)
    t, l = ref.run(p, out["prefill"]["kv_transfer_params"]["hit_tokens"], 6)
    assert out["tokens"] == t
    _same_logits(out["logits"], l)
    call(p_ep, "shutdown")
    call(d1, "shutdown")


def test_prefill_killed_mid_save(bare, store):
    """pm0 is SIGKILLed after handing layer 0 of every new block to its saver
    (layer 1 never saved, no marker written). No block of the prompt becomes
    visible; the router retries on pm1, which recomputes everything and
    answers what the in-process computation answers."""
    p = prompt(30, 100)
    hs = prefix_hashes(p, CFG.block_size)
    kv = KVStore(store, CFG)
    p0 = bare.start_worker("prefill", "pm0", env={"CRESCENT_SERVING_PAUSE": "prefill_mid_save"})
    d = bare.start_worker("decode", "dm")
    r = Router(bare.conductor, CFG.name, rpc_timeout_s=120)
    r.attach([p0, d])
    out = {}
    th = threading.Thread(target=lambda: out.update(r.generate("killpre", p, 4)))
    th.start()
    _wait_line(bare.workers["pm0"][0], r"PAUSED prefill_mid_save", "pm0")
    assert kv.committed_prefix(hs) == 0
    p1 = bare.start_worker("prefill", "pm1")
    r.attach([p1])
    # pm1 stopped while pm0 dies and the check runs: the router retries on
    # pm1 as soon as pm0 is gone, and pm1's own save of the same blocks
    # would otherwise race the check (it waits in the kernel meanwhile)
    pm1 = bare.workers["pm1"][0]
    pm1.send_signal(signal.SIGSTOP)
    try:
        bare.kill("pm0")
        assert kv.committed_prefix(hs) == 0      # nothing of the dead writer is visible
    finally:
        pm1.send_signal(signal.SIGCONT)
    th.join(120)
    assert not th.is_alive()
    assert out["prefill_worker"] == "pm1" and "pm0" in r.dead
    assert out["prefill"]["kv_transfer_params"]["hit_tokens"] == 0
    t, l = Reference(CFG).run(p, 0, 4)
    assert out["tokens"] == t
    _same_logits(out["logits"], l)
    assert kv.committed_prefix(hs) == 6          # pm1's blocks, all layers
    for ep in (p1, d):
        call(ep, "shutdown")


def test_model_shape_mismatch_refused(bare, store):
    other = dataclasses.replace(CFG, n_head=8)
    p_ep = bare.start_worker("prefill", "ps")
    bad_d = bare.start_worker("decode", "ds-bad", cfg=other)
    # 1. the router refuses to start with workers of different shapes
    r = Router(bare.conductor, CFG.name)
    with pytest.raises(ModelMismatch, match=r"n_head 4 vs 8"):
        r.attach([p_ep, bad_d])
    # 2. a decode worker refuses KV produced by another model shape
    pre = call(p_ep, "prefill", 60, req_id="shape", tokens=prompt(40, 50))
    with pytest.raises(RpcError, match=r"ModelMismatch.*n_head 8 here vs 4 at the prefill worker"):
        call(bad_d, "decode", 60, req_id="shape", tokens=prompt(40, 50),
             first_token=pre["first_token"], params=pre["kv_transfer_params"], max_new=2)
    # 3. a prefill worker with the same model name but another shape finds
    #    the blocks' markers and refuses their bytes
    eng = PrefillEngine(dataclasses.replace(CFG, d_model=128, d_ff=512), KVStore(store, CFG.__class__(
        **dict(CFG.to_dict(), d_model=128, d_ff=512))), 16)
    try:
        with pytest.raises(ModelMismatch, match=r"d_model 128 here vs 64"):
            eng.prefill("shape2", prompt(40, 50))
    finally:
        eng.close()
    # 4. shapes are validated when a config is made
    with pytest.raises(ValueError, match="not divisible"):
        ModelConfig(d_model=65)
    for ep in (p_ep, bad_d):
        call(ep, "shutdown")


def test_bad_requests_refused_worker_keeps_serving(bare):
    """Junk token lists get a clear per-request error; the same worker then
    serves a good request."""
    p_ep = bare.start_worker("prefill", "pb")
    d_ep = bare.start_worker("decode", "db")
    for bad, why in (([], "non-empty"), ([1, 2, 256], r"tokens\[2\] = 256"),
                     ([1, -1], r"tokens\[1\] = -1"), ([1, "a"], r"tokens\[1\] = 'a'"),
                     ([1] * (CFG.max_seq + 1), "exceed max_seq")):
        with pytest.raises(RpcError, match=why):
            call(p_ep, "prefill", 60, req_id="bad", tokens=bad)
    with pytest.raises(RpcError, match="reserve"):
        call(d_ep, "reserve", 60, req_id="bad", n_tokens=CFG.max_seq, max_new=1)
    pre = call(p_ep, "prefill", 60, req_id="good", tokens=prompt(70, 40))
    with pytest.raises(RpcError, match="max_new"):
        call(d_ep, "decode", 60, req_id="good", tokens=prompt(70, 40), first_token=pre["first_token"],
             params=pre["kv_transfer_params"], max_new=0)
    dec = call(d_ep, "decode", 60, req_id="good", tokens=prompt(70, 40), first_token=pre["first_token"],
               params=pre["kv_transfer_params"], max_new=3)
    t, _ = Reference(CFG).run(prompt(70, 40), 0, 3)
    assert dec["tokens"] == t
    for ep in (p_ep, d_ep):
        call(ep, "shutdown")


def test_failed_step_commits_nothing(bare, store):
    """A step that fails after layer 0 was handed to the saver (here: the
    hook raises at layer 1) commits no block and leaves no saver thread; the
    same engine then serves the prompt and commits all of it."""
    p = prompt(80, 70)
    hs = prefix_hashes(p, CFG.block_size)
    kv = KVStore(store, CFG)
    eng = PrefillEngine(CFG, KVStore(store, CFG), 32)

    def boom(point, info):
        if point == "save_layer" and info[1] == 1:
            raise RuntimeError("injected failure in layer 1")
    eng.conn.fault_hook = boom
    before = threading.active_count()
    with pytest.raises(RuntimeError, match="injected"):
        eng.prefill("fail-1", p)
    assert kv.committed_prefix(hs) == 0
    assert threading.active_count() <= before
    assert len(eng.pool.free) == eng.pool.num_blocks
    eng.conn.fault_hook = None
    r = eng.prefill("fail-2", p)
    assert r["kv_transfer_params"]["hit_tokens"] == 0
    assert kv.committed_prefix(hs) == 4
    _, lr = Reference(CFG).run(p, 0, 1)
    _same_logits([r["logits"]], lr)
    eng.close()


def _raw(ep, payload, timeout_ms=20000):
    """Sends raw bytes on a fresh REQ socket; returns the decoded answer, or
    None if none came within timeout_ms."""
    s = zmq.Context.instance().socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(ep)
        s.send(payload)
        if not s.poll(timeout_ms, zmq.POLLIN):
            return None
        return msgpack.unpackb(s.recv(), raw=False)
    finally:
        s.close()


def test_malformed_rpc_refused_worker_keeps_serving(bare):
    """Regression: a valid msgpack value that is not a map (b"\\x93\\x01\\x02\\x03")
    got an error answer and then killed the worker (msg.get on a list).
    Every malformed request (not msgpack, not a map, no method, unknown
    method, wrong parameter types or names, oversized) gets a BadRequest
    answer or, past the size limit, is dropped; no prefill runs, the worker
    stays up and serves a good request after them, and a per-request
    setting of a refused request does not stick."""
    p_ep = bare.start_worker("prefill", "pm")
    d_ep = bare.start_worker("decode", "dm")
    pack = lambda m: msgpack.packb(m, use_bin_type=True)   # noqa: E731
    ok_args = {"req_id": "m", "tokens": [1, 2, 3]}
    cases = [
        (p_ep, b"\x93\x01\x02\x03", "a request is a map"),
        (p_ep, b"\xc1", "not a msgpack message"),
        (p_ep, b"", "not a msgpack message"),
        (p_ep, pack("prefill"), "a request is a map"),
        (p_ep, pack({"args": {}}), "method: a string is required"),
        (p_ep, pack({"method": 7}), "method: a string is required"),
        (p_ep, pack({"method": "format_disk"}), "unknown method 'format_disk'"),
        (p_ep, pack({"method": "prefill", "args": [1, 2]}), "args must be a map"),
        (p_ep, pack({"method": "prefill", "args": {1: 2}}), "args must be a map"),
        (p_ep, pack({"method": "prefill", "args": {"req_id": 1, "tokens": [1]}}),
         "parameter req_id must be str, got int"),
        (p_ep, pack({"method": "prefill", "args": {"req_id": "m", "tokens": "abc"}}),
         "parameter tokens must be list, got str"),
        (p_ep, pack({"method": "prefill", "args": dict(ok_args, layer_wise="no")}),
         "parameter layer_wise must be bool or nil"),
        (p_ep, pack({"method": "prefill", "args": dict(ok_args, max_new=True)}),
         "parameter max_new must be int, got bool"),
        (p_ep, pack({"method": "prefill", "args": dict(ok_args, rm_rf=1)}),
         "unknown parameter 'rm_rf'"),
        (p_ep, pack({"method": "prefill", "args": {"tokens": [1]}}), "missing parameter req_id"),
        (p_ep, pack({"method": "prefill", "args": dict(ok_args, push=[1])}),
         "parameter push must be dict or nil"),
        (p_ep, pack({"method": "prefill", "args": dict(ok_args, push={"rid": "r"})}),
         "push: segment must be str"),
        (p_ep, pack({"method": "prefill", "args": dict(ok_args, req_id="")}), "req_id: 1 to 256"),
        (d_ep, pack({"method": "decode", "args": dict(ok_args, first_token=1, max_new=2,
                                                      params={"fp": CFG.fingerprint(), "num_tokens": "3", "pages": 5})}),
         "KV for '3'"),
        (d_ep, pack({"method": "decode", "args": dict(ok_args, first_token=1, max_new=2,
                                                      params={"fp": CFG.fingerprint(), "num_tokens": 3, "pages": 5})}),
         "params.pages must be a list"),
        (d_ep, pack({"method": "reserve", "args": {"req_id": "m", "n_tokens": "9", "max_new": 1}}),
         "parameter n_tokens must be int"),
    ]
    for ep, payload, why in cases:
        rep = _raw(ep, payload)
        assert isinstance(rep, dict) and "error" in rep, "%r: answer %r" % (payload[:40], rep)
        assert why in rep["error"], "%r: want %r in %r" % (payload[:40], why, rep["error"])
    # past the server's size limit: ZMQ drops the connection unread, no answer
    assert _raw(p_ep, b"\x00" * (MAX_REQUEST + 1), timeout_ms=2000) is None
    # the client refuses one itself (a dropped connection would look like a
    # dead worker to the router)
    with pytest.raises(RpcError, match="BadRequest.*exceeds"):
        call(p_ep, "prefill", 60, req_id="m" * (MAX_REQUEST + 1), tokens=[1])
    for wid in ("pm", "dm"):
        assert bare.workers[wid][0].poll() is None, "worker %s died" % wid
    assert call(p_ep, "stats", 30) == {"prefills": 0}
    # a refused request's layer_wise does not stick; a good one's does not either
    toks = prompt(90, 40)
    pre = call(p_ep, "prefill", 60, req_id="good", tokens=toks, max_new=3, layer_wise=False)
    assert pre["kv_transfer_params"]["hit_tokens"] == 0
    assert call(p_ep, "stats", 30) == {"prefills": 1}
    dec = call(d_ep, "decode", 60, req_id="good", tokens=toks, first_token=pre["first_token"],
               params=pre["kv_transfer_params"], max_new=3)
    t, _ = Reference(CFG).run(toks, 0, 3)
    assert dec["tokens"] == t, "%r vs reference %r" % (dec["tokens"], t)
    for ep in (p_ep, d_ep):
        call(ep, "shutdown")


def test_over_length_refused_before_prefill(bare):
    """Regression: prompt + max_new > max_seq was refused by the decode
    worker only after the prefill had run (seconds of compute, KV stored
    for nothing), with a message saying "+ 0 new". Now the router and the
    prefill worker refuse it at admission: no prefill runs, and the message
    names the prompt length, max_new and max_seq."""
    p_ep = bare.start_worker("prefill", "pl")
    d_ep = bare.start_worker("decode", "dl")
    r = Router(bare.conductor, CFG.name, rpc_timeout_s=120.0)
    r.attach([p_ep, d_ep])
    n = CFG.max_seq - 2
    toks = prompt(91, n)
    want = r"%d prompt \+ 4 new = %d exceed max_seq %d" % (n, n + 4, CFG.max_seq)
    with pytest.raises(ValueError, match=want):
        r.generate("long", toks, 4)
    with pytest.raises(ValueError, match=want):
        r.generate("long-p2p", toks, 4, p2p=True)
    assert call(p_ep, "stats", 30) == {"prefills": 0}
    # a caller going straight to the worker gets the same refusal
    with pytest.raises(RpcError, match=want):
        call(p_ep, "prefill", 60, req_id="long", tokens=toks, max_new=4)
    assert call(p_ep, "stats", 30) == {"prefills": 0}
    # prompt + max_new == max_seq fits
    g = r.generate("fits", prompt(92, CFG.max_seq - 4), 4)
    assert len(g["tokens"]) == 4
    assert call(p_ep, "stats", 30) == {"prefills": 1}
    for ep in (p_ep, d_ep):
        call(ep, "shutdown")
