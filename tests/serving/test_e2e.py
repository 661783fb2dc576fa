"""End to end: a 2-layer model, prefill and decode in separate processes,
the second turn of a conversation reusing the first turn's KV through
crescent's store; tokens and logits bit-identical to the same split computed
in this process."""
import torch

from conftest import CFG, prompt, wait_indexed
from crescent_serving.engine import Reference
from crescent_serving.hashing import prefix_hashes
from crescent_serving.router import http_post


def _t(b):
    return torch.frombuffer(bytearray(b), dtype=torch.float32)


def test_two_turns_reuse_bit_identical(cluster, router):
    p1 = prompt(1, 100)
    a = router.generate("conv1-turn1", p1, 8)
    assert a["prefill"]["kv_transfer_params"]["hit_tokens"] == 0
    assert a["prefill_worker"] == "p0" and a["decode_worker"] == "d0"
    # the KV events reached the conductor: its index holds turn 1's blocks
    wait_indexed(cluster.conductor, p1, (100 // 16) * 16)
    p2 = p1 + a["tokens"] + prompt(2, 40)
    st, sched = http_post(cluster.conductor + "/schedule", {"model": CFG.name, "token_ids": p2,
                                                            "dry_run": True})
    assert st == 200 and sched["prefill"]["instance_id"] == "p0", sched
    assert sched["local_prefix_tokens"] == 96, sched
    b = router.generate("conv1-turn2", p2, 8)
    params = b["prefill"]["kv_transfer_params"]
    # every full block of turn 1's prompt came from the store, nothing else
    assert params["hit_tokens"] == 96, params
    assert b["prefill"]["computed_from"] == 96
    assert params["bytes_loaded"] == 6 * CFG.n_layer * CFG.block_bytes()
    assert params["load_errors"] == 0

    ref = Reference(CFG)
    t1, l1 = ref.run(p1, 0, 8)
    t2, l2 = ref.run(p2, 96, 8)
    assert a["tokens"] == t1, (a["tokens"], t1)
    assert b["tokens"] == t2, (b["tokens"], t2)
    got = [_t(x) for x in a["logits"] + b["logits"]]
    for i, (g, r) in enumerate(zip(got, l1 + l2)):
        assert torch.equal(g, r), "logits %d differ by %g" % (i, (g - r).abs().max().item())
    assert len(got) == 16
    # the measured prefill times reached the conductor's predictor (/report)
    st, rep = router.last_report
    assert st == 200 and rep.get("refused") == [], router.last_report
    assert rep["predictor"]["prefill_samples"] >= 2, rep

    # against one monolithic prefill of turn 2 (no split): close, reported
    mono = Reference(CFG)
    tm, lm = mono.run(p2, 0, 8, store=False)
    diff = max((g - r).abs().max().item() for g, r in zip(got[8:], lm))
    print("max |logit difference| split vs monolithic prefill: %g (tokens equal: %s)"
          % (diff, tm == b["tokens"]))
    assert diff < 1e-3


def test_block_keys_are_conductor_hashes(cluster, router):
    """The store's keys, the events and the conductor's index use one hash."""
    p = prompt(3, 64)
    router.generate("keys", p, 2)
    rep = wait_indexed(cluster.conductor, p, 64)
    hs = prefix_hashes(p, CFG.block_size)
    st, byhash = http_post(cluster.conductor + "/query_by_hash",
                           {"model": CFG.name, "seq_hashes": [str(h) for h in hs]})
    assert st == 200
    assert byhash["default"]["p0"]["longest_matched"] == 64, byhash
    from crescent_serving.kvstore import KVStore, open_store
    s = open_store("127.0.0.1", cluster.metadata, cluster.master)
    try:
        assert KVStore(s, CFG).committed_prefix(hs) == 4
    finally:
        s.close()


def test_p2p_handoff_bit_identical(cluster, router):
    """Mooncake's P2P mode: the decode worker reserves blocks, the prefill
    worker writes the KV into them through the Transfer Engine and notifies;
    no store read on the decode side; same tokens and logits."""
    p1 = prompt(50, 90)
    a = router.generate("p2p-1", p1, 6, p2p=True)
    assert a["decode"]["bytes_loaded"] == 0
    assert a["decode"]["bytes_pushed"] == 6 * CFG.n_layer * CFG.block_bytes()
    p2 = p1 + a["tokens"] + prompt(51, 30)
    b = router.generate("p2p-2", p2, 6, p2p=True)
    hit = b["prefill"]["kv_transfer_params"]["hit_tokens"]
    assert hit == 80
    ref = Reference(CFG)
    t1, l1 = ref.run(p1, 0, 6)
    t2, l2 = ref.run(p2, hit, 6)
    assert (a["tokens"], b["tokens"]) == (t1, t2)
    for g, r in zip(a["logits"] + b["logits"], l1 + l2):
        assert torch.equal(_t(g), r)
