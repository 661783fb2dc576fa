"""``mooncake.codec_store`` on crescent: FP16/BF16 CPU tensors stored as
scaled-FP8 records (mooncake._kv_codec) through a store's put/get.

Records live under ``__mc_codec__/<format_id>/<key>``, so two group sizes
never read each other's records and raw keys are untouched. A put encodes
first (codec errors raise before the store is called) and returns the
store's code; get_into reads one whole record and decodes it into the
destination, which is left as it was when anything fails.
"""
from mooncake._kv_codec import Dtype, InvalidRecord, ScaledFp8Codec

__all__ = ["CodecStoreClient", "InvalidRecord", "StoreReadError"]

_PREFIX = "__mc_codec__"


class StoreReadError(RuntimeError):
    """get() returned no record: the key is missing or the read failed (the
    byte API does not tell the two apart)."""


class CodecStoreClient:
    """Wraps a set-up MooncakeDistributedStore (or any object with
    put(key, bytes[, config]) and get(key))."""

    def __init__(self, store, group_size=128):
        if type(group_size) is not int or not 0 < group_size < (1 << 32):
            raise ValueError("group_size must be a positive uint32")
        self._store = store
        self._codec = ScaledFp8Codec(group_size)

    def storage_key(self, key):
        """The store key holding key's record."""
        if not isinstance(key, str) or key == "":
            raise ValueError("key must be a nonempty string")
        return "%s/%s/%s" % (_PREFIX, self._codec.format_id, key)

    @staticmethod
    def _bytes_of(tensor):
        import torch
        if not isinstance(tensor, torch.Tensor):
            raise TypeError("Expected a torch.Tensor")
        if tensor.device.type != "cpu" or tensor.layout != torch.strided:
            raise ValueError("Only strided CPU tensors are supported")
        if not tensor.is_contiguous():
            raise ValueError("Tensor must be contiguous")
        if tensor.dtype == torch.float16:
            dtype = Dtype.FLOAT16
        elif tensor.dtype == torch.bfloat16:
            dtype = Dtype.BFLOAT16
        else:
            raise ValueError("Only FP16/BF16 tensors are supported")
        if tensor.requires_grad or tensor.is_conj() or tensor.is_neg():
            raise ValueError("Tensor must have no gradient or lazy view bits")
        if not 1 <= tensor.dim() <= 8 or tensor.numel() == 0:
            raise ValueError("Expected a nonempty tensor with rank between 1 and 8")
        view = memoryview(tensor.detach().view(torch.uint8).numpy()).cast("B")
        return view, dtype, list(tensor.shape)

    def put(self, key, tensor, config=None):
        """Stores tensor's record; the store's put code (0 = stored)."""
        skey = self.storage_key(key)
        data, dtype, shape = self._bytes_of(tensor)
        record = self._codec.encode(data, dtype, shape)
        if config is None:
            return self._store.put(skey, record)
        return self._store.put(skey, record, config)

    def get_into(self, key, destination):
        """Decodes key's record into destination and returns it.
        StoreReadError without a record; ValueError / InvalidRecord for a
        record that does not fit destination or is corrupt."""
        skey = self.storage_key(key)
        data, dtype, shape = self._bytes_of(destination)
        record = self._store.get(skey)
        if not record:
            raise StoreReadError("No record returned for %r" % skey)
        self._codec.decode_into(bytes(record), data, dtype, shape)
        return destination
