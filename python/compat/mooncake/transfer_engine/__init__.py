"""mooncake.transfer_engine: the small weight-push helpers Mooncake ships beside
its engine (a training process pushes named tensors to an inference process;
ZMQ carries the names, shapes and addresses, the Transfer Engine the bytes).
crescent's own versions, on host memory: crescent has no GPUs or RDMA, so the
engines use TCP and tensors live on the CPU (``gpu_id`` is accepted and, like
``ib_device``, must be left at its no-device value; see docs/python.md)."""
from mooncake.transfer_engine.transfer_engine import MooncakeTransferEngine
from mooncake.transfer_engine.new_tensor import (create_tensor, dtype_map, get_child_tensor,
                                                 get_dtype, get_dtype_str, shape_to_stride)

__all__ = ["MooncakeTransferEngine", "create_tensor", "dtype_map", "get_child_tensor",
           "get_dtype", "get_dtype_str", "shape_to_stride"]
