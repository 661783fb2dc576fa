"""mooncake.dataproto_transfer: DataProto batches through the store, one
object per column, optionally cut into row shards (crescent's own
implementation of Mooncake's module; same names, signatures and manifest
fields).

A DataProto-like object (``batch`` of tensors, ``non_tensor_batch`` of
object ndarrays, ``meta_info``) is stored as:

* one object per ``batch`` tensor (``dense_tensor_v1``), written with
  ``batch_put_from`` from the tensor's memory and read back with one
  ``batch_get_into`` into freshly allocated tensors;
* one leaf per ``non_tensor_batch`` field, its codec chosen from the rows
  (``choose_leaf_codec``): ``ragged_tensor`` (tensors of one dtype, any
  shapes), ``typed_ragged`` (numeric lists / arrays promoted to one dtype),
  ``ndarray`` (numeric scalars), ``bytes_ragged``, ``utf8_ragged``,
  ``json_ragged``; ``None`` rows kept. The rows' bytes are concatenated and
  cut into part objects of ``RAGGED_TENSOR_PART_CHUNK_BYTES`` /
  ``RAGGED_BYTES_PART_CHUNK_BYTES``, read back with ``get_into_ranges``
  straight into one registered buffer (or, when registering fails, through a
  scratch copy);
* ``meta_info`` and rows no codec takes (dicts, mixed types) with msgpack:
  crescent never pickles, so reading a batch never runs code chosen by its
  writer; a value msgpack cannot hold raises TypeError at put time;
* a JSON manifest naming all of it (``RemoteDataProtoRef.manifest``).

With a ``DataProtoShardPolicy`` the rows are cut into shards (equal rows, or
byte-balanced when rows are skewed), each stored as above, under a parent
manifest (``layout: row_sharded_v1``); ``materialize_dataproto`` reads the
shards on a bounded thread pool and concatenates them. A failed put removes
every object it wrote.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Protocol, Tuple

import numpy as np

from mooncake.structured_object_store import (_decode_member, _dataproto_envelope,
                                              _encode_member, _is_torch_tensor)

MAX_STRUCT_KEYS = 64
MAX_EXPAND_LIST_LEN = 8
MAX_SAMPLE_ROWS_FOR_INFERENCE = 128
MAX_JSON_INLINE_BYTES = 1 << 20
RAGGED_TENSOR_PART_CHUNK_BYTES = int(os.environ.get("MOONCAKE_DATAPROTO_RAGGED_PART_BYTES",
                                                    str(512 * 1024 ** 2)))
RAGGED_BYTES_PART_CHUNK_BYTES = int(os.environ.get("MOONCAKE_DATAPROTO_BYTES_PART_BYTES",
                                                   str(512 * 1024 ** 2)))
REGISTERED_BUFFER_POOL_BYTES = int(os.environ.get("MOONCAKE_REGISTERED_BUFFER_POOL_BYTES",
                                                  str(2 * 1024 ** 3)))
REGISTERED_BUFFER_POOL_MAX_BUFFER_BYTES = int(os.environ.get(
    "MOONCAKE_REGISTERED_BUFFER_POOL_MAX_BUFFER_BYTES", str(512 * 1024 ** 2)))
REGISTERED_BUFFER_POOL_PREWARM_BYTES = int(os.environ.get(
    "MOONCAKE_REGISTERED_BUFFER_POOL_PREWARM_BYTES", "0"))
REGISTERED_BUFFER_POOL_PREWARM_COUNT = int(os.environ.get(
    "MOONCAKE_REGISTERED_BUFFER_POOL_PREWARM_COUNT", "0"))

# id(store) -> adaptive materialize state (pressure feedback between calls)
_TRANSFER_ADAPTIVE_STATES: Dict[int, "_AdaptiveState"] = {}
_STATE_LOCK = threading.RLock()


@dataclass
class CodecDecision:
    accepted: bool
    codec: str
    reason: str
    confidence: str
    normalized_type: str
    metadata: Dict[str, Any] = field(default_factory=dict)


@dataclass
class EncodedLeaf:
    path: str
    codec: str
    rows: int
    bytes: int
    payload: Dict[str, Any]
    metadata: Dict[str, Any] = field(default_factory=dict)
    encode_s: float = 0.0


@dataclass
class RemoteDataProtoRef:
    object_id: str
    row_count: int
    manifest_key: str
    manifest: Dict[str, Any]


@dataclass
class RemoteDataProtoShardedRef:
    object_id: str
    row_count: int
    manifest_key: str
    manifest: Dict[str, Any]


@dataclass
class DataProtoShardPolicy:
    enabled: bool = False
    adaptive: bool = False
    num_shards: Optional[int] = None
    target_shard_bytes: int = 2 * 1024 ** 3
    max_shards: int = 16
    max_inflight_get: int = 4
    small_payload_threshold: int = 256 * 1024 ** 2
    row_oriented_ratio_threshold: float = 0.5
    dense_ratio_threshold: float = 0.8
    byte_balanced: bool = True


@dataclass
class DataProtoTransferProfile:
    total_bytes: int
    dense_tensor_bytes: int
    row_oriented_bytes: int
    row_bytes_p50: int
    row_bytes_p95: int
    row_bytes_max: int
    row_skew_ratio: float
    row_skewed: bool


@dataclass
class DataProtoTransferDecision:
    shard_count: int
    byte_balanced: bool
    target_shard_bytes: int
    recommended_max_inflight_get: int
    profile: DataProtoTransferProfile


@dataclass
class DataProtoMaterializePolicy:
    """``pool_prewarm*`` are accepted and recorded: crescent registers each
    read buffer for its call instead of keeping a prewarmed pool."""
    max_inflight_get: Optional[int] = None
    pool_prewarm: bool = True
    pool_prewarm_size: Optional[int] = None
    pool_prewarm_count: Optional[int] = None
    adaptive_feedback: bool = True


@dataclass(frozen=True)
class DataProtoManifestView:
    row_count: int
    batch_fields: Dict[str, Dict[str, Any]]
    non_tensor_fields: Dict[str, Dict[str, Any]]
    meta_info_key: Optional[str]
    layout: str = "single"
    object_id: Optional[str] = None


@dataclass
class PayloadParts:
    parts: List[Any]
    kind: str
    dtype: Optional[str]
    shape: List[int]
    chunk_offsets: Optional[List[int]] = None


@dataclass
class _AdaptiveState:
    pressure_level: str = "normal"
    last_max_inflight_get: int = 0
    materialize_count: int = 0


def chunk_offsets_by_size(sizes: List[int], target_bytes: int) -> List[int]:
    """Row indexes where chunks of about ``target_bytes`` start, plus the end
    (a chunk holds at least one row)."""
    offsets, acc = [0], 0
    for i, n in enumerate(sizes):
        if i > offsets[-1] and acc + n > target_bytes:
            offsets.append(i)
            acc = 0
        acc += n
    offsets.append(len(sizes))
    return offsets


class KeyValueStore(Protocol):
    def put(self, key: str, value: Any) -> int: ...
    def get(self, key: str) -> bytes: ...
    def remove(self, key: str, force: bool = False) -> int: ...
    def register_buffer(self, buffer_ptr: int, size: int) -> int: ...
    def unregister_buffer(self, buffer_ptr: int) -> int: ...
    def put_from(self, key: str, buffer_ptr: int, size: int, config: Any = None) -> int: ...
    def get_into(self, key: str, buffer_ptr: int, size: int) -> int: ...
    def batch_put_from(self, keys: List[str], buffer_ptrs: List[int], sizes: List[int],
                       config: Any = None) -> List[int]: ...
    def batch_get_into(self, keys: List[str], buffer_ptrs: List[int],
                       sizes: List[int]) -> List[int]: ...


def create_mooncake_store_from_env() -> Any:
    """A ``MooncakeDistributedStore`` set up from Mooncake's environment
    variables (LOCAL_HOSTNAME, MC_METADATA_SERVER, MOONCAKE_GLOBAL_SEGMENT_SIZE,
    MOONCAKE_LOCAL_BUFFER_SIZE, PROTOCOL, DEVICE_NAME, MASTER_SERVER)."""
    from mooncake.store import MooncakeDistributedStore
    env = os.environ.get
    store = MooncakeDistributedStore()
    rc = store.setup(env("LOCAL_HOSTNAME", "localhost"), env("MC_METADATA_SERVER", "127.0.0.1:2379"),
                     int(env("MOONCAKE_GLOBAL_SEGMENT_SIZE", str(3200 * 1024 * 1024))),
                     int(env("MOONCAKE_LOCAL_BUFFER_SIZE", str(512 * 1024 * 1024))),
                     env("PROTOCOL", "tcp"), env("DEVICE_NAME", ""),
                     env("MASTER_SERVER", "127.0.0.1:50051"))
    if rc != 0:
        raise RuntimeError("failed to setup MooncakeDistributedStore: %d" % rc)
    return store


class InMemoryMooncakeStore:
    """A dict with the store's zero-copy signatures (for code that wants a
    store without a cluster; crescent's own tests use a real cluster)."""

    def __init__(self) -> None:
        self.objects: Dict[str, bytes] = {}

    def put(self, key: str, value: Any, config: Any = None) -> int:
        self.objects[key] = bytes(value)
        return 0

    def put_parts(self, key: str, *parts, config: Any = None) -> int:
        self.objects[key] = b"".join(bytes(p) for p in parts)
        return 0

    def get(self, key: str) -> bytes:
        return self.objects[key]

    def remove(self, key: str, force: bool = False) -> int:
        self.objects.pop(key, None)
        return 0

    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        return 0

    def unregister_buffer(self, buffer_ptr: int) -> int:
        return 0

    def put_from(self, key: str, buffer_ptr: int, size: int, config: Any = None) -> int:
        self.objects[key] = ctypes.string_at(buffer_ptr, size)
        return 0

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        data = self.objects.get(key)
        if data is None:
            return -704
        if len(data) > size:
            return -1
        ctypes.memmove(buffer_ptr, data, len(data))
        return len(data)

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None) -> List[int]:
        return [self.put_from(k, p, n, config) for k, p, n in zip(keys, buffer_ptrs, sizes)]

    def batch_get_into(self, keys, buffer_ptrs, sizes) -> List[int]:
        return [self.get_into(k, p, n) for k, p, n in zip(keys, buffer_ptrs, sizes)]

    def get_into_ranges(self, buffers, all_keys, all_dst_offsets, all_src_offsets, all_sizes):
        out = []
        for ptr, keys, dsts, srcs, sizes in zip(buffers, all_keys, all_dst_offsets,
                                                all_src_offsets, all_sizes):
            per_buffer = []
            for k, d_list, s_list, n_list in zip(keys, dsts, srcs, sizes):
                data, res = self.objects.get(k), []
                for d, s, n in zip(d_list, s_list, n_list):
                    if data is None or s + n > len(data):
                        res.append(-704 if data is None else -600)
                        continue
                    ctypes.memmove(ptr + d, data[s:s + n], n)
                    res.append(n)
                per_buffer.append(res)
            out.append(per_buffer)
        return out


def now() -> float:
    return time.perf_counter()


def tensor_nbytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


def numpy_nbytes(array: np.ndarray) -> int:
    return int(array.nbytes)


def all_not_none(values: List[Any]) -> List[Any]:
    return [v for v in values if v is not None]


def accept(codec: str, normalized_type: str, reason: str,
           metadata: Optional[Dict[str, Any]] = None) -> CodecDecision:
    return CodecDecision(True, codec, reason, "exact", normalized_type, metadata or {})


def reject(codec: str, normalized_type: str, reason: str) -> CodecDecision:
    return CodecDecision(False, codec, reason, "exact", normalized_type)


def is_pil_image(value: Any) -> bool:
    return type(value).__module__.startswith("PIL.") and hasattr(value, "save")


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, bytes, bytearray,
                                               memoryview))


def is_bytes_like(value: Any) -> bool:
    return isinstance(value, (bytes, bytearray, memoryview))


def can_tensor(values: List[Any]) -> CodecDecision:
    rows = all_not_none(values)
    if not rows:
        return reject("ragged_tensor", "torch.Tensor", "all rows are null")
    if not all(_is_torch_tensor(v) for v in rows):
        return reject("ragged_tensor", "torch.Tensor",
                      "at least one non-null row is not torch.Tensor")
    dtypes = sorted({str(v.dtype) for v in rows})
    if len(dtypes) != 1:
        return reject("ragged_tensor", "torch.Tensor", "mixed tensor dtypes: %s" % dtypes)
    if any(v.device.type != "cpu" for v in rows):
        return reject("ragged_tensor", "torch.Tensor", "non-CPU tensor (no GPU here)")
    return accept("ragged_tensor", "torch.Tensor",
                  "all non-null rows are torch.Tensor with one dtype",
                  {"source_type": "torch.Tensor", "dtype": dtypes[0]})


def can_numeric_sequence(values: List[Any]) -> CodecDecision:
    rows = all_not_none(values)
    if not rows:
        return reject("typed_ragged", "numeric sequence", "all rows are null")
    arrays = []
    for v in rows:
        if not isinstance(v, (np.ndarray, list, tuple)):
            return reject("typed_ragged", "numeric sequence",
                          "non-null row is not ndarray/list/tuple")
        try:
            a = np.asarray(v)
        except ValueError:
            return reject("typed_ragged", "numeric sequence", "row is ragged")
        if a.dtype == object or not (np.issubdtype(a.dtype, np.number)
                                     or a.dtype == np.bool_):
            return reject("typed_ragged", "numeric sequence",
                          "non-numeric dtype observed: %s" % a.dtype)
        arrays.append(a)
    dtype = np.result_type(*arrays)
    return accept("typed_ragged", "numeric sequence",
                  "all non-null rows promote to a common numeric dtype",
                  {"source_dtypes": sorted({str(a.dtype) for a in arrays}),
                   "dtype": str(dtype)})


def can_numeric_scalar(values: List[Any]) -> CodecDecision:
    rows = all_not_none(values)
    if not rows:
        return reject("ndarray", "numeric scalar", "all rows are null")
    if not all(isinstance(v, (bool, int, float, np.number, np.bool_)) for v in rows):
        return reject("ndarray", "numeric scalar", "non-null row is not numeric scalar")
    try:
        dtype = np.result_type(*[np.asarray(v) for v in rows])
    except (OverflowError, TypeError):
        return reject("ndarray", "numeric scalar", "values do not fit one numeric dtype")
    if dtype == object:
        return reject("ndarray", "numeric scalar", "values do not fit one numeric dtype")
    return accept("ndarray", "numeric scalar", "all non-null rows are numeric scalars",
                  {"dtype": str(dtype)})


def can_bytes(values: List[Any]) -> CodecDecision:
    rows = all_not_none(values)
    if not rows:
        return reject("bytes_ragged", "bytes-like", "all rows are null")
    if not all(is_bytes_like(v) for v in rows):
        return reject("bytes_ragged", "bytes-like", "non-null row is not bytes-like")
    return accept("bytes_ragged", "bytes-like", "all non-null rows are bytes-like")


def can_text(values: List[Any]) -> CodecDecision:
    rows = all_not_none(values)
    if not rows:
        return reject("utf8_ragged", "str", "all rows are null")
    if not all(isinstance(v, str) for v in rows):
        return reject("utf8_ragged", "str", "non-null row is not str")
    return accept("utf8_ragged", "str", "all non-null rows are str", {"encoding": "utf-8"})


def can_json(values: List[Any]) -> CodecDecision:
    rows = all_not_none(values)
    if not rows:
        return reject("json_ragged", "json", "all rows are null")
    total, types = 0, set()
    for v in rows[:MAX_SAMPLE_ROWS_FOR_INFERENCE]:
        try:
            total += len(json.dumps(v, ensure_ascii=False, separators=(",", ":"),
                                    allow_nan=False))
        except (TypeError, ValueError) as e:
            return reject("json_ragged", "json", "JSON serialization failed: %s" % e)
        types.add(type(v).__name__)
    if total > MAX_JSON_INLINE_BYTES:
        return reject("json_ragged", "json", "sampled JSON payload is too large")
    return accept("json_ragged", "json", "sampled rows pass actual JSON serialization",
                  {"source_types": sorted(types)})


def can_media(values: List[Any]) -> CodecDecision:
    return reject("media_bytes", "media", "PIL images are not supported by crescent")


def choose_leaf_codec(values: List[Any]) -> CodecDecision:
    """The first codec that accepts every non-null row; rows no codec takes
    go to ``msgpack_ragged`` (crescent's replacement for Mooncake's pickle
    fallback: safe to read, and a value msgpack cannot hold is refused)."""
    rejected = []
    for predicate in (can_tensor, can_numeric_sequence, can_numeric_scalar, can_bytes,
                      can_text, can_json):
        d = predicate(values)
        if d.accepted:
            return d
        rejected.append({"codec": d.codec, "reason": d.reason})
    return CodecDecision(False, "msgpack_ragged", "no typed codec accepted the observed values",
                         "fallback", "python object",
                         {"rejected_codecs": rejected,
                          "sample_types": sorted({type(v).__name__
                                                  for v in all_not_none(values)})})


# -- leaf encoding -------------------------------------------------------------------

def _encode_leaf(path: str, values: List[Any]) -> Tuple[EncodedLeaf, List[Any]]:
    """-> (leaf with row metadata, list of row byte views to concatenate)."""
    t0 = now()
    decision = choose_leaf_codec(values)
    codec, meta = decision.codec, dict(decision.metadata)
    nulls = [i for i, v in enumerate(values) if v is None]
    parts, lengths, extra = [], [], []
    for v in values:
        if v is None:
            lengths.append(0)
            extra.append(None)
            continue
        if codec == "ragged_tensor":
            spec, mv = _encode_member(path, v)
            extra.append(spec["shape"])
        elif codec == "typed_ragged":
            a = np.ascontiguousarray(np.asarray(v, dtype=np.dtype(meta["dtype"])))
            mv = memoryview(a.reshape(-1).view(np.uint8))
            extra.append([type(v).__name__, list(a.shape),
                          v.dtype.str if isinstance(v, np.ndarray) else None])
        elif codec == "ndarray":
            a = np.asarray(v, dtype=np.dtype(meta["dtype"])).reshape(1)
            mv = memoryview(a.view(np.uint8))
            extra.append(type(v).__name__ if isinstance(v, (bool, int, float)) else None)
        elif codec == "bytes_ragged":
            mv = memoryview(bytes(v))
            extra.append(type(v).__name__)
        elif codec == "utf8_ragged":
            mv = memoryview(v.encode("utf-8"))
            extra.append(None)
        elif codec == "json_ragged":
            mv = memoryview(json.dumps(v, ensure_ascii=False, separators=(",", ":"),
                                       allow_nan=False).encode("utf-8"))
            extra.append(None)
        else:
            spec, mv = _encode_member(path, v)
            extra.append(spec)
        parts.append(mv)
        lengths.append(mv.nbytes)
    meta.update({"nulls": nulls, "lengths": lengths, "rows_meta": extra})
    leaf = EncodedLeaf(path=path, codec=codec, rows=len(values), bytes=sum(lengths),
                       payload={}, metadata=meta, encode_s=now() - t0)
    return leaf, parts


def _decode_leaf(leaf: Dict[str, Any], data: memoryview) -> List[Any]:
    codec, meta = leaf["codec"], leaf["metadata"]
    nulls = set(meta["nulls"])
    out, pos = [], 0
    for i, (n, extra) in enumerate(zip(meta["lengths"], meta["rows_meta"])):
        if i in nulls:
            out.append(None)
            continue
        raw = data[pos:pos + n]
        pos += n
        if codec == "ragged_tensor":
            out.append(_decode_member({"encoding": "torch_tensor",
                                       "dtype": meta["dtype"].replace("torch.", "")},
                                      raw, shape=extra))
        elif codec == "typed_ragged":
            kind, shape, own = extra
            a = np.frombuffer(bytearray(raw), dtype=np.dtype(meta["dtype"])).reshape(shape)
            out.append(a.astype(np.dtype(own)) if kind == "ndarray" else
                       tuple(a.tolist()) if kind == "tuple" else a.tolist())
        elif codec == "ndarray":
            a = np.frombuffer(bytearray(raw), dtype=np.dtype(meta["dtype"]))[0]
            out.append({"bool": bool, "int": int, "float": float}[extra](a) if extra else a)
        elif codec == "bytes_ragged":
            out.append(bytearray(raw) if extra == "bytearray" else bytes(raw))
        elif codec == "utf8_ragged":
            out.append(bytes(raw).decode("utf-8"))
        elif codec == "json_ragged":
            out.append(json.loads(bytes(raw)))
        elif codec == "msgpack_ragged":
            out.append(_decode_member(extra, raw))
        else:
            raise ValueError("unknown DataProto leaf codec %r" % codec)
    return out


# -- the backend -----------------------------------------------------------------------

def _slice_dataproto(batch, non_tensor, info, start, end):
    return ({k: v[start:end] for k, v in batch.items()},
            {k: v[start:end] for k, v in non_tensor.items()}, info)


def _row_count(batch, non_tensor) -> int:
    for v in list(batch.values()) + list(non_tensor.values()):
        return int(v.shape[0]) if hasattr(v, "shape") else len(v)
    return 0


def _value_bytes(v: Any) -> int:
    if v is None:
        return 0
    if _is_torch_tensor(v):
        return tensor_nbytes(v)
    if isinstance(v, np.ndarray):
        return int(v.nbytes)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return len(v)
    if isinstance(v, str):
        return len(v.encode("utf-8"))
    if isinstance(v, dict):
        return sum(_value_bytes(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return sum(_value_bytes(x) for x in v)
    return 8


class MooncakeDataProtoTransferBackend:
    def __init__(self, store: KeyValueStore, key_prefix: str = "dataproto",
                 dataproto_cls: Optional[Any] = None) -> None:
        self.store = store
        self.key_prefix = key_prefix.rstrip("/")
        self.dataproto_cls = dataproto_cls

    # -- put --------------------------------------------------------------------------

    def put_dataproto(self, data: Any, partition: str = "default",
                      shard_policy: Optional[DataProtoShardPolicy] = None):
        parts = _dataproto_envelope(data)
        if shard_policy is not None and self._should_shard(parts, shard_policy):
            return self.put_dataproto_sharded(data, partition=partition,
                                              shard_policy=shard_policy)
        return self._put_single(parts, partition)

    def put_dataproto_sharded(self, data: Any, partition: str = "default",
                              shard_policy: Optional[DataProtoShardPolicy] = None):
        policy = shard_policy or DataProtoShardPolicy(enabled=True)
        parts = _dataproto_envelope(data)
        rows = _row_count(parts[0], parts[1])
        decision = self._select_transfer_decision(parts, policy)
        if rows == 0 or decision.shard_count <= 1:
            return self._put_single(parts, partition)
        object_id = "%s/%s" % (partition, uuid.uuid4().hex)
        base = "%s/%s" % (self.key_prefix, object_id)
        ranges = self._select_shard_ranges(parts, decision.shard_count, decision.byte_balanced)
        shards, refs, t0 = [], [], now()
        try:
            for i, (s, e) in enumerate(ranges):
                ref = self._put_single(_slice_dataproto(*parts, s, e),
                                       "%s/shard_%04d" % (object_id, i))
                refs.append(ref)
                shards.append({"shard_id": i, "row_start": s, "row_count": e - s,
                               "logical_bytes": self._logical_bytes(ref.manifest),
                               "object_id": ref.object_id, "manifest_key": ref.manifest_key,
                               "manifest": ref.manifest})
            manifest = {
                "version": 2, "layout": "row_sharded_v1", "object_id": object_id,
                "row_count": rows, "shards": shards,
                "policy": self._policy_to_dict(policy, decision),
                "profile": {"put_s": now() - t0, "shard_count": len(ranges),
                            "shard_ranges": [list(r) for r in ranges],
                            "rows_per_shard": [e - s for s, e in ranges],
                            "bytes_per_shard": [sh["logical_bytes"] for sh in shards],
                            "transfer_profile": dict(decision.profile.__dict__)}}
            key = base + "/manifest"
            rc = self.store.put(key, json.dumps(manifest, ensure_ascii=False).encode("utf-8"))
            if rc != 0:
                raise RuntimeError("put failed for %s: %s" % (key, rc))
        except BaseException:
            for ref in reversed(refs):
                self.remove_dataproto(ref)
            raise
        return RemoteDataProtoShardedRef(object_id, rows, key, manifest)

    def _put_single(self, parts, partition: str) -> RemoteDataProtoRef:
        batch, non_tensor, info = parts
        rows = _row_count(batch, non_tensor)
        object_id = "%s/%s" % (partition, uuid.uuid4().hex)
        base = "%s/%s" % (self.key_prefix, object_id)
        written: List[str] = []
        profile: Dict[str, Any] = {"batch_put_s": 0.0, "infer_encode_s": 0.0,
                                   "leaf_put_s": 0.0, "meta_put_s": 0.0, "manifest_put_s": 0.0}
        t_all = now()
        try:
            batch_entries = self._put_dense(base, batch, written, profile)
            t0 = now()
            encoded = []
            for name, array in non_tensor.items():
                if not isinstance(array, np.ndarray) or array.dtype != object:
                    raise TypeError("non_tensor_batch.%s must be np.ndarray(dtype=object)" % name)
                encoded.append(_encode_leaf("non_tensor_batch." + name, list(array)))
            profile["infer_encode_s"] = now() - t0
            t0 = now()
            leaves = [self._put_leaf(base, i, leaf, views, written)
                      for i, (leaf, views) in enumerate(encoded)]
            profile["leaf_put_s"] = now() - t0
            t0 = now()
            meta_key = base + "/meta_info"
            spec, blob = _encode_member("meta_info", dict(info))
            self._put_or_raise(meta_key, bytes(blob))
            written.append(meta_key)
            profile["meta_put_s"] = now() - t0
            manifest = {"version": 1, "object_id": object_id, "row_count": rows,
                        "batch": batch_entries, "nodes": [], "leaves": leaves,
                        "meta_info_key": meta_key, "meta_info_encoding": spec}
            profile["total_s"] = now() - t_all
            manifest["profile"] = profile
            key = base + "/manifest"
            self._put_or_raise(key, json.dumps(manifest, ensure_ascii=False).encode("utf-8"))
        except BaseException:
            self._remove_keys(written, quiet=True)
            raise
        return RemoteDataProtoRef(object_id, rows, key, manifest)

    def _put_or_raise(self, key: str, value: bytes) -> None:
        rc = self.store.put(key, value)
        if rc != 0:
            raise RuntimeError("put failed for %s: %s" % (key, rc))

    def _put_dense(self, base, batch, written, profile) -> List[Dict[str, Any]]:
        entries, keys, views = [], [], []
        for name, tensor in batch.items():
            spec, mv = _encode_member("batch." + name, tensor)
            key = "%s/batch/%s" % (base, name)
            entries.append({"path": "batch." + name, "key": key, "codec": "dense_tensor_v1",
                            "dtype": str(tensor.dtype), "shape": list(tensor.shape),
                            "bytes": mv.nbytes, "payload": spec})
            keys.append(key)
            views.append(mv)
        if not keys:
            return entries
        t0 = now()
        arrays = [np.frombuffer(v, dtype=np.uint8) if v.nbytes else None for v in views]
        nonempty = [i for i, a in enumerate(arrays) if a is not None]
        for i in range(len(keys)):
            if arrays[i] is None:  # an empty tensor: an empty object (put of b"")
                self._put_or_raise(keys[i], b"")
                written.append(keys[i])
        with _Registered(self.store, [(arrays[i].ctypes.data, arrays[i].nbytes)
                                      for i in nonempty]):
            rcs = self.store.batch_put_from([keys[i] for i in nonempty],
                                            [arrays[i].ctypes.data for i in nonempty],
                                            [arrays[i].nbytes for i in nonempty])
        written.extend(keys[i] for i, rc in zip(nonempty, rcs) if rc == 0)
        if any(rc != 0 for rc in rcs):
            raise RuntimeError("batch_put_from failed: %s" % list(rcs))
        profile["batch_put_s"] = now() - t0
        return entries

    def _put_leaf(self, base, index, leaf: EncodedLeaf, views, written) -> Dict[str, Any]:
        chunk = RAGGED_TENSOR_PART_CHUNK_BYTES if leaf.codec == "ragged_tensor" \
            else RAGGED_BYTES_PART_CHUNK_BYTES
        offsets = chunk_offsets_by_size([v.nbytes for v in views], max(1, chunk))
        key = "%s/leaf/%d/data" % (base, index)
        chunks = []
        for c, (lo, hi) in enumerate(zip(offsets, offsets[1:])):
            ckey = key if len(offsets) == 2 else "%s/chunk/%d" % (key, c)
            group = views[lo:hi]
            put_parts = getattr(self.store, "put_parts", None)
            rc = put_parts(ckey, *group) if put_parts else \
                self.store.put(ckey, b"".join(bytes(g) for g in group))
            written.append(ckey)  # a failed put_parts may have left the object
            if rc != 0:
                raise RuntimeError("put_parts failed for %s: %s" % (ckey, rc))
            chunks.append({"key": ckey, "bytes": sum(g.nbytes for g in group)})
        if not chunks:  # no rows at all: an empty object keeps the layout uniform
            self._put_or_raise(key, b"")
            written.append(key)
            chunks.append({"key": key, "bytes": 0})
        payload = {"data": {"key": key, "bytes": leaf.bytes, "kind": "raw", "chunks": chunks}}
        return {"path": leaf.path, "codec": leaf.codec, "rows": leaf.rows, "bytes": leaf.bytes,
                "metadata": leaf.metadata, "payload": payload}

    # -- materialize ---------------------------------------------------------------------

    def materialize_dataproto(self, ref, fast_media: bool = False,
                              max_inflight_get: Optional[int] = None,
                              materialize_policy: Optional[DataProtoMaterializePolicy] = None):
        manifest = ref.manifest or self._load_manifest(ref.manifest_key)
        policy = materialize_policy or DataProtoMaterializePolicy(max_inflight_get=max_inflight_get)
        cls = self._resolve_dataproto_cls()
        if manifest.get("layout") == "row_sharded_v1":
            return self._materialize_sharded(manifest, policy, cls)
        batch, non_tensor, info, prof = self._read_single(manifest)
        info["mooncake_materialize_profile"] = prof
        return self._build(cls, batch, non_tensor, info)

    def _load_manifest(self, key: str) -> Dict[str, Any]:
        raw = self.store.get(key)
        if not raw:
            raise KeyError("DataProto manifest %s is missing" % key)
        return json.loads(bytes(raw).decode("utf-8"))

    def _resolve_dataproto_cls(self) -> Any:
        if self.dataproto_cls is not None:
            return self.dataproto_cls
        try:
            from roll.distributed.scheduler.protocol import DataProto
        except ImportError as exc:
            raise ImportError("dataproto_cls is required when ROLL DataProto is not "
                              "installed") from exc
        return DataProto

    @staticmethod
    def _build(cls, batch, non_tensor, info):
        if cls is dict:
            return {"batch": batch, "non_tensor_batch": non_tensor, "meta_info": info}
        if hasattr(cls, "from_dict") and batch:
            return cls.from_dict(tensors=batch, non_tensors=non_tensor, meta_info=info)
        return cls(batch=batch or None, non_tensor_batch=non_tensor, meta_info=info)

    def _read_single(self, manifest):
        prof = {"batch_get_s": 0.0, "leaf_payload_get_s": 0.0, "leaf_decode_s": 0.0,
                "range_read_s": 0.0, "scratch_copy_s": 0.0, "range_group_count": 0,
                "range_group_sizes": [], "direct_range_read_s": 0.0,
                "direct_range_group_count": 0, "direct_range_group_sizes": [],
                "direct_range_fallback_count": 0, "meta_info_s": 0.0, "leaves": []}
        t0 = now()
        batch = self._read_dense(manifest["batch"])
        prof["batch_get_s"] = now() - t0
        non_tensor = {}
        for leaf in manifest["leaves"]:
            t0 = now()
            data = self._read_payload(leaf["payload"]["data"], prof)
            t1 = now()
            values = _decode_leaf(leaf, memoryview(data))
            arr = np.empty(len(values), dtype=object)
            arr[:] = values
            non_tensor[leaf["path"].split(".", 1)[1]] = arr
            prof["leaf_payload_get_s"] += t1 - t0
            prof["leaf_decode_s"] += now() - t1
            prof["leaves"].append({"path": leaf["path"], "codec": leaf["codec"],
                                   "payload_get_s": t1 - t0, "decode_s": now() - t1})
        t0 = now()
        raw = self.store.get(manifest["meta_info_key"])
        if raw is None or (not raw and manifest.get("meta_info_encoding")):
            raise KeyError("DataProto meta_info %s is missing" % manifest["meta_info_key"])
        info = _decode_member(manifest.get("meta_info_encoding", {"encoding": "msgpack"}), raw)
        prof["meta_info_s"] = now() - t0
        return batch, non_tensor, dict(info), prof

    def _read_dense(self, entries) -> Dict[str, Any]:
        out, reads = {}, []
        for e in entries:
            spec = e["payload"]
            if spec["encoding"] == "ndarray":
                value = np.empty(spec["shape"], dtype=np.dtype(spec["dtype"]))
                raw = value.reshape(-1).view(np.uint8)
            else:
                import torch
                from mooncake.structured_object_store import _torch_dtype
                value = torch.empty(spec["shape"], dtype=_torch_dtype(spec["dtype"]))
                raw = value.reshape(-1).view(torch.uint8).numpy() if value.numel() \
                    else np.empty(0, np.uint8)
            out[e["path"].split(".", 1)[1]] = value
            if raw.nbytes:
                reads.append((e["key"], raw))
        if reads:
            with _Registered(self.store, [(r.ctypes.data, r.nbytes) for _, r in reads]):
                rcs = self.store.batch_get_into([k for k, _ in reads],
                                                [r.ctypes.data for _, r in reads],
                                                [r.nbytes for _, r in reads])
            for (k, r), rc in zip(reads, rcs):
                if rc != r.nbytes:
                    raise RuntimeError("batch_get_into failed for %s: %s" % (k, rc))
        return out

    def _read_payload(self, spec, prof) -> np.ndarray:
        """All chunks of one leaf payload into one buffer: ranged reads
        straight into it when it can be registered, else a scratch copy."""
        total = int(spec["bytes"])
        buf = np.empty(total, dtype=np.uint8)
        chunks = [c for c in spec["chunks"] if c["bytes"]]
        if not chunks:
            return buf
        offsets = np.cumsum([0] + [c["bytes"] for c in chunks])[:-1].tolist()
        t0 = now()
        rc = self.store.register_buffer(buf.ctypes.data, total)
        if rc == 0:
            try:
                res = self.store.get_into_ranges(
                    [buf.ctypes.data], [[c["key"] for c in chunks]],
                    [[[o] for o in offsets]], [[[0] for _ in chunks]],
                    [[[c["bytes"]] for c in chunks]])
            finally:
                self.store.unregister_buffer(buf.ctypes.data)
            got = [r[0] for r in res[0]]
            want = [c["bytes"] for c in chunks]
            if got != want:
                raise RuntimeError("get_into_ranges failed for %s: expected %s, got %s"
                                   % (spec["key"], want, got))
            prof["direct_range_read_s"] += now() - t0
            prof["direct_range_group_count"] += 1
            prof["direct_range_group_sizes"].append(len(chunks))
            return buf
        prof["direct_range_fallback_count"] += 1
        for c, o in zip(chunks, offsets):
            t1 = now()
            data = self.store.get(c["key"])
            if data is None or len(data) != c["bytes"]:
                raise RuntimeError("get failed for %s: %s" % (
                    c["key"], "missing" if data is None else "%d bytes" % len(data)))
            t2 = now()
            buf[o:o + c["bytes"]] = np.frombuffer(data, dtype=np.uint8)
            prof["range_read_s"] += t2 - t1
            prof["scratch_copy_s"] += now() - t2
        prof["range_group_count"] += 1
        prof["range_group_sizes"].append(len(chunks))
        return buf

    def _materialize_sharded(self, manifest, policy, cls):
        shards = sorted(manifest["shards"], key=lambda s: int(s["row_start"]))
        if not shards:
            raise ValueError("sharded RemoteDataProtoRef has no shards")
        parent = manifest.get("policy", {})
        workers = self._select_materialize_inflight(parent, policy, len(shards))
        t0 = now()

        def one(shard):
            m = shard.get("manifest") or self._load_manifest(shard["manifest_key"])
            t = now()
            res = self._read_single(m)
            return res, now() - t

        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(one, shards))
        t1 = now()
        batch, non_tensor = {}, {}
        for name in results[0][0][0]:
            first = results[0][0][0][name]
            parts = [r[0][0][name] for r in results]
            if isinstance(first, np.ndarray):
                batch[name] = np.concatenate(parts)
            else:
                import torch
                batch[name] = torch.cat(parts)
        for name in results[0][0][1]:
            non_tensor[name] = np.concatenate([r[0][1][name] for r in results])
        info = results[0][0][2]
        times = {str(s["shard_id"]): r[1] for s, r in zip(shards, results)}
        feedback = self._feedback(list(times.values()), workers, policy)
        info["mooncake_materialize_profile"] = {
            "layout": "row_sharded_v1", "shard_count": len(shards), "max_inflight_get": workers,
            "shard_materialize_s": times, "concat_s": now() - t1, "total_s": now() - t0,
            "parallel_feedback": feedback, "adaptive_state": dict(self._state().__dict__),
            "parent_policy": parent,
            "materialize_policy": dict(policy.__dict__)}
        return self._build(cls, batch, non_tensor, info)

    def _state(self) -> _AdaptiveState:
        with _STATE_LOCK:
            return _TRANSFER_ADAPTIVE_STATES.setdefault(id(self.store), _AdaptiveState())

    def _select_materialize_inflight(self, parent, policy, shard_count) -> int:
        want = policy.max_inflight_get or parent.get("max_inflight_get") or 1
        want = max(1, min(int(want), shard_count))
        state = self._state()
        if state.pressure_level == "throttle" and state.last_max_inflight_get:
            want = max(1, min(want, state.last_max_inflight_get // 2))
        return want

    def _feedback(self, shard_times, workers, policy) -> Dict[str, Any]:
        """Throttle the next read when one shard took far longer than the
        median (a sign the store or the network is saturated)."""
        state = self._state()
        ordered = sorted(shard_times)
        median = ordered[len(ordered) // 2]
        slow = ordered[-1] > 4 * max(median, 1e-3)
        with _STATE_LOCK:
            state.last_max_inflight_get = workers
            state.materialize_count += 1
            if policy.adaptive_feedback:
                state.pressure_level = "throttle" if slow else "normal"
        return {"max_inflight_get": workers, "slowest_shard_s": ordered[-1],
                "median_shard_s": median, "pressure_level": state.pressure_level}

    # -- remove -------------------------------------------------------------------------

    def remove_dataproto(self, ref) -> None:
        manifest = ref.manifest or self._load_manifest(ref.manifest_key)
        if manifest.get("layout") == "row_sharded_v1":
            errors = []
            for s in manifest["shards"]:
                try:
                    self.remove_dataproto(RemoteDataProtoRef(
                        s["object_id"], int(s["row_count"]), s["manifest_key"],
                        s.get("manifest", {})))
                except KeyError:
                    continue
                except RuntimeError as e:
                    errors.append(e)
            if errors:
                raise RuntimeError("failed to remove %d Mooncake shards" % len(errors)) \
                    from errors[0]
            self._remove_keys([ref.manifest_key])
            return
        keys = [manifest["meta_info_key"]] + [e["key"] for e in manifest["batch"]]
        for leaf in manifest["leaves"]:
            for spec in leaf["payload"].values():
                keys.extend(c["key"] for c in spec["chunks"])
        self._remove_keys(keys + [ref.manifest_key])

    def _remove_keys(self, keys: Iterable[str], quiet: bool = False) -> None:
        errors = []
        for k in keys:
            rc = self.store.remove(k, True)
            if rc not in (None, 0, -704):
                errors.append((k, rc))
        if errors and not quiet:
            raise RuntimeError("failed to remove %d Mooncake keys: %s" % (len(errors),
                                                                           errors[:3]))

    # -- sharding policy -----------------------------------------------------------------

    def _should_shard(self, parts, policy: DataProtoShardPolicy) -> bool:
        if not policy.enabled and not policy.adaptive and policy.num_shards is None:
            return False
        if _row_count(parts[0], parts[1]) <= 1:
            return False
        if policy.num_shards is not None:
            return policy.num_shards > 1
        return self._select_transfer_decision(parts, policy).shard_count > 1

    def _row_bytes(self, parts) -> List[int]:
        batch, non_tensor, _ = parts
        rows = _row_count(batch, non_tensor)
        out = [0] * rows
        for t in batch.values():
            n = (tensor_nbytes(t) if _is_torch_tensor(t) else int(t.nbytes)) // max(rows, 1)
            out = [x + n for x in out]
        for arr in non_tensor.values():
            for i, v in enumerate(arr[:rows]):
                out[i] += _value_bytes(v)
        return out

    def _estimate_dataproto_profile(self, parts) -> DataProtoTransferProfile:
        batch, non_tensor, _ = parts
        dense = sum(tensor_nbytes(t) if _is_torch_tensor(t) else int(t.nbytes)
                    for t in batch.values())
        row_oriented = sum(int(a.nbytes) + sum(_value_bytes(v) for v in a)
                           for a in non_tensor.values() if isinstance(a, np.ndarray))
        rb = sorted(self._row_bytes(parts))
        pick = lambda q: rb[min(len(rb) - 1, int(q * (len(rb) - 1) + 0.5))] if rb else 0
        p50, mx = pick(0.5), (rb[-1] if rb else 0)
        ratio = float(mx) / max(float(p50), 1.0)
        return DataProtoTransferProfile(
            total_bytes=int(dense + row_oriented), dense_tensor_bytes=int(dense),
            row_oriented_bytes=int(row_oriented), row_bytes_p50=int(p50),
            row_bytes_p95=int(pick(0.95)), row_bytes_max=int(mx), row_skew_ratio=ratio,
            row_skewed=bool(ratio >= 3.0 and mx >= 64 * 1024 ** 2))

    def _select_transfer_decision(self, parts, policy) -> DataProtoTransferDecision:
        rows = _row_count(parts[0], parts[1])
        prof = self._estimate_dataproto_profile(parts)
        total = max(prof.total_bytes, 1)
        if rows <= 1:
            n = 1
        elif policy.num_shards is not None:
            n = max(1, min(rows, policy.num_shards))
        elif (prof.total_bytes < policy.small_payload_threshold
              or prof.dense_tensor_bytes / total >= policy.dense_ratio_threshold
              or prof.row_oriented_bytes / total < policy.row_oriented_ratio_threshold):
            n = 1
        else:
            n = max(1, min(rows, policy.max_shards,
                           math.ceil(prof.total_bytes / max(policy.target_shard_bytes, 1))))
        balanced = bool(policy.byte_balanced and (prof.row_skewed or not policy.adaptive
                                                  or policy.num_shards is not None))
        if n <= 1:
            inflight = 1
        else:
            cap = 2 if prof.total_bytes < 2 * policy.small_payload_threshold else 4
            inflight = min(n, cap, policy.max_inflight_get)
        return DataProtoTransferDecision(n, balanced, policy.target_shard_bytes, inflight, prof)

    def _select_shard_ranges(self, parts, shard_count, byte_balanced) -> List[Tuple[int, int]]:
        rows = _row_count(parts[0], parts[1])
        sizes = self._row_bytes(parts) if byte_balanced else []
        if not byte_balanced or not sum(sizes):
            base, extra = divmod(rows, shard_count)
            out, s = [], 0
            for i in range(shard_count):
                e = s + base + (1 if i < extra else 0)
                out.append((s, e))
                s = e
            return out
        # cut where the running byte total comes closest to k/n of the total,
        # every shard keeping at least one row
        out, s, total, acc = [], 0, float(sum(sizes)), 0
        for k in range(1, shard_count):
            target = total * k / shard_count
            e = s + 1
            acc += sizes[s]
            while e < rows - (shard_count - k) and \
                    abs(acc + sizes[e] - target) <= abs(acc - target):
                acc += sizes[e]
                e += 1
            out.append((s, e))
            s = e
        out.append((s, rows))
        return out

    @staticmethod
    def _policy_to_dict(policy, decision) -> Dict[str, Any]:
        d = dict(policy.__dict__)
        d.update({"selected_shards": decision.shard_count,
                  "byte_balanced": decision.byte_balanced,
                  "max_inflight_get": decision.recommended_max_inflight_get})
        return d

    @staticmethod
    def _logical_bytes(manifest) -> int:
        return sum(e["bytes"] for e in manifest["batch"]) + \
            sum(l["bytes"] for l in manifest["leaves"])

    def manifest_view(self, ref) -> DataProtoManifestView:
        """The fields a stored DataProto holds (no payload read)."""
        m = ref.manifest or self._load_manifest(ref.manifest_key)
        if m.get("layout") == "row_sharded_v1":
            first = m["shards"][0].get("manifest") or self._load_manifest(
                m["shards"][0]["manifest_key"])
            v = self.manifest_view(RemoteDataProtoRef("", 0, "", first))
            return DataProtoManifestView(m["row_count"], v.batch_fields, v.non_tensor_fields,
                                         None, "row_sharded_v1", m["object_id"])
        return DataProtoManifestView(
            m["row_count"],
            {e["path"].split(".", 1)[1]: {"dtype": e["dtype"], "shape": e["shape"]}
             for e in m["batch"]},
            {l["path"].split(".", 1)[1]: {"codec": l["codec"], "bytes": l["bytes"]}
             for l in m["leaves"]},
            m["meta_info_key"], "single", m["object_id"])


class _Registered:
    """Register (ptr, size) buffers with the store for a block; unregister
    them all on exit (RuntimeError if a register fails)."""

    def __init__(self, store, buffers):
        self.store, self.buffers, self.done = store, buffers, []

    def __enter__(self):
        for ptr, n in self.buffers:
            rc = self.store.register_buffer(ptr, n)
            if rc != 0:
                self.__exit__(None, None, None)
                raise RuntimeError("register_buffer failed: %s" % rc)
            self.done.append(ptr)
        return self

    def __exit__(self, *exc):
        for ptr in reversed(self.done):
            self.store.unregister_buffer(ptr)
        self.done = []
        return False


__all__ = ["CodecDecision", "EncodedLeaf", "RemoteDataProtoRef", "RemoteDataProtoShardedRef",
           "DataProtoShardPolicy", "DataProtoTransferProfile", "DataProtoTransferDecision",
           "DataProtoMaterializePolicy", "DataProtoManifestView", "PayloadParts",
           "KeyValueStore", "InMemoryMooncakeStore", "MooncakeDataProtoTransferBackend",
           "chunk_offsets_by_size", "choose_leaf_codec", "create_mooncake_store_from_env"]
