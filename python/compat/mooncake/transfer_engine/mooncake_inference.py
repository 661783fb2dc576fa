"""MooncakeInference: receives the tensors a MooncakeTraining pushes.
config: ``inference_ip``, ``inference_gpu_id``, ``training_ip``, ``port``."""
import zmq

from mooncake.transfer_engine.new_tensor import create_tensor
from mooncake.transfer_engine.transfer_engine import MooncakeTransferEngine

_TIMEOUT_MS = 60000


class MooncakeInference:
    def __init__(self, config: dict):
        for k in ("inference_ip", "training_ip", "port"):
            if k not in config:
                raise KeyError("MooncakeInference config needs %r" % k)
        self.config = config
        self._engine = MooncakeTransferEngine(hostname=config["inference_ip"],
                                              gpu_id=config.get("inference_gpu_id", 0),
                                              ib_device=None)
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.REQ)
        self._socket.setsockopt(zmq.RCVTIMEO, int(config.get("timeout_ms", _TIMEOUT_MS)))
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect("tcp://%s:%d" % (config["training_ip"], int(config["port"])))

    def recv_tensor(self) -> dict:
        """{name: tensor} of the next tensor the training side sends (CPU memory here).
        A silent peer raises zmq.Again after ``timeout_ms`` (default 60 s)."""
        self._socket.send_json({"session_id": self._engine.get_session_id()})
        name, shape, dtype = self._socket.recv_json()
        tensor = create_tensor(shape, dtype, self.config.get("inference_gpu_id", 0))
        nbytes = tensor.numel() * tensor.element_size()
        self._engine.register(tensor.data_ptr(), max(nbytes, 1))
        try:
            self._socket.send_json({"ptr": tensor.data_ptr()})
            self._socket.recv_json()
        finally:
            self._engine.deregister(tensor.data_ptr())
        return {name: tensor}

    def close(self):
        self._socket.close(linger=0)
        self._context.term()
        self._engine.close()
