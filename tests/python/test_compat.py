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
    assert TransferOpcode.Read == 0 and TransferOpcode.Write == 1
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
        health = url.rsplit("/", 1)[0] + "/health"
        with urllib.request.urlopen(health, timeout=5) as r:
            assert r.status == 200
    finally:
        assert _stop(p) == 0


def test_mooncake_master_flags_act_or_refuse():
    """Mooncake's master flags crescent has map onto its own; the others are
    refused with exit status 2 and the reason, never dropped silently."""
    from mooncake import cli
    assert cli.master_args(["--ha_backend_type=etcd", "--ha_backend_connstring=h1:2379",
                            "--rpc_port=1"]) == \
        ["--enable_ha=true", "--etcd_endpoints=h1:2379", "--rpc_port=1"]
    assert cli.master_args(["--enable_offload", "true", "--quota_bytes=0"]) == []
    # the shared-FS tier exists (store-tiers.md): the flag goes to crescent-master
    assert cli.master_args(["--root_fs_dir=/mnt/dfs"]) == ["--root_fs_dir=/mnt/dfs"]
    for bad in (["--global_file_segment_size=1GB"],
                ["--enable_disk_eviction=false"], ["--ha_backend_type=redis"],
                ["--allocation_strategy=cxl"], ["--quota_bytes=100"],
                ["--noenable_metadata_cleanup_on_timeout"]):
        with pytest.raises(cli.Refused):
            cli.master_args(bad)
    r = subprocess.run([os.path.join(BIN, "mooncake_master"), "--global_file_segment_size=1GB"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "shared-filesystem" in r.stderr


def test_gflags_no_prefix_and_glog_verbosity_are_accepted():
    """Regression: --noNAME (gflags: any boolean flag off) and --v=N (glog's
    verbosity) were passed on as they are, and crescent-master refused them
    as unknown options. A boolean flag of the daemon turns off; --v >= 1
    asks for crescent's debug log level, --v 0 (glog's default) leaves it."""
    env = {}
    assert cli.master_args(["--noenable_gc", "--v=1", "--nocapabilities", "--rpc_port=1"],
                           env) == ["--enable_gc=false", "--capabilities=false", "--rpc_port=1"]
    assert env == {"CRESCENT_LOG": "debug"}
    env = {}
    assert cli.master_args(["--v", "0", "-v=-1", "--noenable_http_metadata_server"], env) == \
        ["--enable_http_metadata_server=false"]
    assert env == {}
    # Mooncake's own booleans crescent translates or drops take --no too
    assert cli.master_args(["--noenable_offload"]) == []
    with pytest.raises(cli.Refused):
        cli.master_args(["--noenable_disk_eviction"])
    # not a boolean flag of the daemon: passed on for the daemon to refuse
    assert cli.master_args(["--norpc_port", "--nosuch_flag"]) == ["--norpc_port", "--nosuch_flag"]
    for bad in (["--v=high"], ["--v"]):
        with pytest.raises(cli.Refused):
            cli.master_args(bad)
    env = {}
    assert cli.client_args(["--v=2", "--noenable_http_server", "--nostart_offload_rpc_server",
                            "--protocol=tcp"], env) == ["--protocol=tcp"]
    assert env == {"CRESCENT_LOG": "debug"}
    with pytest.raises(cli.Refused):
        cli.client_args(["--v=x"])
    r = subprocess.run([sys.executable, os.path.join(BIN, "mooncake_client"), "--v=x"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--v=x" in r.stderr, (r.returncode, r.stderr)


def test_mooncake_master_and_client_run_with_no_flags_and_v():
    """The entry points with --noNAME and --v=1 run the daemons, which log
    at debug level (crescent-master's INFO start line appears)."""
    m = subprocess.Popen([sys.executable, os.path.join(BIN, "mooncake_master"), "--rpc_port=0",
                          "--rpc_address=127.0.0.1", "--metrics_port=-1", "--noenable_gc",
                          "--norpc_enable_tcp_no_delay", "--v=1",
                          "--enable_http_metadata_server=true",
                          "--http_metadata_server_host=127.0.0.1",
                          "--http_metadata_server_port=0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        g = wait_line(m, r"listening rpc=(\d+) .*http_metadata=(\d+)", "mooncake_master")
        c, cp = _run_entry([os.path.join(BIN, "mooncake_client"), "--host=127.0.0.1",
                            "--metadata_server=http://127.0.0.1:%s/metadata" % g.group(2),
                            "--master_server_address=127.0.0.1:%s" % g.group(1),
                            "--global_segment_size=16MB", "--v", "1",
                            "--noenable_http_server"], r"ready segment=(\S+)")
        assert _stop(cp) == 0
    finally:
        m.send_signal(signal.SIGTERM)
        _, err = m.communicate(timeout=10)
        m.stdout.close()
    assert m.returncode == 0, err[-2000:]
    assert b"master: id" in err, err[-2000:]  # an INFO line: CRESCENT_LOG=debug


def test_mooncake_master_entry_point():
    """mooncake_master with Mooncake's flags runs crescent-master; a store works against it."""
    m, p = _run_entry([os.path.join(BIN, "mooncake_master"), "--rpc_port=0",
                       "--enable_offload=false", "--root_fs_dir=",
                       "--enable_disk_eviction=true", "--allocation_strategy=random",
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
        import urllib.request
        with urllib.request.urlopen("http://127.0.0.1:%s/health" % m.group(2), timeout=5) as r:
            assert r.status == 200  # the embedded metadata server answers /health
        # mooncake_client with Mooncake's flags: a storage process holding data
        c, cp = _run_entry([os.path.join(BIN, "mooncake_client"), "--host=127.0.0.1",
                            "--metadata_server=http://127.0.0.1:%s/metadata" % m.group(2),
                            "--master_server_address=127.0.0.1:%s" % m.group(1),
                            "--global_segment_size=32MB", "--protocol=tcp", "--port=50052",
                            "--threads=2", "--enable_offload=false"],
                           r"ready segment=(\S+)")
        try:
            cfg = ReplicateConfig()
            cfg.preferred_segment = c.group(1)
            assert s.put("on-client", b"z" * 1000, cfg) == 0
            segs = [d.get_memory_descriptor().buffer_descriptor.transport_endpoint
                    for d in s.get_replica_desc("on-client")]
            assert segs == [c.group(1)]
        finally:
            assert _stop(cp) == 0
        s.close()
    finally:
        assert _stop(p) == 0


def test_transfer_engine_bench_entry_point(tmp_path):
    """transfer_engine_bench with Mooncake's flags: a target and an initiator."""
    ready = tmp_path / "seg"
    t = subprocess.Popen([sys.executable, os.path.join(BIN, "transfer_engine_bench"),
                          "--mode=target", "--metadata_server=P2PHANDSHAKE",
                          "--local_server_name=127.0.0.1:0", "--buffer_size=8MB",
                          "--ready_file=%s" % ready, "--report_unit=GB", "--gpu_id=0"],
                         stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        import time
        deadline = time.monotonic() + 60
        while not (ready.exists() and ready.read_text().strip()) and t.poll() is None and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        seg = ready.read_text().strip()
        r = subprocess.run([sys.executable, os.path.join(BIN, "transfer_engine_bench"),
                            "--mode=initiator", "--metadata_server=P2PHANDSHAKE",
                            "--segment_id=%s" % seg, "--operation=write", "--duration=1",
                            "--threads=1", "--block_size=65536", "--batch_size=8",
                            "--buffer_size=8MB"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
    finally:
        t.terminate()
        t.wait(timeout=20)
    r = subprocess.run([sys.executable, os.path.join(BIN, "transfer_engine_bench"),
                        "--mode=initiator", "--use_vram=true"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "GPU" in r.stderr


def test_flag_translation():
    assert cli.client_args(["--host", "0.0.0.0:1234", "--device_names=", "--port=9",
                            "--metadata_server=P2PHANDSHAKE", "--protocol=rdma"])[2:] == \
        ["--metadata_server", "p2p", "--protocol", "tcp"]
    assert cli.bench_args(["--metadata_server=10.0.0.1:2379", "--segment_id", "a:1"]) == \
        ["te", "--metadata", "etcd://10.0.0.1:2379", "--segment", "a:1"]
    with pytest.raises(ValueError):
        cli.bench_args(["--use_vram"])


def test_entry_point_help_passes_through():
    r = subprocess.run([sys.executable, os.path.join(BIN, "mooncake_master"), "--help"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    assert re.search(r"rpc_port", r.stdout), r.stdout[:500]


def test_cli_modules_run_the_commands():
    """mooncake.cli_client / mooncake.cli_bench (Mooncake's module forms of
    mooncake_client and transfer_engine_bench)."""
    r = subprocess.run([sys.executable, "-m", "mooncake.cli_client", "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "global_segment_size" in r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "mooncake.cli_bench", "--use_vram=true"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
