"""Point-to-point messages between processes: Mooncake's ``RpcInterface``
(``mooncake.engine.RpcInterface``, alias ``CoroRPCInterface``).

A server listens on ``host:port``; clients send it byte strings
(``send_data``) or tensors (``send_tensor``), and the server hands each one
to the callback set with ``set_data_receive_callback`` /
``set_tensor_receive_callback`` as a ``ReceivedData`` / ``ReceivedTensor``.
A send returns once the server took the message (0), or -1.

crescent's own implementation over TCP (Mooncake's runs on coro_rpc).
Frame: ``b"CRPC"``, u8 kind (1 data, 2 tensor), u32 metadata length, u64
payload length (little-endian), the metadata (JSON, tensors only: shape and
dtype), the payload; the server answers one i32 status. Frames are bounded
(metadata 64 KiB, payload ``MAX_PAYLOAD``) before anything is allocated.
"""
import asyncio
import json
import socket
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["RpcInterface", "CoroRPCInterface", "ReceivedData", "ReceivedTensor",
           "create_rpc_client", "create_rpc_server"]

_HDR = struct.Struct("<4sBIQ")
_MAGIC = b"CRPC"
_DATA, _TENSOR = 1, 2
MAX_META = 64 << 10
MAX_PAYLOAD = 4 << 30


def _split(address):
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError("address must be host:port, not %r" % (address,))
    return host or "0.0.0.0", int(port)


def _recv_exact(sock, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        r = sock.recv_into(view[got:])
        if r == 0:
            raise ConnectionError("peer closed the connection")
        got += r
    return buf


class ReceivedData:
    """Bytes a server received: source_address ("ip:port" of the sender),
    data_size, get_bytes(), get_memory_view()."""
    __slots__ = ("source_address", "data_size", "_data")

    def __init__(self, source_address, data):
        self.source_address = source_address
        self.data_size = len(data)
        self._data = data

    def get_bytes(self):
        return bytes(self._data)

    def get_memory_view(self):
        return memoryview(self._data)


class ReceivedTensor:
    """A tensor a server received: source_address, shape (list of int),
    dtype (torch's name, e.g. "torch.float32"), total_bytes, and its data:
    get_data_size(), get_data_as_bytes(), get_memory_view()."""
    __slots__ = ("source_address", "shape", "dtype", "total_bytes", "_data")

    def __init__(self, source_address, shape, dtype, data):
        self.source_address = source_address
        self.shape = list(shape)
        self.dtype = dtype
        self.total_bytes = len(data)
        self._data = data

    def get_data_size(self):
        return self.total_bytes

    def get_data_as_bytes(self):
        return bytes(self._data)

    def get_memory_view(self):
        return memoryview(self._data)


class RpcInterface:
    """See the module doc. One object may be a client, a server, or both."""

    def __init__(self):
        self._timeout = 30.0
        self._pool_size = 10
        self._pool = {}              # target address -> idle sockets; guarded by _mu
        self._mu = threading.Lock()
        self._listener = None
        self._workers = None
        self._serving = threading.Event()
        self._stopped = threading.Event()
        self._data_cb = None
        self._tensor_cb = None
        self._max_conns = 8
        self._conns = set()          # accepted sockets; guarded by _mu

    # ---- setup --------------------------------------------------------------
    def initialize(self, listen_address="", thread_count=0, timeout_seconds=30, pool_size=10):
        """Client settings, and a server on listen_address when it is not
        empty. True, or False when the address cannot be bound."""
        if not self.initialize_client(pool_size, timeout_seconds):
            return False
        if listen_address:
            return self.initialize_server(listen_address, thread_count or 8, timeout_seconds)
        return True

    def initialize_client(self, pool_size=10, timeout_seconds=30):
        """Up to pool_size idle connections kept per server; sends time out
        after timeout_seconds. True."""
        for v, n in ((pool_size, "pool_size"), (timeout_seconds, "timeout_seconds")):
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError("%s must be a positive int" % n)
        self._pool_size, self._timeout = pool_size, float(timeout_seconds)
        return True

    def initialize_server(self, listen_address, thread_count=8, timeout_seconds=30):
        """Binds and listens on listen_address ("host:port", port 0 picks
        one: see ``listen_port``); up to thread_count connections are served
        at once. True, or False when it cannot be bound."""
        if not isinstance(listen_address, str):
            raise TypeError("listen_address must be str")
        if not isinstance(thread_count, int) or thread_count <= 0:
            raise ValueError("thread_count must be a positive int")
        host, port = _split(listen_address)
        if self._listener is not None:
            return False
        try:
            s = socket.create_server((host, port), reuse_port=False, backlog=64)
        except OSError:
            return False
        self._listener, self._max_conns = s, thread_count
        self._timeout = float(timeout_seconds)
        return True

    @property
    def listen_port(self):
        """The port the server listens on (crescent's addition), or 0."""
        return self._listener.getsockname()[1] if self._listener else 0

    def start_server_async(self):
        """Serves in background threads; True, False without
        initialize_server()."""
        if self._listener is None:
            return False
        if self._serving.is_set():
            return True
        self._stopped.clear()
        self._workers = ThreadPoolExecutor(max_workers=self._max_conns,
                                           thread_name_prefix="crescent-rpc")
        self._serving.set()
        threading.Thread(target=self._accept_loop, name="crescent-rpc-accept",
                         daemon=True).start()
        return True

    def start_server(self):
        """Serves until stop_server() (from another thread or a callback);
        True, False without initialize_server()."""
        if not self.start_server_async():
            return False
        self._stopped.wait()
        return True

    def stop_server(self):
        """Stops accepting, closes the connections, waits for callbacks in
        flight."""
        lst, self._listener = self._listener, None
        self._serving.clear()
        if lst is not None:
            try:
                lst.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            lst.close()
        with self._mu:
            conns, self._conns = list(self._conns), set()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._workers is not None:
            self._workers.shutdown(wait=True)
            self._workers = None
        self._stopped.set()

    def set_data_receive_callback(self, callback):
        """callback(ReceivedData) for every send_data() this server gets."""
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable")
        self._data_cb = callback

    def set_tensor_receive_callback(self, callback):
        """callback(ReceivedTensor) for every send_tensor() this server gets."""
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable")
        self._tensor_cb = callback

    # ---- server -------------------------------------------------------------
    def _accept_loop(self):
        lst = self._listener
        slots = threading.BoundedSemaphore(self._max_conns)
        while self._serving.is_set() and lst is not None:
            try:
                conn, peer = lst.accept()
            except OSError:
                break
            if not slots.acquire(blocking=False):
                conn.close()  # bounded: more connections than thread_count
                continue
            with self._mu:
                self._conns.add(conn)
            try:
                self._workers.submit(self._serve_conn, conn, "%s:%d" % peer[:2], slots)
            except RuntimeError:  # shutting down
                slots.release()
                conn.close()

    def _serve_conn(self, conn, peer, slots):
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                magic, kind, mlen, plen = _HDR.unpack(_recv_exact(conn, _HDR.size))
                if magic != _MAGIC or kind not in (_DATA, _TENSOR) or mlen > MAX_META or \
                        plen > MAX_PAYLOAD:
                    return  # not our protocol: drop the connection
                meta = bytes(_recv_exact(conn, mlen)) if mlen else b""
                payload = _recv_exact(conn, plen) if plen else bytearray()
                status = 0
                try:
                    if kind == _DATA:
                        if self._data_cb is not None:
                            self._data_cb(ReceivedData(peer, payload))
                    else:
                        m = json.loads(meta)
                        if self._tensor_cb is not None:
                            self._tensor_cb(ReceivedTensor(peer, m["shape"], m["dtype"], payload))
                except Exception:  # noqa: BLE001 - the sender learns it failed
                    status = -1
                conn.sendall(struct.pack("<i", status))
        except (OSError, ConnectionError, ValueError, KeyError):
            pass
        finally:
            with self._mu:
                self._conns.discard(conn)
            conn.close()
            slots.release()

    # ---- client -------------------------------------------------------------
    def _send(self, target_address, kind, meta, payload):
        host, port = _split(target_address)
        key = (host, port)
        with self._mu:
            idle = self._pool.get(key)
            sock = idle.pop() if idle else None
        try:
            if sock is None:
                sock = socket.create_connection(key, timeout=self._timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(self._timeout)
            sock.sendall(_HDR.pack(_MAGIC, kind, len(meta), len(payload)) + meta)
            if len(payload):
                sock.sendall(payload)
            status = struct.unpack("<i", _recv_exact(sock, 4))[0]
        except (OSError, ConnectionError):
            if sock is not None:
                sock.close()
            return -1
        with self._mu:
            idle = self._pool.setdefault(key, [])
            if len(idle) < self._pool_size:
                idle.append(sock)
                sock = None
        if sock is not None:
            sock.close()
        return 0 if status == 0 else -1

    def send_data(self, target_address, data):
        """Sends bytes (any buffer) to the server at target_address: 0 once
        it took them (and its callback returned), -1 otherwise."""
        if not isinstance(target_address, str):
            raise TypeError("target_address must be str")
        payload = memoryview(data).cast("B")
        if len(payload) > MAX_PAYLOAD:
            raise ValueError("data larger than %d bytes" % MAX_PAYLOAD)
        return self._send(target_address, _DATA, b"", payload)

    def send_tensor(self, target_address, tensor):
        """Sends a CPU tensor (its shape, dtype and bytes): 0 or -1."""
        if not isinstance(target_address, str):
            raise TypeError("target_address must be str")
        from crescent import tensor_codec as tc
        torch = tc.torch()
        if not isinstance(tensor, torch.Tensor):
            raise TypeError("tensor must be a torch.Tensor")
        t = tensor.detach().to("cpu").contiguous()
        payload = memoryview(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b""
        if len(payload) > MAX_PAYLOAD:
            raise ValueError("tensor larger than %d bytes" % MAX_PAYLOAD)
        meta = json.dumps({"shape": list(t.shape), "dtype": str(t.dtype)}).encode()
        return self._send(target_address, _TENSOR, meta, payload)

    def send_data_async(self, target_address, data, loop):
        """send_data() in loop's default executor: an awaitable of 0 or -1."""
        if not isinstance(loop, asyncio.AbstractEventLoop):
            raise TypeError("loop must be an asyncio event loop")
        data = bytes(memoryview(data).cast("B"))
        return loop.run_in_executor(None, self.send_data, target_address, data)

    def send_tensor_async(self, target_address, tensor, loop):
        """send_tensor() in loop's default executor: an awaitable of 0 or -1."""
        if not isinstance(loop, asyncio.AbstractEventLoop):
            raise TypeError("loop must be an asyncio event loop")
        return loop.run_in_executor(None, self.send_tensor, target_address, tensor)

    def close(self):
        """Stops the server and drops idle connections (crescent's addition)."""
        self.stop_server()
        with self._mu:
            pools, self._pool = list(self._pool.values()), {}
        for idle in pools:
            for s in idle:
                s.close()


CoroRPCInterface = RpcInterface


def create_rpc_client(local_rank=0, world_size=1):
    """An RpcInterface set up as a client (Mooncake's factory; the ranks are
    accepted and unused, as there)."""
    r = RpcInterface()
    r.initialize("", 0, 30, 10)
    return r


def create_rpc_server(local_rank=0, world_size=1):
    """An RpcInterface listening on 0.0.0.0:8080, Mooncake's fixed address
    (call start_server_async() to serve; when 8080 is taken the object is
    returned without a server, as Mooncake ignores that failure)."""
    r = RpcInterface()
    r.initialize("0.0.0.0:8080", 0, 30, 10)
    return r
