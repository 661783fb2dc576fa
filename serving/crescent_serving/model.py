"""A small GPT-style decoder over a paged KV cache (torch, CPU).

Why torch: the KV cache is a torch tensor in every engine our users write for
(vLLM, SGLang), the matmuls run on OpenBLAS (libopenblas0-pthread), and
advanced indexing gives paged gathers/scatters without hand-written kernels.
numpy would need the same BLAS and more glue; C would mean writing GEMM.

Layout of the paged KV pool (one tensor per worker, registered with the store
once, so store reads land in it directly):

    pool[layer, block, kv(0=K,1=V), slot, head, head_dim]   float32

so the KV of one (layer, block) pair is one contiguous range of
block_bytes() bytes: the unit the store holds under one key, and the unit a
layer-wise save can push as soon as its layer is computed.

Determinism: every computation for a chunk of new tokens depends only on the
chunk's tokens, its start position and the KV already in the pool (values,
not block ids); torch runs with one thread (set_deterministic_threads), so the
same split of a prompt gives bit-identical logits in any process.
"""
import ctypes
import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass

import torch

SHAPE_FIELDS = ("n_layer", "n_head", "d_model", "d_ff", "vocab", "max_seq", "block_size", "seed")


def set_deterministic_threads():
    """One thread for torch and OpenBLAS, in this process and its children.

    OpenBLAS picks its kernels by thread count, so logits differ in the last
    bits between a 1-thread and a 2-thread process: every party that must
    agree bit for bit (workers, reference) runs single-threaded. The env
    variables cover children; OpenBLAS read them when torch was imported, so
    openblas_set_num_threads(1) is called in the loaded library too."""
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    with open("/proc/self/maps") as f:
        libs = {l.split()[-1] for l in f if "openblas" in l and l.split()[-1].startswith("/")}
    for lib in libs:
        try:
            ctypes.CDLL(lib).openblas_set_num_threads(1)
        except (OSError, AttributeError):
            pass


class ModelMismatch(ValueError):
    """Two parties hold KV of different model shapes: never mix their bytes."""


@dataclass(frozen=True)
class ModelConfig:
    name: str = "crescent-gpt-tiny"
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    d_ff: int = 256
    vocab: int = 256          # byte-level tokens
    max_seq: int = 4096
    block_size: int = 16      # tokens per KV block (page)
    seed: int = 1234
    weights: str = ""         # "" = seeded random; else weights/<name>.pt (trained)

    def __post_init__(self):
        for f in SHAPE_FIELDS:
            v = getattr(self, f)
            low = 0 if f == "seed" else 1
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError("ModelConfig.%s: must be an int >= %d, got %r" % (f, low, v))
        if self.d_model % self.n_head:
            raise ValueError("ModelConfig: d_model %d not divisible by n_head %d"
                             % (self.d_model, self.n_head))
        if not isinstance(self.weights, str) or "/" in self.weights or self.weights.startswith("."):
            raise ValueError("ModelConfig.weights: a file name under weights/, got %r" % (self.weights,))
        if self.block_size > 4096 or self.n_layer > 256 or self.max_seq > 1 << 20:
            raise ValueError("ModelConfig: block_size <= 4096, n_layer <= 256, max_seq <= 2^20")

    @property
    def head_dim(self):
        return self.d_model // self.n_head

    def block_elems(self):
        """floats in one (layer, block): K and V of block_size tokens."""
        return 2 * self.block_size * self.d_model

    def block_bytes(self):
        return 4 * self.block_elems()

    def shape(self):
        return {f: getattr(self, f) for f in ("name",) + SHAPE_FIELDS + ("weights",)}

    def fingerprint(self):
        """Identity of the KV layout and weights: equal fingerprints = same bytes."""
        blob = json.dumps(dict(self.shape(), dtype="float32", layout="L,B,2,S,H,D"),
                          sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, d):
        return cls(**d)

    def check_same(self, other_shape, who):
        """Raises ModelMismatch naming every differing field."""
        mine = self.shape()
        diff = ["%s %r here vs %r at %s" % (k, mine[k], other_shape.get(k), who)
                for k in mine if other_shape.get(k) != mine[k]]
        if diff:
            raise ModelMismatch("model shape mismatch with %s: %s" % (who, "; ".join(diff)))


# Benchmark model (docs/benchmarks.md): 4 layers, d=512, 2k-token prompts.
BENCH = dict(n_layer=4, n_head=8, d_model=512, d_ff=2048, max_seq=4096, block_size=16)
# The shipped trained model (train.py): bytes of docs/*.md, 2 layers, d=64.
TRAINED = dict(name="crescent-gpt-docs", n_layer=2, n_head=4, d_model=64, d_ff=256, max_seq=512,
               block_size=16, weights="docs-tiny.pt")


def weights_path(name):
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "weights", name)


def load_weights(cfg):
    """The trained weights named by cfg.weights, widened to float32."""
    # weights_only: the restricted unpickler (tensors, dicts, lists, numbers, strings)
    blob = torch.load(weights_path(cfg.weights), weights_only=True)
    cfg.check_same(dict(ModelConfig(**blob["config"]).shape(), seed=cfg.seed), "weights/" + cfg.weights)

    def widen(o):
        if isinstance(o, dict):
            return {k: widen(v) for k, v in o.items()}
        if isinstance(o, list):
            return [widen(v) for v in o]
        return o.to(torch.float32)
    return widen(blob["weights"])


class KVPool:
    """Paged KV cache: num_blocks blocks of block_size slots per layer."""

    def __init__(self, cfg, num_blocks):
        self.cfg = cfg
        self.num_blocks = num_blocks
        # zeros (not empty): pages are touched once here, never on the hot path
        self.t = torch.zeros(cfg.n_layer, num_blocks, 2, cfg.block_size, cfg.n_head,
                             cfg.head_dim, dtype=torch.float32)
        self.free = list(range(num_blocks - 1, -1, -1))

    def alloc(self, n):
        if n > len(self.free):
            raise MemoryError("KV pool: %d blocks wanted, %d free" % (n, len(self.free)))
        return [self.free.pop() for _ in range(n)]

    def release(self, blocks):
        self.free.extend(reversed(blocks))

    def ptr(self):
        return self.t.data_ptr()

    def nbytes(self):
        return self.t.numel() * 4

    def block_addr(self, layer, block):
        return self.ptr() + (layer * self.num_blocks + block) * self.cfg.block_bytes()

    def block_view(self, layer, block):
        return self.t[layer, block]


class GPT:
    """Pre-LN decoder: token + learned position embeddings, n_layer blocks of
    causal multi-head attention and a GELU MLP, a linear output head."""

    def __init__(self, cfg, weights=None):
        self.cfg = cfg
        if weights is None:
            weights = load_weights(cfg) if cfg.weights else init_weights(cfg)
        self.w = weights

    # -- one chunk of new tokens -------------------------------------------
    @torch.no_grad()
    def forward(self, tokens, start, pool, block_table, before_layer=None, after_layer=None,
                all_logits=False):
        """Computes tokens at positions start..start+n-1, reading the KV of
        positions < start from pool (via block_table) and writing theirs.
        before_layer(l) runs before layer l reads the pool (load wait);
        after_layer(l) after layer l wrote its KV (layer-wise save).
        Returns the logits of the last position (or of every position)."""
        cfg, w = self.cfg, self.w
        n = len(tokens)
        end = start + n
        if n == 0 or end > cfg.max_seq:
            raise ValueError("forward: %d tokens at %d (max_seq %d)" % (n, start, cfg.max_seq))
        if len(block_table) * cfg.block_size < end:
            raise ValueError("forward: block table covers %d tokens, need %d"
                             % (len(block_table) * cfg.block_size, end))
        H, D, bs = cfg.n_head, cfg.head_dim, cfg.block_size
        tok = torch.as_tensor(tokens, dtype=torch.long)
        pos = torch.arange(start, end)
        bt = torch.as_tensor(block_table, dtype=torch.long)
        blk, off = bt[pos // bs], pos % bs
        nb = (end + bs - 1) // bs
        ctx_blocks = bt[:nb]
        # causal mask: query at absolute position start+i sees keys 0..start+i
        mask = torch.arange(end)[None, :] > pos[:, None]
        x = w["wte"][tok] + w["wpe"][pos]
        scale = 1.0 / math.sqrt(D)
        for l in range(cfg.n_layer):
            if before_layer is not None:
                before_layer(l)
            layer = pool.t[l]

            def attend(q, k, v):
                """Paged attention: write this chunk's K/V, read the context's."""
                layer[blk, 0, off] = k.reshape(n, H, D)
                layer[blk, 1, off] = v.reshape(n, H, D)
                K = layer[ctx_blocks, 0].reshape(nb * bs, H, D)[:end].permute(1, 2, 0)  # H,D,T
                V = layer[ctx_blocks, 1].reshape(nb * bs, H, D)[:end].transpose(0, 1)   # H,T,D
                qh = q.reshape(n, H, D).transpose(0, 1)                                  # H,n,D
                att = ((qh @ K) * scale).masked_fill(mask, float("-inf")).softmax(dim=-1)
                return (att @ V).transpose(0, 1).reshape(n, cfg.d_model)
            x = decoder_layer(cfg, w["layers"][l], x, attend)
            if after_layer is not None:
                after_layer(l)
        logits = final_logits(cfg, w, x if all_logits else x[-1:])
        return logits if all_logits else logits[0]


def decoder_layer(cfg, L, x, attend):
    """One pre-LN block; attend(q, k, v) -> attention output (paged for
    serving, batched for training)."""
    h = torch.nn.functional.layer_norm(x, (cfg.d_model,), L["ln1_w"], L["ln1_b"])
    q, k, v = (h @ L["wqkv"] + L["bqkv"]).split(cfg.d_model, dim=-1)
    x = x + attend(q, k, v) @ L["wo"] + L["bo"]
    h = torch.nn.functional.layer_norm(x, (cfg.d_model,), L["ln2_w"], L["ln2_b"])
    return x + torch.nn.functional.gelu(h @ L["w1"] + L["b1"]) @ L["w2"] + L["b2"]


def final_logits(cfg, w, x):
    h = torch.nn.functional.layer_norm(x, (cfg.d_model,), w["lnf_w"], w["lnf_b"])
    return h @ w["head"]


def init_weights(cfg):
    """Seeded weights (torch.Generator, CPU): the same in every process."""
    g = torch.Generator().manual_seed(cfg.seed)

    def rnd(*shape, std):
        return torch.randn(*shape, generator=g) * std

    d, f = cfg.d_model, cfg.d_ff
    w = {"wte": rnd(cfg.vocab, d, std=1.0), "wpe": rnd(cfg.max_seq, d, std=0.1),
         "head": rnd(d, cfg.vocab, std=1 / math.sqrt(d)),
         "lnf_w": torch.ones(d), "lnf_b": torch.zeros(d), "layers": []}
    for _ in range(cfg.n_layer):
        w["layers"].append({
            "ln1_w": torch.ones(d), "ln1_b": torch.zeros(d),
            "wqkv": rnd(d, 3 * d, std=1 / math.sqrt(d)), "bqkv": rnd(3 * d, std=0.02),
            "wo": rnd(d, d, std=1 / math.sqrt(d)), "bo": torch.zeros(d),
            "ln2_w": torch.ones(d), "ln2_b": torch.zeros(d),
            "w1": rnd(d, f, std=1 / math.sqrt(d)), "b1": torch.zeros(f),
            "w2": rnd(f, d, std=1 / math.sqrt(f)), "b2": torch.zeros(d)})
    return w


def argmax_token(logits):
    return int(torch.argmax(logits).item())
