"""Transfer Engine for Python (Mooncake's ``mooncake.engine`` API).

    engine = TransferEngine()
    engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
    engine.register_memory(addr, length)
    engine.transfer_sync_write(peer_name, addr, peer_addr, length)

Every method of the native type releases the GIL while it moves data; one
engine may be shared by several Python threads.  Addresses are ints (e.g.
``numpy_array.ctypes.data``); wherever a local buffer address is expected, a
buffer-protocol object (numpy array, bytearray, memoryview, mmap) is accepted
as well and its length is used when the length argument is omitted.
"""
import atexit
import ctypes
import enum
import os
import threading
import weakref

from crescent import _crescent

__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify", "ScatterTransferCompletionStatus",
           "allocate_host_buffer", "free_host_buffer",
           "ScatterTransferTicket"]


class TransferOpcode(enum.IntEnum):
    """Direction of a transfer: Mooncake's Read (0) and Write (1); READ and
    WRITE are aliases kept for crescent's earlier spelling."""
    Read = 0
    Write = 1
    READ = 0
    WRITE = 1


# Transports that need hardware crescent does not drive: initialize() fails
# with -1 like a Mooncake build without them.
UNSUPPORTED_PROTOCOLS = frozenset(("nvlink", "nvlink_intra", "hip", "musa", "efa", "cxl",
                                   "ascend", "hccs", "barex", "nvmeof", "ubshmem", "cuda"))
# Memory locations crescent cannot register (device memory).
_DEVICE_LOCATIONS = ("cuda", "musa", "npu", "hip", "gpu", "xpu", "mlu")
# Statuses of a submission that never reached a peer.
_UNREACHABLE = (-2, -111, -113, -110, -104, -6)


class ScatterTransferCompletionStatus(enum.IntEnum):
    """How a scatter transfer ended (Mooncake's names)."""
    COMPLETED = 0
    FAILED_DRAINED = 1
    COMPLETION_UNKNOWN = 2


class ScatterTransferTicket:
    """Result of scatter_transfer_sync_*_with_ticket(): Mooncake's ticket
    keeps a scatter alive until its DMA drained. crescent's scatter is done
    when the call returns, so the ticket is drained already: ``status`` is
    COMPLETED or FAILED_DRAINED, ``drained`` True, ``drain(timeout_ms)``
    returns True at once."""
    __slots__ = ("_status", "result")

    def __init__(self, result):
        self.result = result
        self._status = (ScatterTransferCompletionStatus.COMPLETED if result == 0
                        else ScatterTransferCompletionStatus.FAILED_DRAINED)

    @property
    def status(self):
        return self._status

    @property
    def drained(self):
        return True

    def drain(self, timeout_ms):
        if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms < 0:
            raise TypeError("timeout_ms must be a non-negative int")
        return True

    def __repr__(self):
        return "ScatterTransferTicket(status=%s)" % self._status.name


class TransferNotify:
    """A notification: ``name`` and ``msg`` (str). Sent with transfer_sync(...,
    notify=...) after the transfer's writes landed; received with
    get_notifies().  On the wire the payload is ``name + "\\0" + msg`` (UTF-8);
    a payload without NUL (sent by C code) arrives with the sender's segment
    name as ``name``."""
    __slots__ = ("name", "msg")

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg

    def _payload(self):
        name = self.name.encode() if isinstance(self.name, str) else bytes(self.name)
        msg = self.msg.encode("utf-8", "surrogateescape") if isinstance(self.msg, str) else bytes(self.msg)
        return name + b"\0" + msg

    def __eq__(self, other):
        return isinstance(other, TransferNotify) and (self.name, self.msg) == (other.name, other.msg)

    def __repr__(self):
        return "TransferNotify(name=%r, msg=%r)" % (self.name, self.msg)


_live = weakref.WeakSet()


@atexit.register
def _close_all():
    # Engines still open at interpreter exit unpublish their segment.
    for e in list(_live):
        try:
            e.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def _payload(notify):
    if notify is None:
        return None
    if not isinstance(notify, TransferNotify):
        raise TypeError("notify must be a TransferNotify, not %s" % type(notify).__name__)
    if not isinstance(notify.name, (str, bytes)) or not isinstance(notify.msg, (str, bytes)):
        raise TypeError("TransferNotify name and msg must be str")
    return notify._payload()


# send_probe() payload; get_notifies() drops it (a user notification always
# has a non-empty name or no NUL at all).
_PROBE = b"\0\0crescent-probe"


class TransferEngine(_crescent.TransferEngine):
    """Mooncake-compatible Transfer Engine (see the module doc)."""

    def __init__(self):
        super().__init__()
        _live.add(self)

    def initialize(self, local_hostname, metadata_server, protocol="tcp", device_name=""):
        """Starts the engine. Returns 0, or -1 for a transport that needs
        hardware crescent does not have (nvlink, hip, efa, ...)."""
        if isinstance(protocol, str) and protocol.lower() in UNSUPPORTED_PROTOCOLS:
            return -1
        return super().initialize(local_hostname, metadata_server, protocol, device_name)

    def initialize_ext(self, local_hostname, metadata_server, protocol="tcp", device_name="",
                       *args, **kwargs):
        if isinstance(protocol, str) and protocol.lower() in UNSUPPORTED_PROTOCOLS:
            return -1
        return super().initialize_ext(local_hostname, metadata_server, protocol, device_name,
                                      *args, **kwargs)

    def register_memory(self, buffer_addr, capacity=None, location="*",
                        remote_accessible=True, update_metadata=True):
        """Registers host memory. location names where it lives ("*", the
        default, lets the engine find out, as Mooncake's wildcard; "cpu:N"
        host memory); device memory ("cuda:0", "musa:0", ...) is not
        supported here: -1."""
        if location is not None and not isinstance(location, str):
            raise TypeError("location must be str, not %s" % type(location).__name__)
        if location and location.split(":")[0].lower() in _DEVICE_LOCATIONS:
            return -1
        if capacity is None:
            return super().register_memory(buffer_addr)
        return super().register_memory(buffer_addr, capacity)

    def batch_register_memory(self, buffer_addresses, capacities, location="*"):
        """Registers every range or none. Returns 0, or -1 when the lists
        differ in length (Mooncake's answer), or a negative error. location:
        one str for all ranges (Mooncake's signature) or a list of str;
        device locations (cuda:0, ...) return -1 (no device memory here)."""
        locations = [location] if isinstance(location, str) else location
        if locations is not None:
            if not hasattr(locations, "__iter__"):
                raise TypeError("location must be str or a list of str")
            for loc in locations:
                if not isinstance(loc, str):
                    raise TypeError("locations must hold str")
                if loc.split(":")[0].lower() in _DEVICE_LOCATIONS:
                    return -1
        return super().batch_register_memory(buffer_addresses, capacities)

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length,
                              transport_hint="", nic_hint=""):
        """Submits one write; returns its batch id (> 0). A write to a peer
        that cannot be resolved or reached returns 0, as Mooncake's
        submission does for a segment it cannot open; other failures are
        negative."""
        rc = super().transfer_submit_write(target_hostname, buffer, peer_buffer_address, length,
                                           transport_hint, nic_hint)
        return 0 if rc in _UNREACHABLE else rc

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode,
                      notify=None, transport_hint="", nic_hint=""):
        """Synchronous transfer of one range in direction ``opcode``; ``notify``
        (TransferNotify) is delivered once the data landed. Returns 0 or a
        negative status."""
        return self._transfer_sync(target_hostname, [buffer], [peer_buffer_address], [length],
                                   opcode, _payload(notify))

    def batch_transfer_sync(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                            opcode, notify=None, transport_hint="", nic_hint=""):
        """Synchronous batch transfer; see transfer_sync()."""
        return self._transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths,
                                   opcode, _payload(notify))

    def send_notify(self, target_hostname, notify):
        """Sends a TransferNotify now (no ordering with data). Returns 0 or negative."""
        if notify is None:
            raise TypeError("notify must be a TransferNotify")
        return self._send_notify(target_hostname, _payload(notify))

    def send_probe(self, peer_server_name):
        """Checks that a peer ("host:port" segment name) is reachable now:
        resolves it and delivers a probe message to it. Returns 0, or a
        negative status when the peer is unknown or unreachable."""
        return self._send_notify(peer_server_name, _PROBE)

    def get_notifies(self):
        """Pops the notifications received so far: list of TransferNotify."""
        out = []
        for sender, payload in self._get_notifies_raw():
            if payload == _PROBE:
                continue
            name, sep, msg = payload.partition(b"\0")
            if not sep:
                name, msg = sender.encode(), payload
            out.append(TransferNotify(name.decode("utf-8", "surrogateescape"),
                                      msg.decode("utf-8", "surrogateescape")))
        return out

    # -- tensors: [24-byte header: int32 dtype code, int32 ndim, int32 shape[4]
    # (-1 padded)][data], written to / read from a peer's registered memory
    # through a managed buffer of this engine. CPU tensors (no GPUs here).
    _TENSOR_HDR = "<ii4i"

    def transfer_tensor_sync_write(self, target_hostname, tensor, remote_address):
        """Writes tensor (header + data, 24 + nbytes) at remote_address of
        target_hostname. Returns 0, or -1 for a non-CPU / empty / > 4-D /
        unsupported-dtype tensor or a failed transfer's negative status."""
        import struct
        from crescent import tensor_codec as tc
        tc.torch()
        if not tc.is_tensor(tensor):
            raise TypeError("tensor must be a torch.Tensor, not %s" % type(tensor).__name__)
        code = tc.dtype_code(tensor.dtype)
        if code is None or tensor.device.type != "cpu" or tensor.dim() > 4 or \
                tensor.numel() == 0 or any(d >= 1 << 31 for d in tensor.shape):
            return -1
        t = tensor.detach().contiguous()
        data = t.reshape(-1).view(tc.torch().uint8).numpy().tobytes()
        hdr = struct.pack(self._TENSOR_HDR, code, t.dim(), *(list(t.shape) + [-1] * (4 - t.dim())))
        total = len(hdr) + len(data)
        buf = self.allocate_managed_buffer(total)
        if not buf:
            return -1
        try:
            self.write_bytes_to_buffer(buf, hdr + data, total)
            return self.transfer_sync_write(target_hostname, buf, remote_address, total)
        finally:
            self.free_managed_buffer(buf, total)

    def transfer_tensor_sync_read(self, target_hostname, remote_address, length):
        """Reads length bytes at remote_address of target_hostname written by
        transfer_tensor_sync_write and returns the tensor (a copy), or None
        when the transfer fails or the bytes are not such a tensor."""
        import struct
        from crescent import tensor_codec as tc
        torch = tc.torch()
        n = struct.calcsize(self._TENSOR_HDR)
        if not isinstance(length, int) or isinstance(length, bool):
            raise TypeError("length must be an int")
        if length <= n:
            return None
        buf = self.allocate_managed_buffer(length)
        if not buf:
            return None
        try:
            if self.transfer_sync_read(target_hostname, buf, remote_address, length) != 0:
                return None
            raw = self.read_bytes_from_buffer(buf, length)
        finally:
            self.free_managed_buffer(buf, length)
        code, ndim, *dims = struct.unpack_from(self._TENSOR_HDR, raw)
        dt = tc._dtype_of(code)
        if dt is None or not 0 <= ndim <= 4 or any(d < 0 for d in dims[:ndim]):
            return None
        shape = dims[:ndim]
        nbytes = torch.empty(0, dtype=dt).element_size()
        for d in shape:
            nbytes *= d
        if n + nbytes > len(raw) or nbytes == 0:
            return None
        flat = torch.frombuffer(bytearray(raw[n:n + nbytes]), dtype=torch.uint8)
        return flat.view(dt).reshape(shape)

    def get_local_topology(self, device_name=None):
        """Mooncake's topology JSON: for every NUMA node "cpu:<n>", the
        [preferred, available] RDMA devices. crescent drives no RDMA device,
        so both lists are empty; device_name (a filter) is checked (str or
        None) and selects nothing here."""
        import json
        import os
        if device_name is not None and not isinstance(device_name, str):
            raise TypeError("device_name must be str or None")
        nodes = []
        try:
            nodes = sorted(int(d[4:]) for d in os.listdir("/sys/devices/system/node")
                           if d.startswith("node") and d[4:].isdigit())
        except OSError:
            pass
        return json.dumps({"cpu:%d" % n: [[], []] for n in (nodes or [0])})

    def warmup_efa_segment(self, segment_name):
        """Pre-connects EFA endpoints to a segment; 0, as Mooncake answers
        when no EFA transport is installed (none is here)."""
        if not isinstance(segment_name, str):
            raise TypeError("segment_name must be str")
        return 0

    def get_engine_ptr(self):
        """Mooncake returns the address of its C++ TransferEngine for C++
        integrations to share; crescent has no such object."""
        raise RuntimeError("UNAVAILABLE_IN_CURRENT_MODE: get_engine_ptr returns Mooncake's C++ "
                           "TransferEngine pointer; crescent's engine is not that type")

    def _scatter(self, opcode, endpoint, local_base_addresses, local_capacities,
                 remote_base_addresses, remote_capacities, local_offsets, remote_offsets, lengths):
        lists = (local_base_addresses, local_capacities, remote_base_addresses,
                 remote_capacities, local_offsets, remote_offsets, lengths)
        for v in lists:
            if not isinstance(v, (list, tuple)):
                raise TypeError("scatter arguments must be lists of ints")
            for x in v:
                if not isinstance(x, int) or isinstance(x, bool):
                    raise TypeError("scatter arguments must be lists of ints")
                if x < 0:
                    raise ValueError("scatter addresses, offsets and lengths must be >= 0")
        if len({len(v) for v in lists}) != 1:
            raise ValueError("scatter argument lists differ in length")
        if not isinstance(endpoint, str):
            raise TypeError("endpoint must be str")
        for lc, rc_, lo, ro, n in zip(local_capacities, remote_capacities, local_offsets,
                                      remote_offsets, lengths):
            if lo + n > lc or ro + n > rc_:
                raise ValueError("scatter range exceeds its region's capacity")
        rc = 0
        if lengths:
            rc = self.batch_transfer_sync(
                endpoint, [b + o for b, o in zip(local_base_addresses, local_offsets)],
                [b + o for b, o in zip(remote_base_addresses, remote_offsets)], list(lengths),
                opcode)
        return ScatterTransferTicket(rc)

    def scatter_transfer_sync_write_with_ticket(self, endpoint, local_base_addresses,
                                                local_capacities, remote_base_addresses,
                                                remote_capacities, local_offsets, remote_offsets,
                                                lengths):
        """Writes lengths[i] bytes from local_base_addresses[i] +
        local_offsets[i] to remote_base_addresses[i] + remote_offsets[i] of
        endpoint, each range checked against its region's capacity
        (ValueError). Returns a ScatterTransferTicket; crescent's transfer
        is synchronous, so the ticket is drained on return."""
        return self._scatter(TransferOpcode.Write, endpoint, local_base_addresses,
                             local_capacities, remote_base_addresses, remote_capacities,
                             local_offsets, remote_offsets, lengths)

    def scatter_transfer_sync_read_with_ticket(self, endpoint, local_base_addresses,
                                               local_capacities, remote_base_addresses,
                                               remote_capacities, local_offsets, remote_offsets,
                                               lengths):
        """The read direction of scatter_transfer_sync_write_with_ticket()."""
        return self._scatter(TransferOpcode.Read, endpoint, local_base_addresses,
                             local_capacities, remote_base_addresses, remote_capacities,
                             local_offsets, remote_offsets, lengths)

    def get_engine(self):
        """Mooncake returns its C++ engine for reuse by the store; crescent's
        store runs its own engine, so this returns the engine itself."""
        return self


# Mooncake's TransferEngine carries its opcode enum as a class attribute.
TransferEngine.TransferOpcode = TransferOpcode


# ---- host buffers (Mooncake's module functions allocate_host_buffer /
# free_host_buffer): page-aligned host memory from libc, remembered here so
# that a pointer this module did not hand out is refused instead of being
# passed to free().
_libc = ctypes.CDLL(None, use_errno=True)
_libc.posix_memalign.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                 ctypes.c_size_t)
_libc.posix_memalign.restype = ctypes.c_int
_libc.free.argtypes = (ctypes.c_void_p,)
_libc.free.restype = None
_HOST_ALIGN = 4096
_host_mu = threading.Lock()
_host_buffers = {}  # address -> size; guarded by _host_mu


def _host_memory_bytes():
    """The host's physical memory (a request above it is refused up front:
    the allocator would fail it anyway, or abort under a sanitizer)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return (1 << 63) - 1


def allocate_host_buffer(size):
    """Page-aligned host memory of `size` bytes (not registered with any
    engine; register_memory() it to transfer from it): its address, 0 for
    size 0 or when the memory cannot be had (more than the host's physical
    memory, or an allocation failure). Release it with
    free_host_buffer(). TypeError for a non-int or negative size (Mooncake's
    size is unsigned)."""
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError("size must be int, not %s" % type(size).__name__)
    if size < 0:
        raise TypeError("size must be a non-negative int")
    if size == 0 or size > _host_memory_bytes():
        return 0  # none, or more than the host has: it could never be resident
    p = ctypes.c_void_p()
    if _libc.posix_memalign(ctypes.byref(p), _HOST_ALIGN, size) != 0 or not p.value:
        return 0
    with _host_mu:
        _host_buffers[p.value] = size
    return p.value


def free_host_buffer(ptr):
    """Frees memory from allocate_host_buffer(); 0 is a no-op. ValueError
    for any other address (one not from allocate_host_buffer, or freed
    already): nothing is freed then."""
    if isinstance(ptr, bool) or not isinstance(ptr, int):
        raise TypeError("ptr must be int, not %s" % type(ptr).__name__)
    if ptr == 0:
        return
    with _host_mu:
        if _host_buffers.pop(ptr, None) is None:
            raise ValueError("free_host_buffer: 0x%x was not returned by allocate_host_buffer "
                             "(or was freed already)" % ptr)
    _libc.free(ptr)
