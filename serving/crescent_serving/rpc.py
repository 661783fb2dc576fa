"""Router <-> worker calls: msgpack over ZMQ REQ/REP, bounded and timed out.

A call opens a fresh REQ socket (LINGER 0, RCVTIMEO) so that a dead or hung
worker costs one timeout and never wedges a socket. Errors travel as
{"error": message, "kind": exception class name}."""
import time

import msgpack
import zmq
from zmq.utils.monitor import recv_monitor_message

MAX_MSG = 256 << 20


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
        s.connect(endpoint)
        s.send(msgpack.packb({"method": method, "args": args}, use_bin_type=True))
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
                rep = msgpack.unpackb(s.recv(), raw=False, strict_map_key=False)
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
    if "error" in rep:
        raise RpcError(rep.get("kind", "Error"), rep["error"])
    return rep["result"]


def serve(bind_host, handlers, on_ready):
    """Serves handlers {method: fn(**args)} forever on an ephemeral port."""
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.REP)
    s.setsockopt(zmq.MAXMSGSIZE, MAX_MSG)
    port = s.bind_to_random_port("tcp://%s" % bind_host)
    on_ready("tcp://%s:%d" % (bind_host, port))
    while True:
        msg = {}
        try:
            msg = msgpack.unpackb(s.recv(), raw=False, strict_map_key=False)
            fn = handlers[msg["method"]]
            rep = {"result": fn(**msg.get("args", {}))}
        except Exception as e:  # noqa: BLE001 - every error goes back to the caller
            rep = {"error": str(e), "kind": type(e).__name__}
        s.send(msgpack.packb(rep, use_bin_type=True))
        if msg.get("method") == "shutdown" and "error" not in rep:
            return
