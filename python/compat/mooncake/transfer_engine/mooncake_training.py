"""MooncakeTraining: a thread that pushes registered tensors to inference peers.

Per tensor (queued with ``reg_tensor``): a peer asks (ZMQ REQ, its session
id), gets ``[name, shape, dtype]``, allocates and registers a tensor and
answers its address; the tensor is written into it with the Transfer Engine
and the address is echoed back as the acknowledgement.
config: ``training_ip``, ``training_gpu_id``, ``port``, ``send_bulk``.
"""
import threading
import time
from queue import Queue

import zmq

from mooncake.transfer_engine.new_tensor import get_dtype_str
from mooncake.transfer_engine.transfer_engine import MooncakeTransferEngine

_POLL_MS = 200


class MooncakeTraining(threading.Thread):
    def __init__(self, config: dict):
        # Not a daemon, as in Mooncake: a training script may end right after
        # reg_tensor(None, None); the process then lives until every queued
        # tensor has been delivered (close() stops it early).
        super().__init__(daemon=False)
        for k in ("training_ip", "port", "send_bulk"):
            if k not in config:
                raise KeyError("MooncakeTraining config needs %r" % k)
        self.config = config
        self._queue = Queue(maxsize=int(config["send_bulk"]))
        self.engine = MooncakeTransferEngine(hostname=config["training_ip"],
                                             gpu_id=config.get("training_gpu_id", 0),
                                             ib_device=None)
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.REP)
        self._socket.bind("tcp://%s:%d" % (config.get("bind_ip", "*"), int(config["port"])))
        self._report = 0.0
        self._stopped = threading.Event()
        self.error = None
        self.start()

    def reg_tensor(self, name, tensor):
        """Queue a CPU tensor to be sent to the next peer that asks."""
        if name is not None and (tensor.device.type != "cpu" or not tensor.is_contiguous()):
            raise ValueError("only contiguous CPU tensors can be sent here")
        self._queue.put((name, tensor))

    def stop(self):
        """Stop after the tensors already queued (``reg_tensor(None, None)`` also stops)."""
        self._queue.put((None, None))

    def _recv(self):
        while not self._stopped.is_set():
            if self._socket.poll(_POLL_MS):
                return self._socket.recv_json()
        raise RuntimeError("stopped")

    def run(self):
        try:
            while True:
                name, tensor = self._queue.get()
                if name is None:
                    break
                req = self._recv()
                session_id = req["session_id"]
                self._socket.send_json([name, list(tensor.shape), get_dtype_str(tensor.dtype)])
                ptr, size = tensor.data_ptr(), tensor.numel() * tensor.element_size()
                self.engine.register(ptr, size)
                try:
                    reply = self._recv()
                    t1 = time.perf_counter()
                    self.engine.transfer_sync(session_id, ptr, reply["ptr"], size)
                    self._report += time.perf_counter() - t1
                    self._socket.send_json(reply)
                finally:
                    self.engine.deregister(ptr)
        except Exception as e:  # reported to the caller through .error
            self.error = e

    def report(self):
        """Seconds spent in Transfer Engine writes so far."""
        return self._report

    def close(self):
        self._stopped.set()
        self.stop()
        self.join(timeout=10)
        self._socket.close(linger=0)
        self._context.term()
        self.engine.close()
