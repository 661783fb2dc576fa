"""MooncakeStoreConnector: tensors and sidecar strings of one model in the store."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, List, Optional

from mooncake.model_loader.config import (COMMON_REMOTE_MODEL_FILES, MooncakeStoreLoaderConfig,
                                          parse_model_name)
from mooncake.model_loader.connector_base import BaseKVConnector

logger = logging.getLogger(__name__)

FILE_INDEX_KEY_PREFIX = "__index__"
MAX_INDEX_BYTES = 16 << 20


def _nbytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def pull_files_from_db(connector: "MooncakeStoreConnector", model_name: str,
                       allow_pattern=None, ignore_pattern=None) -> None:
    """Write the model's sidecar files from the store into ``connector.local_dir``
    (names are taken as plain file names: a name with a directory part or ``..``
    is skipped, so a stored index cannot write outside the directory)."""
    del allow_pattern, ignore_pattern
    prefix = "%s/files/" % model_name
    files = set(connector.list(prefix))
    for name in COMMON_REMOTE_MODEL_FILES:
        if connector._key_exists(prefix + name):
            files.add(prefix + name)
    local_dir = connector.get_local_dir()
    for key in sorted(files):
        name = key[len(prefix):] if key.startswith(prefix) else ""
        if not name or name != os.path.basename(name) or name in (".", ".."):
            logger.warning("skipping sidecar key %r (not a plain file name)", key)
            continue
        content = connector.getstr(key)
        if content is None:
            continue
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        with open(os.path.join(local_dir, name), "wb") as f:
            f.write(content.encode("utf-8"))


class MooncakeStoreConnector(BaseKVConnector):
    """``mooncake:///<model_name>`` over a MooncakeDistributedStore (``store=`` one
    already set up, else one set up from ``config`` / the environment)."""

    def __init__(self, url: str, *, config: Optional[MooncakeStoreLoaderConfig] = None,
                 store: Any = None):
        self.model_name = parse_model_name(url)
        self._owns_store = store is None
        self.config = config if config is not None else \
            (MooncakeStoreLoaderConfig.load_from_env() if store is None else None)
        super().__init__(url)
        self.store = store if store is not None else self._create_and_setup_store()
        from mooncake.store import ReplicateConfig
        self._rep_config = ReplicateConfig()
        if self.config is not None:
            self._rep_config.replica_num = self.config.replica_num
            if self.config.preferred_segments:
                self._rep_config.preferred_segments = list(self.config.preferred_segments)

    def _create_and_setup_store(self) -> Any:
        from mooncake.store import MooncakeDistributedStore
        store = MooncakeDistributedStore()
        c = self.config
        if c.standalone_storage:
            if not c.client_server_address:
                raise ValueError("MOONCAKE_CLIENT must be set when MOONCAKE_STANDALONE_STORAGE "
                                 "is enabled.")
            rc = store.setup_dummy(c.global_segment_size, c.local_buffer_size,
                                   c.client_server_address)
        else:
            rc = store.setup(c.local_hostname, c.metadata_server, c.global_segment_size,
                             c.local_buffer_size, c.protocol, c.device_name,
                             c.master_server_address)
        if rc:
            store.close()
            raise RuntimeError("Failed to setup Mooncake store, error code: %d" % rc)
        return store

    def close(self) -> None:
        if not self.closed and self._owns_store and getattr(self, "store", None) is not None:
            self.store.close()
        super().close()

    def _full_key(self, key: str) -> str:
        if not isinstance(key, str) or not key:
            raise ValueError("keys must be non-empty strings")
        if key.startswith(self.model_name + "/") or key.startswith(FILE_INDEX_KEY_PREFIX):
            return key
        return "%s/%s" % (self.model_name, key)

    def _key_exists(self, key: str) -> bool:
        rc = self.store.is_exist(key)
        if rc < 0:
            raise RuntimeError("Failed to query Mooncake key '%s', error code: %d" % (key, rc))
        return rc == 1

    def _check(self, keys, tensors, what):
        if len(keys) != len(tensors):
            raise ValueError("%s: %d keys for %d tensors" % (what, len(keys), len(tensors)))
        for k, t in zip(keys, tensors):
            if not t.is_contiguous():
                raise ValueError("%s: tensor for %s is not contiguous" % (what, k))
            if t.device.type != "cpu":
                raise ValueError("%s: tensor for %s is on %s (host memory only here)"
                                 % (what, k, t.device))

    def _registered(self, tensors):
        """Register each tensor's bytes for the call; returns the pointers to unregister."""
        done = []
        try:
            for t in tensors:
                n = _nbytes(t)
                if n == 0:
                    continue
                rc = self.store.register_buffer(t.data_ptr(), n)
                if rc:
                    raise RuntimeError("Failed to register buffer to Mooncake Store, "
                                       "error code: %d" % rc)
                done.append(t.data_ptr())
        except Exception:
            self._unregister(done)
            raise
        return done

    def _unregister(self, ptrs):
        for p in ptrs:
            self.store.unregister_buffer(p)

    def batch_get_into(self, keys: List[str], tensors: List[Any]) -> None:
        """Fill each (contiguous, CPU) tensor with its key's bytes; the stored size
        must equal the tensor's. RuntimeError naming every failed key."""
        full = [self._full_key(k) for k in keys]
        self._check(full, tensors, "batch_get_into")
        sizes = [_nbytes(t) for t in tensors]
        regs = self._registered(tensors)
        try:
            results = self.store.batch_get_into(full, [t.data_ptr() for t in tensors], sizes)
        finally:
            self._unregister(regs)
        bad = ["%s: error=%d" % (k, r) if r < 0 else "%s: expected %d bytes, got %d" % (k, n, r)
               for k, r, n in zip(full, results, sizes) if r != n]
        if bad:
            raise RuntimeError("Mooncake batch_get_into failed for some tensors: "
                               + "; ".join(bad))

    def get_into(self, key: str, tensor) -> None:
        self.batch_get_into([key], [tensor])

    def get(self, key: str):
        raise NotImplementedError("Use batch_get_into() instead for performance.")

    def set(self, key: str, tensor) -> None:
        raise NotImplementedError("Use batch_put_from() instead for performance.")

    def batch_put_from(self, keys: List[str], tensors: List[Any]) -> None:
        """Store each tensor's bytes under its key (non-contiguous tensors are copied
        first). RuntimeError naming every failed key."""
        full = [self._full_key(k) for k in keys]
        tensors = [t.detach().contiguous() for t in tensors]
        self._check(full, tensors, "batch_put_from")
        regs = self._registered(tensors)
        try:
            results = self.store.batch_put_from(full, [t.data_ptr() for t in tensors],
                                                [_nbytes(t) for t in tensors], self._rep_config)
        finally:
            self._unregister(regs)
        bad = ["%s: error=%d" % (k, r) for k, r in zip(full, results) if r != 0]
        if bad:
            raise RuntimeError("Mooncake batch_put_from failed for some tensors: "
                               + "; ".join(bad))

    def getstr(self, key: str) -> Optional[str]:
        if not self._key_exists(key):
            logger.error("Key %s not found in Mooncake store", key)
            return None
        return bytes(self.store.get(key)).decode("utf-8")

    def setstr(self, key: str, obj: str) -> None:
        if not isinstance(obj, str):
            raise TypeError("setstr stores a str")
        rc = self.store.upsert(key, obj.encode("utf-8"), self._rep_config)
        if rc != 0:
            raise RuntimeError("Failed to put string key '%s' into Mooncake store, "
                               "error code: %d" % (key, rc))
        prefix = key.rpartition("/")[0]
        self._register_key_in_index(key, prefix + "/")

    def list(self, prefix: str) -> List[str]:
        index_key = FILE_INDEX_KEY_PREFIX + prefix
        if not self._key_exists(index_key):
            return []
        content = bytes(self.store.get(index_key)).decode("utf-8").strip()
        return content.split("\n") if content else []

    def _register_key_in_index(self, key: str, prefix: str) -> None:
        index_key = FILE_INDEX_KEY_PREFIX + prefix
        keys = self.list(prefix)
        if key in keys:
            return
        keys.append(key)
        data = "\n".join(keys).encode("utf-8")
        if len(data) > MAX_INDEX_BYTES:
            raise RuntimeError("Mooncake file index '%s' would exceed %d bytes"
                               % (index_key, MAX_INDEX_BYTES))
        # the index changes: an upsert replaces it atomically (a put keeps the old value)
        rc = self.store.upsert(index_key, data, self._rep_config)
        if rc != 0:
            raise RuntimeError("Failed to update Mooncake file index '%s', error code: %d"
                               % (index_key, rc))

    def weight_iterator(self, rank: int = 0):
        raise NotImplementedError("MooncakeStoreConnector does not support iterating weights "
                                  "one by one. Use batch_get_into via RemoteWeightIO instead.")

    def pull_files(self, allow_pattern=None, ignore_pattern=None) -> None:
        pull_files_from_db(self, self.model_name, allow_pattern, ignore_pattern)


def create_mooncake_connector(url: str, *, config: Optional[MooncakeStoreLoaderConfig] = None,
                              store: Any = None) -> MooncakeStoreConnector:
    return MooncakeStoreConnector(url, config=config, store=store)
