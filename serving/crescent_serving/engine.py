"""The engines the workers run: prefill (vLLM-shaped, through the v1 KV
connector) and decode (SGLang-shaped, through the HiCache storage backend),
plus the in-process reference the tests compare against."""
import os
import sys
import time

import torch

from . import hashing
from .hicache import CrescentHiCacheStorage, HiCacheStorageConfig
from .model import GPT, KVPool, ModelMismatch, argmax_token
from .vllm_connector import (AttentionMetadata, CrescentConnectorV1, ForwardContext,
                             KVCacheBlocks, Request, SchedulerOutput, layer_name)


class KVMissing(RuntimeError):
    """The KV a decode needs is not (or no longer) in the store."""


def pause_point(name):
    """Tests: CRESCENT_SERVING_PAUSE=<name> makes the worker announce the
    point on stdout and stop there until it is killed."""
    if os.environ.get("CRESCENT_SERVING_PAUSE") == name:
        sys.stdout.write("PAUSED %s\n" % name)
        sys.stdout.flush()
        while True:
            time.sleep(3600)


def check_tokens(cfg, tokens, max_new=0):
    """Refuses a prompt the model cannot take, before anything is touched."""
    if not isinstance(tokens, (list, tuple)) or not tokens:
        raise ValueError("tokens: a non-empty list of ints is required")
    if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 0:
        raise ValueError("max_new: %.64r is not an int >= 0" % (max_new,))
    check_length(cfg, len(tokens), max_new)
    for i, t in enumerate(tokens):
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < cfg.vocab:
            raise ValueError("tokens[%d] = %.64r: not a token id in [0, %d)" % (i, t, cfg.vocab))


def check_length(cfg, n_prompt, max_new):
    """A request's KV needs n_prompt + max_new positions (the router and
    both workers check this at admission, before any compute)."""
    if n_prompt + max_new > cfg.max_seq:
        raise ValueError("tokens: %d prompt + %d new = %d exceed max_seq %d"
                         % (n_prompt, max_new, n_prompt + max_new, cfg.max_seq))


def _check_push(push):
    """The P2P target a decode worker's reserve() answered, checked before
    the forward (not after it, when the compute is already spent)."""
    if not isinstance(push, dict):
        raise ValueError("push: a map from reserve() is required")
    for k, t in (("rid", str), ("segment", str), ("addrs", list)):
        if not isinstance(push.get(k), t):
            raise ValueError("push: %s must be %s" % (k, t.__name__))
    for a in push["addrs"]:
        if not isinstance(a, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in a):
            raise ValueError("push: addrs must be lists of int addresses")


def _blocks_for(n_tokens, bs):
    return (n_tokens + bs - 1) // bs


class PrefillEngine:
    def __init__(self, cfg, kvstore, num_blocks, layer_wise=True):
        self.cfg = cfg
        self.model = GPT(cfg)
        self.pool = KVPool(cfg, num_blocks)
        self.prefills_run = 0     # prefills admitted to compute (stats RPC)
        self.sched = CrescentConnectorV1(cfg, CrescentConnectorV1.SCHEDULER, kvstore, layer_wise)
        self.conn = CrescentConnectorV1(cfg, CrescentConnectorV1.WORKER, kvstore, layer_wise)
        self.conn.register_kv_caches({layer_name(l): self.pool.t[l] for l in range(cfg.n_layer)},
                                     pool=self.pool)
        if os.environ.get("CRESCENT_SERVING_PAUSE") == "prefill_mid_save":
            def hook(point, info):
                # layers 0..L-2 are handed to the saver; the last is not
                if point == "save_layer" and info[1] == cfg.n_layer - 1:
                    pause_point("prefill_mid_save")
            self.conn.fault_hook = hook

    def close(self):
        """Unregisters the pool from the store (before the pool is freed)."""
        self.conn.shutdown()

    def set_layer_wise(self, on):
        self.sched.layer_wise = self.conn.layer_wise = bool(on)

    def enable_p2p(self, engine):
        """Mooncake's P2P mode: the KV is also written straight into a decode
        worker's reserved blocks through the Transfer Engine."""
        self.te = engine
        rc = engine.register_memory(self.pool.ptr(), self.pool.nbytes())
        if rc != 0:
            raise RuntimeError("TE register_memory of the KV pool: %d" % rc)

    def _push(self, push, blocks, n_tokens):
        from mooncake.engine import TransferNotify, TransferOpcode
        cfg = self.cfg
        if push.get("fp") != cfg.fingerprint():
            cfg.check_same(push.get("shape") or {}, "the decode worker")
            raise ModelMismatch("decode fingerprint %s, ours %s" % (push.get("fp"), cfg.fingerprint()))
        pages = _blocks_for(n_tokens, cfg.block_size)
        if len(push["addrs"]) != pages or any(len(a) != cfg.n_layer for a in push["addrs"]):
            raise ValueError("push: %d pages x %d layers wanted" % (pages, cfg.n_layer))
        src = [self.pool.block_addr(l, blocks[i]) for i in range(pages) for l in range(cfg.n_layer)]
        dst = [push["addrs"][i][l] for i in range(pages) for l in range(cfg.n_layer)]
        # Mooncake names it TransferOpcode.Write; crescent's compat has WRITE
        # (noted for i13 in /work/wt/NOTES.md): accept both
        write = getattr(TransferOpcode, "Write", None) or TransferOpcode.WRITE
        rc = self.te.batch_transfer_sync(push["segment"], src, dst, [cfg.block_bytes()] * len(src),
                                         write, notify=TransferNotify(push["rid"], "kv"))
        if rc != 0:
            raise RuntimeError("TE write of %d KV pages to %s: %d" % (pages, push["segment"], rc))
        return len(src) * cfg.block_bytes()

    def prefill(self, req_id, tokens, reuse=True, push=None, max_new=0):
        """Returns {first_token, logits (bytes), kv_transfer_params, events,
        timings}. The pool blocks are released before returning: the decode
        side reads the KV from the store. max_new: the tokens the request
        will generate, so that one that cannot fit max_seq is refused here,
        before any compute."""
        cfg = self.cfg
        check_tokens(cfg, tokens, max_new)
        if push is not None:
            _check_push(push)
        self.prefills_run += 1
        t0 = time.perf_counter()
        req = Request(req_id, list(tokens))
        # -- scheduler step (vLLM: Scheduler.schedule) --
        n_ext = 0
        if reuse:
            n_ext, load_async = self.sched.get_num_new_matched_tokens(req, 0)
            assert load_async is False
        t_lookup = time.perf_counter() - t0
        blocks = self.pool.alloc(_blocks_for(req.num_tokens, cfg.block_size))
        try:
            self.sched.update_state_after_alloc(req, KVCacheBlocks(blocks), n_ext)
            meta = self.sched.build_connector_meta(SchedulerOutput([req]))
            # -- model runner step --
            self.conn.bind_connector_metadata(meta)
            start = n_ext
            am = AttentionMetadata(blocks, start, req.num_tokens)
            self.conn.start_load_kv(ForwardContext(am))
            failed = self.conn.get_block_ids_with_load_errors()
            if failed:
                # recompute from the first block that did not load
                first_bad = min(blocks.index(b) for b in failed)
                start = min(start, first_bad * cfg.block_size)
                am.start = start
            t_c0 = time.perf_counter()
            logits = self.model.forward(
                req.prompt_token_ids[start:], start, self.pool, blocks,
                before_layer=lambda l: self.conn.wait_for_layer_load(layer_name(l)),
                after_layer=lambda l: self.conn.save_kv_layer(layer_name(l), self.pool.t[l], am))
            t_first = time.perf_counter()
            self.conn.wait_for_save()
            self.conn.clear_connector_metadata()
            self.conn.get_finished({req_id})
            self.sched.update_connector_output(self.conn.build_connector_worker_meta())
            _, params = self.sched.request_finished(req, blocks)
            t_push, pushed = time.perf_counter(), 0
            if push is not None:
                pushed = self._push(push, blocks, req.num_tokens)
                params = dict(params, p2p_rid=push["rid"], bytes_pushed=pushed)
            t_ready = time.perf_counter()
            t_push = t_ready - t_push
        except BaseException:
            self.conn.abort()
            self.sched.build_connector_meta(SchedulerOutput([]))   # drops pending state
            raise
        finally:
            self.pool.release(blocks)
        events = []
        for e in self.sched.take_events():
            i = e["block_index"]
            events.append((e["hash"], e["parent"],
                           req.prompt_token_ids[i * cfg.block_size:(i + 1) * cfg.block_size]))
        first = argmax_token(logits)
        return {"first_token": first, "logits": logits.numpy().tobytes(),
                "kv_transfer_params": params, "events": events, "computed_from": start,
                "t_lookup": t_lookup, "t_compute": t_first - t_c0, "t_first": t_first - t0,
                "t_ready": t_ready - t0, "t_push": t_push}


class DecodeEngine:
    def __init__(self, cfg, kvstore, num_blocks, load_batch_pages=128):
        self.cfg = cfg
        self.model = GPT(cfg)
        self.pool = KVPool(cfg, num_blocks)
        self.hicache = CrescentHiCacheStorage(HiCacheStorageConfig(cfg.name), kvstore)
        self.hicache.register_mem_pool_host(self.pool)
        self.load_batch_pages = load_batch_pages

    def close(self):
        self.hicache.kv.close()

    MAX_RESERVED = 64

    def enable_p2p(self, engine):
        self.te = engine
        self.reserved = {}        # rid -> (blocks, n_tokens, max_new, deadline)
        self.notified = set()
        rc = engine.register_memory(self.pool.ptr(), self.pool.nbytes())
        if rc != 0:
            raise RuntimeError("TE register_memory of the KV pool: %d" % rc)

    def reserve(self, req_id, n_tokens, max_new, ttl_s=300.0):
        """Allocates the blocks a P2P prefill writes into; returns where."""
        cfg = self.cfg
        if not isinstance(n_tokens, int) or not 0 < n_tokens or not isinstance(max_new, int) \
                or not 0 < max_new or n_tokens + max_new > cfg.max_seq:
            raise ValueError("reserve: %r tokens + %r new (max_seq %d)" % (n_tokens, max_new, cfg.max_seq))
        now = time.monotonic()
        for rid, r in list(self.reserved.items()):
            if r[3] < now:                       # never claimed: give back
                self.pool.release(r[0])
                del self.reserved[rid]
        if len(self.reserved) >= self.MAX_RESERVED:
            raise MemoryError("decode: %d reservations pending" % len(self.reserved))
        blocks = self.pool.alloc(_blocks_for(n_tokens + max_new, cfg.block_size))
        rid = "%s/%s" % (req_id, os.urandom(4).hex())
        self.reserved[rid] = (blocks, n_tokens, max_new, now + ttl_s)
        pages = _blocks_for(n_tokens, cfg.block_size)
        return {"rid": rid, "segment": self.te.get_local_name(), "fp": cfg.fingerprint(),
                "shape": cfg.shape(),
                "addrs": [[self.pool.block_addr(l, blocks[i]) for l in range(cfg.n_layer)]
                          for i in range(pages)]}

    def _wait_notify(self, rid, timeout_s):
        deadline = time.monotonic() + timeout_s
        while rid not in self.notified:
            for n in self.te.get_notifies():
                self.notified.add(n.name)
            if rid in self.notified:
                break
            if time.monotonic() > deadline:
                raise KVMissing("no P2P notification %s within %ss" % (rid, timeout_s))
            time.sleep(0.001)
        self.notified.discard(rid)

    def decode_p2p(self, req_id, tokens, first_token, params, max_new, timeout_s=60.0):
        """The KV was written into the reserved blocks by the prefill worker;
        waits for its notification, then generates."""
        rid = params.get("p2p_rid") if params else None
        if not isinstance(rid, str) or rid not in self.reserved:
            raise KVMissing("request %s: no P2P reservation %.80r" % (req_id, rid))
        blocks, n, mx, _ = self.reserved.pop(rid)
        try:
            check_tokens(self.cfg, tokens, max_new)
            if n != len(tokens) or max_new > mx:
                raise ValueError("request %s: reservation for %d tokens + %d, got %d + %d"
                                 % (req_id, n, mx, len(tokens), max_new))
            t0 = time.perf_counter()
            self._wait_notify(rid, timeout_s)
            t_load = time.perf_counter() - t0
            out, logits = self._generate(blocks, first_token, n, max_new)
            return {"tokens": out, "logits": logits, "t_load": t_load,
                    "t_decode": time.perf_counter() - t0 - t_load, "bytes_loaded": 0,
                    "bytes_pushed": params.get("bytes_pushed", 0)}
        finally:
            self.pool.release(blocks)

    def _generate(self, blocks, first_token, n, max_new):
        out, logits = [first_token], []
        tok, pos = first_token, n
        for _ in range(max_new - 1):
            lg = self.model.forward([tok], pos, self.pool, blocks)
            logits.append(lg.numpy().tobytes())
            tok = argmax_token(lg)
            out.append(tok)
            pos += 1
        return out, logits

    def decode(self, req_id, tokens, first_token, params, max_new):
        """Loads the prompt's KV through the HiCache backend and generates
        max_new tokens (the first one came from prefill). Returns
        {tokens, logits (list of bytes, one per decode step), timings}."""
        cfg = self.cfg
        check_tokens(cfg, tokens, max_new)
        if max_new < 1:
            raise ValueError("max_new: at least 1 (the first token comes from prefill)")
        if not params:
            raise KVMissing("request %s: no KV pages from prefill" % req_id)
        if params.get("fp") != cfg.fingerprint():
            cfg.check_same(params.get("shape") or {}, "the prefill worker")
            raise ModelMismatch("request %s: prefill fingerprint %s, ours %s"
                                % (req_id, params.get("fp"), cfg.fingerprint()))
        n = params.get("num_tokens")
        if not isinstance(n, int) or n != len(tokens):
            raise ValueError("request %s: %d prompt tokens, KV for %r" % (req_id, len(tokens), n))
        pages = params.get("pages")
        if pages is not None and (not isinstance(pages, list)
                                  or not all(isinstance(p, str) for p in pages)):
            raise ValueError("request %s: params.pages must be a list of page keys" % req_id)
        if pages is None or len(pages) != _blocks_for(n, cfg.block_size):
            raise KVMissing("request %s: prefill could not store all KV pages" % req_id)
        t0 = time.perf_counter()
        blocks = self.pool.alloc(_blocks_for(n + max_new, cfg.block_size))
        try:
            have = self.hicache.batch_exists(pages)
            if have < len(pages):
                raise KVMissing("request %s: page %d of %d (%s) not in the store"
                                % (req_id, have, len(pages), pages[have]))
            bs = cfg.block_size
            B = self.load_batch_pages
            for i in range(0, len(pages), B):
                batch = pages[i:i + B]
                host = torch.cat([torch.arange(b * bs, (b + 1) * bs) for b in blocks[i:i + len(batch)]])
                ok = self.hicache.batch_get_v1(batch, host)
                if not all(ok):
                    j = ok.index(False)
                    raise KVMissing("request %s: page %s vanished before it was read" % (req_id, batch[j]))
                if i == 0 and len(pages) > B:
                    pause_point("decode_mid_load")
            t_load = time.perf_counter() - t0
            out, logits = self._generate(blocks, first_token, n, max_new)
            t_done = time.perf_counter() - t0
        finally:
            self.pool.release(blocks)
        tails = [p for p in pages if p.startswith("t/")]
        if tails:
            self.hicache.kv.remove([k for p in tails for k in self.hicache._keys(p)])
        return {"tokens": out, "logits": logits, "t_load": t_load, "t_decode": t_done - t_load,
                "bytes_loaded": len(pages) * cfg.n_layer * cfg.block_bytes()}


class Reference:
    """The same computation in one process: a dict stands for the store
    (first writer wins, like the store's immutable objects), splits given by
    the caller (the hit lengths the distributed run reported)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.model = GPT(cfg)
        self.blocks = {}          # rolling hash -> [L,2,bs,H,D] tensor

    def run(self, tokens, hit_tokens, max_new, store=True):
        cfg = self.cfg
        bs = cfg.block_size
        hashes = hashing.prefix_hashes(tokens, bs)
        pool = KVPool(cfg, _blocks_for(len(tokens) + max_new, bs))
        bt = list(range(pool.num_blocks))
        for i in range(hit_tokens // bs):
            pool.t[:, i] = self.blocks[hashes[i]]
        lg = self.model.forward(tokens[hit_tokens:], hit_tokens, pool, bt)
        if store:
            for i in range(hit_tokens // bs, len(hashes)):
                self.blocks.setdefault(hashes[i], pool.t[:, i].clone())
        logits = [lg.clone()]
        tok = argmax_token(lg)
        out = [tok]
        pos = len(tokens)
        for _ in range(max_new - 1):
            lg = self.model.forward([tok], pos, pool, bt)
            logits.append(lg.clone())
            tok = argmax_token(lg)
            out.append(tok)
            pos += 1
        return out, logits
