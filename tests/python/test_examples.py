"""The examples in examples/ (written only against the mooncake compat API)
run against a real local cluster and check their own results."""
import os

from conftest import HERE, SANITIZED, run_py

EXAMPLES = os.path.normpath(os.path.join(HERE, "..", "..", "examples"))


def test_sglang_hicache_backend(cluster):
    r = run_py(os.path.join(EXAMPLES, "sglang_hicache_backend.py"), "--pages",
               8 if SANITIZED else 32, env={"MOONCAKE_MASTER": cluster["master"],
                                             "MOONCAKE_TE_META_DATA_SERVER": cluster["metadata"]})
    assert r.returncode == 0, "stdout:\n%s\nstderr:\n%s" % (r.stdout, r.stderr)
    assert "sglang_hicache_backend: OK" in r.stdout


def test_sglang_backend_shares_pages_between_instances(cluster):
    """Two backends (two processes' worth of clients) see each other's pages."""
    import sys
    sys.path.insert(0, EXAMPLES)
    try:
        import numpy as np
        from sglang_hicache_backend import HostKVPool, MooncakeHiCacheStore, page_key
    finally:
        sys.path.pop(0)
    a_pool, b_pool = HostKVPool(4, 8192), HostKVPool(4, 8192)
    a = MooncakeHiCacheStore(a_pool, master=cluster["master"], metadata=cluster["metadata"],
                             global_segment_size="16MB")
    b = MooncakeHiCacheStore(b_pool, master=cluster["master"], metadata=cluster["metadata"],
                             global_segment_size=0)
    try:
        keys = [page_key([i, i + 1], "shared-%d" % os.getpid()) for i in range(4)]
        a_pool.buffer[:] = np.arange(4 * 8192, dtype=np.uint32).astype(np.uint8).reshape(4, 8192)
        assert a.batch_set(keys, [0, 1, 2, 3])
        assert b.batch_exists(keys) == 4
        assert b.batch_get(keys, [3, 2, 1, 0]) == 4
        assert np.array_equal(b_pool.buffer[::-1], a_pool.buffer)
    finally:
        a.close()
        b.close()


def test_lmcache_remote_connector(cluster):
    r = run_py(os.path.join(EXAMPLES, "lmcache_remote_connector.py"), "--url",
               "mooncakestore://%s/" % cluster["master"], "--metadata", cluster["metadata"],
               "--chunks", 4 if SANITIZED else 16)
    assert r.returncode == 0, "stdout:\n%s\nstderr:\n%s" % (r.stdout, r.stderr)
    assert "lmcache_remote_connector: OK" in r.stdout


def test_lmcache_connector_rejects_bad_url():
    r = run_py(os.path.join(EXAMPLES, "lmcache_remote_connector.py"), "--url", "redis://x:1/")
    assert r.returncode != 0 and "expected mooncakestore://" in r.stderr
