"""Fixtures: a real serving cluster (master, node, conductor, workers) on
127.0.0.1 with ephemeral ports, stopped at teardown."""
import json
import random
import time
import urllib.request

import pytest

from crescent_serving.model import ModelConfig, set_deterministic_threads
from crescent_serving.cluster import Cluster
from crescent_serving.router import Router, http_post

set_deterministic_threads()
CFG = ModelConfig()          # 2 layers, d=64, 4 heads, block 16


def prompt(seed, n):
    rng = random.Random(seed)
    return [rng.randrange(CFG.vocab) for _ in range(n)]


def wait_indexed(conductor, tokens, want_tokens, timeout=30.0):
    """Waits until the conductor's index (fed by the KV events) holds
    want_tokens of tokens' prefix; returns the /query answer."""
    deadline = time.monotonic() + timeout
    while True:
        st, rep = http_post(conductor + "/query", {"model": CFG.name, "token_ids": tokens})
        best = max([inst.get("longest_matched", 0) for ten in rep.values() if isinstance(ten, dict)
                    for inst in ten.values() if isinstance(inst, dict)] or [0])
        if st == 200 and best >= want_tokens:
            return rep
        if time.monotonic() > deadline:
            raise AssertionError("conductor indexed %d tokens, want %d: %s" % (best, want_tokens, rep))
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster():
    with Cluster(CFG, n_prefill=1, n_decode=1, node_size="128MB", worker_blocks=256) as c:
        yield c


@pytest.fixture(scope="module")
def router(cluster):
    r = Router(cluster.conductor, CFG.name, rpc_timeout_s=120.0)
    r.attach(cluster.endpoints())
    return r
