"""What every crescent listener does (docs/security.md, issue 11), for the
HTTP servers of the Python package (the store service's REST API and
KVBootstrapServer), which run on the standard library's http.server:

* ``BoundedHTTPServer``: at most MAX_CONNS connections, MAX_PER_SOURCE per
  source address (one source cannot take the slots of others); a connection
  that sends nothing (first byte, idle keep-alive, a trickled request) for
  IDLE_S seconds is closed; refused connections are logged rate-limited.
  With ``BoundedRequestHandler``, a request also has absolute deadlines
  (IDLE_S is reset by every byte): its line and headers HEADERS_S after its
  first byte, its body BODY_S after the headers plus 1 s per BODY_RATE
  bytes received; a thread closes a connection past them.
* ``warn_if_open``: the loud start-up warning of a listener beyond loopback
  without credentials (the C daemons print the same line).
* ``HttpAuth``: the cluster key's HTTP signature (``X-Crescent-Auth``,
  docs/security.md "HTTP signatures"), checked like the C servers do
  (±60 s of clock skew, nonces remembered while inside it; a full replay
  cache refuses as busy rather than forget a live nonce), and
  ``auth_header`` to sign a request.
"""
import collections
import hashlib
import hmac
import logging
import os
import stat
import struct
import threading
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logger = logging.getLogger("mooncake.security")

MAX_CONNS = 256
MAX_PER_SOURCE = 64
IDLE_S = 30
HEADERS_S = 10  # a request's line and headers, from its first byte
BODY_S = 10  # a body: this, plus 1 s per BODY_RATE bytes received
BODY_RATE = 64 << 10
REAP_S = 0.5  # how often the deadlines are checked
KEY_ENV = "CRESCENT_CLUSTER_KEY_FILE"
SKEW_S = 60
REPLAY_MAX = 8192


class _RateLimited:
    """At most 5 lines per 10 s per call site, then one counting the rest."""

    def __init__(self, n=5, window_s=10.0):
        self.n, self.window_s = n, window_s
        self.lock = threading.Lock()
        self.start, self.count, self.suppressed = 0.0, 0, 0

    def warning(self, msg, *args):
        now = time.monotonic()
        with self.lock:
            if now - self.start >= self.window_s:
                if self.suppressed:
                    logger.warning("(%d similar lines suppressed)", self.suppressed)
                self.start, self.count, self.suppressed = now, 0, 0
            self.count += 1
            if self.count > self.n:
                self.suppressed += 1
                return
        logger.warning(msg, *args)


def is_loopback(host):
    return host in ("localhost", "::1") or str(host).startswith("127.")


def warn_if_open(what, host, credentials=False):
    """Logs the loud warning when `what` listens beyond loopback without
    credentials. Returns True if it warned."""
    if credentials or is_loopback(host):
        return False
    logger.error("WARNING: %s listens on %s WITHOUT CREDENTIALS: anyone who can reach it can "
                 "read, overwrite or remove cluster data. Bind it to 127.0.0.1 or put it behind "
                 "an authenticating proxy (docs/security.md)", what,
                 host if host not in ("", "0.0.0.0", "::") else "all addresses")
    return True


class BoundedHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with crescent's listener limits (module doc).
    Its handlers derive from BoundedRequestHandler."""
    daemon_threads = True
    request_queue_size = 128  # the C listeners' backlog (socketserver's 5 drops SYNs in a burst)
    max_conns = MAX_CONNS
    max_per_source = MAX_PER_SOURCE

    def __init__(self, *args, **kw):
        self._conn_lock = threading.Lock()
        self._open = {}  # accepted socket -> source address
        self._by_source = collections.Counter()
        self._refusals = _RateLimited()
        self._deadlines = {}  # socket -> time.monotonic() past which it is closed
        self._overdue = set()  # sockets closed past their deadline
        self._closing = threading.Event()
        super().__init__(*args, **kw)
        threading.Thread(target=self._reap, daemon=True, name="http-deadlines").start()

    def set_deadline(self, request, at):
        """Closes request's connection at time.monotonic() `at` (None: never)."""
        with self._conn_lock:
            if at is None:
                self._deadlines.pop(request, None)
            elif request in self._open:
                self._deadlines[request] = at

    def overdue(self, request):
        """True if request's connection was closed past its deadline."""
        with self._conn_lock:
            return request in self._overdue

    def _reap(self):
        while not self._closing.wait(REAP_S):
            now = time.monotonic()
            with self._conn_lock:
                overdue = [r for r, at in self._deadlines.items() if at <= now]
                for r in overdue:
                    del self._deadlines[r]
                    self._overdue.add(r)
            for r in overdue:
                try:
                    r.shutdown(socket.SHUT_RDWR)  # the handler's read or write ends
                except OSError:
                    pass
            if overdue:
                self._refusals.warning("%s: closed %d connection(s) whose request was not in "
                                       "by its deadline", type(self).__name__, len(overdue))

    def server_close(self):
        self._closing.set()
        super().server_close()

    def verify_request(self, request, client_address):
        src = client_address[0] if isinstance(client_address, tuple) else ""
        with self._conn_lock:
            full = len(self._open) >= self.max_conns
            if full or self._by_source[src] >= self.max_per_source:
                refused = True
            else:
                refused = False
                self._open[request] = src
                self._by_source[src] += 1
        if refused:
            self._refusals.warning("%s: too many connections%s, refusing one",
                                   type(self).__name__, "" if full else " from " + src)
        return not refused

    def shutdown_request(self, request):
        with self._conn_lock:
            src = self._open.pop(request, None)
            self._deadlines.pop(request, None)
            self._overdue.discard(request)
            if src is not None:
                self._by_source[src] -= 1
                if not self._by_source[src]:
                    del self._by_source[src]
        super().shutdown_request(request)


class BoundedRequestHandler(BaseHTTPRequestHandler):
    """A handler for BoundedHTTPServer: the IDLE_S idle timeout, and the
    request deadlines (module doc). Read a body with read_body. A request
    cut short (a closed connection, a deadline) is dropped silently."""
    timeout = IDLE_S

    def handle_one_request(self):
        try:  # the idle timeout governs the wait for a request's first byte
            started = bool(self.rfile.peek(1))
        except (TimeoutError, OSError):
            started = False
        if not started:
            self.close_connection = True
            return
        self.server.set_deadline(self.connection, time.monotonic() + HEADERS_S)
        try:
            super().handle_one_request()
        except ConnectionError:
            self.close_connection = True
        finally:
            self.server.set_deadline(self.connection, None)

    def parse_request(self):
        ok = super().parse_request()  # the line and headers are in, or cut short:
        if self.server.overdue(self.connection):  # the end seen was the deadline's
            raise ConnectionError("request headers not in by their deadline")
        self._body_from = time.monotonic()
        self.server.set_deadline(self.connection, self._body_from + BODY_S)
        return ok

    def read_body(self, n):
        """The n bytes of body, read within the body's deadline (handling
        the request has none). Raises ConnectionError when they do not all
        come (the client closed, or the deadline did): a request whose body
        was cut short is never handled."""
        parts, got = [], 0
        while got < n:
            b = self.rfile.read1(min(n - got, BODY_RATE))
            if not b:
                break
            parts.append(b)
            got += len(b)
            self.server.set_deadline(self.connection,
                                     self._body_from + BODY_S + got / BODY_RATE)
        if got < n:
            raise ConnectionError("request body cut short (%d of %d bytes)" % (got, n))
        self.server.set_deadline(self.connection, None)
        return b"".join(parts)


def read_key_file(path):
    """The cluster key in path, as the C library reads it (trailing blanks
    stripped, at least 32 bytes, mode 0600 or stricter). Raises ValueError."""
    st = os.stat(path)
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError("cluster key file %s is readable by others: chmod 600 it" % path)
    key = open(path, "rb").read().rstrip(b"\r\n\t ")
    if len(key) < 32:
        raise ValueError("cluster key file %s: at least 32 bytes of secret" % path)
    return key


def _mac(key, method, target, ts, nonce, body):
    msg = (b"crescent http v1\0" + method.encode() + b"\0" + target.encode() + b"\0" +
           struct.pack("<Q", ts) + nonce + hashlib.sha256(body).digest())
    return hmac.new(key, msg, hashlib.sha256).digest()


def auth_header(method, target, body=b"", key_file=None):
    """The X-Crescent-Auth value that signs one request (target: the path
    and query exactly as sent) with the cluster key of key_file or
    $CRESCENT_CLUSTER_KEY_FILE."""
    key = read_key_file(key_file or os.environ[KEY_ENV])
    ts, nonce = int(time.time()), os.urandom(16)
    return "v1:%d:%s:%s" % (ts, nonce.hex(), _mac(key, method, target, ts, nonce, body).hex())


class HttpAuth:
    """Checks X-Crescent-Auth signatures with one cluster key."""

    def __init__(self, key):
        self.key = key
        self._lock = threading.Lock()
        self._seen = collections.OrderedDict()  # nonce -> ts

    @classmethod
    def from_environment(cls):
        """An HttpAuth for $CRESCENT_CLUSTER_KEY_FILE, or None when it is
        unset (security off). Raises ValueError for a bad key file."""
        path = os.environ.get(KEY_ENV)
        return cls(read_key_file(path)) if path else None

    def verify(self, header, method, target, body):
        """True if header is a fresh, genuine signature of this request."""
        return self.check(header, method, target, body) == "ok"

    def check(self, header, method, target, body):
        """"ok" for a fresh, genuine signature of this request, "bad" for a
        missing, wrong, stale or replayed one, "busy" when the replay cache
        is full of nonces that could still be replayed: such a request is
        refused (the caller answers 503) rather than a live nonce forgotten,
        which would let its request be replayed."""
        try:
            v, ts, nonce, mac = (header or "").split(":")
            ts, nonce, mac = int(ts), bytes.fromhex(nonce), bytes.fromhex(mac)
        except ValueError:
            return "bad"
        now = int(time.time())
        if v != "v1" or len(nonce) != 16 or len(mac) != 32 or abs(now - ts) > SKEW_S:
            return "bad"
        if not hmac.compare_digest(mac, _mac(self.key, method, target, ts, nonce, body)):
            return "bad"
        with self._lock:
            # a nonce matters while its time is inside the window; the
            # oldest-inserted ones go first once out of it
            while self._seen and next(iter(self._seen.values())) < now - SKEW_S:
                self._seen.popitem(last=False)
            if nonce in self._seen:
                return "bad"  # a replay
            if len(self._seen) >= REPLAY_MAX:
                return "busy"
            self._seen[nonce] = ts
        return "ok"
