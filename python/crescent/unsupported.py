"""Mooncake Store classes whose feature crescent does not have.

Each exists under Mooncake's name so imports succeed; constructing one
raises RuntimeError naming Mooncake's UNAVAILABLE_IN_CURRENT_MODE and why.
"""

__all__ = ["MooncakeDistributedNoFRegister", "EngramStore", "EngramStoreConfig",
           "RangedReadSnapshot"]


def _refuse(name, why):
    def __init__(self, *args, **kwargs):
        raise RuntimeError("UNAVAILABLE_IN_CURRENT_MODE (-1011): %s is not supported by "
                           "crescent: %s" % (name, why))
    return __init__


class MooncakeDistributedNoFRegister:
    """Registers NVMe-oF SSD segments with the master (Mooncake)."""
    __init__ = _refuse("MooncakeDistributedNoFRegister", "crescent has no NVMe-oF tier")
    # the methods exist under Mooncake's names (reachable on the class)
    real_register = real_unregister_by_endpoint = _refuse(
        "MooncakeDistributedNoFRegister", "crescent has no NVMe-oF tier")


class EngramStore:
    """Mooncake's Engram embedding store."""
    __init__ = _refuse("EngramStore", "crescent has no Engram store")


class EngramStoreConfig:
    __init__ = _refuse("EngramStoreConfig", "crescent has no Engram store")


class RangedReadSnapshot:
    """What MooncakeDistributedStore.prepare_get_into_ranges_snapshot()
    returns and get_into_ranges_from_snapshot() reads through: the store it
    belongs to and its keys. Not constructible directly (as Mooncake's
    binding, which defines no constructor: TypeError)."""
    __slots__ = ("_store", "keys", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("crescent.store.RangedReadSnapshot: No constructor defined! "
                        "(use MooncakeDistributedStore.prepare_get_into_ranges_snapshot)")

    @classmethod
    def _make(cls, store, keys):
        import weakref
        snap = object.__new__(cls)
        snap._store = weakref.ref(store)
        snap.keys = tuple(keys)
        return snap

    def _belongs_to(self, store):
        return self._store() is store

    def __repr__(self):
        return "<RangedReadSnapshot of %d keys>" % len(self.keys)
