"""Store settings of the model-loader connector, model URLs and key names."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional
from urllib.parse import urlparse

from mooncake.mooncake_config import (DEFAULT_GLOBAL_SEGMENT_SIZE, MooncakeConfig,
                                      _bool as _parse_bool, _size as _parse_segment_size)

DEFAULT_CONNECTOR_LOCAL_BUFFER_SIZE = 16 * 1024 * 1024
SAVE_MODEL_DEFAULT_BATCH_SIZE = 256
LOAD_MODEL_DEFAULT_BATCH_SIZE = 256

COMMON_REMOTE_MODEL_FILES = [
    "config.json", "generation_config.json", "special_tokens_map.json", "tokenizer.json",
    "tokenizer.model", "tokenizer_config.json", "preprocessor_config.json",
    "processor_config.json", "chat_template.jinja", "merges.txt", "vocab.json",
]


@dataclass
class MooncakeStoreLoaderConfig:
    """MooncakeConfig's store settings plus the connector's own."""

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: str
    master_server_address: str
    standalone_storage: bool = False
    client_server_address: str = ""
    preferred_segments: Optional[list] = None
    replica_num: int = 1

    @classmethod
    def from_mooncake_config(cls, config: MooncakeConfig, *, standalone_storage=False,
                             client_server_address="", preferred_segments=None, replica_num=1,
                             local_buffer_size=None) -> "MooncakeStoreLoaderConfig":
        return cls(local_hostname=config.local_hostname, metadata_server=config.metadata_server,
                   global_segment_size=config.global_segment_size,
                   local_buffer_size=(DEFAULT_CONNECTOR_LOCAL_BUFFER_SIZE
                                      if local_buffer_size is None else local_buffer_size),
                   protocol=config.protocol, device_name=config.device_name or "",
                   master_server_address=config.master_server_address,
                   standalone_storage=standalone_storage,
                   client_server_address=client_server_address,
                   preferred_segments=preferred_segments, replica_num=replica_num)

    @classmethod
    def load_from_env(cls) -> "MooncakeStoreLoaderConfig":
        """MooncakeConfig.load_from_env() plus MOONCAKE_STANDALONE_STORAGE,
        MOONCAKE_CLIENT, MOONCAKE_CONNECTOR_PREFERRED_SEGMENTS, MOONCAKE_REPLICA_NUM,
        MOONCAKE_CONNECTOR_LOCAL_BUFFER_SIZE."""
        base = MooncakeConfig.load_from_env()
        pref = os.getenv("MOONCAKE_CONNECTOR_PREFERRED_SEGMENTS")
        buf = os.getenv("MOONCAKE_CONNECTOR_LOCAL_BUFFER_SIZE")
        return cls.from_mooncake_config(
            base, standalone_storage=_parse_bool(os.getenv("MOONCAKE_STANDALONE_STORAGE", "false")),
            client_server_address=os.getenv("MOONCAKE_CLIENT", ""),
            preferred_segments=[p for p in pref.split(",") if p] if pref else None,
            replica_num=_int(os.getenv("MOONCAKE_REPLICA_NUM", "1"), "MOONCAKE_REPLICA_NUM"),
            local_buffer_size=_parse_segment_size(buf) if buf is not None else None)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "MooncakeStoreLoaderConfig":
        """From a dict (vLLM's ``model_loader_extra_config``): complete when it names a
        master (``master_server_address`` / ``master``), else the environment's
        settings with the dict's overrides."""
        if not isinstance(data, Mapping):
            raise TypeError("from_mapping needs a mapping")
        pref = data.get("preferred_segments")
        if isinstance(pref, str):
            pref = [p for p in pref.split(",") if p]
        master = data.get("master_server_address") or data.get("master")
        if master:
            return cls(local_hostname=str(data.get("local_hostname", "localhost")),
                       metadata_server=str(data.get("metadata_server")
                                           or data.get("te_meta_data_server") or "P2PHANDSHAKE"),
                       global_segment_size=_parse_segment_size(
                           data.get("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE)),
                       local_buffer_size=_parse_segment_size(
                           data.get("local_buffer_size", DEFAULT_CONNECTOR_LOCAL_BUFFER_SIZE)),
                       protocol=str(data.get("protocol", "tcp")),
                       device_name=str(data.get("device_name", "")),
                       master_server_address=str(master),
                       standalone_storage=_parse_bool(data.get("standalone_storage", False)),
                       client_server_address=str(data.get("client_server_address", "")),
                       preferred_segments=pref,
                       replica_num=_int(data.get("replica_num", 1), "replica_num"))
        cfg = cls.load_from_env()
        if "standalone_storage" in data:
            cfg.standalone_storage = _parse_bool(data["standalone_storage"])
        if "client_server_address" in data:
            cfg.client_server_address = str(data["client_server_address"])
        if pref is not None:
            cfg.preferred_segments = list(pref)
        if "replica_num" in data:
            cfg.replica_num = _int(data["replica_num"], "replica_num")
        if "local_buffer_size" in data:
            cfg.local_buffer_size = _parse_segment_size(data["local_buffer_size"])
        return cfg


def _int(v, what):
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise ValueError("%s must be an integer, got %r" % (what, v)) from None
    if n < 1:
        raise ValueError("%s must be at least 1" % what)
    return n


def parse_model_name(url: str) -> str:
    """``mooncake:///<model>`` (or ``mooncake://<model>``, or a bare name) -> model name."""
    if not isinstance(url, str):
        raise TypeError("model URL must be a str")
    parsed = urlparse(url)
    if parsed.scheme and parsed.scheme.lower() != "mooncake":
        raise ValueError("Unsupported URL scheme %r; expected 'mooncake'" % parsed.scheme)
    name = parsed.path.lstrip("/") or parsed.netloc
    if not name:
        raise ValueError("Missing model name in URL: %r" % url)
    return name


def rank_weight_key(model_name: str, rank: int, param_name: str) -> str:
    return "%s/keys/rank_%d/%s" % (model_name, rank, param_name)


def relative_rank_weight_key(rank: int, param_name: str) -> str:
    """The weight key relative to the model (the connector prefixes ``<model>/``)."""
    return "keys/rank_%d/%s" % (rank, param_name)


def file_key(model_name: str, file_name: str) -> str:
    return "%s/files/%s" % (model_name, file_name)
