"""Mooncake-compatible Python API served by crescent.

Put python/compat (and crescent's build tree <build>/python, or an installed
crescent package) on sys.path, and code written for Mooncake runs unchanged:

    from mooncake.store import MooncakeDistributedStore, ReplicateConfig
    from mooncake.engine import TransferEngine
"""
__all__ = ["store", "engine"]
