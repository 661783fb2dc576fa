"""KV events to crescent-conductor in vLLM's format (ZmqEventPublisher):
frames [topic, seq (8 bytes big-endian), msgpack EventBatch], EventBatch =
[ts, [BlockStored...], dp_rank], BlockStored = ["BlockStored", [hash],
parent_hash|nil, token_ids, block_size, lora_id nil, medium]. Hashes are the
rolling hashes (u64), so the conductor recomputes exactly the same values
from token_ids and the parent (docs/architecture/conductor-service.md)."""
import struct
import time

import msgpack
import zmq


class KVEventPublisher:
    def __init__(self, host, block_size, medium="CPU", topic=b"kv-events"):
        self.ctx = zmq.Context.instance()
        # XPUB, not PUB: it tells us when the conductor's SUB socket has
        # subscribed, so no batch is published into the void before that
        self.sock = self.ctx.socket(zmq.XPUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://%s" % host)
        self.endpoint = "tcp://%s:%d" % (host, port)
        self.block_size = block_size
        self.medium = medium
        self.topic = topic
        self.seq = 0
        self.subscribers = 0

    def _drain(self, timeout_ms):
        while self.sock.poll(timeout_ms, zmq.POLLIN):
            msg = self.sock.recv()
            if msg[:1] == b"\x01":
                self.subscribers += 1
            elif msg[:1] == b"\x00":
                self.subscribers = max(0, self.subscribers - 1)
            timeout_ms = 0

    def wait_subscribed(self, timeout_s):
        """True once at least one subscriber (the conductor) has subscribed."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._drain(100)
            if self.subscribers > 0:
                return True
            if time.monotonic() > deadline:
                return False

    def block_stored(self, blocks):
        """blocks: [(hash, parent hash or None, token ids)] in prefix order."""
        if not blocks:
            return
        evs = [["BlockStored", [h], p, list(toks), self.block_size, None, self.medium]
               for h, p, toks in blocks]
        self._send([time.time(), evs, 0])

    def all_cleared(self):
        self._send([time.time(), [["AllBlocksCleared"]], 0])

    def _send(self, batch):
        self._drain(0)
        self.sock.send_multipart([self.topic, struct.pack(">q", self.seq), msgpack.packb(batch)])
        self.seq += 1

    def close(self):
        self.sock.close()
