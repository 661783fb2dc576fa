"""``mooncake._kv_codec`` on crescent: Mooncake's FP8 KV codec binding
(ScaledFp8Codec, Dtype, InvalidRecord), implemented by crescent.kv_codec."""
from crescent.kv_codec import Dtype, InvalidRecord, ScaledFp8Codec

__all__ = ["Dtype", "InvalidRecord", "ScaledFp8Codec"]
