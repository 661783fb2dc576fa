"""Router <-> worker calls: msgpack over ZMQ REQ/REP, bounded and timed out.

A call opens a fresh REQ socket (LINGER 0, RCVTIMEO) so that a dead or hung
worker costs one timeout and never wedges a socket. Errors travel as
{"error": message, "kind": exception class name}.

A server validates every request before it runs anything: a msgpack map
{"method": str, "args": map} at most MAX_REQUEST bytes, a known method, and
(with a schema) only known parameters of the expected types. Anything else
is answered with kind "BadRequest" and the server keeps serving; a request
over the size limit is dropped by ZMQ (MAXMSGSIZE) before it is read."""
import time

import msgpack
import zmq
from zmq.utils.monitor import recv_monitor_message

MAX_MSG = 256 << 20        # a reply (the client's receive limit)
MAX_REQUEST = 16 << 20     # a request (the server's receive limit)
MAX_ERROR = 2000           # characters of an error message sent back


class BadRequest(ValueError):
    """A request that is not {"method": str, "args": {name: value}} of the
    expected types: refused before any handler runs."""


class RpcError(RuntimeError):
    def __init__(self, kind, msg):
        super().__init__("%s: %s" % (kind, msg))
        self.kind = kind


class RpcTimeout(RpcError):
    def __init__(self, endpoint, method, timeout_s):
        super().__init__("RpcTimeout", "%s on %s: no answer within %ss" % (method, endpoint, timeout_s))


class WorkerGone(RpcError):
    def __init__(self, endpoint, method):
        super().__init__("WorkerGone", "%s on %s: the worker closed the connection before answering"
                         % (method, endpoint))


def call(endpoint, method, timeout_s=60.0, **args):
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.MAXMSGSIZE, MAX_MSG)
    s.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
    s.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
    mon = s.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
    try:
        req = msgpack.packb({"method": method, "args": args}, use_bin_type=True)
        if len(req) > MAX_REQUEST:
            # the server would drop it (and look like a dead worker): refuse here
            raise RpcError("BadRequest", "%s on %s: request of %d bytes exceeds %d"
                           % (method, endpoint, len(req), MAX_REQUEST))
        s.connect(endpoint)
        s.send(req)
        deadline = time.monotonic() + timeout_s
        connected = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RpcTimeout(endpoint, method, timeout_s)
            p = zmq.Poller()
            p.register(s, zmq.POLLIN)
            p.register(mon, zmq.POLLIN)
            ready = dict(p.poll(min(left, 1.0) * 1000))
            if s in ready:
                try:
                    rep = msgpack.unpackb(s.recv(), raw=False, strict_map_key=False)
                except Exception as e:  # noqa: BLE001 - a garbled reply is the worker's fault
                    raise RpcError("BadReply", "%s on %s: %s" % (method, endpoint, e)) from None
                break
            if mon in ready:
                e = recv_monitor_message(mon)
                if e["event"] == zmq.EVENT_CONNECTED:
                    connected = True
                elif e["event"] == zmq.EVENT_DISCONNECTED and connected:
                    if method == "shutdown":
                        # serve() returns as soon as the answer is queued and
                        # the worker exits, which may drop it: the worker
                        # going away is what the call asked for
                        return "bye"
                    # the worker went away with our request (killed, crashed)
                    raise WorkerGone(endpoint, method)
    finally:
        s.disable_monitor()
        mon.close()
        s.close()
    if not isinstance(rep, dict) or ("error" not in rep and "result" not in rep):
        raise RpcError("BadReply", "%s on %s: reply is not {result} or {error}" % (method, endpoint))
    if "error" in rep:
        raise RpcError(str(rep.get("kind", "Error")), str(rep["error"]))
    return rep["result"]


def _type_names(types):
    return " or ".join("nil" if t is type(None) else t.__name__ for t in types)


def parse_request(raw, handlers, schemas=None):
    """Returns (method, args) of a well-formed request or raises BadRequest.
    schemas: {method: {param: (types tuple, required bool)}}; a method
    without a schema only gets its args checked to be a map of str keys."""
    try:
        msg = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception as e:  # noqa: BLE001 - any decoding failure is the caller's
        raise BadRequest("not a msgpack message (%s: %s)" % (type(e).__name__, e)) from None
    if not isinstance(msg, dict):
        raise BadRequest("a request is a map {method, args}, got %s" % type(msg).__name__)
    method = msg.get("method")
    if not isinstance(method, str):
        raise BadRequest("method: a string is required, got %s" % type(method).__name__)
    if method not in handlers:
        raise BadRequest("unknown method %.64r (known: %s)" % (method, ", ".join(sorted(handlers))))
    unknown = sorted(repr(k)[:64] for k in msg if k not in ("method", "args"))
    if unknown:
        raise BadRequest("%s: unknown request fields %s" % (method, ", ".join(unknown)))
    args = msg.get("args", {})
    if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
        raise BadRequest("%s: args must be a map of parameter names" % method)
    schema = (schemas or {}).get(method)
    if schema is not None:
        for k, v in args.items():
            if k not in schema:
                raise BadRequest("%s: unknown parameter %.64r" % (method, k))
            types = schema[k][0]
            if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
                raise BadRequest("%s: parameter %s must be %s, got %s"
                                 % (method, k, _type_names(types), type(v).__name__))
        missing = [k for k, (_, req) in schema.items() if req and k not in args]
        if missing:
            raise BadRequest("%s: missing parameter %s" % (method, ", ".join(missing)))
    return method, args


def _error(e):
    msg = str(e)
    if len(msg) > MAX_ERROR:
        msg = msg[:MAX_ERROR] + "... (%d characters)" % len(msg)
    return {"error": msg, "kind": type(e).__name__}


def serve(bind_host, handlers, on_ready, schemas=None, max_request=MAX_REQUEST):
    """Serves handlers {method: fn(**args)} on an ephemeral port until a
    `shutdown` succeeds. schemas: see parse_request. No request, however
    malformed, ends the loop: each gets exactly one answer."""
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.REP)
    s.setsockopt(zmq.MAXMSGSIZE, max_request)   # larger: the connection is dropped unread
    port = s.bind_to_random_port("tcp://%s" % bind_host)
    on_ready("tcp://%s:%d" % (bind_host, port))
    while True:
        raw = s.recv()
        method = None
        try:
            method, args = parse_request(raw, handlers, schemas)
            rep = {"result": handlers[method](**args)}
        except Exception as e:  # noqa: BLE001 - every error goes back to the caller
            rep = _error(e)
        try:
            out = msgpack.packb(rep, use_bin_type=True)
        except Exception as e:  # noqa: BLE001 - a result msgpack cannot carry
            rep = _error(TypeError("%s: result not serializable: %s" % (method, e)))
            out = msgpack.packb(rep, use_bin_type=True)
        s.send(out)
        if method == "shutdown" and "error" not in rep:
            return
