"""``mooncake.mooncake_store_service``: a store client with a REST API.

crescent's own implementation of Mooncake's service (the
``mc_store_rest_server`` command, ``python3 -m mooncake.mooncake_store_service
--config FILE --port N``), on the standard library's ``http.server`` (Mooncake
uses aiohttp, which Debian's Python here does not have). Same routes and
JSON answers:

  PUT    /api/put            {"key", "value"}  (the value is stored UTF-8 encoded)
  GET    /api/get/<key>      raw bytes, 404 for a missing key
  GET    /api/exist/<key>    {"exists": bool}
  DELETE /api/remove/<key>, DELETE /api/remove_all
  POST   /api/mount          {"size", "protocol", "location"} -> allocate_and_mount_segment
  POST   /api/unmount        {"segment_ids", "grace_period_seconds"} -> unmount_and_free_segment
  POST   /api/mount_shm      {"name", "size", "offset", ...} -> mount_segment("/dev/shm/<name>")
  POST   /api/unmount_shm    {"segment_ids", "grace_period_seconds"} -> unmount_segment
  POST   /api/reconfigure    {"mode": "decode", "path", "size", ...} mounts the file
                             (make-before-break: the previous decode segments are
                             unmounted only once the new one is mounted);
                             {"mode": "prefill"} unmounts them

Bodies are bounded (100 MiB, as Mooncake's). Errors answer 400 (missing or
invalid fields) or 500 with {"error": ...}. Security (docs/security.md): the
service listens on 127.0.0.1 unless ``host`` / ``--host`` says otherwise
(Mooncake's listens on 0.0.0.0) and warns loudly when it listens beyond
loopback without a cluster key; with a cluster key
($CRESCENT_CLUSTER_KEY_FILE, what its store client uses too) every request
must carry a valid ``X-Crescent-Auth`` signature, else 401
(``mooncake._listener.auth_header`` signs one). Connections are bounded like
every crescent listener's (mooncake/_listener.py).
"""
import argparse
import asyncio
import contextlib
import functools
import json
import logging
import signal
import threading
import time
from urllib.parse import unquote, urlparse

from mooncake._listener import (IDLE_S, BoundedHTTPServer, BoundedRequestHandler, HttpAuth,
                                _RateLimited, warn_if_open)
from mooncake.http_metadata_server import _Response
from mooncake.mooncake_config import MooncakeConfig

__all__ = ["MooncakeStoreService", "parse_arguments", "main", "sync_main"]

MAX_BODY = 100 << 20


def _json(status, obj):
    return _Response(status, json.dumps(obj).encode(), "application/json")


def _error(status, msg, **extra):
    d = {"error": msg}
    d.update(extra)
    return _json(status, d)


def _shm_name_to_path(name):
    """/dev/shm/<name> for a plain shared-memory object name, else None."""
    if not isinstance(name, str):
        return None
    n = name[1:] if name.startswith("/") else name
    if not n or "/" in n or n in (".", "..") or "\0" in n:
        return None
    return "/dev/shm/" + n


def _ids(data):
    ids = data.get("segment_ids", [])
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return None
    return ids


def _guarded(handler):
    """A handler whose failure answers 500 with the reason (as Mooncake's)."""
    @functools.wraps(handler)
    async def run(self, request):
        try:
            return await handler(self, request)
        except Exception as e:  # noqa: BLE001
            logging.error("%s: %s", handler.__name__, e)
            return _error(500, str(e))
    return run


@contextlib.asynccontextmanager
async def _locked(lock):
    """Holds a threading lock or an asyncio one (callers may set either)."""
    if hasattr(lock, "__aenter__"):
        async with lock:
            yield
    else:
        with lock:
            yield


class _Request:
    """What a handler reads (the parts of aiohttp's request used here)."""

    def __init__(self, method, body, match_info):
        self.method = method
        self._body = body
        self.match_info = match_info

    async def json(self):
        return json.loads(self._body or b"null")

    async def read(self):
        return self._body


class MooncakeStoreService:
    """A MooncakeDistributedStore set up from a MooncakeConfig, served over REST."""

    def __init__(self, config_path=None, cli_config=None):
        self.store = None
        self.current_mode = "prefill"
        self.mounted_segment_ids = []
        self.last_mount_info = {}
        self._state_lock = threading.Lock()  # handlers run in server threads
        self._httpd = None
        self._thread = None
        self.port = None
        self._auth = None  # HttpAuth when a cluster key is set (start_http_service)
        self._refusals = _RateLimited()
        self.config = (MooncakeConfig.from_file(config_path) if config_path
                       else MooncakeConfig.load_from_env())
        for k, v in (cli_config or {}).items():
            if hasattr(self.config, k):
                setattr(self.config, k, v)

    # ---- the store ---------------------------------------------------------------

    async def start_store_service(self, max_wait_time=60, shutdown_event=None):
        """Sets the store up, retrying every second for up to max_wait_time
        seconds. True once it is up; False on timeout or shutdown."""
        from mooncake.store import MooncakeDistributedStore
        c = self.config
        start = time.monotonic()
        while True:
            if shutdown_event is not None and shutdown_event.is_set():
                return False
            store = MooncakeDistributedStore()
            rc = store.setup({
                "local_hostname": c.local_hostname, "metadata_server": c.metadata_server,
                "global_segment_size": c.global_segment_size,
                "local_buffer_size": c.local_buffer_size, "protocol": c.protocol,
                "rdma_devices": c.device_name or "",
                "master_server_addr": c.master_server_address,
                "enable_ssd_offload": c.enable_ssd_offload,
                "ssd_offload_path": c.ssd_offload_path, "tenant_id": c.tenant_id})
            if rc == 0:
                self.store = store
                logging.info("store service started on %s", c.local_hostname)
                return True
            store.close()
            left = max_wait_time - (time.monotonic() - start)
            logging.warning("store setup failed (%d); %.1f s left", rc, max(left, 0))
            if left <= 0:
                return False
            if shutdown_event is not None:
                try:
                    await asyncio.wait_for(shutdown_event.wait(), timeout=min(1.0, left))
                    return False
                except asyncio.TimeoutError:
                    pass
            else:
                await asyncio.sleep(min(1.0, left))

    async def stop(self):
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self.store is not None:
            rc = self.store.close()
            self.store = None
            if rc != 0:
                logging.warning("store close returned %s", rc)

    # ---- handlers (async, like Mooncake's; each returns a response) ------------------

    @_guarded
    async def handle_put(self, request):
        data = await request.json()
        if not isinstance(data, dict) or not data.get("key") or data.get("value") is None:
            return _error(400, "Missing key or value")
        if not isinstance(data["key"], str) or not isinstance(data["value"], str):
            return _error(400, "key and value must be strings")
        if self.store.put(data["key"], data["value"].encode()) != 0:
            return _error(500, "PUT operation failed")
        return _json(200, {"status": "success"})

    @_guarded
    async def handle_get(self, request):
        key = request.match_info["key"]
        value = self.store.get(key)
        if not value:  # a miss is b"" (None from other stores): is it an empty value?
            ex = self.store.is_exist(key) if hasattr(self.store, "is_exist") else 0
            if ex < 0:
                return _error(500, "Exist check failed")
            if not ex:
                return _error(404, "Key not found")
            value = b""
        return _Response(200, bytes(value), "application/octet-stream")

    @_guarded
    async def handle_exist(self, request):
        ex = self.store.is_exist(request.match_info["key"])
        if ex < 0:
            return _error(500, "Exist check failed")
        return _json(200, {"exists": ex > 0})

    @_guarded
    async def handle_remove(self, request):
        if self.store.remove(request.match_info["key"]) != 0:
            return _error(500, "Remove operation failed")
        return _json(200, {"status": "success"})

    @_guarded
    async def handle_remove_all(self, request):
        n = self.store.remove_all()
        if n < 0:
            return _error(500, "RemoveAll operation failed")
        return _json(200, {"status": "success removed %d keys" % n})

    @_guarded
    async def handle_mount(self, request):
        data = await request.json() or {}
        size = data.get("size")
        if type(size) is not int or size <= 0:
            return _error(400, "Invalid size, must be a positive integer")
        r = self.store.allocate_and_mount_segment(size, data.get("protocol", self.config.protocol),
                                                  data.get("location", ""))
        if r["ret"] != 0:
            return _error(500, "Allocate and mount failed, ret=%d" % r["ret"])
        return _json(200, {"status": "success", "segment_ids": r["segment_ids"],
                           "allocated_size": r["allocated_size"]})

    @_guarded
    async def handle_unmount(self, request):
        data = await request.json() or {}
        ids = _ids(data)
        if not ids:
            return _error(400, "Missing segment_ids")
        grace = data.get("grace_period_seconds", 0)
        rc = (self.store.unmount_and_free_segment(ids, grace) if grace
              else self.store.unmount_and_free_segment(ids))
        if rc != 0:
            return _error(500, "Unmount and free failed, ret=%d" % rc)
        return _json(200, {"status": "success"})

    def _mount_file(self, path, data):
        size, offset = data.get("size"), data.get("offset", 0)
        if type(size) is not int or type(offset) is not int or size <= 0 or offset < 0:
            return None
        return self.store.mount_segment(path, size, offset,
                                        data.get("protocol", self.config.protocol),
                                        data.get("location", ""))

    @_guarded
    async def handle_mount_shm(self, request):
        data = await request.json() or {}
        path = _shm_name_to_path(data.get("name"))
        r = self._mount_file(path, data) if path else None
        if r is None:
            return _error(400, "Missing or invalid name or size")
        if r["ret"] != 0:
            return _error(500, "Mount failed, ret=%d" % r["ret"])
        return _json(200, {"status": "success", "segment_ids": r["segment_ids"]})

    @_guarded
    async def handle_unmount_shm(self, request):
        data = await request.json() or {}
        ids = _ids(data)
        if not ids:
            return _error(400, "Missing segment_ids")
        grace = data.get("grace_period_seconds", 0)
        failed = []
        async with _locked(self._state_lock):
            for sid in ids:  # one at a time: a failure names exactly its ids
                rc = (self.store.unmount_segment([sid], grace) if grace
                      else self.store.unmount_segment([sid]))
                if rc != 0:
                    failed.append(sid)
                elif sid in self.mounted_segment_ids:
                    self.mounted_segment_ids.remove(sid)
            if not self.mounted_segment_ids:
                self.current_mode = "prefill"
        if failed:
            return _error(500, "Unmount failed for one or more segments",
                          failed_segment_ids=failed)
        return _json(200, {"status": "success"})

    @_guarded
    async def handle_reconfigure(self, request):
        data = await request.json() or {}
        mode = str(data.get("mode", "")).lower()
        if mode == "decode":
            path = data.get("path")
            if not isinstance(path, str) or not path or data.get("size") is None:
                return _error(400, "Missing path or size for decode mode")
            async with _locked(self._state_lock):
                previous = list(self.mounted_segment_ids)
                r = self._mount_file(path, data)
                if r is None:
                    return _error(400, "Invalid size or offset")
                if r["ret"] != 0:
                    if previous:  # keep serving from the old segments
                        return _error(500, "Mount failed, ret=%d; keeping previous decode "
                                      "segments" % r["ret"], mode=self.current_mode)
                    self.current_mode = "prefill"
                    self.last_mount_info = {}
                    return _error(500, "Mount failed, ret=%d; rolled back to prefill"
                                  % r["ret"], mode=self.current_mode)
                failed = [sid for sid in previous if self.store.unmount_segment([sid]) != 0]
                self.mounted_segment_ids = list(r["segment_ids"]) + failed
                self.current_mode = "decode"
                self.last_mount_info = {k: data.get(k) for k in
                                        ("path", "offset", "size", "protocol", "location")}
                ids = list(self.mounted_segment_ids)
            return _json(200, {"status": "success", "mode": "decode", "segment_ids": ids})
        if mode == "prefill":
            async with _locked(self._state_lock):
                if self.mounted_segment_ids:
                    rc = self.store.unmount_segment(self.mounted_segment_ids)
                    if rc != 0:
                        return _error(500, "Unmount failed, ret=%d" % rc)
                    self.mounted_segment_ids = []
                self.current_mode = "prefill"
                self.last_mount_info = {}
            return _json(200, {"status": "success", "mode": "prefill"})
        return _error(400, "Invalid mode. Use 'decode' or 'prefill'")

    # ---- HTTP ----------------------------------------------------------------------

    _ROUTES = {
        ("POST", "/api/reconfigure"): "handle_reconfigure",
        ("POST", "/api/mount_shm"): "handle_mount_shm",
        ("POST", "/api/unmount_shm"): "handle_unmount_shm",
        ("POST", "/api/mount"): "handle_mount",
        ("POST", "/api/unmount"): "handle_unmount",
        ("PUT", "/api/put"): "handle_put",
        ("DELETE", "/api/remove_all"): "handle_remove_all",
    }
    _KEY_ROUTES = {("GET", "/api/get/"): "handle_get", ("GET", "/api/exist/"): "handle_exist",
                   ("DELETE", "/api/remove/"): "handle_remove"}

    def _dispatch(self, method, path, body):
        name, match = self._ROUTES.get((method, path)), {}
        if name is None:
            for (m, prefix), n in self._KEY_ROUTES.items():
                if m == method and path.startswith(prefix) and len(path) > len(prefix):
                    name, match = n, {"key": unquote(path[len(prefix):])}
                    break
        if name is None:
            return _error(404, "not found")
        if self.store is None:
            return _error(500, "store is not set up")
        t0 = time.perf_counter()
        try:
            return asyncio.run(getattr(self, name)(_Request(method, body, match)))
        except Exception as e:  # noqa: BLE001 - Mooncake answers 500 with the reason
            logging.error("%s %s: %s", method, path, e)
            return _error(500, str(e))
        finally:
            logging.info("%s %s completed in %.2f ms", method, path,
                         (time.perf_counter() - t0) * 1000)

    def _handler(self):
        service = self

        class Handler(BoundedRequestHandler):  # and its request deadlines
            timeout = IDLE_S  # idle, first byte: closed after

            def _serve(self):
                n = int(self.headers.get("Content-Length") or 0)
                auth = service._auth
                sig = self.headers.get("X-Crescent-Auth")
                if auth is not None and not sig:
                    r = _error(401, "X-Crescent-Auth required (cluster key)")
                    self.close_connection = True  # the body is never read
                elif n < 0 or n > MAX_BODY:
                    r = _error(413, "body too large")
                    self.close_connection = True
                else:
                    body = self.read_body(n)
                    verdict = "ok" if auth is None else auth.check(sig, self.command,
                                                                   self.path, body)
                    if verdict == "busy":
                        r = _error(503, "server busy (replay cache full), retry")
                    elif verdict != "ok":
                        service._refusals.warning("REST API: refused a request with a bad "
                                                  "signature from %s", self.client_address[0])
                        r = _error(401, "bad or replayed X-Crescent-Auth")
                    else:
                        r = service._dispatch(self.command, urlparse(self.path).path, body)
                self.send_response(r.status)
                self.send_header("Content-Type", r.content_type)
                self.send_header("Content-Length", str(len(r.body)))
                self.end_headers()
                self.wfile.write(r.body)

            do_GET = do_PUT = do_POST = do_DELETE = _serve

            def log_message(self, *args):
                pass

        return Handler

    async def start_http_service(self, port=8080, host="127.0.0.1"):
        """Serves the REST API in a background thread; self.port is the
        bound port (port 0 = ephemeral). True once listening. With a cluster
        key ($CRESCENT_CLUSTER_KEY_FILE, security on) every request must be
        signed (X-Crescent-Auth, mooncake._listener.auth_header), else 401;
        without one it warns loudly when host is beyond loopback."""
        self._auth = HttpAuth.from_environment()
        self._refusals = _RateLimited()
        self._httpd = BoundedHTTPServer((host, port), self._handler())
        warn_if_open("mooncake store service REST API", host, self._auth is not None)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        name="mooncake-store-service")
        self._thread.start()
        logging.info("REST API started on %s:%d", host, self.port)
        return True


def parse_arguments(argv=None):
    p = argparse.ArgumentParser(description="Mooncake Store Service with REST API")
    p.add_argument("--config", type=str, help="Path to Mooncake config file")
    p.add_argument("-D", "--define", action="append", default=[],
                   help="Override configuration with key=value pairs")
    p.add_argument("--port", type=int, default=8080, help="HTTP API port (default: 8080)")
    p.add_argument("--host", type=str, default="127.0.0.1",
                   help="HTTP API address (default: 127.0.0.1; Mooncake's is 0.0.0.0)")
    p.add_argument("--max-wait-time", type=float, default=60,
                   help="Maximum total wait time in seconds (default: 60)")
    return p.parse_args(argv)


async def main(argv=None):
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")
    args = parse_arguments(argv)
    cli = {}
    for item in args.define:
        if "=" in item:
            k, v = item.split("=", 1)
            cli[k] = v
        else:
            logging.warning("Ignoring invalid CLI config: %s", item)
    service = MooncakeStoreService(args.config, cli)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        if not await service.start_store_service(args.max_wait_time, stop):
            if stop.is_set():
                return 0
            raise RuntimeError("Failed to start store service")
        await service.start_http_service(args.port, args.host)
        print("mooncake store service listening on %s:%d" % (args.host, service.port),
              flush=True)
        await stop.wait()
        return 0
    finally:
        await service.stop()


def sync_main(argv=None):
    """The mc_store_rest_server command."""
    return asyncio.run(main(argv))


if __name__ == "__main__":
    raise SystemExit(sync_main())
