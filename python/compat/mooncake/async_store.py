"""``mooncake.async_store``: asyncio front end of MooncakeDistributedStore.

    store = AsyncMooncakeDistributedStore()            # or wrap an existing one
    await store.setup("localhost", meta, "1GB", "64MB", "tcp", "", master)
    await store.put("k", b"v"); v = await store.get("k")

Every store method is awaitable; it runs in a bounded thread pool (the C
extension releases the GIL while it waits on the network), so the event
loop never blocks on the store.
"""
import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

from mooncake.store import MooncakeDistributedStore

__all__ = ["AsyncMooncakeDistributedStore", "AsyncStore"]


class AsyncMooncakeDistributedStore:
    def __init__(self, store=None, max_workers=8):
        if not isinstance(max_workers, int) or not 1 <= max_workers <= 256:
            raise ValueError("max_workers must be in 1..256")
        self.store = store if store is not None else MooncakeDistributedStore()
        self._pool = ThreadPoolExecutor(max_workers=max_workers,
                                        thread_name_prefix="mooncake-async")

    def __getattr__(self, name):
        fn = getattr(self.store, name)
        if not callable(fn) or name.startswith("_"):
            return fn

        @functools.wraps(fn)
        async def call(*args, **kwargs):
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))
        return call

    async def close(self):
        loop = asyncio.get_running_loop()
        rc = await loop.run_in_executor(self._pool, self.store.close)
        self._pool.shutdown(wait=False)
        return rc

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()


AsyncStore = AsyncMooncakeDistributedStore
