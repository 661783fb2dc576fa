#!/usr/bin/python3
"""crescent-metadata end to end: Mooncake's HTTP metadata contract over a real
socket on 127.0.0.1, --help, a port already in use, clean exit on SIGTERM.
Usage: test_metadata_tool.py <crescent-metadata binary>"""
import http.client
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

BIN = sys.argv[1]
failures = []


def check(cond, what, expected=None, got=None):
    if cond:
        return
    msg = what if expected is None else "%s: expected %r, got %r" % (what, expected, got)
    print("FAIL:", msg, flush=True)
    failures.append(msg)


def req(method, url, body=None):
    r = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(r, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def put_too_large(port, path, n):
    """The server answers 413 from the headers and closes without reading the
    body, so the upload may break off: read the response anyway."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.putrequest("PUT", path)
    c.putheader("Content-Length", str(n))
    c.endheaders()
    try:
        c.send(b"x" * n)
    except (BrokenPipeError, ConnectionResetError):
        pass
    try:
        return c.getresponse().status
    except (ConnectionResetError, http.client.RemoteDisconnected) as e:
        return repr(e)
    finally:
        c.close()


def start(*args):
    p = subprocess.Popen([BIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline()
    m = re.search(r"serving (http://\S+)", line)
    if not m:
        p.kill()
        raise SystemExit("FAIL: no 'serving' line, got %r; stderr %r" % (line, p.stderr.read()))
    return p, m.group(1)


def main():
    r = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=10)
    check(r.returncode == 0 and "--port" in r.stdout, "--help exits 0 and lists --port",
          0, (r.returncode, r.stdout[:200]))
    r = subprocess.run([BIN, "--bogus"], capture_output=True, text=True, timeout=10)
    check(r.returncode == 2, "unknown flag exits 2", 2, r.returncode)

    p, url = start("--port", "0", "--host", "127.0.0.1", "--path", "/metadata")
    try:
        check(url.startswith("http://127.0.0.1:") and url.endswith("/metadata"), "URL printed",
              "http://127.0.0.1:<port>/metadata", url)
        port = int(url.split(":")[2].split("/")[0])
        key = "crescent/segment/a b&c=d"
        k = urllib.parse.quote(key, safe="")
        st, body = req("GET", url + "?key=" + k)
        check(st == 404, "GET missing key", 404, st)
        st, _ = req("PUT", url + "?key=" + k, b'{"name":"x"}')
        check(st == 200, "PUT", 200, st)
        st, body = req("GET", url + "?key=" + k)
        check((st, body) == (200, b'{"name":"x"}'), "GET after PUT", (200, b'{"name":"x"}'),
              (st, body))
        st, body = req("GET", url + "?key=" + urllib.parse.quote("crescent/segment/a b", safe=""))
        check(st == 404, "prefix of a key is a different key", 404, st)
        st, _ = req("PUT", url + "?key=" + k, b"\x00\x01binary")
        st, body = req("GET", url + "?key=" + k)
        check(body == b"\x00\x01binary", "overwrite with binary", b"\x00\x01binary", body)
        st, _ = req("DELETE", url + "?key=" + k)
        check(st == 200, "DELETE", 200, st)
        st, _ = req("GET", url + "?key=" + k)
        check(st == 404, "GET after DELETE", 404, st)
        st, _ = req("DELETE", url + "?key=" + k)
        check(st == 404, "DELETE missing key", 404, st)
        st, _ = req("GET", url)
        check(st == 400, "GET without key", 400, st)
        st, _ = req("GET", url.replace("/metadata", "/other") + "?key=x")
        check(st == 404, "wrong path", 404, st)
        st, _ = req("PATCH", url + "?key=x", b"1")
        check(st == 405, "unsupported method", 405, st)
        st = put_too_large(port, "/metadata?key=big", (16 << 20) + 1)
        check(st == 413, "value over 16 MiB", 413, st)
        st, _ = req("PUT", url + "?key=" + "k" * 1024, b"1")
        check(st == 400, "key of 1024 bytes", 400, st)

        # a second server on the same port fails cleanly
        r = subprocess.run([BIN, "--port", str(port), "--host", "127.0.0.1"], capture_output=True,
                           text=True, timeout=10)
        check(r.returncode == 1 and "cannot listen" in r.stderr, "port in use exits 1",
              1, (r.returncode, r.stderr[:200]))
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "hung"
    check(rc == 0, "exit status after SIGTERM", 0, rc)
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("ok")


main()
