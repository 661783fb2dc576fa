"""`pip install .` from this checkout (offline, Debian's setuptools/wheel,
--no-build-isolation) into a throwaway --target directory: both packages,
the extension, the daemons and the commands land there, and a cluster run
only from the installed files works. CRESCENT_PREBUILT_DIR makes setup.py
take the extension and daemons from this build tree instead of building
them again (docs/python.md shows the full build)."""
import os
import re
import subprocess
import sys

import pytest

from conftest import HERE

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "CRESCENT_BIN_DIR", "CRESCENT_BUILD_DIR")}
    env.update(extra)
    return env


def test_pip_install_target(tmp_path):
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    build = os.environ.get("CRESCENT_BUILD_DIR")
    if not build:
        pytest.skip("CRESCENT_BUILD_DIR is not set (run through CTest)")
    tgt = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation",
                        "--no-deps", "--no-index", "--target", str(tgt), ROOT],
                       env=_clean_env(CRESCENT_PREBUILT_DIR=build, PIP_NO_CACHE_DIR="1",
                                      CRESCENT_PYBUILD=str(tmp_path / "pybuild")),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("mooncake_master", "mooncake_http_metadata_server", "mooncake_client",
                 "transfer_engine_bench", "mc_store_rest_server", "crescent-master",
                 "crescent-node"):
        assert os.access(tgt / "bin" / name, os.X_OK), name
    script = r"""
import os, re, subprocess, sys, time
import crescent, mooncake.store as ms
import mooncake.transfer_engine, mooncake.structured_object_store, mooncake.model_loader
import mooncake.weight_store
assert mooncake.transfer_engine.__file__.startswith(%(tgt)r)
assert crescent._crescent.__file__.startswith(%(tgt)r), crescent._crescent.__file__
assert crescent.find_executable("crescent-master").startswith(%(tgt)r)
env = dict(os.environ, PYTHONPATH=%(tgt)r)
m = subprocess.Popen([sys.executable, %(tgt)r + "/bin/mooncake_master", "--rpc_port=0",
                      "--rpc_address=127.0.0.1", "--enable_http_metadata_server=true",
                      "--http_metadata_server_host=127.0.0.1", "--http_metadata_server_port=0",
                      "--metrics_port=0", "--metrics_address=127.0.0.1"],
                     stdout=subprocess.PIPE, env=env, text=True)
try:
    line = m.stdout.readline()
    g = re.search(r"listening rpc=(\d+) .*http_metadata=(\d+)", line)
    assert g, line
    s = ms.MooncakeDistributedStore()
    assert s.setup("localhost", "http://127.0.0.1:%%s/metadata" %% g.group(2), "16MB", "16MB",
                   "tcp", "", "127.0.0.1:%%s" %% g.group(1)) == 0
    assert s.put("pkg", b"installed") == 0 and s.get("pkg") == b"installed"
    s.close()
finally:
    m.terminate(); m.wait(20)
print("ok")
""" % {"tgt": str(tgt)}
    r = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path),
                       env=_clean_env(PYTHONPATH=str(tgt)), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:] + r.stderr[-3000:]
    r = subprocess.run([str(tgt / "bin" / "crescent-node"), "--help"],
                       env=_clean_env(PYTHONPATH=str(tgt)), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and re.search("global_segment_size", r.stdout + r.stderr)
