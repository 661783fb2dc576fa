"""``mooncake.registered_buffer_pool``: the registered BufferPool (crescent's own)."""
from mooncake.store import BufferPool

RegisteredBufferPool = BufferPool

__all__ = ["RegisteredBufferPool"]
