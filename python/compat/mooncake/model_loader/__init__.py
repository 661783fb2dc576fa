"""mooncake.model_loader: model weights saved to and loaded from the store under
``mooncake:///<model_name>`` (crescent's own implementation of Mooncake's package).

Key layout (Mooncake's): ``<model>/keys/rank_<r>/<param>`` holds the raw bytes of
one tensor, ``<model>/files/<name>`` a sidecar text file (config.json, tokenizer
files, ...), ``__index__<model>/files/`` the newline-separated list of those.

    seed_model_from_files("/ckpt", "mooncake:///m", tp_rank=0)   # safetensors files
    save_model(model, "mooncake:///m", model_path="/ckpt", rank=0)
    load_weights_into(empty_model, "mooncake:///m", rank=0)

The vLLM and SGLang adapters (``vllm_loader``, ``sglang_adapter``,
``sglang_launch``) need those frameworks: importing them raises ImportError
naming the framework, which is not installed here.
"""
from mooncake.model_loader.config import (COMMON_REMOTE_MODEL_FILES,
                                          MooncakeStoreLoaderConfig, parse_model_name)
from mooncake.model_loader.connector import create_remote_connector
from mooncake.model_loader.mooncake_store_connector import (MooncakeStoreConnector,
                                                            create_mooncake_connector)
from mooncake.model_loader.remote_weight_io import (RemoteWeightIO, filter_subtensors,
                                                    load_weights_into, save_model)
from mooncake.model_loader.seed_from_files import seed_model_from_files

__all__ = [
    "COMMON_REMOTE_MODEL_FILES", "MooncakeStoreConnector", "MooncakeStoreLoaderConfig",
    "RemoteWeightIO", "create_mooncake_connector", "create_remote_connector",
    "filter_subtensors", "load_weights_into", "parse_model_name", "save_model",
    "seed_model_from_files",
]
