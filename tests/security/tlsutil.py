"""Helpers for the TLS tests: a throw-away PKI made with the openssl CLI (a
cluster CA, a member certificate, and a rogue CA with its own certificate),
and probes that speak TLS with Python's ssl module (an implementation
independent of the OpenSSL code under test's configuration)."""
import os
import shutil
import socket
import ssl
import subprocess

import pytest


def _run(*argv, cwd):
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _ca(d, name):
    _run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-out", name + ".key", cwd=d)
    _run("openssl", "req", "-x509", "-new", "-key", name + ".key", "-subj", "/CN=" + name,
         "-days", "2", "-out", name + ".pem", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def _cert(d, name, ca):
    _run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-out", name + ".key", cwd=d)
    os.chmod(os.path.join(d, name + ".key"), 0o600)
    _run("openssl", "req", "-new", "-key", name + ".key", "-subj", "/CN=" + name,
         "-out", name + ".csr", cwd=d)
    with open(os.path.join(d, name + ".ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _run("openssl", "x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey",
         ca + ".key", "-CAcreateserial", "-days", "2", "-out", name + ".pem", "-extfile",
         name + ".ext", cwd=d)


def make_pki(d):
    """CA 'ca' + certificate 'member'; 'rogue-ca' + certificate 'rogue'.
    Returns {name: (cert, key)} plus 'ca' and 'rogue_ca' paths."""
    if not shutil.which("openssl"):
        pytest.skip("openssl CLI not installed")
    _ca(d, "ca")
    _ca(d, "rogue-ca")
    _cert(d, "member", "ca")
    _cert(d, "rogue", "rogue-ca")
    p = lambda n: os.path.join(d, n)
    return {"ca": p("ca.pem"), "rogue_ca": p("rogue-ca.pem"),
            "member": (p("member.pem"), p("member.key")),
            "rogue": (p("rogue.pem"), p("rogue.key"))}


def tls_flags(pki, who="member", ca=None):
    cert, key = pki[who]
    return ["--tls_cert=" + cert, "--tls_key=" + key, "--tls_ca=" + (ca or pki["ca"])]


def tls_env(pki, who="member"):
    cert, key = pki[who]
    return {"CRESCENT_TLS_CERT": cert, "CRESCENT_TLS_KEY": key, "CRESCENT_TLS_CA": pki["ca"]}


def client_ctx(pki, who="member"):
    """A TLS client context trusting the cluster CA; who=None: no certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False  # members are reached by address (docs/security.md)
    ctx.load_verify_locations(pki["ca"])
    if who:
        ctx.load_cert_chain(*pki[who])
    return ctx


def exchange(port, request, ctx=None, timeout=30):
    """Sends request over TLS (ctx) or plain TCP (ctx None) to 127.0.0.1:port
    and returns the first bytes of the answer; b"" when the server refused
    the connection (closed, reset, TLS alert) without answering. The timeout
    only guards against a hang."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except ConnectionRefusedError:
        return b""
    try:
        if ctx is not None:
            s = ctx.wrap_socket(s)
        s.sendall(request)
        return s.recv(4096)
    except (ssl.SSLError, ConnectionError, OSError):
        return b""
    finally:
        s.close()


def http_get(port, path, ctx=None):
    return exchange(port, ("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                           % path).encode(), ctx)
