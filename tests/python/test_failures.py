"""Failures seen from Python: a peer engine killed, a storage node killed, the
master gone. Calls return error codes (or b"" / None) within the library's
timeouts; nothing crashes or hangs, and the objects stay usable."""
import http.server
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

from conftest import (HERE, SANITIZED, Daemons, exe, make_store, start_master, start_metadata,
                      start_node)
from mooncake.engine import TransferEngine
from mooncake.store import MooncakeDistributedStore, ReplicateConfig


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


def more_than_this_host_has():
    """MemAvailable + SwapFree + 4 GiB, in bytes, 2 MiB aligned (as segments
    are): a size that must be refused
    before any of it is touched (read from /proc/meminfo, never allocated)."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            info[k] = int(v.split()[0]) * 1024
    return (info["MemAvailable"] + info.get("SwapFree", 0) + (4 << 30)) & ~((2 << 20) - 1)


def no_room_for_it():
    """In the child: an address-space limit far below the size asked, the
    test's safety net. Were the check gone, the mapping would fail at once
    (and the test with it, for want of the message) instead of the host's
    memory filling up for a minute."""
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


needs_as_limit = pytest.mark.skipif(
    SANITIZED, reason="ASan reserves terabytes of address space: no RLIMIT_AS safety net")


@needs_as_limit
def test_node_segment_larger_than_memory_exits_with_the_reason():
    """A node asked for more memory than the host has exits non-zero at
    start with a line naming the size, MemAvailable and the option, instead
    of being OOM-killed after ~40 s of pre-faulting."""
    d = Daemons()
    try:
        master, meta = start_master(d)
        size = more_than_this_host_has()
        env = dict(os.environ)
        env.pop("CRESCENT_MEM_CHECK", None)
        p = subprocess.run([exe("crescent-node"), "--master_server_address", master,
                            "--metadata_server", meta, "--local_hostname", "127.0.0.1",
                            "--global_segment_size", str(size)],
                           capture_output=True, text=True, timeout=60, env=env,
                           preexec_fn=no_room_for_it)
        assert p.returncode != 0, p.stdout + p.stderr
        assert "ready segment" not in p.stdout
        assert "global_segment_size %d" % size in p.stderr, p.stderr
        assert "MemAvailable" in p.stderr and "lower global_segment_size" in p.stderr, p.stderr
    finally:
        d.stop()


@needs_as_limit
def test_setup_larger_than_memory_returns_enomem_with_the_reason():
    """Python setup() with a segment larger than the host's memory returns
    -ENOMEM (the store's code for memory it cannot have) and logs why,
    without touching the memory (the child has no address space for it)."""
    size = more_than_this_host_has()
    script = ("import sys\n"
              "from mooncake.store import MooncakeDistributedStore\n"
              "s = MooncakeDistributedStore()\n"
              "rc = s.setup('127.0.0.1', 'P2PHANDSHAKE', %d, '16MB', 'tcp', '', '127.0.0.1:1')\n"
              "print('rc', rc)\n"
              "s.close()\n" % size)
    env = dict(os.environ)
    env.pop("CRESCENT_MEM_CHECK", None)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=60, env=env, preexec_fn=no_room_for_it)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["rc", str(-12)], p.stdout + p.stderr
    assert "MemAvailable" in p.stderr, p.stderr
    assert "lower global_segment_size or local_buffer_size" in p.stderr, p.stderr


def closes_while_stopped(proc, close, seconds):
    """SIGSTOPs proc, runs close() in a thread and continues proc; True if
    close() returned within `seconds` (a hang check: the bound is far above
    the expected time, far below the hang)."""
    proc.send_signal(signal.SIGSTOP)
    try:
        t = threading.Thread(target=close, daemon=True)
        t.start()
        t.join(seconds)
        return not t.is_alive()
    finally:
        proc.send_signal(signal.SIGCONT)


def test_close_with_a_stopped_metadata_server_is_not_held_for_the_full_timeout():
    """close() of a store whose master (and the HTTP metadata server it
    embeds) is stopped: the unmount RPC times out (5 s), then the engine's
    unpublish is bounded to 2 s instead of its 30 s metadata timeout (it
    took ~35 s in all)."""
    d = Daemons()
    try:
        master, meta = start_master(d)
        s = make_store({"master": master, "metadata": meta}, segment="16MB")
        assert closes_while_stopped(d.procs[0], s.close, 20), "close() still blocked after 20 s"
    finally:
        d.stop()


def test_engine_close_with_a_stopped_metadata_server_is_not_held_for_the_full_timeout():
    """The same for a TransferEngine on crescent-metadata: its close() used to
    wait the engine's full 30 s metadata timeout to unpublish."""
    d = Daemons()
    try:
        url = start_metadata(d)
        e = TransferEngine()
        assert e.initialize("127.0.0.1", url, "tcp", "") == 0
        assert closes_while_stopped(d.procs[0], e.close, 15), "close() still blocked after 15 s"
    finally:
        d.stop()


# setup()'s codes stay as they were (-113 EHOSTUNREACH for a metadata service
# it cannot use, -600 for a local_hostname it cannot use); the log line says
# what happened. Each used to be "transfer engine: No route to host", or
# nothing at all for the host name.
METADATA_UNUSABLE = -113


def setup_rc_and_log(capfd, metadata, local_hostname="127.0.0.1"):
    capfd.readouterr()
    s = MooncakeDistributedStore()
    rc = s.setup(local_hostname, metadata, 0, "16MB", "tcp", "", "127.0.0.1:1")
    s.close()
    return rc, capfd.readouterr().err


def closed_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def test_setup_says_the_metadata_connection_was_refused(capfd):
    url = "http://127.0.0.1:%d/metadata" % closed_port()
    rc, err = setup_rc_and_log(capfd, url)
    assert rc == METADATA_UNUSABLE
    assert "connection refused at %s" % url in err, err
    assert "No route to host" not in err, err


def test_setup_names_the_http_status_of_a_wrong_metadata_path(capfd):
    d = Daemons()
    try:
        wrong = start_metadata(d).replace("/metadata", "/no-such-path")
        rc, err = setup_rc_and_log(capfd, wrong)
        assert rc == METADATA_UNUSABLE
        assert "HTTP 404 from %s (not a metadata service" % wrong in err, err
    finally:
        d.stop()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_setup_names_the_http_status_of_a_server_that_is_no_metadata_service(capfd):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        url = "http://127.0.0.1:%d/metadata" % srv.server_address[1]
        rc, err = setup_rc_and_log(capfd, url)
        assert rc == METADATA_UNUSABLE
        assert "HTTP 501 from %s (not a metadata service" % url in err, err
    finally:
        srv.shutdown()
        srv.server_close()


def test_setup_says_the_local_hostname_does_not_resolve(capfd):
    rc, err = setup_rc_and_log(capfd, "P2PHANDSHAKE", local_hostname="no-such-host.invalid")
    assert rc == -600
    assert 'local_hostname "no-such-host.invalid": host name does not resolve' in err, err
