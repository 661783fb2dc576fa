"""The two-turn conversation across network namespaces: router, store
(master, node, conductor), prefill and decode each on its own "host"
(i15-* namespaces on a bridge, 10.215.0.0/24), both handoffs (store and P2P).
Skips unless root with a working `ip netns`. The namespaces are deleted
whatever happens (Cluster.stop)."""
import os
import subprocess

import pytest
import torch

from conftest import CFG, prompt
from crescent_serving.cluster import Cluster, Netns
from crescent_serving.engine import Reference
from crescent_serving.router import Router


def _netns_ok():
    if os.geteuid() != 0:
        return "not root"
    name = "i15-probe-%d" % os.getpid()
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return "ip netns add failed: " + r.stderr.strip()
    subprocess.run(["ip", "netns", "del", name])
    return None


def test_two_turns_across_namespaces():
    why = _netns_ok()
    if why:
        pytest.skip(why)
    c = Cluster(CFG, n_prefill=1, n_decode=1, netns=True, node_size="64MB", worker_blocks=128)
    try:
        c.start()
        assert c.master.startswith("10.215.0.1:")
        r = Router(c.conductor, CFG.name)
        r.attach(c.endpoints())
        p1 = prompt(60, 100)
        a = r.generate("ns-1", p1, 6)
        p2 = p1 + a["tokens"] + prompt(61, 20)
        b = r.generate("ns-2", p2, 6, p2p=True)
        assert b["prefill"]["kv_transfer_params"]["hit_tokens"] == 96
        ref = Reference(CFG)
        t1, l1 = ref.run(p1, 0, 6)
        t2, l2 = ref.run(p2, 96, 6)
        assert (a["tokens"], b["tokens"]) == (t1, t2)
        for g, x in zip(a["logits"] + b["logits"], l1 + l2):
            assert torch.equal(torch.frombuffer(bytearray(g), dtype=torch.float32), x)
    finally:
        c.stop()
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert ("-%d" % os.getpid()) not in names, names
