"""Issue 11, attacks 1 and 2 on the data plane: a stranger who reaches a
node's Transfer Engine ports (control channel: GET_DESC/NOTIFY; tcp data:
READ/WRITE) gets nothing with security on — the connection is closed before
a single protocol byte is served — and a member (the handshake of
docs/security.md, implemented in secutil.py) is served. With security off
the same GET_DESC lists the node's buffers (documented exposure)."""
import json
import os
import socket
import struct
import urllib.parse

import http.client

from secutil import (AUTH_MAGIC, http_auth_header, key_id, mac, recv_exact, store_for)

CTL_MAGIC = 0x4C435243
TCP_GARBAGE_WRITE = struct.pack("<IIQQQ", 0x43525457, 1, 0, 0, 4096) + b"E" * 4096


def descriptor(c):
    """The node's segment descriptor, as a member reads it."""
    key = "crescent/segment/" + c["node"]
    target = "/metadata?key=" + urllib.parse.quote(key, safe="")
    h = {"X-Crescent-Auth": http_auth_header(c["key"], "GET", target)} if c["key"] else {}
    conn = http.client.HTTPConnection("127.0.0.1", c["http_port"], timeout=10)
    conn.request("GET", target, headers=h)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    assert r.status == 200, (r.status, body)
    if body.startswith(b"CRSIG1 "):
        body = body.split(b"\n", 1)[1]
    return json.loads(body)


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.settimeout(10)
    return s


def get_desc(s):
    s.sendall(struct.pack("<IBBHiI", CTL_MAGIC, 1, 1, 0, 0, 0))
    h = recv_exact(s, 16)
    magic, ver, op, flags, status, ln = struct.unpack("<IBBHiI", h)
    return status, recv_exact(s, ln) if ln else b""


def te_handshake(s, key):
    nc = os.urandom(32)
    s.sendall(struct.pack("<IBBH", AUTH_MAGIC, 1, 1, 0) + key_id(key) + nc)
    hdr = recv_exact(s, 8)
    if hdr[5] == 4:  # RESULT: refused at once
        return struct.unpack("<i", recv_exact(s, 8)[:4])[0]
    body = recv_exact(s, 72)
    ns = body[8:40]
    assert body[40:72] == mac(key, "crescent handshake v1", b"S", b"te\0", nc, ns)
    s.sendall(struct.pack("<IBBH", AUTH_MAGIC, 1, 3, 0) +
              mac(key, "crescent handshake v1", b"C", b"te\0", nc, ns))
    return struct.unpack("<i", recv_exact(s, 16)[8:12])[0]


def closed_without_answer(s):
    try:
        return s.recv(65536) == b""
    except ConnectionResetError:
        return True


def test_get_desc_from_stranger_refused(secure):
    d = descriptor(secure)
    s = connect(d["rpc_port"])
    s.sendall(struct.pack("<IBBHiI", CTL_MAGIC, 1, 1, 0, 0, 0))
    assert closed_without_answer(s), "a stranger was answered on the control channel"
    s.close()


def test_notify_from_stranger_refused(secure):
    d = descriptor(secure)
    s = connect(d["rpc_port"])
    msg = struct.pack("<H", 4) + b"evil" + b"hello"
    s.sendall(struct.pack("<IBBHiI", CTL_MAGIC, 1, 2, 0, 0, len(msg)) + msg)
    assert closed_without_answer(s)
    s.close()


def test_write_and_read_from_stranger_refused(secure):
    st, rc = store_for(secure, secure["key_file"])
    assert rc == 0 and st.put("te-victim", b"G" * 8192) == 0
    d = descriptor(secure)
    for nic in d["nics"]:
        s = connect(nic["port"])
        s.sendall(TCP_GARBAGE_WRITE)
        assert closed_without_answer(s), "a stranger's WRITE was not refused"
        s.close()
    assert st.get("te-victim") == b"G" * 8192
    st.close()


def test_wrong_key_refused_on_te(secure):
    d = descriptor(secure)
    s = connect(d["rpc_port"])
    assert te_handshake(s, os.urandom(32)) != 0
    s.close()


def test_member_is_served_on_te(secure):
    """The same GET_DESC after the handshake is answered: the refusal above
    is the handshake's doing, not a broken port."""
    d = descriptor(secure)
    s = connect(d["rpc_port"])
    assert te_handshake(s, secure["key"]) == 0
    status, body = get_desc(s)
    assert status == 0 and json.loads(body)["name"] == secure["node"]
    s.close()


def test_get_desc_open_cluster_is_exposed(open_cluster):
    """Security off: GET_DESC lists the node's buffers to anyone (documented)."""
    d = descriptor(open_cluster)
    s = connect(d["rpc_port"])
    status, body = get_desc(s)
    s.close()
    assert status == 0 and json.loads(body)["buffers"]


def test_disk_tier_read_server_refuses_strangers(secure, tmp_path):
    """A node's disk-tier read server (--ssd_path) is a data-plane port too:
    with security on a stranger's request is closed unanswered, while the
    node itself (its master RPC authenticates) joins and serves members."""
    from secutil import start_node
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    p = port.getsockname()[1]
    port.close()
    start_node(secure["daemons"], secure, secure["key_file"], size="16MB",
               extra=["--ssd_path", str(tmp_path), "--ssd_capacity", "64MB", "--ssd_port", str(p)])
    s = connect(p)
    s.sendall(b"\0" * 64)
    assert closed_without_answer(s), "the disk tier served a stranger"
    s.close()
    st, rc = store_for(secure, secure["key_file"])
    assert rc == 0 and st.put("tier-legit", b"T" * 5000) == 0
    assert st.get("tier-legit") == b"T" * 5000
    st.close()
    # the same-host path (the node hands local members its data file) also
    # asks for the key first: a stranger of the same user gets no descriptor
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.connect(b"\0crescent-tier-v1:ssd@127.0.0.1:%d" % p)
    u.settimeout(30)
    u.sendall(b"\0" * 64)
    fds = []
    try:
        while True:
            data, anc, _, _ = u.recvmsg(4096, socket.CMSG_SPACE(16))
            fds += [c for c in anc if c[1] == socket.SCM_RIGHTS]
            if not data:
                break
    except (ConnectionError, socket.timeout):
        pass
    u.close()
    assert not fds, "the node handed its data file to a stranger"
