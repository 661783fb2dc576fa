"""Failures seen from Python: a peer engine killed, a storage node killed, the
master gone. Calls return error codes (or b"" / None) within the library's
timeouts; nothing crashes or hangs, and the objects stay usable."""
import json
import os
import signal
import subprocess
import sys

import numpy as np

from conftest import HERE, Daemons, make_store, start_master, start_node
from mooncake.engine import TransferEngine
from mooncake.store import ReplicateConfig


def test_transfer_to_a_killed_peer_fails_cleanly():
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "engine_peer.py"), "P2PHANDSHAKE",
                          str(1 << 20)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    info = json.loads(p.stdout.readline() or b"{}")
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        buf = np.zeros(1 << 20, dtype=np.uint8)
        assert e.register_memory(buf) == 0
        assert e.transfer_sync_read(info["name"], buf.ctypes.data, info["addr"], 4096) == 0
        p.kill()
        p.wait()
        assert e.transfer_sync_read(info["name"], buf.ctypes.data, info["addr"], 4096) < 0
        assert e.transfer_sync_write(info["name"], buf.ctypes.data, info["addr"], 4096) < 0
        bid = e.batch_transfer_async_read(info["name"], [buf.ctypes.data], [info["addr"]], [16])
        assert bid == 0 or e.get_batch_transfer_status([bid]) < 0
        # the engine itself still works
        own = e.get_local_name()
        assert e.transfer_sync_read(own, buf.ctypes.data, buf.ctypes.data + 8192, 16) == 0
    finally:
        e.close()
        p.stdin.close()
        p.stdout.close()


def test_killed_storage_node_and_master():
    d = Daemons()
    try:
        master, meta = start_master(d)
        node = start_node(d, master, meta, size="16MB")
        s = make_store({"master": master, "metadata": meta}, segment=0)
        try:
            cfg = ReplicateConfig()
            cfg.preferred_segment = node
            assert s.put("on-node", b"x" * 100000, cfg) == 0
            assert s.get("on-node") == b"x" * 100000
            buf = np.zeros(200000, dtype=np.uint8)
            assert s.register_buffer(buf) == 0
            # SIGKILL the node that holds the only replica
            node_proc = d.procs[1]
            node_proc.send_signal(signal.SIGKILL)
            node_proc.wait()
            assert s.get("on-node") == b""
            assert s.get_into("on-node", buf) < 0
            assert s.get_buffer("on-node") is None
            # the master goes away: calls fail with error codes
            master_proc = d.procs[0]
            master_proc.send_signal(signal.SIGKILL)
            master_proc.wait()
            assert s.put("after-master", b"v") < 0
            assert s.is_exist("after-master") < 0
            assert all(r < 0 for r in s.batch_is_exist(["a", "b"]))
            assert s.get("after-master") == b""
            assert s.batch_get_into(["on-node"], [buf.ctypes.data], [1000])[0] < 0
            assert s.unregister_buffer(buf) == 0
        finally:
            assert s.close() == 0
    finally:
        d.stop()
