"""``mooncake.engine`` on crescent: TransferEngine, TransferOpcode, TransferNotify."""
from crescent.engine import TransferEngine, TransferNotify, TransferOpcode

__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify"]

# Compile-time features of Mooncake's module: crescent moves host memory over
# TCP and shared memory only.
SUPPORT_CUDA = False
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_INTRA_NVLINK = False

from mooncake._shared_segment import SharedSegment  # noqa: E402

__all__.append("SharedSegment")
