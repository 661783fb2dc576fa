"""The mooncake compatibility package: names, constants, the Mooncake
documentation's hello-world, and the mooncake_master /
mooncake_http_metadata_server entry points."""
import os
import re
import signal
import subprocess
import sys

import pytest

import crescent
import crescent.engine
import crescent.store
from conftest import HERE, wait_line
from mooncake import cli
from mooncake import engine as mc_engine
from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

BIN = os.path.normpath(os.path.join(HERE, "..", "..", "python", "compat", "bin"))


def test_names_and_constants():
    assert issubclass(MooncakeDistributedStore, crescent.store.DistributedStore)
    assert TransferEngine is crescent.engine.TransferEngine
    assert TransferOpcode.READ == 0 and TransferOpcode.WRITE == 1
    assert mc_engine.SUPPORT_CUDA is False
    n = TransferNotify("a", "b")
    assert (n.name, n.msg) == ("a", "b")
    cfg = ReplicateConfig()
    assert (cfg.replica_num, cfg.with_soft_pin, cfg.with_hard_pin, cfg.preferred_segment) == \
        (1, False, False, "")
    cfg.replica_num, cfg.with_soft_pin, cfg.preferred_segment = 3, True, "node1:12345"
    assert "3" in str(cfg) and cfg.preferred_segments == ["node1:12345"]
    cfg.group_ids = ["group-a", ""]  # newer Mooncake fields are accepted
    assert cfg.group_ids == ["group-a", ""]
    assert crescent.strerror(-704).startswith("OBJECT_NOT_FOUND")
    assert crescent.__version__.count(".") == 2
    import crescent._crescent as native
    assert native.STORE_BATCH_MAX >= 1


def test_hello_world_from_mooncake_docs(cluster):
    store = MooncakeDistributedStore()
    store.setup("localhost", cluster["metadata"], 512 * 1024 * 1024 // 8, 128 * 1024 * 1024 // 8,
                "tcp", "", cluster["master"])
    store.put("hello_key-%d" % os.getpid(), b"Hello, Mooncake Store!")
    data = store.get("hello_key-%d" % os.getpid())
    assert data.decode() == "Hello, Mooncake Store!"
    store.close()


def test_metadata_flag_translation():
    assert cli.metadata_args(["--port", "8080"]) == ["--port", "8080"]
    assert cli.metadata_args(["--port=9"]) == ["--port", "9"]
    assert cli.metadata_args(["-port", "7", "--addr=1.2.3.4"]) == ["--port", "7", "--host",
                                                                  "1.2.3.4"]
    assert cli.metadata_args(["--host", "127.0.0.1", "--other"]) == ["--host", "127.0.0.1",
                                                                    "--other"]


def test_missing_executable_reports_127(monkeypatch, capsys):
    monkeypatch.setattr(cli, "find_executable", lambda name: None)
    assert cli.master_main(["--rpc_port=0"]) == 127
    assert "crescent-master" in capsys.readouterr().err


def _run_entry(argv, pattern):
    p = subprocess.Popen([sys.executable] + argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        return wait_line(p, pattern, argv[0]), p
    except Exception:
        p.kill()
        p.wait()
        p.stdout.close()
        raise


def _stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=10)
    finally:
        p.stdout.close()
    return rc


def test_mooncake_http_metadata_server_entry_point():
    m, p = _run_entry([os.path.join(BIN, "mooncake_http_metadata_server"), "--port", "0",
                       "--host", "127.0.0.1"], r"serving (http://127\.0\.0\.1:\d+/metadata)")
    try:
        url = m.group(1)
        import urllib.request
        req = urllib.request.Request(url + "?key=compat-test", data=b"v", method="PUT")
        urllib.request.urlopen(req, timeout=5).read()
        assert urllib.request.urlopen(url + "?key=compat-test", timeout=5).read() == b"v"
    finally:
        assert _stop(p) == 0


def test_mooncake_master_entry_point():
    """mooncake_master with Mooncake's flags runs crescent-master; a store works against it."""
    m, p = _run_entry([os.path.join(BIN, "mooncake_master"), "--rpc_port=0",
                       "--rpc_address=127.0.0.1", "--enable_http_metadata_server=true",
                       "--http_metadata_server_host=127.0.0.1", "--http_metadata_server_port=0",
                       "--metrics_port=0", "--metrics_address=127.0.0.1"],
                      r"listening rpc=(\d+) .*http_metadata=(\d+)")
    try:
        s = MooncakeDistributedStore()
        rc = s.setup("127.0.0.1", "http://127.0.0.1:%s/metadata" % m.group(2), "16MB", "16MB",
                     "tcp", "", "127.0.0.1:%s" % m.group(1))
        if os.environ.get("CRESCENT_TEST_METADATA") == "P2PHANDSHAKE":
            s.close()
            s = MooncakeDistributedStore()
            rc = s.setup("127.0.0.1", "P2PHANDSHAKE", "16MB", "16MB", "tcp", "",
                         "127.0.0.1:%s" % m.group(1))
        assert rc == 0, crescent.strerror(rc)
        assert s.put("via-entry-point", b"ok") == 0 and s.get("via-entry-point") == b"ok"
        s.close()
    finally:
        assert _stop(p) == 0


def test_entry_point_help_passes_through():
    r = subprocess.run([sys.executable, os.path.join(BIN, "mooncake_master"), "--help"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    assert re.search(r"rpc_port", r.stdout), r.stdout[:500]
