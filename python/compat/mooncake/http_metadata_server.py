"""``mooncake.http_metadata_server``: Mooncake's HTTP metadata server.

Two forms, same HTTP API (``GET/PUT/DELETE /metadata?key=K``, ``GET /health``):

* ``main()`` / ``python3 -m mooncake.http_metadata_server --port N`` runs
  crescent's C server, crescent-metadata (what the ``mooncake_http_metadata_server``
  command runs);
* ``KVBootstrapServer(port, host)``: Mooncake's in-process Python server
  class (``run()`` serves in a background thread and returns it, ``poll()``,
  ``close()``), crescent's own implementation on the standard library
  (``http.server``; Mooncake's uses aiohttp, which Debian's Python here does
  not have). ``store`` is the key -> bytes dict; keys are stripped of
  surrounding blanks, a missing or blank key is refused with 400. It has
  no credentials: it listens on 0.0.0.0 by default as Mooncake's (peers on
  other hosts bootstrap through it), warns loudly when it listens beyond
  loopback, and bounds its connections like every crescent listener
  (mooncake/_listener.py; docs/security.md).
"""
import asyncio
import enum
import logging
import sys
import threading
from urllib.parse import parse_qs, urlparse

from mooncake._listener import IDLE_S, BoundedHTTPServer, BoundedRequestHandler, warn_if_open
from mooncake.cli import http_metadata_server_main as main

__all__ = ["main", "KVBootstrapServer", "KVPoll"]

logger = logging.getLogger(__name__)


class KVPoll(enum.IntEnum):
    """State of a KVBootstrapServer (the values of SGLang's KVPoll)."""
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4

MAX_VALUE = 64 << 20  # bytes in one PUT body


class _Response:
    """What a handler returns (the fields of aiohttp's web.Response used here)."""

    def __init__(self, status, body=b"", content_type="text/plain"):
        self.status = status
        self.body = body
        self.content_type = content_type

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")


class KVBootstrapServer:
    def __init__(self, port=8080, host="0.0.0.0"):
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ValueError("port must be in 0..65535")
        self.port = port
        self.host = host
        self.store = {}
        self._lock = threading.Lock()
        self._httpd = None
        self._thread = None

    async def _handle_metadata(self, request):
        """One /metadata request: request.method, request.query (dict with
        "key"), await request.read() for the body."""
        key = (request.query.get("key") or "").strip()
        if not key:
            return _Response(400, b"missing or empty key")
        if request.method == "GET":
            with self._lock:
                v = self.store.get(key)
            if v is None:
                return _Response(404, b"metadata not found")
            return _Response(200, v, "application/json")
        if request.method == "PUT":
            body = await request.read()
            if len(body) > MAX_VALUE:
                return _Response(413, b"value too large")
            with self._lock:
                self.store[key] = bytes(body)
            return _Response(200, b"metadata updated")
        if request.method == "DELETE":
            with self._lock:
                found = self.store.pop(key, None) is not None
            return _Response(200 if found else 404,
                             b"metadata deleted" if found else b"metadata not found")
        return _Response(405, b"method not allowed")

    def _handler(self):
        server = self

        class Handler(BoundedRequestHandler):  # and its request deadlines
            timeout = IDLE_S  # idle, first byte: closed after

            def _serve(self):
                url = urlparse(self.path)
                if url.path == "/health" and self.command == "GET":
                    return self._reply(_Response(200, b"OK"))
                if url.path != "/metadata":
                    return self._reply(_Response(404, b"not found"))
                n = int(self.headers.get("Content-Length") or 0)
                if n < 0 or n > MAX_VALUE:
                    return self._reply(_Response(413, b"value too large"))
                body = self.read_body(n)
                q = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}

                class Req:
                    method, query = self.command, q

                    async def read(self_inner):
                        return body
                self._reply(asyncio.run(server._handle_metadata(Req())))

            def _reply(self, r):
                self.send_response(r.status)
                self.send_header("Content-Type", r.content_type)
                self.send_header("Content-Length", str(len(r.body)))
                self.end_headers()
                self.wfile.write(r.body)

            do_GET = do_PUT = do_DELETE = _serve

            def log_message(self, *args):
                pass

        return Handler

    @property
    def thread(self):
        """The serving thread (None before run())."""
        return self._thread

    def run(self):
        """Binds, then serves in a background thread, which it returns (as
        Mooncake's). A bind failure raises OSError here, and nothing is
        logged as started; self.port is the bound port (port 0: ephemeral)."""
        try:
            self._httpd = BoundedHTTPServer((self.host, self.port), self._handler())
        except OSError:
            self._thread = threading.Thread(target=lambda: None, name="mooncake-metadata")
            self._thread.start()  # Mooncake's run() leaves a finished thread behind
            raise
        self.port = self._httpd.server_address[1]
        warn_if_open("KVBootstrapServer (HTTP metadata)", self.host)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        name="mooncake-metadata")
        self._thread.start()
        logger.info("HTTP Metadata Server started on %s:%d", self.host, self.port)
        return self._thread

    def start(self):
        """run(), returning the server."""
        self.run()
        return self

    def poll(self):
        """KVPoll.Success while serving, KVPoll.Failed otherwise."""
        t = self._thread
        return KVPoll.Success if self._httpd is not None and t is not None and t.is_alive() \
            else KVPoll.Failed

    def close(self):
        """Stops serving and joins the thread (idempotent)."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
