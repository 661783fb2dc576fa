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


class EngramStore:
    """Mooncake's Engram embedding store."""
    __init__ = _refuse("EngramStore", "crescent has no Engram store")


class EngramStoreConfig:
    __init__ = _refuse("EngramStoreConfig", "crescent has no Engram store")


class RangedReadSnapshot:
    """Snapshot handle of Mooncake's ranged tensor reads; crescent reads
    ranges with get_into_ranges() instead."""
    __init__ = _refuse("RangedReadSnapshot", "use MooncakeDistributedStore.get_into_ranges()")
