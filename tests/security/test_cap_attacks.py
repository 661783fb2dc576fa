"""Issue 11, least-privilege data plane: per-object capabilities. A *member*
(it holds the cluster key and passes every handshake) talks to a storage
node's Transfer Engine tcp port directly and tries to read and overwrite an
object it was granted nothing for: without a capability, with one it forged
(minted with the cluster key, the best a member can do), with a genuine
grant of another object, with a READ grant used for a WRITE. All are refused
and the object keeps its bytes; the same member with the master's genuine
grant is served, and the library's own traffic (put/get) is unaffected.
With security off the same raw READ and WRITE are served (documented
exposure). Wire formats: docs/architecture/tcp-wire.md, docs/protocol.md,
src/common/auth/cap.h — implemented here independently."""
import hashlib
import hmac
import os
import socket
import struct
import time

from secutil import rpc_authenticate, rpc_connect, rpc_frame, rpc_reply, store_for
from test_te_attacks import connect, descriptor, te_handshake

TCP_MAGIC = 0x45545243
WRITE, READ, RESP = 1, 2, 0x80
F_CAP = 1
EACCES = -13
GET_REPLICA_LIST = 13
SIZE = 8192


def grl(sock, key):
    """GetReplicaList over the raw master RPC -> [(segment, addr, len, cap)]
    of the first replica (cap is None when the reply granted none)."""
    k = key.encode()
    sock.sendall(rpc_frame(GET_REPLICA_LIST, struct.pack("<II", 1, len(k)) + k, req_id=9))
    _, status, p = rpc_reply(sock)
    assert status == 0, status
    off = 4
    st, ver, size, lease = struct.unpack_from("<iQQI", p, off)
    off += 24
    assert st == 0
    (nrep,) = struct.unpack_from("<I", p, off)
    off += 4
    reps = []
    for _ in range(nrep):
        _, nsh = struct.unpack_from("<QI", p, off)
        off += 12
        shards = []
        for _ in range(nsh):
            (l,) = struct.unpack_from("<H", p, off)
            name = p[off + 2:off + 2 + l].decode()
            off += 2 + l
            a, ln = struct.unpack_from("<QQ", p, off)
            off += 16
            shards.append([name, a, ln, None])
        reps.append(shards)
    (ncaps,) = struct.unpack_from("<I", p, off)
    off += 4
    for _ in range(ncaps):
        r, s = struct.unpack_from("<HH", p, off)
        reps[r][s][3] = p[off + 4:off + 84]
        off += 84
    return reps[0]


def member_rpc(c):
    sock = rpc_connect(c["master"])
    if c["key"]:
        assert rpc_authenticate(sock, c["key"]) == 0
    return sock


def te_conn(c):
    """A member's connection to the node's tcp data port (handshake done)."""
    d = descriptor(c)
    s = connect(d["nics"][0]["port"])
    if c["key"]:
        assert te_handshake(s, c["key"]) == 0
    return s


def request(s, op, addr, ln, cap=None, payload=b""):
    """One READ or WRITE; returns (status, data read)."""
    h = struct.pack("<IBBHiIQQ", TCP_MAGIC, 1, op, F_CAP if cap else 0, 0, 1, addr, ln)
    s.sendall(h + (cap or b"") + payload)
    r = struct.unpack("<IBBHiIQQ", recv_all(s, 32))
    assert r[0] == TCP_MAGIC and r[2] == op | RESP, r
    data = recv_all(s, ln) if op == READ else b""
    return r[4], data


def recv_all(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        assert c, "connection closed"
        b += c
    return b


def forge(key, ops, addr, ln, seg_id=0, epoch=0, ttl_ms=60000):
    """A capability minted with the cluster key: the layout of cap.h, but a
    member does not hold the segment's capability key."""
    body = struct.pack("<IBBHQQQQII", 0x50435243, 1, ops, 0, seg_id, addr, ln,
                       int(time.time() * 1000) + ttl_ms, epoch, 0)
    return body + hmac.new(key, b"crescent cap v1\0" + body, hashlib.sha256).digest()


def setup_objects(c):
    st, rc = store_for(c, c["key_file"])
    assert rc == 0
    assert st.put("cap-victim", b"V" * SIZE) == 0
    assert st.put("cap-other", b"O" * SIZE) == 0
    return st


def test_read_and_write_without_capability_refused(secure):
    st = setup_objects(secure)
    sock = member_rpc(secure)
    seg, addr, ln, cap = grl(sock, "cap-victim")[0]
    assert cap is not None, "the master granted no capability with security on"
    s = te_conn(secure)
    status, data = request(s, READ, addr, ln)
    assert status == EACCES and data == b"\0" * ln, "a READ without capability was served"
    status, _ = request(s, WRITE, addr, ln, payload=b"X" * ln)
    assert status == EACCES, "a WRITE without capability was served"
    s.close()
    assert st.get("cap-victim") == b"V" * SIZE
    st.close()


def test_forged_capability_refused(secure):
    st = setup_objects(secure)
    seg, addr, ln, real = grl(member_rpc(secure), "cap-victim")[0]
    seg_id = struct.unpack_from("<Q", real, 8)[0]  # even with the right segment id
    s = te_conn(secure)
    for bad in (forge(secure["key"], 3, addr, ln, seg_id),
                real[:48] + bytes(32),                                   # no MAC
                real[:5] + b"\x03" + real[6:]):                          # READ -> READ|WRITE
        assert request(s, READ, addr, ln, bad)[0] == EACCES
        assert request(s, WRITE, addr, ln, bad, b"F" * ln)[0] == EACCES
    s.close()
    assert st.get("cap-victim") == b"V" * SIZE
    st.close()


def test_grant_of_another_object_or_mode_refused(secure):
    st = setup_objects(secure)
    sock = member_rpc(secure)
    _, vaddr, vlen, vcap = grl(sock, "cap-victim")[0]
    _, oaddr, olen, ocap = grl(sock, "cap-other")[0]
    assert vaddr != oaddr
    s = te_conn(secure)
    # a genuine READ grant of "cap-other" does not reach "cap-victim"'s bytes
    assert request(s, READ, vaddr, vlen, ocap)[0] == EACCES
    assert request(s, READ, oaddr, olen + 1, ocap)[0] == EACCES      # one byte past the grant
    # a READ grant does not allow a WRITE, not even of its own object
    assert request(s, WRITE, oaddr, olen, ocap, b"W" * olen)[0] == EACCES
    # the genuine grant is served: the refusals above are the check's doing
    status, data = request(s, READ, vaddr, vlen, vcap)
    assert status == 0 and data == b"V" * vlen
    status, data = request(s, READ, oaddr + 100, 1000, ocap)         # inside the grant
    assert status == 0 and data == b"O" * 1000
    s.close()
    assert st.get("cap-victim") == b"V" * SIZE and st.get("cap-other") == b"O" * SIZE
    st.close()


def test_library_traffic_unaffected(secure):
    st, rc = store_for(secure, secure["key_file"])
    assert rc == 0
    for i, n in enumerate((1, 4096, 100_000, 3 << 20)):
        v = os.urandom(n)
        assert st.put("cap-legit-%d" % i, v) == 0
        assert st.get("cap-legit-%d" % i) == v
    st.close()


def test_open_cluster_raw_access_is_exposed(open_cluster):
    """Security off: no capability is granted and none is checked — anyone
    who reaches the port reads and overwrites the object (documented)."""
    st = setup_objects(open_cluster)
    seg, addr, ln, cap = grl(member_rpc(open_cluster), "cap-victim")[0]
    assert cap is None
    s = te_conn(open_cluster)
    status, data = request(s, READ, addr, ln)
    assert status == 0 and data == b"V" * ln
    assert request(s, WRITE, addr, ln, payload=b"X" * ln)[0] == 0
    s.close()
    got = st.get("cap-victim")
    assert got in (b"X" * SIZE, b""), "overwritten bytes (or a checksum miss)"
    st.close()


def test_extra_segments_served_with_capabilities(tmp_path):
    """A client's extra segments (allocate_and_mount_segment) live in its one
    engine, under the key its mount replies carry: with security on, puts by
    another client land there (the master has no node, so they must) and are
    read back; a member without a grant is refused there too."""
    from secutil import Daemons, new_key_file, read_key, start_master
    d = Daemons()
    d.dir = str(tmp_path)
    try:
        kf = new_key_file(d.dir)
        c = start_master(d, kf)
        c.update({"key_file": kf, "key": read_key(kf)})
        owner, rc = store_for(c, kf)
        assert rc == 0
        r = owner.allocate_and_mount_segment(1)
        assert r["ret"] == 0, r
        writer, rc = store_for(c, kf)
        assert rc == 0
        v = os.urandom(6000)
        assert writer.put("cap-extra", v) == 0
        assert writer.get("cap-extra") == v and owner.get("cap-extra") == v
        seg, addr, ln, cap = grl(member_rpc(c), "cap-extra")[0]
        assert cap is not None
        s = te_conn_to(c, seg.split("#")[0])
        assert request(s, READ, addr, ln)[0] == EACCES
        status, data = request(s, READ, addr, ln, cap)
        assert status == 0 and data == v
        s.close()
        writer.close()
        owner.close()
    finally:
        d.stop()


def te_conn_to(c, te_segment):
    """A member's data connection to the engine named te_segment."""
    d = descriptor({**c, "node": te_segment})
    s = connect(d["nics"][0]["port"])
    assert te_handshake(s, c["key"]) == 0
    return s
