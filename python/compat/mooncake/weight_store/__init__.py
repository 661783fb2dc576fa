"""mooncake.weight_store: checkpoint files cached in the store (crescent's own
implementation of Mooncake's module; same key space and manifest fields).

A checkpoint directory is imported file by file: each file is cut into
``file_chunk_size`` chunks (one store object each, hard-pinned by default so
eviction never drops weights), its size and SHA-256 recorded in a JSON
manifest; two JSON indexes list the checkpoints (all, and per model id).
``verify_model`` re-reads every chunk and checks sizes, digests and the
safetensors index; ``materialize_file`` writes one file back (checked).
"""
from mooncake.weight_store.model import (FAILED, READY, ModelFileCacheClient, ModelFileManifest,
                                         ModelFileRecord)
from mooncake.weight_store.model_keyspace import (model_file_chunk_key, model_file_key,
                                                  model_id_index_key, model_index_key,
                                                  model_manifest_key)

__all__ = ["FAILED", "READY", "ModelFileCacheClient", "ModelFileManifest", "ModelFileRecord",
           "model_file_chunk_key", "model_file_key", "model_id_index_key", "model_index_key",
           "model_manifest_key"]
