"""crescent behind vLLM's v1 KV connector contract (KVConnectorBase_V1).

The class has vLLM's method names, arguments, return values and call order
(vllm/distributed/kv_transfer/kv_connector/v1/base.py); our prefill worker
(engine.py) is the engine that calls them, in the order vLLM's scheduler and
model runner do. Porting to vLLM means subclassing KVConnectorBase_V1 with
these bodies and reading vLLM's Request / KVCacheBlocks / ForwardContext
instead of the small stand-ins below (the fields used are named after vLLM's).

Scheduler side
  get_num_new_matched_tokens(request, num_computed_tokens) -> (n, False)
      side-effect free; n = tokens of the longest committed prefix in the
      store beyond num_computed_tokens (whole blocks; never the last prompt
      token, whose logits must be computed). Loads are synchronous (False).
  update_state_after_alloc(request, blocks, num_external_tokens)
      remembers which of the request's blocks receive the external tokens;
      loads only if num_external_tokens > 0.
  build_connector_meta(scheduler_output) -> CrescentConnectorMetadata
      the step's load and save specs; resets the per-step state.
  update_connector_output(output)   absorbs the worker side's report
  request_finished(request, block_ids) -> (False, kv_transfer_params)
      kv_transfer_params names the request's KV pages for the decode side.
  take_events() -> BlockStored events of newly committed blocks.

Worker side
  register_kv_caches({layer_name: tensor})   registers the pool with the store
  bind_connector_metadata / clear_connector_metadata
  start_load_kv(forward_context)     reads every layer of the hit blocks into
      the paged buffer (one batched zero-copy get); a block that vanished
      since the lookup is reported by get_block_ids_with_load_errors() and
      the engine recomputes from the first failed block.
  wait_for_layer_load(layer_name)    returns once that layer's blocks are in.
  save_kv_layer(layer_name, kv_layer, attn_metadata)
      layer_wise=True: hands the layer's new full blocks (and the partial
      tail) to the saver thread at once, so they move while later layers
      compute; False: only records them (whole KV saved in wait_for_save).
  wait_for_save()   waits for every layer put, then commits the markers of
      the blocks whose every layer was stored.
  get_finished(finished_req_ids) -> (None, None)  (saves are synchronous
      within the step: wait_for_save already ran)
  build_connector_worker_meta()    per request: pages loaded/saved, bytes,
      times, load errors.
"""
import queue
import threading
import time
from dataclasses import dataclass, field

from . import hashing
from .kvstore import KVStore, block_page, layer_key, new_nonce, tail_page


# -- the small engine types the contract talks about (vLLM's field names) ---
@dataclass
class Request:
    request_id: str
    prompt_token_ids: list

    @property
    def num_tokens(self):
        return len(self.prompt_token_ids)


@dataclass
class KVCacheBlocks:
    block_ids: list

    def get_block_ids(self):
        return (list(self.block_ids),)


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list          # Requests scheduled this step


@dataclass
class AttentionMetadata:
    block_table: list
    start: int                        # first position computed this step
    end: int                          # one past the last


@dataclass
class ForwardContext:
    attn_metadata: AttentionMetadata


@dataclass
class ReqMeta:
    request_id: str
    hashes: list                      # rolling hashes of the prompt's full blocks
    block_ids: list
    load_blocks: int                  # leading blocks to load
    save_from: int                    # first full block to save
    num_tokens: int
    nonce: str


@dataclass
class CrescentConnectorMetadata:
    requests: list = field(default_factory=list)


@dataclass
class KVConnectorOutput:
    reports: dict


def layer_name(l):
    return "model.layers.%d.self_attn.attn" % l


def layer_index(name):
    return int(name.split(".")[2])


class CrescentConnectorV1:
    SCHEDULER, WORKER = 0, 1

    def __init__(self, cfg, role, kvstore, layer_wise=True):
        self.cfg = cfg
        self.role = role
        self.kv = kvstore if isinstance(kvstore, KVStore) else KVStore(kvstore, cfg)
        self.layer_wise = layer_wise
        self._connector_metadata = None
        # scheduler side
        self._pending = {}            # req id -> ReqMeta (until build_connector_meta)
        self._reports = {}            # req id -> worker report
        self._events = []
        # worker side
        self._kv_caches = None
        self._pool = None
        self._load_errors = set()
        self._loaded_layers = set()
        self._report = {}
        self._saves = []              # [(req meta, layer, keys, addrs)]
        self._save_res = []
        self._save_q = None
        self._saver = None
        self.fault_hook = None        # tests: called with (point, info)

    # ======================= scheduler side =======================
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        bs = self.cfg.block_size
        hashes = hashing.prefix_hashes(request.prompt_token_ids, bs)
        # the last prompt token is always computed (its logits give token 1)
        usable = (request.num_tokens - 1) // bs
        n = self.kv.committed_prefix(hashes[:usable]) * bs
        return max(0, n - num_computed_tokens), False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        bs = self.cfg.block_size
        hashes = hashing.prefix_hashes(request.prompt_token_ids, bs)
        load = num_external_tokens // bs if num_external_tokens > 0 else 0
        self._pending[request.request_id] = ReqMeta(
            request.request_id, hashes, blocks.get_block_ids()[0], load, load,
            request.num_tokens, new_nonce())

    def build_connector_meta(self, scheduler_output):
        meta = CrescentConnectorMetadata()
        for r in scheduler_output.scheduled_new_reqs:
            m = self._pending.pop(r.request_id, None)
            if m is not None:
                meta.requests.append(m)
        self._pending.clear()
        return meta

    def update_connector_output(self, connector_output):
        for rid, rep in connector_output.reports.items():
            self._reports[rid] = rep
            for i, h in enumerate(rep["committed"]):
                self._events.append({"hash": h, "parent": rep["parents"][i],
                                     "block_index": rep["block_index"][i]})

    def request_finished(self, request, block_ids):
        rep = self._reports.pop(request.request_id, None)
        if rep is None:
            return False, None
        return False, {"pages": rep["pages"], "num_tokens": request.num_tokens,
                       "fp": self.cfg.fingerprint(), "shape": self.cfg.shape(),
                       "bytes_loaded": rep["bytes_loaded"], "bytes_saved": rep["bytes_saved"],
                       "hit_tokens": rep["hit_tokens"], "t_load": rep["t_load"],
                       "t_save_wait": rep["t_save_wait"], "t_commit": rep["t_commit"],
                       "load_errors": rep["load_errors"]}

    def take_events(self):
        ev, self._events = self._events, []
        return ev

    # ======================= worker side =======================
    def bind_connector_metadata(self, connector_metadata):
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self):
        self._connector_metadata = None

    def register_kv_caches(self, kv_caches, pool=None):
        """kv_caches: {layer_name: pool.t[l]}; pool gives the block addresses."""
        self._kv_caches = kv_caches
        self._pool = pool
        self.kv.register(pool.ptr(), pool.nbytes())

    def _addr(self, layer, block):
        return self._pool.block_addr(layer, block)

    def start_load_kv(self, forward_context, **kwargs):
        self._load_errors = set()
        self._loaded_layers = set()
        self._report = {}
        t0 = time.perf_counter()
        for m in self._connector_metadata.requests:
            rep = self._report.setdefault(m.request_id, _new_report())
            if m.load_blocks == 0:
                continue
            wanted = m.load_blocks
            nonces = self.kv.read_markers(m.hashes[:m.load_blocks])
            if self.fault_hook:
                self.fault_hook("after_markers", m)
            keys, addrs, where = [], [], []
            for i, nonce in enumerate(nonces):
                page = block_page(m.hashes[i], nonce)
                for l in range(self.cfg.n_layer):
                    keys.append(layer_key(self.kv.ns, page, l))
                    addrs.append(self._addr(l, m.block_ids[i]))
                    where.append(i)
            ok, _ = self.kv.get_into(keys, addrs)
            good = len(nonces)
            for i, o in zip(where, ok):
                if not o:
                    good = min(good, i)
            for i in range(good, wanted):
                self._load_errors.add(m.block_ids[i])
            if good < len(nonces):
                # the marker of block `good` names layer objects that are gone
                # (evicted): drop it so that this request's save commits anew
                self.kv.uncommit([m.hashes[good]], nonces[good])
            m.load_blocks = good
            m.save_from = good
            rep["pages"] = [block_page(m.hashes[i], nonces[i]) for i in range(good)]
            rep["hit_tokens"] = good * self.cfg.block_size
            rep["bytes_loaded"] = sum(1 for i, o in zip(where, ok) if o and i < good) * self.cfg.block_bytes()
            rep["load_errors"] = wanted - good
        self._loaded_layers = set(range(self.cfg.n_layer))
        for rep in self._report.values():
            rep["t_load"] = time.perf_counter() - t0
        if self.layer_wise:
            self._start_saver()

    def get_block_ids_with_load_errors(self):
        return set(self._load_errors)

    def wait_for_layer_load(self, layer_name):
        # loads are synchronous in start_load_kv (all layers, one batch)
        assert layer_index(layer_name) in self._loaded_layers

    def _pages_to_save(self, m, attn_metadata):
        """(page, block id) of the full blocks computed this step + the tail."""
        bs = self.cfg.block_size
        out = [(block_page(m.hashes[i], m.nonce), m.block_ids[i], i)
               for i in range(m.save_from, len(m.hashes))]
        if m.num_tokens % bs:
            out.append((tail_page(m.request_id, m.nonce), m.block_ids[m.num_tokens // bs], None))
        return out

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        l = layer_index(layer_name)
        for m in self._connector_metadata.requests:
            pages = self._pages_to_save(m, attn_metadata)
            keys = [layer_key(self.kv.ns, p, l) for p, _, _ in pages]
            addrs = [kv_layer[b].data_ptr() for _, b, _ in pages]
            item = (m, l, keys, addrs)
            if self.fault_hook:
                self.fault_hook("save_layer", item)
            if self.layer_wise:
                self._save_q.put(item)
            else:
                self._saves.append(item)

    def _start_saver(self):
        self._save_q = queue.Queue()
        self._save_res = []
        self._saver = threading.Thread(target=self._saver_main, daemon=True)
        self._saver.start()

    def _saver_main(self):
        while True:
            item = self._save_q.get()
            if item is None:
                return
            m, l, keys, addrs = item
            self._save_res.append((m, l, self.kv.put_from(keys, addrs)))

    def wait_for_save(self):
        t0 = time.perf_counter()
        if self.layer_wise:
            self._save_q.put(None)
            self._saver.join()
            self._saver = None
            results = self._save_res
        else:
            results = [(m, l, self.kv.put_from(keys, addrs)) for m, l, keys, addrs in self._saves]
            self._saves = []
        t_puts = time.perf_counter()
        if self.fault_hook:
            self.fault_hook("before_commit", results)
        for m in self._connector_metadata.requests:
            rep = self._report.setdefault(m.request_id, _new_report())
            pages = self._pages_to_save(m, None)
            okp = [True] * len(pages)
            for mm, l, res in results:
                if mm is m:
                    for j, rc in enumerate(res):
                        if rc != 0:
                            okp[j] = False
            # commit the leading run of fully stored blocks only
            commit = []
            for j, (p, b, i) in enumerate(pages):
                if i is None or not okp[j]:
                    break
                commit.append(i)
            self.kv.commit([m.hashes[i] for i in commit], m.nonce)
            tail_ok = bool(pages) and pages[-1][2] is None and okp[-1]
            full_ok = all(okp[j] for j, (_, _, i) in enumerate(pages) if i is not None)
            if full_ok:
                rep["pages"] = rep["pages"] + [p for p, _, i in pages if i is not None]
                if tail_ok:
                    rep["pages"].append(pages[-1][0])
            else:
                rep["pages"] = None       # the decode side cannot get this request's KV
            rep["committed"] = [m.hashes[i] for i in commit]
            rep["parents"] = [m.hashes[i - 1] if i > 0 else None for i in commit]
            rep["block_index"] = list(commit)
            rep["bytes_saved"] = sum(1 for _, _, res in results for rc in res if rc == 0) * self.cfg.block_bytes()
            rep["t_save_wait"] = t_puts - t0
            rep["t_commit"] = time.perf_counter() - t_puts
        self._save_res = []

    def abort(self):
        """The step failed before wait_for_save: stop the saver, commit
        nothing (layer objects already put stay invisible), drop the state."""
        if self._saver is not None and self._saver.is_alive():
            self._save_q.put(None)
            self._saver.join()
        self._saver = None
        self._saves, self._save_res, self._report = [], [], {}
        self._connector_metadata = None

    def get_finished(self, finished_req_ids):
        return None, None

    def build_connector_worker_meta(self):
        out, self._report = KVConnectorOutput(self._report), {}
        return out

    def shutdown(self):
        self.kv.close()


def _new_report():
    return {"pages": [], "hit_tokens": 0, "bytes_loaded": 0, "bytes_saved": 0,
            "load_errors": 0, "t_load": 0.0, "t_save_wait": 0.0, "t_commit": 0.0,
            "committed": [], "parents": [], "block_index": []}
