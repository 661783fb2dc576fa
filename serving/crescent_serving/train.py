"""Trains the tiny byte-level model shipped as weights/docs-tiny.pt, so that
greedy decoding prints text rather than noise:

    PYTHONPATH=serving /usr/bin/python3 -m crescent_serving.train [--steps 1500]

Data: this repository's docs/**/*.md (bytes). Same layers as serving
(model.decoder_layer), with batched causal attention instead of the paged
one. Seeded; single-threaded; a few minutes of CPU. The weights are stored
as float16 (half the size in git) and widened to float32 on load.
"""
import argparse
import glob
import math
import os
import sys
import time

import torch

from .model import TRAINED, ModelConfig, decoder_layer, final_logits, init_weights, \
    set_deterministic_threads, weights_path


def corpus(root):
    data = b""
    for p in sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)):
        with open(p, "rb") as f:
            data += f.read() + b"\n\n"
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def forward_batch(cfg, w, idx):
    B, T = idx.shape
    H, D = cfg.n_head, cfg.head_dim
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)

    def attend(q, k, v):
        q, k, v = (t.reshape(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(D)).masked_fill(mask, float("-inf")).softmax(-1)
        return (att @ v).transpose(1, 2).reshape(B, T, cfg.d_model)
    x = w["wte"][idx] + w["wpe"][:T]
    for L in w["layers"]:
        x = decoder_layer(cfg, L, x, attend)
    return final_logits(cfg, w, x)


def params(w):
    out = [w[k] for k in ("wte", "wpe", "head", "lnf_w", "lnf_b")]
    for L in w["layers"]:
        out += list(L.values())
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=5e-3)
    a = ap.parse_args(argv)
    set_deterministic_threads()
    cfg = ModelConfig(**dict(TRAINED, weights=""))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    data = corpus(root)
    w = init_weights(cfg)
    ps = params(w)
    for p in ps:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(ps, lr=a.lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(cfg.seed)
    t0 = time.time()
    for step in range(a.steps):
        ix = torch.randint(0, len(data) - a.seq - 1, (a.batch,), generator=g)
        xb = torch.stack([data[i:i + a.seq] for i in ix])
        yb = torch.stack([data[i + 1:i + a.seq + 1] for i in ix])
        lr = a.lr * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * step / a.steps))
        for group in opt.param_groups:
            group["lr"] = lr
        loss = torch.nn.functional.cross_entropy(forward_batch(cfg, w, xb).reshape(-1, cfg.vocab),
                                                 yb.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == a.steps - 1:
            print("step %d loss %.3f (%.0fs)" % (step, loss.item(), time.time() - t0), flush=True)
    state = {"wte": w["wte"], "wpe": w["wpe"], "head": w["head"], "lnf_w": w["lnf_w"],
             "lnf_b": w["lnf_b"], "layers": w["layers"]}
    state = _map(state, lambda t: t.detach().to(torch.float16).clone())
    out = weights_path(TRAINED["weights"])
    torch.save({"config": dict(TRAINED), "weights": state, "corpus_bytes": len(data),
                "steps": a.steps, "final_loss": "%.4f" % loss.item()}, out)
    print("wrote %s (%d bytes)" % (out, os.path.getsize(out)))
    return 0


def _map(obj, fn):
    if isinstance(obj, dict):
        return {k: _map(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map(v, fn) for v in obj]
    return fn(obj)


if __name__ == "__main__":
    sys.exit(main())
