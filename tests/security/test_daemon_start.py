"""What every daemon does at start with the files an operator names and how
it states its security mode (docs/security.md "Files on disk", "Configuring
it").

--port_file / --ready_file are replaced through <path>.tmp: a symlink
planted under that predictable name used to be followed (fopen "w"), so a
daemon truncated and overwrote any file its user can write.

crescent-master, crescent-node, crescent-metadata and crescent-conductor
each print one line "<daemon>: security: ..." saying whether TLS and the
cluster key are on (crescent-node and crescent-conductor printed nothing,
crescent-metadata only https://, crescent-master nothing with neither).

Each raises its soft limit on open files to the hard one (the usual soft
1024 is below what its connection caps can use) and says so when the
limit stays below 4096."""
import os
import re
import resource
import shutil
import tempfile

import pytest

from secutil import Daemons, exe, new_key_file, wait_line
from tlsutil import make_pki, tls_flags

VICTIM = "victim contents\n"


@pytest.fixture
def d():
    ds = Daemons()
    ds.dir = tempfile.mkdtemp(prefix="cr-start-")
    yield ds
    ds.stop()
    shutil.rmtree(ds.dir, ignore_errors=True)


def start_master(d, extra=(), err="master.err", **kw):
    p = d.start([exe("crescent-master"), "--rpc_port=0", "--rpc_address=127.0.0.1",
                 "--enable_http_metadata_server=true", "--http_metadata_server_port=0",
                 "--http_metadata_server_host=127.0.0.1", "--metrics_port=0",
                 "--metrics_address=127.0.0.1"] + list(extra),
                stderr=open(os.path.join(d.dir, err), "w"), **kw)
    m = wait_line(p, r"listening rpc=(\d+) metrics=(\d+) http_metadata=(\d+)", "crescent-master")
    return "127.0.0.1:" + m.group(1), "http://127.0.0.1:%s/metadata" % m.group(3)


def start_node(d, master, metadata, extra=(), err="node.err", **kw):
    p = d.start([exe("crescent-node"), "--master_server_address", master, "--metadata_server",
                 metadata, "--local_hostname", "127.0.0.1", "--global_segment_size", "16MB"] +
                list(extra), stderr=open(os.path.join(d.dir, err), "w"), **kw)
    wait_line(p, r"ready segment=", "crescent-node")


def start_metadata(d, extra=(), err="meta.err", **kw):
    p = d.start([exe("crescent-metadata"), "--port", "0", "--host", "127.0.0.1"] + list(extra),
                stderr=open(os.path.join(d.dir, err), "w"), **kw)
    wait_line(p, r"serving ", "crescent-metadata")


def start_conductor(d, extra=(), err="cond.err", **kw):
    p = d.start([exe("crescent-conductor"), "--port", "0", "--host", "127.0.0.1"] + list(extra),
                stderr=open(os.path.join(d.dir, err), "w"), **kw)
    wait_line(p, r"listening on ", "crescent-conductor")


def test_port_and_ready_files_are_not_written_through_a_planted_symlink(d):
    victim = os.path.join(d.dir, "victim")
    with open(victim, "w") as f:
        f.write(VICTIM)
    files = {n: os.path.join(d.dir, n) for n in ("master.port", "cond.port", "node.ready")}
    for path in files.values():
        os.symlink(victim, path + ".tmp")
    master, metadata = start_master(d, ["--port_file=" + files["master.port"]])
    start_conductor(d, ["--port_file=" + files["cond.port"]])
    start_node(d, master, metadata, ["--ready_file=" + files["node.ready"]])
    with open(victim) as f:
        assert f.read() == VICTIM, "a daemon wrote through the symlink"
    for name, path in files.items():
        assert not os.path.islink(path) and os.path.isfile(path), name
        with open(path) as f:
            body = f.read()
        assert body.endswith("\n") and len(body) > 1, (name, body)
        assert not os.path.lexists(path + ".tmp"), name


DAEMONS = (("crescent-master", "master.err"), ("crescent-node", "node.err"),
           ("crescent-metadata", "meta.err"), ("crescent-conductor", "cond.err"))


MODES = {
    "none": "security: none (no cluster key, no TLS)",
    "key": "security: cluster key on, no TLS",
    "tls": "security: TLS on (mutual certificates), no cluster key",
    "both": "security: TLS on (mutual certificates), cluster key on",
}


@pytest.mark.parametrize("mode", list(MODES))
def test_every_daemon_prints_its_security_mode_once(d, mode):
    flags = []
    if mode in ("key", "both"):
        flags.append("--cluster_key_file=" + new_key_file(d.dir))
    if mode in ("tls", "both"):
        flags += tls_flags(make_pki(d.dir))
    master, metadata = start_master(d, flags)
    start_node(d, master, metadata, flags)
    start_metadata(d, flags)
    start_conductor(d, flags)
    for daemon, err in DAEMONS:
        with open(os.path.join(d.dir, err)) as f:
            text = f.read()
        lines = re.findall(r"^%s: security: .*$" % daemon, text, re.M)
        assert lines == ["%s: %s" % (daemon, MODES[mode])], (daemon, text)


def start_all_with_nofile(d, soft, hard):
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    master, metadata = start_master(d, preexec_fn=limit)
    start_node(d, master, metadata, preexec_fn=limit)
    start_metadata(d, preexec_fn=limit)
    start_conductor(d, preexec_fn=limit)
    limits = []
    for p in d.procs:
        with open("/proc/%d/limits" % p.pid) as f:
            row = [line for line in f if line.startswith("Max open files")][0]
        limits.append(tuple(int(v) for v in row.split()[3:5]))
    return limits


def test_every_daemon_raises_its_open_files_limit_to_the_hard_one(d):
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 8192)
    if hard < 4096:
        pytest.skip("hard limit on open files below 4096 here")
    assert start_all_with_nofile(d, 1024, hard) == [(hard, hard)] * 4
    for daemon, err in DAEMONS:
        with open(os.path.join(d.dir, err)) as f:
            assert "open files limited" not in f.read(), daemon


def test_every_daemon_says_when_its_open_files_limit_stays_low(d):
    assert start_all_with_nofile(d, 1024, 1024) == [(1024, 1024)] * 4
    for daemon, err in DAEMONS:
        with open(os.path.join(d.dir, err)) as f:
            text = f.read()
        assert re.search(r"^%s: open files limited to 1024 \(ulimit -n\)" % daemon, text,
                         re.M), (daemon, text)
