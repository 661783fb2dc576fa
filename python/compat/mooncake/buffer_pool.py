"""``mooncake.buffer_pool``: BufferPool and its RegisteredBufferPool alias."""
from mooncake.store import BufferPool

RegisteredBufferPool = BufferPool

__all__ = ["BufferPool", "RegisteredBufferPool"]
