"""``mooncake.store_file_io``: tensor files for MooncakeDistributedStore.

In Mooncake, importing ``mooncake`` calls ``patch_store_file_io_support()``,
which attaches ``save_tensor_to_file``, ``load_tensor_from_file``, their
safetensors forms and the ``*_kv_cache_*`` aliases to the store class. On
crescent the class has those methods itself (crescent/store.py, local files
only: other filesystems are not applicable here and answer -600 / None), so
patching only marks the class, idempotently, for code that checks.
"""
from importlib import import_module

__all__ = ["patch_store_file_io_support", "INVALID_PARAMS", "FILE_NOT_FOUND", "PERSISTENT_FAIL"]

INVALID_PARAMS = -600
FILE_NOT_FOUND = -1100
PERSISTENT_FAIL = -1503

_METHODS = ("save_tensor_to_file", "load_tensor_from_file", "save_kv_cache_to_file",
            "load_kv_cache_from_file", "save_tensor_to_safetensor", "load_tensor_from_safetensor")


def patch_store_file_io_support():
    """Makes sure MooncakeDistributedStore has the file methods; returns
    nothing, like Mooncake's (a store module that cannot load is left as is)."""
    try:
        store_module = import_module("mooncake.store")
    except (ImportError, OSError):
        return
    cls = getattr(store_module, "MooncakeDistributedStore", None)
    if cls is None or getattr(cls, "_mooncake_file_io_patched", False):
        return
    missing = [m for m in _METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise RuntimeError("MooncakeDistributedStore lacks %s" % ", ".join(missing))
    cls._mooncake_file_io_patched = True
