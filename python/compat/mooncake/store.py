"""``mooncake.store`` on crescent: MooncakeDistributedStore, ReplicateConfig."""
from crescent.store import BufferHandle, DistributedStore, ReplicateConfig

__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "BufferHandle"]


class MooncakeDistributedStore(DistributedStore):
    """Mooncake's MooncakeDistributedStore, implemented by crescent's Store client."""
