"""SGLang-style connector factory (``mooncake://`` URLs only)."""
from mooncake.model_loader.mooncake_store_connector import (MooncakeStoreConnector,
                                                            create_mooncake_connector)

__all__ = ["MooncakeStoreConnector", "create_mooncake_connector", "create_remote_connector"]


def create_remote_connector(url: str, device=None, **kwargs) -> MooncakeStoreConnector:
    """Like SGLang's ``create_remote_connector`` for ``mooncake:///`` URLs
    (``device`` is ignored: tensors move through host memory)."""
    del device
    return create_mooncake_connector(url, **kwargs)
