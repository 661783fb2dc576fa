"""The shipped trained model (weights/docs-tiny.pt, bytes of docs/*.md)
served end to end: its text prompts' KV through the store, the second turn
reusing the first, output bit-identical to the in-process computation and
made of printable text (seeded random weights give ~37% printable bytes)."""
import torch

from crescent_serving.cluster import Cluster
from crescent_serving.engine import Reference
from crescent_serving.model import TRAINED, ModelConfig, ModelMismatch, set_deterministic_threads
from crescent_serving.router import Router

set_deterministic_threads()
CFG = ModelConfig(**TRAINED)


def _printable(bs):
    return sum(1 for b in bs if 32 <= b < 127 or b in (9, 10)) / len(bs)


def test_trained_model_two_turns():
    with Cluster(CFG, n_prefill=1, n_decode=1, node_size="64MB", worker_blocks=64) as c:
        r = Router(c.conductor, CFG.name)
        r.attach(c.endpoints())
        p1 = list(b"The store keeps the KV cache of every prefix. The master ")
        a = r.generate("t1", p1, 24)
        p2 = p1 + a["tokens"] + list(b"\n\nThe conductor ")
        b = r.generate("t2", p2, 24)
        hit = b["prefill"]["kv_transfer_params"]["hit_tokens"]
        assert hit == (len(p1) - 1) // 16 * 16, hit
        ref = Reference(CFG)
        t1, l1 = ref.run(p1, 0, 24)
        t2, l2 = ref.run(p2, hit, 24)
        assert (a["tokens"], b["tokens"]) == (t1, t2)
        for g, x in zip(a["logits"] + b["logits"], l1 + l2):
            assert torch.equal(torch.frombuffer(bytearray(g), dtype=torch.float32), x)
        out = bytes(a["tokens"] + b["tokens"])
        print("generated: %r %r" % (bytes(a["tokens"]), bytes(b["tokens"])))
        assert _printable(out) >= 0.9, out


def test_trained_weights_are_part_of_the_identity():
    """Same shapes, random vs trained weights: refused, naming the field."""
    rnd = ModelConfig(**dict(TRAINED, weights=""))
    try:
        rnd.check_same(CFG.shape(), "a trained worker")
    except ModelMismatch as e:
        assert "weights '' here vs 'docs-tiny.pt'" in str(e)
    else:
        raise AssertionError("random and trained weights compared equal")
    assert rnd.fingerprint() != CFG.fingerprint()
