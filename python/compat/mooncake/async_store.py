"""``mooncake.async_store``: asyncio front ends of MooncakeDistributedStore.

Mooncake's own form: a store whose every method ``m`` also exists as the
coroutine ``async_m`` (setup/close stay synchronous)::

    store = MooncakeDistributedStoreAsync()
    store.setup("localhost", meta, "1GB", "64MB", "tcp", "", master)
    await store.async_put("k", b"v"); v = await store.async_get("k")

and a wrapper whose methods are all coroutines::

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

__all__ = ["MooncakeDistributedStoreAsync", "AsyncMooncakeDistributedStore", "AsyncStore"]


class MooncakeDistributedStoreAsync(MooncakeDistributedStore):
    """MooncakeDistributedStore plus ``async_<method>`` for every method:
    the call runs in a bounded thread pool (the C extension releases the
    GIL while it waits), so the event loop never blocks on the store. The
    coroutine function is made on first use and kept on the instance."""

    _ASYNC_THREADS = 8

    def __getattr__(self, name):
        if not name.startswith("async_") or len(name) == 6:
            raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, name))
        fn = getattr(self, name[6:], None)
        if fn is None or not callable(fn) or name[6:].startswith("_"):
            raise AttributeError("'%s' object has no attribute '%s' (nor '%s')"
                                 % (type(self).__name__, name, name[6:]))
        pool = self.__dict__.get("_async_pool")
        if pool is None:
            pool = ThreadPoolExecutor(max_workers=self._ASYNC_THREADS,
                                      thread_name_prefix="mooncake-async")
            self.__dict__["_async_pool"] = pool

        @functools.wraps(fn)
        async def call(*args, **kwargs):
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(pool, functools.partial(fn, *args, **kwargs))
        setattr(self, name, call)
        return call

    def close(self):
        pool = self.__dict__.pop("_async_pool", None)
        if pool is not None:  # not wait=True: close() may run on the pool itself
            pool.shutdown(wait=False)
        return super().close()


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
