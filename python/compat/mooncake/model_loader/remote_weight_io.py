"""Save / load an nn.Module's weights through a MooncakeStoreConnector."""
from __future__ import annotations

import logging
import os
from typing import Any, Dict, Mapping, Optional

from mooncake.model_loader.config import (COMMON_REMOTE_MODEL_FILES,
                                          LOAD_MODEL_DEFAULT_BATCH_SIZE,
                                          SAVE_MODEL_DEFAULT_BATCH_SIZE, parse_model_name,
                                          relative_rank_weight_key)
from mooncake.model_loader.mooncake_store_connector import (MooncakeStoreConnector,
                                                            create_mooncake_connector)

logger = logging.getLogger(__name__)
MAX_SIDECAR_BYTES = 64 << 20


def filter_subtensors(state_dict: Mapping[str, Any]) -> Dict[str, Any]:
    """One tensor per storage (the one with the most elements): tied weights and
    views are stored once."""
    groups: Dict[int, list] = {}
    for name, t in state_dict.items():
        st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        groups.setdefault(st.data_ptr(), []).append((name, t))
    out = {}
    for group in groups.values():
        name, t = max(group, key=lambda item: item[1].numel())
        out[name] = t
    return out


def _batch_size(n):
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError("batch_size must be a positive int, got %r" % (n,))
    return n


class RemoteWeightIO:
    """Weights of ``url``'s model; owns (and closes) its connector unless given one."""

    def __init__(self, url: str, *, connector: Optional[MooncakeStoreConnector] = None,
                 batch_size: int = SAVE_MODEL_DEFAULT_BATCH_SIZE):
        self.url = url
        self.model_name = parse_model_name(url)
        self.batch_size = _batch_size(batch_size)
        self._owns_connector = connector is None
        self.connector = connector or create_mooncake_connector(url)

    def close(self) -> None:
        if self._owns_connector:
            self.connector.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _in_batches(self, op, items, batch_size):
        keys, tensors = [], []
        for k, t in items:
            keys.append(k)
            tensors.append(t)
            if len(keys) >= batch_size:
                op(keys, tensors)
                keys, tensors = [], []
        if keys:
            op(keys, tensors)

    def save_model(self, model: Any, model_path: Optional[str] = None, *, rank: int = 0,
                   state_dict: Optional[Mapping[str, Any]] = None) -> None:
        """Every tensor of the (filtered) state dict under
        ``<model>/keys/rank_<rank>/<name>``; sidecar files of ``model_path`` too.
        (A key that exists keeps its value, as Mooncake's put: save a changed
        model under a new name or remove the old keys first.)"""
        sd = filter_subtensors(dict(state_dict) if state_dict is not None else model.state_dict())
        self._in_batches(self.connector.batch_put_from,
                         (("%s/%s" % (self.model_name, relative_rank_weight_key(rank, k)), t)
                          for k, t in sd.items()), self.batch_size)
        if model_path:
            self._save_sidecar_files(model_path)

    def _save_sidecar_files(self, model_path: str) -> None:
        if not os.path.isdir(model_path):
            raise FileNotFoundError("model_path %s is not a directory" % model_path)
        for name in sorted(os.listdir(model_path)):
            path = os.path.join(model_path, name)
            if name.startswith(".") or not os.path.isfile(path):
                continue
            if os.path.splitext(name)[1] not in (".json", ".py") and \
                    name not in COMMON_REMOTE_MODEL_FILES:
                continue
            if os.path.getsize(path) > MAX_SIDECAR_BYTES:
                logger.warning("Skipping sidecar file %s (over %d bytes)", path, MAX_SIDECAR_BYTES)
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    content = f.read()
            except UnicodeDecodeError:
                logger.warning("Skipping non-utf8 sidecar file %s", path)
                continue
            self.connector.setstr("%s/files/%s" % (self.model_name, name), content)

    def load_weights_into(self, model: Any, *, rank: int = 0,
                          state_dict: Optional[Dict[str, Any]] = None,
                          batch_size: int = LOAD_MODEL_DEFAULT_BATCH_SIZE) -> None:
        """Fill the model's tensors in place (same names, shapes and dtypes as saved)."""
        sd = filter_subtensors(state_dict if state_dict is not None else model.state_dict())
        self._in_batches(self.connector.batch_get_into,
                         ((relative_rank_weight_key(rank, k), t) for k, t in sd.items()),
                         _batch_size(batch_size))

    def materialize_files(self) -> str:
        """Pull the sidecar files into the connector's scratch directory; its path."""
        self.connector.pull_files()
        return self.connector.get_local_dir()


def save_model(model: Any, url: str, model_path: Optional[str] = None, *, rank: int = 0,
               connector: Optional[MooncakeStoreConnector] = None) -> None:
    with RemoteWeightIO(url, connector=connector) as io:
        io.save_model(model, model_path, rank=rank)


def load_weights_into(model: Any, url: str, *, rank: int = 0,
                      connector: Optional[MooncakeStoreConnector] = None) -> None:
    with RemoteWeightIO(url, connector=connector) as io:
        io.load_weights_into(model, rank=rank)
