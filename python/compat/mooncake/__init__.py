"""Mooncake-compatible Python API served by crescent.

Put python/compat (and crescent's build tree <build>/python, or an installed
crescent package) on sys.path, and code written for Mooncake runs unchanged:

    from mooncake.store import MooncakeDistributedStore, ReplicateConfig
    from mooncake.engine import TransferEngine
"""
__all__ = ["store", "engine"]


def __getattr__(name):
    # mooncake.BufferPool without importing mooncake.store at package import
    if name in ("BufferPool", "RegisteredBufferPool"):
        from mooncake import store
        return getattr(store, name)
    raise AttributeError("module 'mooncake' has no attribute %r" % name)
