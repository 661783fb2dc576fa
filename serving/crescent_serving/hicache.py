"""crescent behind SGLang's HiCache storage-backend contract (HiCacheStorage).

Method names, arguments and return values follow
sglang/srt/mem_cache/hicache_storage.py; our decode worker (engine.py) calls
them the way SGLang's cache controller does (batch_exists for the prefetch
length, then zero-copy batch_get_v1 into the host pool by host_indices).

A key is a page: one KV block, all layers ("b/<hash>/<nonce>" or
"t/<req>/<nonce>", see kvstore.py). The host pool is layer-first (our
KVPool), so a page is n_layer store objects, one per layer.

  register_mem_pool_host(pool)       registers the pool with the store
  exists(key) -> bool                every layer object of the page exists
  batch_exists(keys, extra_info=None) -> int
                                     leading pages that exist
  batch_get_v1(keys, host_indices, extra_info=None) -> [bool]
                                     zero copy into the pool pages named by
                                     host_indices (token slots, page aligned);
                                     False for a page missing or of the wrong
                                     size (its slots then hold no valid KV)
  batch_set_v1(keys, host_indices, extra_info=None) -> [bool]
  get(key, target_location=None, target_sizes=None) -> tensor | None
  batch_get(keys, target_locations=None, target_sizes=None)
      without locations: [tensor | None] (copies); with locations (per key a
      list of n_layer addresses, sizes per key a list of n_layer sizes): the
      number of leading pages read into them
  set(key, value=None, target_location=None, target_sizes=None) -> bool
  batch_set(keys, values=None, target_locations=None, target_sizes=None) -> bool
  clear()  (removes nothing: the store is shared), get_stats()
"""
import torch

from .kvstore import KVStore, layer_key


class HiCacheStorageConfig:
    """The fields of SGLang's HiCacheStorageConfig this backend reads."""

    def __init__(self, model_name, tp_rank=0, tp_size=1, is_mla_model=False,
                 is_page_first_layout=False, extra_config=None):
        self.model_name = model_name
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.is_mla_model = is_mla_model
        self.is_page_first_layout = is_page_first_layout
        self.extra_config = extra_config or {}


class CrescentHiCacheStorage:
    def __init__(self, storage_config, kvstore):
        if storage_config.tp_size != 1:
            raise ValueError("CrescentHiCacheStorage: tensor parallelism is not supported (tp_size %d)"
                             % storage_config.tp_size)
        if storage_config.is_page_first_layout:
            raise ValueError("CrescentHiCacheStorage: the host pool must be layer_first")
        self.kv = kvstore
        self.cfg = kvstore.cfg
        if storage_config.model_name != self.cfg.name:
            raise ValueError("CrescentHiCacheStorage: model_name %r, store namespace of %r"
                             % (storage_config.model_name, self.cfg.name))
        self.mem_pool_host = None
        self.stats = {"pages_read": 0, "pages_written": 0, "pages_failed": 0,
                      "bytes_read": 0, "bytes_written": 0}

    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host
        self.kv.register(mem_pool_host.ptr(), mem_pool_host.nbytes())

    def _keys(self, key):
        return [layer_key(self.kv.ns, key, l) for l in range(self.cfg.n_layer)]

    def _page_addrs(self, host_indices, i):
        bs = self.cfg.block_size
        slot = int(host_indices[i * bs])
        if slot % bs:
            raise ValueError("host_indices: page %d starts at slot %d, not page aligned" % (i, slot))
        blk = slot // bs
        return [self.mem_pool_host.block_addr(l, blk) for l in range(self.cfg.n_layer)]

    # -- existence ---------------------------------------------------------
    def exists(self, key):
        return all(self.kv.exist_all(self._keys(key)))

    def batch_exists(self, keys, extra_info=None):
        flat = [k for key in keys for k in self._keys(key)]
        ok = self.kv.exist_all(flat)
        L = self.cfg.n_layer
        for i in range(len(keys)):
            if not all(ok[i * L:(i + 1) * L]):
                return i
        return len(keys)

    # -- zero copy by host indices (v1) -------------------------------------
    def _io_v1(self, keys, host_indices, put):
        if len(host_indices) < len(keys) * self.cfg.block_size:
            raise ValueError("host_indices: %d slots for %d pages of %d"
                             % (len(host_indices), len(keys), self.cfg.block_size))
        flat_k, flat_a = [], []
        for i, key in enumerate(keys):
            flat_k.extend(self._keys(key))
            flat_a.extend(self._page_addrs(host_indices, i))
        if put:
            res = [rc == 0 for rc in self.kv.put_from(flat_k, flat_a)]
        else:
            res, _ = self.kv.get_into(flat_k, flat_a)
        L = self.cfg.n_layer
        out = [all(res[i * L:(i + 1) * L]) for i in range(len(keys))]
        n_ok = sum(out)
        b = n_ok * L * self.cfg.block_bytes()
        if put:
            self.stats["pages_written"] += n_ok
            self.stats["bytes_written"] += b
        else:
            self.stats["pages_read"] += n_ok
            self.stats["bytes_read"] += b
        self.stats["pages_failed"] += len(keys) - n_ok
        return out

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        return self._io_v1(keys, host_indices, put=False)

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        return self._io_v1(keys, host_indices, put=True)

    # -- older interface --------------------------------------------------
    def get(self, key, target_location=None, target_sizes=None):
        if target_location is not None:
            return self.batch_get([key], [target_location], [target_sizes])
        vals = self.kv.s.get_batch(self._keys(key))
        if any(len(v) != self.cfg.block_bytes() for v in vals):
            return None
        return torch.frombuffer(bytearray(b"".join(vals)), dtype=torch.float32)

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        if target_locations is None:
            return [self.get(k) for k in keys]
        flat_k, flat_a = [], []
        for key, locs, sizes in zip(keys, target_locations, target_sizes):
            if len(locs) != self.cfg.n_layer or any(s != self.cfg.block_bytes() for s in sizes):
                raise ValueError("batch_get: page %s needs %d locations of %d bytes"
                                 % (key, self.cfg.n_layer, self.cfg.block_bytes()))
            flat_k.extend(self._keys(key))
            flat_a.extend(locs)
        ok, _ = self.kv.get_into(flat_k, flat_a)
        L = self.cfg.n_layer
        for i in range(len(keys)):
            if not all(ok[i * L:(i + 1) * L]):
                return i
        return len(keys)

    def set(self, key, value=None, target_location=None, target_sizes=None):
        if target_location is not None:
            return self.batch_set([key], None, [target_location], [target_sizes])
        t = value.contiguous().view(torch.float32).reshape(self.cfg.n_layer, -1)
        if t.shape[1] != self.cfg.block_elems():
            raise ValueError("set: value holds %d floats per layer, want %d"
                             % (t.shape[1], self.cfg.block_elems()))
        rc = self.kv.s.put_batch(self._keys(key), [t[l].numpy().tobytes() for l in range(self.cfg.n_layer)])
        return rc == 0

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        if target_locations is None:
            return all(self.set(k, v) for k, v in zip(keys, values))
        flat_k, flat_a = [], []
        for key, locs in zip(keys, target_locations):
            flat_k.extend(self._keys(key))
            flat_a.extend(locs)
        return all(rc == 0 for rc in self.kv.put_from(flat_k, flat_a))

    def clear(self):
        pass

    def get_stats(self):
        return dict(self.stats)
