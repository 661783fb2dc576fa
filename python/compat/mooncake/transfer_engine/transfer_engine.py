"""MooncakeTransferEngine: a TransferEngine with a session id and errors raised."""
import logging
from typing import Optional

logger = logging.getLogger(__name__)


class MooncakeTransferEngine:
    """Mooncake's helper class (``hostname``, ``gpu_id``, ``ib_device``).

    Mooncake initializes it over RDMA with a P2P handshake; crescent has no
    RDMA, so it uses TCP (``protocol=`` added, default ``"tcp"``); an
    ``ib_device`` names an RDMA NIC and raises RuntimeError here.
    """

    def __init__(self, hostname: str, gpu_id: int = 0, ib_device: Optional[str] = None,
                 metadata_server: str = "P2PHANDSHAKE", protocol: str = "tcp"):
        from mooncake.engine import TransferEngine
        if not isinstance(hostname, str) or not hostname:
            raise ValueError("hostname must be a non-empty str")
        if isinstance(gpu_id, bool) or not isinstance(gpu_id, int) or gpu_id < 0:
            raise ValueError("gpu_id must be a non-negative int")
        if ib_device:
            raise RuntimeError("Mooncake Transfer Engine initialization failed: "
                               "ib_device %r needs RDMA, which crescent does not have"
                               % ib_device)
        self.engine = TransferEngine()
        self.hostname = hostname
        self.gpu_id = gpu_id
        self.ib_device = ib_device
        self._metadata_server = metadata_server
        self._protocol = protocol
        self.initialize(hostname, ib_device)
        self.session_id = "%s:%d" % (self.hostname, self.engine.get_rpc_port())

    def initialize(self, hostname: str, device_name: Optional[str]) -> None:
        rc = self.engine.initialize(hostname, self._metadata_server, self._protocol,
                                    device_name or "")
        if rc != 0:
            logger.error("Mooncake Transfer Engine initialization failed.")
            raise RuntimeError("Mooncake Transfer Engine initialization failed: %d" % rc)

    def register(self, ptr, length):
        if self.engine.register_memory(ptr, length) != 0:
            logger.error("Mooncake memory registration failed.")
            raise RuntimeError("Mooncake memory registration failed.")

    def deregister(self, ptr):
        if self.engine.unregister_memory(ptr) != 0:
            logger.error("Mooncake memory deregistration failed.")
            raise RuntimeError("Mooncake memory deregistration failed.")

    def transfer_sync(self, session_id: str, buffer: int, peer_buffer_address: int,
                      length: int) -> int:
        """Write ``length`` bytes at ``buffer`` to ``peer_buffer_address`` on the peer."""
        ret = self.engine.transfer_sync_write(session_id, buffer, peer_buffer_address, length)
        if ret < 0:
            logger.error("Mooncake Transfer Engine Return Error.")
            raise RuntimeError("Mooncake Transfer Engine Return Error: %d" % ret)
        return ret

    def batch_transfer_sync(self, session_id, buffers, peer_buffer_addresses, lengths) -> int:
        ret = self.engine.batch_transfer_sync_write(session_id, buffers,
                                                    peer_buffer_addresses, lengths)
        if ret < 0:
            logger.error("Mooncake Transfer Engine Return Error.")
            raise RuntimeError("Mooncake Transfer Engine Return Error: %d" % ret)
        return ret

    def get_localhost(self):
        return self.hostname

    def get_session_id(self):
        return self.session_id

    def close(self):
        self.engine.close()
