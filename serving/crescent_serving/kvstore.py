"""KV blocks in crescent's store: key names, commit markers, zero-copy I/O.

Keys (ns = "cs/<model name>"):

    <ns>/b/<hash:016x>/commit        marker of a committed block (msgpack:
                                      fp, shape, nonce, block_bytes, n_layer)
    <ns>/b/<hash:016x>/<nonce>/L<l>  K and V of layer l of that block
                                      (block_bytes, straight from the pool)
    <ns>/t/<req>/<nonce>/L<l>        the partial last block of a request, for
                                      its decode worker only (never a prefix)

A "page" is the part between <ns>/ and /L<l>: one block, all layers (the
unit of SGLang's HiCache keys); the layer objects are the unit of vLLM's
layer-wise save.

Visibility rule: a block exists for readers only once its marker exists, and
the marker is written after every layer object of the block was stored
(put_end), so a prefill worker killed mid-save leaves no visible partial
block. Layer objects carry the writer's nonce: two writers of the same block
never share a layer key (store objects are immutable and first-writer-wins),
so a reader always gets all layers from the one writer named by the marker.
"""
import os

import msgpack

from .model import ModelMismatch

STORE_BATCH = 512          # keys per store batch call (bounded work per call)
MARKER_MAX = 4096          # bytes; a bigger marker is corrupt


def ns_of(cfg):
    return "cs/" + cfg.name


def block_page(h, nonce):
    return "b/%016x/%s" % (h, nonce)


def tail_page(req_id, nonce):
    return "t/%s/%s" % (req_id, nonce)


def layer_key(ns, page, layer):
    return "%s/%s/L%d" % (ns, page, layer)


def marker_key(ns, h):
    return "%s/b/%016x/commit" % (ns, h)


def new_nonce():
    return os.urandom(6).hex()


def open_store(local_hostname, metadata, master, protocol="tcp", segment=0,
               local_buffer=16 << 20):
    """A store client that contributes `segment` bytes (0: uses only)."""
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup(local_hostname, metadata, segment, local_buffer, protocol, "", master)
    if rc != 0:
        raise RuntimeError("store setup(%s, %s, master %s) failed: %d (%s)"
                           % (local_hostname, metadata, master, rc, _strerror(rc)))
    return s


def _strerror(rc):
    try:
        import crescent
        return crescent.strerror(rc)
    except Exception:  # noqa: BLE001 - only for a message
        return "?"


class KVStore:
    """The store operations both adapters are built from."""

    def __init__(self, store, cfg):
        self.s = store
        self.cfg = cfg
        self.ns = ns_of(cfg)
        self.registered = []

    def register(self, ptr, nbytes):
        rc = self.s.register_buffer(ptr, nbytes)
        if rc != 0:
            raise RuntimeError("register_buffer(%#x, %d): %d (%s)" % (ptr, nbytes, rc, _strerror(rc)))
        self.registered.append(ptr)

    def close(self):
        for p in self.registered:
            self.s.unregister_buffer(p)
        self.registered = []

    def _batched(self, fn, keys, *lists):
        out = []
        for i in range(0, len(keys), STORE_BATCH):
            res = fn(keys[i:i + STORE_BATCH], *[l[i:i + STORE_BATCH] for l in lists])
            if isinstance(res, int):       # whole-call error (list length, closed store)
                res = [res] * len(keys[i:i + STORE_BATCH])
            out.extend(res)
        return out

    # -- existence ---------------------------------------------------------
    def committed_prefix(self, hashes):
        """Number of leading blocks whose commit marker exists."""
        if not hashes:
            return 0
        res = self._batched(self.s.batch_is_exist, [marker_key(self.ns, h) for h in hashes])
        n = 0
        for r in res:
            if r != 1:
                break
            n += 1
        return n

    def exist_all(self, keys):
        return [r == 1 for r in self._batched(self.s.batch_is_exist, keys)]

    # -- markers -----------------------------------------------------------
    def read_markers(self, hashes):
        """Nonces of the leading committed blocks (stops at the first missing
        or unreadable marker). Raises ModelMismatch if a marker was written
        for another model shape under this model name."""
        if not hashes:
            return []
        vals = self.s.get_batch([marker_key(self.ns, h) for h in hashes])
        out = []
        for h, v in zip(hashes, vals):
            if not isinstance(v, (bytes, bytearray)) or not v or len(v) > MARKER_MAX:
                break
            try:
                m = msgpack.unpackb(v, raw=False)
                fp, nonce, shape = m["fp"], m["nonce"], m["shape"]
            except Exception:  # noqa: BLE001 - a corrupt marker is a miss
                break
            if fp != self.cfg.fingerprint():
                self.cfg.check_same(shape, "the writer of block %016x" % h)
                raise ModelMismatch("block %016x: fingerprint %s, ours %s" % (h, fp, self.cfg.fingerprint()))
            out.append(nonce)
        return out

    def commit(self, hashes, nonce):
        """Writes the markers (after the layer objects were stored)."""
        if not hashes:
            return []
        m = msgpack.packb({"fp": self.cfg.fingerprint(), "shape": self.cfg.shape(),
                           "nonce": nonce, "block_bytes": self.cfg.block_bytes(),
                           "n_layer": self.cfg.n_layer})
        keys = [marker_key(self.ns, h) for h in hashes]
        rc = self.s.put_batch(keys, [m] * len(keys))
        return [rc] * len(keys) if isinstance(rc, int) else list(rc)

    def uncommit(self, hashes, nonce):
        """Removes the markers of blocks found broken, if they still name
        `nonce` (a marker re-written meanwhile by another writer stays)."""
        keys = [marker_key(self.ns, h) for h in hashes]
        stale = []
        for k, v in zip(keys, self.s.get_batch(keys)):
            try:
                if v and msgpack.unpackb(v, raw=False)["nonce"] == nonce:
                    stale.append(k)
            except Exception:  # noqa: BLE001 - a corrupt marker is stale too
                stale.append(k)
        self.remove(stale)

    # -- layer objects (zero copy) ------------------------------------------
    def put_from(self, keys, addrs):
        """Stores each key from one registered range of block_bytes."""
        sz = self.cfg.block_bytes()
        return self._batched(self.s.batch_put_from, keys, addrs, [sz] * len(keys))

    def get_into(self, keys, addrs):
        """Reads each key straight into the pool. Per key: True only if the
        object exists and has exactly block_bytes (else its bytes are not KV
        of this model and the caller must recompute)."""
        sz = self.cfg.block_bytes()
        res = self._batched(self.s.batch_get_into, keys, addrs, [sz] * len(keys))
        return [r == sz for r in res], res

    def remove(self, keys):
        if keys:
            self._batched(lambda k: self.s.batch_remove(k, True), keys)
