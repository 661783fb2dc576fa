"""``mooncake.engine`` on crescent: every public name of Mooncake's module."""
from crescent.engine import (ScatterTransferCompletionStatus, ScatterTransferTicket,
                             TransferEngine, TransferNotify, TransferOpcode,
                             allocate_host_buffer, free_host_buffer)

__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify", "Read", "Write",
           "ScatterTransferCompletionStatus", "ScatterTransferTicket", "InnerTransferEngine",
           "allocate_host_buffer", "free_host_buffer"]

# export_values(): the opcodes are module names too, as in Mooncake.
Read = TransferOpcode.Read
Write = TransferOpcode.Write

# What get_engine() returns: crescent's store runs its own engine, so the
# engine object itself (Mooncake: its C++ TransferEngine).
InnerTransferEngine = TransferEngine

# Compile-time features of Mooncake's module: crescent moves host memory over
# TCP and shared memory only.
SUPPORT_CUDA = False
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_MUSA = False
SUPPORT_INTRA_NVLINK = False
SUPPORT_MULTI_PROTOCOL = False

from mooncake._shared_segment import SharedSegment  # noqa: E402
from crescent.rpc import (CoroRPCInterface, ReceivedData, ReceivedTensor,  # noqa: E402
                          RpcInterface, create_rpc_client, create_rpc_server)

__all__ += ["SharedSegment", "RpcInterface", "CoroRPCInterface", "ReceivedData",
            "ReceivedTensor", "create_rpc_client", "create_rpc_server"]
