"""Seed the store with a checkpoint's safetensors files (the model-loader key layout)."""
from __future__ import annotations

import json
import logging
import os
from typing import Any, List, Mapping, Optional
from urllib.parse import urlparse

from crescent import tensor_codec
from mooncake.model_loader.config import (COMMON_REMOTE_MODEL_FILES,
                                          SAVE_MODEL_DEFAULT_BATCH_SIZE, parse_model_name)
from mooncake.model_loader.mooncake_store_connector import (MooncakeStoreConnector,
                                                            create_mooncake_connector)

logger = logging.getLogger(__name__)
MAX_INDEX_BYTES = 64 << 20


def _local(path: str, storage_options) -> str:
    scheme = urlparse(path).scheme
    if scheme == "file":
        path = urlparse(path).path
    elif scheme:
        raise ValueError("only local files are supported here (no fsspec filesystems): %r"
                         % path)
    if storage_options:
        raise ValueError("storage_options are not supported for local files")
    return path


def _resolve_weight_files(model_root: str, storage_options=None) -> List[str]:
    root = _local(model_root, storage_options)
    if root.endswith(".safetensors"):
        return [root]
    index = os.path.join(root, "model.safetensors.index.json")
    if os.path.isfile(index):
        if os.path.getsize(index) > MAX_INDEX_BYTES:
            raise ValueError("%s is too large" % index)
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map") or {}
        names = sorted(set(weight_map.values()))
        for n in names:
            if not isinstance(n, str) or n != os.path.basename(n):
                raise ValueError("%s names a shard outside the checkpoint: %r" % (index, n))
        return [os.path.join(root, n) for n in names]
    if os.path.isdir(root):
        shards = sorted(n for n in os.listdir(root) if n.endswith(".safetensors"))
        if not shards:
            raise FileNotFoundError("No safetensors files found under %s" % model_root)
        return [os.path.join(root, n) for n in shards]
    raise FileNotFoundError("Cannot resolve weight files at %s" % model_root)


def seed_model_from_files(model_root: str, url: str, *, tp_rank: int = 0,
                          storage_options: Optional[Mapping[str, Any]] = None,
                          connector: Optional[MooncakeStoreConnector] = None,
                          batch_size: int = SAVE_MODEL_DEFAULT_BATCH_SIZE,
                          include_sidecar_files: bool = True) -> None:
    """Every tensor of the checkpoint's safetensors files (a file, a directory, or a
    directory with model.safetensors.index.json) under
    ``<model>/keys/rank_<tp_rank>/<name>``, plus its common sidecar files.
    Read with crescent's own safetensors reader (bounds-checked)."""
    model_name = parse_model_name(url)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError("batch_size must be a positive int")
    files = _resolve_weight_files(model_root, storage_options)
    owns = connector is None
    client = connector or create_mooncake_connector(url)
    try:
        for path in files:
            names = tensor_codec.safetensors_names(path)
            for i in range(0, len(names), batch_size):
                part = names[i:i + batch_size]
                client.batch_put_from(
                    ["%s/keys/rank_%d/%s" % (model_name, tp_rank, n) for n in part],
                    [tensor_codec.safetensors_read(path, n) for n in part])
        root = _local(model_root, storage_options)
        if include_sidecar_files and os.path.isdir(root):
            for name in COMMON_REMOTE_MODEL_FILES:
                p = os.path.join(root, name)
                if not os.path.isfile(p):
                    continue
                try:
                    with open(p, encoding="utf-8") as f:
                        content = f.read()
                except UnicodeDecodeError:
                    continue
                client.setstr("%s/files/%s" % (model_name, name), content)
        logger.info("Seeded model %s from %s (rank=%d, shards=%d)", model_name, model_root,
                    tp_rank, len(files))
    finally:
        if owns:
            client.close()
