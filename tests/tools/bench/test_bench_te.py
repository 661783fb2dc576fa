#!/usr/bin/python3
"""crescent-bench end to end on 127.0.0.1: a target and initiators as real
processes. Checks the RESULT line (counts consistent, no errors), that
--check verifies every byte for READ and WRITE over tcp and shm, that --check
FAILS against a target with a different data pattern, that http metadata
(crescent-metadata) works, and that bad arguments are rejected.
Timing is never asserted.
Usage: test_bench_te.py <crescent-bench> <crescent-metadata>"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

BENCH, META = sys.argv[1], sys.argv[2]
SAN = bool(os.environ.get("CRESCENT_SANITIZED"))
DUR = "0.5" if not SAN else "0.3"
procs = []
failures = []


def check(cond, what, expected=None, got=None):
    if cond:
        return
    msg = what if expected is None else "%s: expected %r, got %r" % (what, expected, got)
    print("FAIL:", msg, flush=True)
    failures.append(msg)


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def start_target(*args):
    fd, rf = tempfile.mkstemp(prefix="crb-ready-")
    os.close(fd)
    os.unlink(rf)
    p = subprocess.Popen([BENCH, "--mode", "target", "--ready_file", rf] + list(args),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    deadline = time.time() + 60
    while time.time() < deadline:
        if os.path.exists(rf):
            name = open(rf).read().strip()
            os.unlink(rf)
            return p, name
        if p.poll() is not None:
            raise SystemExit("FAIL: target exited %d: %s" % (p.returncode, p.stderr.read()))
        time.sleep(0.05)
    raise SystemExit("FAIL: target not ready")


def stop_target(p):
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = "hung"
    check(rc == 0, "target exit status after SIGTERM", 0, rc)


def initiator(*args):
    r = subprocess.run([BENCH, "--mode", "initiator", "--duration", DUR] + list(args),
                       capture_output=True, text=True, timeout=120)
    m = re.search(r"^RESULT (.*)$", r.stdout, re.M)
    res = dict(kv.split("=", 1) for kv in m.group(1).split()) if m else None
    return r.returncode, res, r.stderr


def expect_ok(what, *args, transport="tcp"):
    rc, res, err = initiator(*args)
    check(rc == 0, what + ": exit status", 0, (rc, err[-500:]))
    if not res:
        check(False, what + ": RESULT line present")
        return
    check(res["errors"] == "0", what + ": errors", "0", res["errors"])
    check(res["transport"] == transport, what + ": transport", transport, res["transport"])
    reqs, block, batches, batch = (int(res["requests"]), int(res["block"]), int(res["batches"]),
                                   int(res["batch"]))
    check(reqs > 0, what + ": some requests completed", ">0", reqs)
    check(int(res["bytes"]) == reqs * block, what + ": bytes == requests*block", reqs * block,
          int(res["bytes"]))
    check(reqs == batches * batch, what + ": requests == batches*batch", batches * batch, reqs)
    check(float(res["gbps"]) > 0 and float(res["p99_us"]) >= float(res["p50_us"]) > 0,
          what + ": throughput and latency percentiles are positive and ordered", None, res)
    if "--check" in args:
        check(res["check"] == "ok", what + ": check", "ok", res["check"])
    print("ok:", what, "->", res["gbps"], "GB/s", flush=True)


def free_port():
    import socket
    so = socket.socket()
    so.bind(("127.0.0.1", 0))
    port = so.getsockname()[1]
    so.close()
    return port


def start_etcd(etcd, d):
    """Starts etcd on fresh loopback ports; returns (process, client URL) once it
    answers, or (None, None) if it exited (e.g. a port was taken meanwhile)."""
    import urllib.request
    cport, pport = free_port(), free_port()
    curl, purl = "http://127.0.0.1:%d" % cport, "http://127.0.0.1:%d" % pport
    log = open(os.path.join(d, "etcd.log"), "a")
    ep = subprocess.Popen([etcd, "--name", "crb", "--data-dir", tempfile.mkdtemp(dir=d),
                           "--listen-client-urls", curl, "--advertise-client-urls", curl,
                           "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                           "--initial-cluster", "crb=" + purl], stdout=log, stderr=log)
    log.close()
    procs.append(ep)
    deadline = time.time() + 30
    while time.time() < deadline and ep.poll() is None:
        try:
            urllib.request.urlopen(urllib.request.Request(curl + "/v3/kv/range",
                                   data=b'{"key":"eA=="}'), timeout=2).read()
            return ep, cport
        except Exception:
            time.sleep(0.1)
    ep.kill()
    ep.wait()
    return None, None


def etcd_case():
    """Engine + etcd metadata (failover past a dead first endpoint), when etcd exists."""
    import shutil
    etcd = shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None)
    if not etcd:
        print("note: etcd not installed, etcd metadata case skipped")
        return
    d = tempfile.mkdtemp(prefix="crb-etcd-")
    ep = None
    try:
        for _ in range(3):
            ep, cport = start_etcd(etcd, d)
            if ep:
                break
        check(ep is not None, "etcd starts")
        if not ep:
            return
        uri = "etcd://127.0.0.1:%d,127.0.0.1:%d" % (free_port(), cport)
        tgt, seg = start_target("--protocol", "tcp", "--metadata", uri, "--local_name",
                                "bench-etcd", "--buffer_size", "16MiB")
        expect_ok("tcp read via etcd metadata (dead first endpoint) --check", "--segment",
                  "bench-etcd", "--metadata", uri, "--protocol", "tcp", "--operation", "read",
                  "--block_size", "1MiB", "--batch_size", "4", "--threads", "1", "--check")
        stop_target(tgt)
    finally:
        if ep:
            ep.kill()
            ep.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    rc, _, err = initiator("--operation", "bogus", "--segment", "x")
    check(rc == 2, "bad --operation exits 2", 2, rc)
    rc, _, err = initiator("--protocol", "rdma", "--segment", "x")
    check(rc == 2, "bad --protocol exits 2", 2, rc)
    rc, _, err = initiator("--operation", "read")
    check(rc == 2, "initiator without --segment exits 2", 2, rc)

    # tcp, p2p metadata
    tgt, seg = start_target("--protocol", "tcp", "--buffer_size", "16MiB")
    check(re.fullmatch(r"127\.0\.0\.1:\d+", seg) is not None, "p2p segment name is host:port",
          "127.0.0.1:<port>", seg)
    expect_ok("tcp read 256KiB x8 --check", "--segment", seg, "--protocol", "tcp", "--operation",
              "read", "--block_size", "256KiB", "--batch_size", "8", "--threads", "2", "--check")
    expect_ok("tcp write 64KiB x16 --check", "--segment", seg, "--protocol", "tcp",
              "--operation", "write", "--block_size", "64KiB", "--batch_size", "16",
              "--threads", "2", "--check")
    expect_ok("tcp read 4KiB x128 --wait block", "--segment", seg, "--protocol", "tcp",
              "--operation", "read", "--block_size", "4KiB", "--batch_size", "128",
              "--threads", "1", "--wait", "block", "--check")
    # --objects: exactly that many blocks per thread, each batch from its own
    # local blocks, every byte checked (READ and WRITE), bad counts rejected
    for op in ("read", "write"):
        rc, res, err = initiator("--segment", seg, "--protocol", "tcp", "--operation", op,
                                 "--block_size", "16KiB", "--batch_size", "8", "--threads", "2",
                                 "--objects", "64", "--duration", "600", "--check")
        check(rc == 0 and res is not None and res["errors"] == "0" and res["check"] == "ok",
              "--objects 64 %s --check" % op, (0, "ok"), (rc, res and res.get("check"), err[-300:]))
        check(res is not None and res["requests"] == "128" and res["batches"] == "16",
              "--objects 64 x 2 threads moves exactly 128 blocks in 16 batches (%s)" % op,
              ("128", "16"), res and (res["requests"], res["batches"]))
    # --passes: the same objects moved that many times in one run, every byte
    # checked; without --objects it is rejected
    rc, res, err = initiator("--segment", seg, "--protocol", "tcp", "--operation", "write",
                             "--block_size", "16KiB", "--batch_size", "8", "--threads", "1",
                             "--objects", "32", "--passes", "3", "--duration", "600", "--check")
    check(rc == 0 and res is not None and res["errors"] == "0" and res["check"] == "ok" and
          res["requests"] == "96" and res["batches"] == "12",
          "--objects 32 --passes 3 moves exactly 96 blocks in 12 batches, checked",
          ("96", "12", "ok"), (rc, res and (res["requests"], res["batches"], res["check"]), err[-300:]))
    rc, _, err = initiator("--segment", seg, "--passes", "2")
    check(rc == 2, "--passes without --objects exits 2", 2, rc)
    rc, _, err = initiator("--segment", seg, "--objects", "10", "--batch_size", "8")
    check(rc == 2, "--objects not a multiple of --batch_size exits 2", 2, rc)
    # a different pattern on the verifying side must be detected
    rc, res, err = initiator("--segment", seg, "--protocol", "tcp", "--operation", "read",
                             "--block_size", "64KiB", "--batch_size", "4", "--threads", "1",
                             "--check", "--pattern_seed", "12345")
    check(rc == 1 and res is not None and res["check"] == "FAILED",
          "--check against a different pattern fails", (1, "FAILED"),
          (rc, res and res.get("check")))
    check("CHECK FAILED" in err, "mismatch is reported on stderr", "CHECK FAILED", err[-300:])
    stop_target(tgt)

    # shm (same host): the engine must pick shm
    tgt, seg = start_target("--protocol", "auto", "--buffer_size", "32MiB")
    expect_ok("shm read 1MiB x4 --check", "--segment", seg, "--protocol", "shm", "--operation",
              "read", "--block_size", "1MiB", "--batch_size", "4", "--threads", "2", "--check",
              transport="shm")
    # --protocol tcp forces tcp even though shm could reach this peer
    expect_ok("tcp forced to a same-host peer", "--segment", seg, "--protocol", "tcp",
              "--operation", "read", "--block_size", "64KiB", "--batch_size", "8", "--check")
    expect_ok("shm write 4KiB x128 --check", "--segment", seg, "--protocol", "shm",
              "--operation", "write", "--block_size", "4KiB", "--batch_size", "128",
              "--threads", "1", "--check", transport="shm")
    stop_target(tgt)

    # the target dies mid-run: the initiator reports the failure and exits 1
    # (it must not hang; CTest's timeout bounds this)
    tgt, seg = start_target("--protocol", "tcp", "--buffer_size", "16MiB")
    ini = subprocess.Popen([BENCH, "--mode", "initiator", "--duration", "60", "--segment", seg,
                            "--protocol", "tcp", "--operation", "read", "--block_size", "256KiB",
                            "--batch_size", "4", "--threads", "2", "--timeout_ms", "5000"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(ini)
    time.sleep(0.5)
    tgt.kill()
    tgt.wait()
    out, err = ini.communicate(timeout=100)
    check(ini.returncode == 1 and "transfer failed" in err,
          "initiator exits 1 when the target dies", (1, "transfer failed"),
          (ini.returncode, err[-300:]))
    m = re.search(r"errors=(\d+)", out)
    check(m is not None and int(m.group(1)) > 0, "RESULT counts the errors", ">0",
          m and m.group(1))

    # http metadata through crescent-metadata, named segments
    mp = subprocess.Popen([META, "--port", "0", "--host", "127.0.0.1"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    procs.append(mp)
    m = re.search(r"serving (http://\S+)", mp.stdout.readline())
    check(m is not None, "crescent-metadata prints its URL")
    if m:
        uri = m.group(1)
        tgt, seg = start_target("--protocol", "tcp", "--metadata", uri, "--local_name",
                                "bench-target", "--buffer_size", "16MiB")
        check(seg == "bench-target", "named segment", "bench-target", seg)
        expect_ok("tcp read via http metadata --check", "--segment", "bench-target",
                  "--metadata", uri, "--protocol", "tcp", "--operation", "read",
                  "--block_size", "1MiB", "--batch_size", "4", "--threads", "1", "--check")
        rc, res, err = initiator("--segment", "no-such-segment", "--metadata", uri, "--protocol",
                                 "tcp", "--operation", "read", "--open_seconds", "0.5")
        check(rc == 1 and "cannot open segment" in err, "unknown segment fails", 1,
              (rc, err[-300:]))
        stop_target(tgt)
    etcd_case()
    cleanup()
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("all ok")


try:
    main()
finally:
    cleanup()
