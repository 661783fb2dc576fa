"""mooncake.transfer: declarative one-range transfers over a TransferEngine
(Mooncake's names and checks, crescent's code).

    transfer(local_buffer(addr, n), remote_buffer("host:port", peer_addr), engine=te)

exactly one side is remote: local -> remote is ``transfer_sync_write``,
remote -> local ``transfer_sync_read``; the return value is the engine's.
The length comes from ``length=`` or the endpoints; all given lengths must
agree. Older Mooncake releases had ``mooncake.transfer`` re-export the
engine's classes: ``TransferEngine`` and ``TransferOpcode`` are here too.
"""
from dataclasses import dataclass
from typing import Optional

from mooncake.engine import TransferEngine, TransferOpcode


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class TransferEndpoint:
    """A registered local range (no hostname) or a range on a remote peer."""

    address: int
    length: Optional[int] = None
    hostname: Optional[str] = None

    def __post_init__(self):
        if not _is_int(self.address) or self.address < 0:
            raise ValueError("endpoint address must be a non-negative integer")
        if self.length is not None and (not _is_int(self.length) or self.length < 0):
            raise ValueError("endpoint length must be a non-negative integer")
        if self.hostname is not None and (not isinstance(self.hostname, str)
                                          or not self.hostname):
            raise ValueError("remote endpoint hostname must be a non-empty string")

    @classmethod
    def local(cls, address, length=None):
        return cls(address=address, length=length)

    @classmethod
    def remote(cls, hostname, address, length=None):
        return cls(address=address, length=length, hostname=hostname)

    @property
    def is_remote(self):
        return self.hostname is not None

    @property
    def is_local(self):
        return self.hostname is None


@dataclass(frozen=True)
class TransferRequest:
    """src, dst, length, transport hint; ``execute(engine)`` runs it."""

    src: TransferEndpoint
    dst: TransferEndpoint
    length: Optional[int] = None
    transport_hint: str = ""

    def execute(self, engine):
        return transfer(self.src, self.dst, engine=engine, length=self.length,
                        transport_hint=self.transport_hint)


def local_buffer(address, length=None):
    return TransferEndpoint.local(address, length)


def remote_buffer(hostname, address, length=None):
    return TransferEndpoint.remote(hostname, address, length)


def _length(src, dst, explicit):
    given = [v for v in (explicit, src.length, dst.length) if v is not None]
    if not given:
        raise ValueError("transfer length must be provided")
    if any(not _is_int(v) or v <= 0 for v in given):
        raise ValueError("transfer length must be a positive integer")
    if len(set(given)) != 1:
        raise ValueError("transfer has conflicting endpoint lengths")
    return given[0]


def transfer(src, dst, *, engine, length=None, transport_hint=""):
    """Move one range synchronously between a local and a remote endpoint."""
    if not isinstance(src, TransferEndpoint) or not isinstance(dst, TransferEndpoint):
        raise TypeError("src and dst must be TransferEndpoint instances")
    n = _length(src, dst, length)
    if not isinstance(transport_hint, str):
        raise TypeError("transport_hint must be a str")
    if src.is_local and dst.is_remote:
        return engine.transfer_sync_write(dst.hostname, src.address, dst.address, n,
                                          transport_hint)
    if src.is_remote and dst.is_local:
        return engine.transfer_sync_read(src.hostname, dst.address, src.address, n,
                                         transport_hint)
    raise ValueError("transfer requires exactly one remote endpoint")


__all__ = ["TransferEndpoint", "TransferRequest", "local_buffer", "remote_buffer",
           "transfer", "TransferEngine", "TransferOpcode"]
