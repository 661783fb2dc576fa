"""TLS with mutual certificates on every control-plane listener (issue 11,
item 1; docs/security.md "TLS"): master RPC, master admin HTTP, the
embedded and the standalone metadata HTTP servers, and the conductor's HTTP
API. A throw-away PKI is made with the openssl CLI in a temp dir.

For each listener: a member (certificate of the cluster CA) is served; a
client without a certificate, with a certificate of another CA, or speaking
plain TCP gets no answer at all (refused during the handshake). A peer that
stalls mid-handshake is cut off by the server and does not keep legitimate
clients out. The crescent library (through the Python package and the
environment variables a library user sets) joins a TLS cluster, and cannot
join it with a rogue certificate or none. TLS combines with the cluster key.
"""
import os
import shutil
import socket
import struct
import tempfile
import time

import pytest

from secutil import (RPC_MAGIC, Daemons, exe, new_key_file, read_key, rpc_authenticate,
                     rpc_frame, start_master, start_node, wait_line)
from tlsutil import client_ctx, exchange, http_get, make_pki, tls_env, tls_flags

PING = 1


@pytest.fixture(scope="module")
def tls_cluster():
    d = Daemons()
    d.dir = tempfile.mkdtemp(prefix="cr-tls-")
    pki = make_pki(d.dir)
    kf = new_key_file(d.dir)
    try:
        c = start_master(d, None, extra=["--rpc_address=127.0.0.1", "--metrics_address=127.0.0.1",
                                         "--http_metadata_server_host=127.0.0.1"] + tls_flags(pki))
        c["node_proc"], c["node"] = start_node(d, c, None, extra=tls_flags(pki))
        # the standalone metadata service and the conductor, TLS on too
        p = d.start([exe("crescent-metadata"), "--port", "0", "--host", "127.0.0.1"] +
                    tls_flags(pki), stderr=open(os.path.join(d.dir, "meta.err"), "w"))
        m = wait_line(p, r"serving (https://\S+):(\d+)/metadata", "crescent-metadata")
        c["meta_port"] = int(m.group(2))
        p = d.start([exe("crescent-conductor"), "--port", "0", "--host", "127.0.0.1"] +
                    tls_flags(pki), stderr=open(os.path.join(d.dir, "cond.err"), "w"))
        m = wait_line(p, r"listening on \S+:(\d+)", "crescent-conductor")
        c["cond_port"] = int(m.group(1))
        # TLS and the cluster key together
        c2 = start_master(d, kf, extra=["--rpc_address=127.0.0.1"] + tls_flags(pki))
        c.update({"daemons": d, "pki": pki, "dir": d.dir, "keyed": c2, "key": read_key(kf)})
        yield c
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)  # keys and certificates do not linger


def http_ports(c):
    return {"master admin": c["metrics"], "embedded metadata": c["http_port"],
            "crescent-metadata": c["meta_port"], "conductor": c["cond_port"]}


def http_answered(resp):
    return resp.startswith(b"HTTP/1.")


def rpc_port(c):
    return int(c["master"].rsplit(":", 1)[1])


def rpc_answered(resp):
    return len(resp) >= 4 and struct.unpack("<I", resp[:4])[0] == RPC_MAGIC


def test_member_is_served_on_every_listener(tls_cluster):
    c = tls_cluster
    ctx = client_ctx(c["pki"])
    for name, port in http_ports(c).items():
        resp = http_get(port, "/health" if name != "embedded metadata" and name != "crescent-metadata"
                        else "/metadata?key=nothing", ctx)
        assert http_answered(resp), "%s did not answer a member: %r" % (name, resp[:80])
    assert rpc_answered(exchange(rpc_port(c), rpc_frame(PING), ctx)), "master RPC did not answer"


@pytest.mark.parametrize("who", ["no certificate", "certificate of another CA", "plain TCP"])
def test_stranger_is_refused_on_every_listener(tls_cluster, who):
    c = tls_cluster
    pki = c["pki"]
    ctx = {"no certificate": client_ctx(pki, None), "certificate of another CA":
           client_ctx(pki, "rogue"), "plain TCP": None}[who]
    for name, port in http_ports(c).items():
        resp = http_get(port, "/health", ctx)
        assert not http_answered(resp), "%s answered a client with %s: %r" % (name, who, resp[:80])
    resp = exchange(rpc_port(c), rpc_frame(PING), ctx)
    assert not rpc_answered(resp), "master RPC answered a client with %s" % who


def test_member_refuses_a_server_of_another_ca(tls_cluster):
    """The other direction of "mutual": a client holding the cluster CA does
    not talk to a server whose certificate another CA signed (a rogue
    master): the client aborts its handshake before sending anything."""
    c = tls_cluster
    d = c["daemons"]
    pki = c["pki"]
    rogue = start_master(d, None, extra=["--rpc_address=127.0.0.1"] +
                         tls_flags(pki, "rogue", ca=pki["ca"]))
    resp = exchange(rogue["metrics"], b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                    client_ctx(pki))
    assert resp == b"", "a member talked to a server with a certificate of another CA"


def test_library_joins_with_certificates_from_the_environment(tls_cluster, monkeypatch):
    """A library user (here the Python package) turns TLS on with
    CRESCENT_TLS_CERT/KEY/CA; put and get go through the TLS master and the
    TLS metadata service."""
    import crescent.store
    c = tls_cluster
    for k, v in tls_env(c["pki"]).items():
        monkeypatch.setenv(k, v)
    s = crescent.store.DistributedStore()
    assert s.setup("127.0.0.1", c["metadata"], "0", "16MB", "tcp", "", c["master"]) == 0
    try:
        value = os.urandom(300000)
        assert s.put("tls-key", value) == 0
        assert s.get("tls-key") == value
    finally:
        s.close()


@pytest.mark.parametrize("who", ["none", "rogue"])
def test_library_without_a_cluster_certificate_cannot_join(tls_cluster, monkeypatch, who):
    import crescent.store
    c = tls_cluster
    for k in ("CRESCENT_TLS_CERT", "CRESCENT_TLS_KEY", "CRESCENT_TLS_CA"):
        monkeypatch.delenv(k, raising=False)
    if who == "rogue":
        env = tls_env(c["pki"], "rogue")
        env["CRESCENT_TLS_CA"] = c["pki"]["rogue_ca"]
        for k, v in env.items():
            monkeypatch.setenv(k, v)
    s = crescent.store.DistributedStore()
    assert s.setup("127.0.0.1", c["metadata"], "0", "16MB", "tcp", "", c["master"]) != 0


def test_partial_tls_configuration_refuses_to_start(tls_cluster):
    """All three of --tls_cert/--tls_key/--tls_ca or none: a daemon given
    only some of them does not start (never a silent downgrade)."""
    c = tls_cluster
    cert, key = c["pki"]["member"]
    d = Daemons()
    try:
        p = d.start([exe("crescent-master"), "--rpc_port=0", "--metrics_port=-1",
                     "--tls_cert=" + cert, "--tls_key=" + key], stderr=open(os.devnull, "w"))
        assert p.wait(timeout=30) != 0
    finally:
        d.stop()


def test_tls_and_cluster_key_combine(tls_cluster):
    """With both on, a member certificate alone is not enough: the RPC
    handshake of the cluster key still runs inside TLS."""
    c = tls_cluster
    k = c["keyed"]
    port = int(k["master"].rsplit(":", 1)[1])
    ctx = client_ctx(c["pki"])
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30))
    try:
        s.sendall(rpc_frame(PING))
        resp = s.recv(4096)
        # refused (ILLEGAL_CLIENT reply, then closed): no key proof yet
        assert rpc_answered(resp) and struct.unpack("<i", resp[20:24])[0] == -601
    finally:
        s.close()
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30))
    try:
        assert rpc_authenticate(s, c["key"]) == 0
        s.sendall(rpc_frame(PING, req_id=9))
        assert rpc_answered(s.recv(4096))
    finally:
        s.close()


def test_stalled_handshakes_are_cut_and_do_not_lock_members_out(tls_cluster):
    """Peers that connect and stall mid-handshake (half a ClientHello) are
    closed by the server after its bounded handshake time; meanwhile members
    are served. The 60 s socket timeout only guards against a hang."""
    c = tls_cluster
    ports = list(http_ports(c).values()) + [rpc_port(c)]
    stalled = []
    for port in ports:
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            s.sendall(b"\x16\x03\x01\x02\x00\x01")  # a TLS record header, then silence
            stalled.append(s)
    ctx = client_ctx(c["pki"])
    for name, port in http_ports(c).items():
        assert http_answered(http_get(port, "/health" if "metadata" not in name
                                      else "/metadata?key=x", ctx)), name
    assert rpc_answered(exchange(rpc_port(c), rpc_frame(PING), ctx))
    for s in stalled:
        try:
            assert s.recv(1) == b"", "the server sent data to a stalled handshake"
        except ConnectionResetError:
            pass
        except socket.timeout:
            pytest.fail("a stalled handshake was not cut off by the server")
        finally:
            s.close()


def test_etcd_over_tls_with_client_certificates(tls_cluster, monkeypatch):
    """A real etcd that demands client certificates (--client-cert-auth)
    serves crescent's etcd client: HA election of a TLS master, the store's
    etcd:// master discovery and TE metadata in etcd, all over https with
    the member certificate. Without a certificate the library cannot use
    that etcd."""
    import crescent.store
    from secutil import _py
    free_port = _py.free_port
    bin_ = shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None)
    if not bin_:
        pytest.skip("etcd not installed (Debian etcd-server)")
    c = tls_cluster
    pki, d = c["pki"], c["daemons"]
    cert, key = pki["member"]
    port, peer = free_port(), free_port()
    curl, purl = "https://127.0.0.1:%d" % port, "http://127.0.0.1:%d" % peer
    d.start([bin_, "--name", "i11t-tls", "--data-dir", os.path.join(c["dir"], "etcd"),
             "--listen-client-urls", curl, "--advertise-client-urls", curl,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", "i11t-tls=" + purl, "--client-cert-auth",
             "--trusted-ca-file", pki["ca"], "--cert-file", cert, "--key-file", key],
            stderr=open(os.path.join(c["dir"], "etcd.log"), "w"))
    ctx = client_ctx(pki)
    for _ in range(300):  # up to 30 s for etcd to serve
        if http_answered(http_get(port, "/version", ctx)):
            break
        time.sleep(0.1)
    else:
        pytest.fail("etcd did not come up (see %s/etcd.log)" % c["dir"])
    assert not http_answered(http_get(port, "/version", client_ctx(pki, None))), \
        "etcd answered without a client certificate: the test proves nothing"
    ep = "127.0.0.1:%d" % port
    p = d.start([exe("crescent-master"), "--enable_ha", "--etcd_endpoints", ep, "--cluster_id",
                 "tlstest", "--rpc_address", "127.0.0.1", "--rpc_port", "0", "--metrics_port", "0",
                 "--client_ttl", "3", "--ha_lease_ttl", "2"] + tls_flags(pki),
                stderr=open(os.path.join(c["dir"], "ha-master.err"), "w"))
    wait_line(p, r"listening rpc=(\d+)", "crescent-master (HA)")
    master, meta = "etcd://%s/tlstest" % ep, "etcd://" + ep
    start_node(d, {"master": master, "metadata": meta}, None, extra=tls_flags(pki))
    for k, v in tls_env(pki).items():
        monkeypatch.setenv(k, v)
    s = crescent.store.DistributedStore()
    assert s.setup("127.0.0.1", meta, "0", "16MB", "tcp", "", master) == 0
    try:
        value = os.urandom(100000)
        assert s.put("etcd-tls", value) == 0
        assert s.get("etcd-tls") == value
    finally:
        s.close()
    for k in ("CRESCENT_TLS_CERT", "CRESCENT_TLS_KEY", "CRESCENT_TLS_CA"):
        monkeypatch.delenv(k)
    s = crescent.store.DistributedStore()
    assert s.setup("127.0.0.1", meta, "0", "16MB", "tcp", "", master) != 0


def test_handshake_flood_from_one_source_leaves_members_served(tls_cluster):
    """300 connections from 127.0.0.2 that never start a handshake to the
    metadata service (more than its 256 TLS slots) and 150 to the master RPC:
    one source holds at most 64 TLS slots of an HTTP server (the RPC applies
    its pending-connection rule), so a member on 127.0.0.1 is still served."""
    c = tls_cluster
    flood = []
    try:
        for port, n in ((c["meta_port"], 300), (rpc_port(c), 150)):
            for _ in range(n):
                s = socket.socket()
                s.bind(("127.0.0.2", 0))
                s.settimeout(30)
                try:
                    s.connect(("127.0.0.1", port))
                except OSError:
                    s.close()
                    continue
                flood.append(s)
        ctx = client_ctx(c["pki"])
        assert http_answered(http_get(c["meta_port"], "/metadata?key=x", ctx))
        assert rpc_answered(exchange(rpc_port(c), rpc_frame(PING), ctx))
    finally:
        for s in flood:
            s.close()


def test_handshake_flood_from_several_sources_leaves_members_served(tls_cluster):
    """Four addresses holding 64 connections each that never start a
    handshake fill all 256 TLS slots of the metadata service, none past its
    per-source cap: a member on another address takes the place of the
    busiest source's longest-waiting connection. Regression: refused at
    accept until the handshakes timed out (and for good against a flooder
    that reconnects)."""
    c = tls_cluster
    flood = []
    try:
        for i in range(2, 6):
            for _ in range(64):
                s = socket.socket()
                s.bind(("127.0.0.%d" % i, 0))
                s.settimeout(30)
                try:
                    s.connect(("127.0.0.1", c["meta_port"]))
                except OSError:
                    s.close()
                    continue
                flood.append(s)
        time.sleep(0.5)  # accepted (setup, not a timing check)
        ctx = client_ctx(c["pki"])
        assert http_answered(http_get(c["meta_port"], "/metadata?key=x", ctx))
    finally:
        for s in flood:
            s.close()


def test_trickled_requests_over_tls_are_closed_and_do_not_lock_members_out(tls_cluster):
    """Behind the TLS front too: four addresses holding 64 connections each
    to the metadata service, each through its handshake and then trickling
    its headers one byte every 1.5 s, fill every slot with requests in
    progress (none evictable); the deadline closes them all, and a member on
    another address is served. Regression: they held the slots for as long
    as they trickled."""
    from secutil import Trickler, eventually, trickle_start
    c = tls_cluster
    ctx = client_ctx(c["pki"])
    port = c["meta_port"]
    socks = [s for i in range(2, 6)
             for s in (trickle_start(port, "127.0.0.%d" % i, wrap=ctx.wrap_socket)
                       for _ in range(64)) if s]
    t = Trickler(socks)
    try:
        time.sleep(1)  # their request lines are in (setup, not a timing check)
        assert eventually(lambda: http_answered(http_get(port, "/metadata?key=x", ctx)), 60), \
            "a member on another address was never served"
        assert t.wait_all_closed(30), "%d of %d trickling TLS connections still open" % (
            len(socks) - t.closed(), len(socks))
    finally:
        t.stop()
