"""mooncake.structured_object_store: typed objects and DataProto batches over the store.

crescent's own implementation of Mooncake's structured object layer (the
public names and call signatures are Mooncake's; the code and the stored
layout are crescent's). Three levels:

* bundles — ``MooncakeBundleTransfer.put_bundle(meta, buffers)``: raw
  metadata bytes plus named byte buffers. Each buffer is cut into chunks of
  at most ``chunk_bytes`` and every chunk is one store object; a JSON
  manifest object names them. ``get_bundle`` / ``remove_bundle``.
* structured objects — ``put_structured_object(StructuredObjectPayload)`` /
  ``put_object``: named members that are bytes, numpy arrays, torch (CPU)
  tensors, or msgpack-able values (str, int, float, bool, None, lists,
  dicts, object ndarrays of those); ``read_spec(ref)`` gives a lazy
  ``StructuredObjectReadSpec`` (``select_members``, ``slice_member``),
  ``materialize`` / ``materialize_into`` read it (a row slice of an array or
  tensor reads only the chunks that hold those rows).
* DataProto batches — ``put(data, type="dataproto"|"dict")`` /
  ``put_dataproto`` store a verl-style DataProto (``batch``,
  ``non_tensor_batch``, ``meta_info``) or a flat dict as one structured
  object per stage; ``get`` / ``get_dataproto`` read selected fields and
  rows; ``append_dataproto_fields`` adds a stage; ``export_dataproto_ref`` /
  ``import_dataproto_ref`` turn the ref into a JSON-safe handle.

Nothing is unpickled: values that are not arrays, tensors or bytes go
through msgpack, so reading a bundle never runs code chosen by its writer.
"""
from __future__ import annotations

import io
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Literal, Mapping, Optional, Protocol, Sequence

import numpy as np

try:
    import msgpack as _msgpack
except ImportError:  # pragma: no cover - Debian python3-msgpack is a dependency
    _msgpack = None

DEFAULT_BUNDLE_CHUNK_BYTES = 64 * 1024 ** 2
AUTO_PARALLEL_MIN_BYTES = DEFAULT_BUNDLE_CHUNK_BYTES
AUTO_PARALLEL_MIN_CHUNKS = 8
MISSING_OBJECT_ERROR = -704  # the store's OBJECT_NOT_FOUND
STRUCTURED_FIELD_SPECS_KEY = "__mooncake_structured_fields__"
DATAPROTO_REF_HANDLE_TYPE = "mooncake_dataproto_ref"
DATAPROTO_REF_HANDLE_VERSION = 1
STORAGE_GROUP_ID = "storage_group_id"

_MANIFEST_FORMAT = "crescent-bundle-1"
_MAX_MANIFEST_BYTES = 64 * 1024 ** 2
_MAX_INFLIGHT = 64
_WRAPPED = "__mooncake_wrapped_object__"


class BundleStore(Protocol):
    def put(self, key: str, value: Any, config: Any = None) -> int: ...

    def get(self, key: str) -> bytes: ...

    def remove(self, key: str, force: bool = False) -> int: ...

    def is_exist(self, key: str) -> int: ...


@dataclass(frozen=True)
class BundleTransferPolicy:
    """How many chunk puts run at once (``max_inflight_put``) and how."""

    max_inflight_put: int = 1
    put_mode: Literal["auto", "batch", "parallel"] = "auto"
    copy_mode: Literal["auto", "zero_copy", "copy"] = "auto"


@dataclass(frozen=True)
class FieldSchema:
    """Schema hint for a DataProto field; ``metadata["section"]`` pins its
    section (``batch``, ``non_tensor_batch`` or ``meta_info``)."""

    codec: str
    nullable: bool = True
    metadata: dict = field(default_factory=dict)


@dataclass
class RemoteBundleRef:
    """A stored bundle: its manifest key and (once read) its manifest."""

    manifest_key: str
    manifest: dict


@dataclass(frozen=True, init=False)
class StructuredObjectPayload:
    """A structured object: JSON-safe metadata plus named members."""

    metadata: Mapping[str, Any]
    buffers: Mapping[str, Any]

    def __init__(self, metadata: Optional[Mapping[str, Any]] = None,
                 buffers: Optional[Mapping[str, Any]] = None) -> None:
        if buffers is None:
            raise TypeError("StructuredObjectPayload requires buffers")
        if not isinstance(buffers, Mapping):
            raise TypeError("StructuredObjectPayload buffers must be a mapping")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise TypeError("StructuredObjectPayload metadata must be a mapping")
        object.__setattr__(self, "metadata", {} if metadata is None else metadata)
        object.__setattr__(self, "buffers", buffers)


@dataclass
class StructuredObjectResult:
    """What ``materialize`` read: the object's metadata and its members."""

    metadata: dict
    objects: dict


@dataclass(frozen=True)
class StructuredFieldLocation:
    """Where a DataProto field lives: stage object, member, section."""

    stage: str
    member: str
    section: Literal["batch", "non_tensor_batch"]


@dataclass
class MooncakeDataProtoRef:
    """A stored DataProto: one structured object per stage."""

    batch_size: int
    stage_refs: dict
    field_index: dict
    meta_info: dict
    namespace: str = "default"
    partition: str = "default"
    global_indexes: Optional[list] = None
    encoded_non_tensor: dict = field(default_factory=dict)
    _storage_group_id: Optional[str] = field(default=None, repr=False)


@dataclass(frozen=True)
class StructuredMemberSlice:
    """``start:end:step`` along ``axis`` of one member."""

    axis: int
    start: int
    end: int
    step: int = 1


@dataclass(frozen=True)
class StructuredObjectReadSpec:
    """Lazy read plan: which members, which slices."""

    ref: Any
    member_names: Optional[tuple] = None
    member_slices: tuple = ()

    def select_members(self, names: Optional[Sequence[str]]) -> "StructuredObjectReadSpec":
        if names is not None:
            if isinstance(names, str):
                raise TypeError("select_members takes a sequence of names, not a str")
            names = tuple(names)
            for n in names:
                if not isinstance(n, str):
                    raise TypeError("member names must be str")
        return StructuredObjectReadSpec(self.ref, names, self.member_slices)

    def slice_member(self, name: str, axis: int, start: int, end: int,
                     step: int = 1) -> "StructuredObjectReadSpec":
        for what, v in (("axis", axis), ("start", start), ("end", end), ("step", step)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError("slice_member: %s must be an int" % what)
        if step <= 0:
            raise ValueError("slice_member: step must be positive")
        slices = dict(self.member_slices)
        slices[name] = StructuredMemberSlice(axis, start, end, step)
        return StructuredObjectReadSpec(self.ref, self.member_names, tuple(slices.items()))

    def member_slice(self, name: str) -> Optional[StructuredMemberSlice]:
        return dict(self.member_slices).get(name)


DataProtoRefLike = Any


# ---------------------------------------------------------------- handles

def is_dataproto_ref_handle(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == DATAPROTO_REF_HANDLE_TYPE


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    raise TypeError("DataProto ref handles support only JSON-safe values, got %s"
                    % type(value).__name__)


def export_dataproto_ref(ref: MooncakeDataProtoRef) -> dict:
    """The ref as a JSON-safe dict another process can import."""
    if not isinstance(ref, MooncakeDataProtoRef):
        raise TypeError("expected MooncakeDataProtoRef, got %s" % type(ref).__name__)
    handle = {
        "type": DATAPROTO_REF_HANDLE_TYPE,
        "version": DATAPROTO_REF_HANDLE_VERSION,
        "kind": "bundle_stages",
        "batch_size": int(ref.batch_size),
        "namespace": ref.namespace,
        "partition": ref.partition,
        "global_indexes": _json_safe(ref.global_indexes),
        "stage_refs": {s: {"manifest_key": r.manifest_key} for s, r in ref.stage_refs.items()},
        "field_index": {n: {"stage": l.stage, "member": l.member, "section": l.section}
                        for n, l in ref.field_index.items()},
        "meta_info": _json_safe(ref.meta_info),
        "encoded_non_tensor": _json_safe(ref.encoded_non_tensor),
    }
    if ref._storage_group_id is not None:
        handle[STORAGE_GROUP_ID] = ref._storage_group_id
    json.dumps(handle)
    return handle


def _mapping(value: Any, what: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise ValueError("DataProto ref handle %s must be a mapping" % what)
    return value


def _nonempty_str(v: Any) -> bool:
    return isinstance(v, str) and v != ""


def import_dataproto_ref(handle: Mapping[str, Any]) -> MooncakeDataProtoRef:
    """A ref from ``export_dataproto_ref``'s handle (checked field by field)."""
    if not is_dataproto_ref_handle(handle):
        raise ValueError("not a Mooncake DataProto ref handle")
    try:
        version = int(handle.get("version", -1))
    except (TypeError, ValueError):
        version = -1
    if version not in (DATAPROTO_REF_HANDLE_VERSION, 2):
        raise ValueError("unsupported DataProto ref handle version: %r" % handle.get("version"))
    if handle.get("kind") != "bundle_stages":
        raise ValueError("unsupported DataProto ref handle kind: %r" % handle.get("kind"))
    stage_refs = {}
    for stage, sr in _mapping(handle.get("stage_refs"), "stage_refs").items():
        mk = _mapping(sr, "stage_refs[%r]" % stage).get("manifest_key")
        if not _nonempty_str(stage) or not _nonempty_str(mk):
            raise ValueError("DataProto ref handle stage refs must contain non-empty "
                             "string names and manifest_key values")
        stage_refs[stage] = RemoteBundleRef(manifest_key=mk, manifest={})
    field_index = {}
    for name, raw in _mapping(handle.get("field_index"), "field_index").items():
        loc = _mapping(raw, "field_index[%r]" % name)
        section = loc.get("section")
        if section not in ("batch", "non_tensor_batch"):
            raise ValueError("invalid DataProto field section: %r" % section)
        if not (_nonempty_str(name) and _nonempty_str(loc.get("stage"))
                and _nonempty_str(loc.get("member"))):
            raise ValueError("DataProto ref handle field locations must be non-empty strings")
        if loc["stage"] not in stage_refs:
            raise ValueError("DataProto ref handle field %r references unknown stage %r"
                             % (name, loc["stage"]))
        field_index[name] = StructuredFieldLocation(loc["stage"], loc["member"], section)
    gid = handle.get(STORAGE_GROUP_ID)
    if (version == 2 and gid is None) or (gid is not None and not _nonempty_str(gid)):
        raise ValueError("DataProto ref handle has invalid storage_group_id")
    gi = handle.get("global_indexes")
    if gi is not None:
        if not isinstance(gi, list) or any(isinstance(i, bool) or not isinstance(i, int)
                                           for i in gi):
            raise ValueError("DataProto ref handle global_indexes must be a list of "
                             "integers or null")
    bs = handle.get("batch_size")
    if isinstance(bs, bool) or not isinstance(bs, int) or bs < 0:
        raise ValueError("DataProto ref handle batch_size must be a non-negative int")
    return MooncakeDataProtoRef(
        batch_size=bs, stage_refs=stage_refs, field_index=field_index,
        meta_info=dict(_mapping(handle.get("meta_info", {}), "meta_info")),
        namespace=str(handle.get("namespace", "default")),
        partition=str(handle.get("partition", "default")),
        global_indexes=None if gi is None else list(gi),
        encoded_non_tensor=dict(_mapping(handle.get("encoded_non_tensor", {}),
                                         "encoded_non_tensor")),
        _storage_group_id=gid)


export_ref = export_dataproto_ref
import_ref = import_dataproto_ref


def _resolve_dataproto_ref(ref: Any) -> MooncakeDataProtoRef:
    if isinstance(ref, MooncakeDataProtoRef):
        return ref
    if is_dataproto_ref_handle(ref):
        return import_dataproto_ref(ref)
    raise TypeError("expected MooncakeDataProtoRef or DataProto handle, got %s"
                    % type(ref).__name__)


# ---------------------------------------------------------------- member codecs

def _is_torch_tensor(v: Any) -> bool:
    t = type(v)
    return t.__module__.startswith("torch") and t.__name__ in ("Tensor", "Parameter")


def _as_bytes_view(v: Any) -> memoryview:
    mv = memoryview(v)
    if not mv.contiguous:
        raise ValueError("buffer is not contiguous")
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


def _msgpack_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError("value of type %s cannot be stored (only bytes, numpy arrays, torch "
                    "tensors and msgpack-able values)" % type(obj).__name__)


def _encode_member(name: str, value: Any):
    """-> (spec dict, bytes-like payload)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        mv = _as_bytes_view(value)
        return {"encoding": "bytes", "kind": type(value).__name__}, mv
    if isinstance(value, np.ndarray) and value.dtype != object and value.dtype.kind != "V":
        arr = np.ascontiguousarray(value)
        return ({"encoding": "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape)},
                memoryview(arr.reshape(-1).view(np.uint8)))
    if _is_torch_tensor(value):
        import torch
        if value.device.type != "cpu":
            raise ValueError("structured member %s: only CPU tensors can be stored "
                             "(no GPU here)" % name)
        t = value.detach().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else np.empty(0, np.uint8)
        return ({"encoding": "torch_tensor", "dtype": str(t.dtype).replace("torch.", ""),
                 "shape": list(t.shape), "element_size": t.element_size()},
                memoryview(raw))
    if _msgpack is None:
        raise RuntimeError("msgpack is required for non-array members (python3-msgpack)")
    spec = {"encoding": "msgpack"}
    if isinstance(value, np.ndarray):
        spec["object_array_shape"] = list(value.shape)
        value = value.tolist()
    try:
        data = _msgpack.packb(value, default=_msgpack_default, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as e:
        raise TypeError("structured member %s: %s" % (name, e)) from None
    return spec, memoryview(data)


def _torch_dtype(name: str):
    import torch
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError("unknown torch dtype %r in stored object" % name)
    return dt


def _row_bytes(spec: Mapping) -> tuple:
    """(rows, bytes per row, dtype) of an ndarray / tensor member."""
    shape = spec["shape"]
    if spec["encoding"] == "ndarray":
        item = np.dtype(spec["dtype"]).itemsize
    else:
        item = int(spec["element_size"])
    per = item
    for d in shape[1:]:
        per *= int(d)
    return int(shape[0]), per


def _decode_member(spec: Mapping, data: Any, shape: Optional[list] = None) -> Any:
    enc = spec.get("encoding")
    if enc == "bytes":
        b = bytes(data)
        return bytearray(b) if spec.get("kind") == "bytearray" else b
    if enc == "ndarray":
        shp = tuple(spec["shape"] if shape is None else shape)
        return np.frombuffer(bytearray(data), dtype=np.dtype(spec["dtype"])).reshape(shp)
    if enc == "torch_tensor":
        import torch
        shp = tuple(spec["shape"] if shape is None else shape)
        dt = _torch_dtype(spec["dtype"])
        buf = bytearray(data)
        if not buf:
            return torch.empty(shp, dtype=dt)
        return torch.frombuffer(buf, dtype=torch.uint8).view(dt).reshape(shp)
    if enc == "msgpack":
        value = _msgpack.unpackb(bytes(data), raw=False, strict_map_key=False)
        if "object_array_shape" in spec:
            shp = tuple(spec["object_array_shape"])
            arr = np.empty(shp, dtype=object)
            if shp == ():
                arr[()] = value
            else:
                flat = _flatten(value, len(shp))
                for i, v in enumerate(flat):
                    arr.flat[i] = v
            return arr
        return value
    raise ValueError("unknown member encoding %r in stored object" % enc)


def _flatten(value: Any, depth: int) -> list:
    if depth == 0:
        return [value]
    out = []
    for v in value:
        out.extend(_flatten(v, depth - 1))
    return out


# ---------------------------------------------------------------- bundles

def _check_chunk_bytes(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError("chunk_bytes must be a positive int, got %r" % (v,))
    return v


def _check_key_prefix(p: Any) -> str:
    if not isinstance(p, str):
        raise TypeError("key_prefix must be a str")
    p = p.strip("/")
    if not p:
        raise ValueError("key_prefix must not be empty")
    return p


def _check_name(what: str, v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError("%s must be a non-empty str, got %r" % (what, v))
    return v


class MooncakeBundleTransfer:
    """Structured objects, bundles and DataProto batches through a Mooncake store."""

    def __init__(self, store: BundleStore, key_prefix: str = "bundle",
                 default_chunk_bytes: int = DEFAULT_BUNDLE_CHUNK_BYTES,
                 buffer_pool: Any = None) -> None:
        for m in ("put", "get", "remove"):
            if not callable(getattr(store, m, None)):
                raise TypeError("store must have put/get/remove (a MooncakeDistributedStore)")
        self.store = store
        self.key_prefix = _check_key_prefix(key_prefix)
        self.default_chunk_bytes = _check_chunk_bytes(default_chunk_bytes)
        self.buffer_pool = buffer_pool  # accepted; reads land in fresh host memory

    # -- low level
    def _inflight(self, policy, max_inflight_put) -> int:
        n = max_inflight_put
        if n is None:
            if policy is not None and not isinstance(policy, BundleTransferPolicy):
                raise TypeError("policy must be a BundleTransferPolicy")
            n = 1 if policy is None else policy.max_inflight_put
            if policy is not None and policy.put_mode == "parallel" and n <= 1:
                n = 4
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError("max_inflight_put must be a positive int, got %r" % (n,))
        return min(n, _MAX_INFLIGHT)

    def _put_keys(self, items, config, inflight) -> None:
        """Put (key, bytes-like) pairs; on any failure remove what was written."""
        done = []

        def one(kv):
            key, data = kv
            rc = self.store.put(key, data, config) if config is not None \
                else self.store.put(key, data)
            if rc != 0:
                raise RuntimeError("mooncake put of %s failed: %d" % (key, rc))
            return key

        try:
            if inflight > 1 and len(items) > 1:
                with ThreadPoolExecutor(max_workers=min(inflight, len(items))) as ex:
                    futs = [ex.submit(one, kv) for kv in items]
                    err = None
                    for f in futs:
                        try:
                            done.append(f.result())
                        except Exception as e:  # keep collecting what got written
                            err = err or e
                    if err is not None:
                        raise err
            else:
                for kv in items:
                    done.append(one(kv))
        except Exception:
            self.remove_keys(done, strict=False)
            raise

    def remove_keys(self, keys: Sequence[str], strict: bool = True) -> None:
        """Remove store objects; a missing one is fine, another error raises if strict.
        The removal is forced: the bundle's owner drops it even while a read lease
        runs (reading a bundle while it is removed is the caller's race; a reader
        that then misses a chunk gets KeyError, chunk sizes are checked)."""
        errors = []
        for k in keys:
            rc = self.store.remove(k, True)
            if rc not in (0, MISSING_OBJECT_ERROR) and strict:
                errors.append((k, rc))
        if errors:
            raise RuntimeError("mooncake remove failed: %s" % errors[:8])

    def _read_key(self, key: str, size: int) -> bytes:
        data = self.store.get(key)
        if data is None or len(data) != size:
            raise KeyError("bundle object %s is missing or damaged (want %d bytes, got %d)"
                           % (key, size, 0 if data is None else len(data)))
        return data

    def _read_payload(self, spec: Mapping, offset: int = 0, length: Optional[int] = None) -> bytes:
        size = int(spec["size"])
        if length is None:
            length = size - offset
        if offset < 0 or length < 0 or offset + length > size:
            raise ValueError("read of %d bytes at %d outside a %d-byte payload"
                             % (length, offset, size))
        out = bytearray()
        pos = 0
        for ch in spec["chunks"]:
            csz = int(ch["size"])
            lo, hi = max(offset, pos), min(offset + length, pos + csz)
            if lo < hi:
                data = self._read_key(ch["key"], csz)
                out += data[lo - pos:hi - pos]
            pos += csz
        return bytes(out)

    def _new_object_id(self, config: Any) -> str:
        gid = getattr(config, "group_ids", None) if config is not None else None
        if gid:
            if isinstance(gid, str):
                gid = [gid]
            gid = list(gid)
            if len(gid) > 1:
                raise ValueError("structured object store config.group_ids must contain "
                                 "exactly one logical group id")
            if not isinstance(gid[0], str):
                raise ValueError("structured object store config.group_ids must contain strings")
        return uuid.uuid4().hex

    def put_bundle(self, meta: Any, buffers: Mapping[str, Any], partition: str = "default",
                   chunk_bytes: Optional[int] = None,
                   policy: Optional[BundleTransferPolicy] = None,
                   max_inflight_put: Optional[int] = None, config: Any = None) -> RemoteBundleRef:
        """Store raw metadata bytes plus named byte buffers; returns the bundle's ref."""
        if not isinstance(meta, (bytes, bytearray, memoryview)):
            raise TypeError("meta must be bytes-like, not %s" % type(meta).__name__)
        if not isinstance(buffers, Mapping):
            raise TypeError("buffers must be a mapping of name -> bytes-like")
        views = {}
        for name, buf in buffers.items():
            _check_name("buffer name", name)
            try:
                views[name] = _as_bytes_view(buf)
            except TypeError:
                raise TypeError("buffer %s must be bytes-like, not %s"
                                % (name, type(buf).__name__)) from None
        return self._put_views(_as_bytes_view(meta), views, partition, chunk_bytes,
                               policy, max_inflight_put, config)

    def _put_views(self, meta, views, partition, chunk_bytes, policy, max_inflight_put,
                   config) -> RemoteBundleRef:
        _check_name("partition", partition)
        if "/" in partition:
            raise ValueError("partition must not contain '/'")
        cb = self.default_chunk_bytes if chunk_bytes is None else _check_chunk_bytes(chunk_bytes)
        inflight = self._inflight(policy, max_inflight_put)
        base = "%s/%s/%s" % (self.key_prefix, partition, self._new_object_id(config))
        items = []

        def payload(tag, mv):
            chunks = []
            for i, off in enumerate(range(0, len(mv), cb)):
                key = "%s/%s/%d" % (base, tag, i)
                part = mv[off:off + cb]
                items.append((key, part))
                chunks.append({"key": key, "size": len(part)})
            return {"size": len(mv), "chunks": chunks}

        manifest = {"format": _MANIFEST_FORMAT, "meta": payload("m", meta), "buffers": {}}
        for i, (name, mv) in enumerate(views.items()):
            manifest["buffers"][name] = payload("b%d" % i, mv)
        mkey = base + "/manifest"
        self._put_keys(items, config, inflight)
        try:
            self._put_keys([(mkey, json.dumps(manifest).encode())], config, 1)
        except Exception:
            self.remove_keys([k for k, _ in items], strict=False)
            raise
        return RemoteBundleRef(manifest_key=mkey, manifest=manifest)

    def resolve_manifest(self, ref: Any) -> dict:
        """The manifest of a bundle ref (read from the store when not at hand)."""
        if isinstance(ref, RemoteBundleRef):
            key, manifest = ref.manifest_key, ref.manifest
        elif isinstance(ref, Mapping):
            key, manifest = ref.get("manifest_key"), ref.get("manifest")
        else:
            raise TypeError("expected RemoteBundleRef or a mapping with manifest_key, got %s"
                            % type(ref).__name__)
        if manifest:
            return manifest
        _check_name("manifest_key", key)
        raw = self.store.get(key)
        if not raw:
            raise KeyError("bundle manifest %s not found" % key)
        if len(raw) > _MAX_MANIFEST_BYTES:
            raise ValueError("bundle manifest %s is too large" % key)
        try:
            manifest = json.loads(bytes(raw))
        except ValueError:
            raise ValueError("%s is not a bundle manifest" % key) from None
        if not isinstance(manifest, dict) or manifest.get("format") != _MANIFEST_FORMAT:
            raise ValueError("%s is not a bundle manifest" % key)
        if isinstance(ref, RemoteBundleRef):
            ref.manifest = manifest
        return manifest

    @staticmethod
    def _manifest_key(ref: Any) -> str:
        return ref.manifest_key if isinstance(ref, RemoteBundleRef) else ref.get("manifest_key")

    def get_bundle(self, ref: Any) -> tuple:
        """(meta bytes, {name: bytes}) of a bundle stored by put_bundle()."""
        m = self.resolve_manifest(ref)
        return (self._read_payload(m["meta"]),
                {n: self._read_payload(s) for n, s in m["buffers"].items()})

    def payload_keys(self, spec: Mapping) -> list:
        return [c["key"] for c in spec["chunks"]]

    def remove_bundle(self, ref: Any) -> None:
        """Remove every store object of a bundle (a missing one is not an error)."""
        m = self.resolve_manifest(ref)
        keys = self.payload_keys(m["meta"])
        for s in m["buffers"].values():
            keys += self.payload_keys(s)
        self.remove_keys(keys + [self._manifest_key(ref)], strict=True)

    # -- structured objects
    def put_structured_object(self, payload: StructuredObjectPayload,
                              partition: str = "default", chunk_bytes: Optional[int] = None,
                              policy: Optional[BundleTransferPolicy] = None,
                              max_inflight_put: Optional[int] = None,
                              config: Any = None) -> RemoteBundleRef:
        """Store JSON metadata plus named members (bytes, arrays, tensors, values)."""
        if not isinstance(payload, StructuredObjectPayload):
            raise TypeError("payload must be a StructuredObjectPayload")
        specs, views = {}, {}
        for name, value in payload.buffers.items():
            _check_name("member name", name)
            specs[name], views[name] = _encode_member(name, value)
        meta = dict(_json_safe(payload.metadata))
        if STRUCTURED_FIELD_SPECS_KEY in meta:
            raise ValueError("metadata key %s is reserved" % STRUCTURED_FIELD_SPECS_KEY)
        meta[STRUCTURED_FIELD_SPECS_KEY] = specs
        return self._put_views(memoryview(json.dumps(meta).encode()), views, partition,
                               chunk_bytes, policy, max_inflight_put, config)

    def put_object(self, obj: Any, partition: str = "default",
                   chunk_bytes: Optional[int] = None,
                   policy: Optional[BundleTransferPolicy] = None,
                   max_inflight_put: Optional[int] = None, config: Any = None) -> RemoteBundleRef:
        """Store a mapping (its items are the members) or a single value."""
        if isinstance(obj, Mapping):
            payload = StructuredObjectPayload(metadata={}, buffers=obj)
        else:
            payload = StructuredObjectPayload(metadata={_WRAPPED: True}, buffers={"value": obj})
        return self.put_structured_object(payload, partition, chunk_bytes, policy,
                                          max_inflight_put, config)

    def get_object(self, ref: Any) -> Any:
        """What put_object() stored."""
        result = self.materialize(self.read_spec(ref))
        if result.metadata.get(_WRAPPED):
            return result.objects["value"]
        return result.objects

    def read_spec(self, ref: Any) -> StructuredObjectReadSpec:
        if not isinstance(ref, (RemoteBundleRef, Mapping)):
            raise TypeError("expected RemoteBundleRef or a mapping with manifest_key, got %s"
                            % type(ref).__name__)
        return StructuredObjectReadSpec(ref=ref)

    def _object_meta(self, manifest: Mapping) -> dict:
        try:
            meta = json.loads(self._read_payload(manifest["meta"]))
        except ValueError:
            raise ValueError("bundle metadata is not a structured object") from None
        if not isinstance(meta, dict) or STRUCTURED_FIELD_SPECS_KEY not in meta:
            raise ValueError("bundle is not a structured object (no member specs)")
        return meta

    def _read_member(self, name: str, spec: Mapping, pspec: Mapping,
                     msl: Optional[StructuredMemberSlice]) -> Any:
        if msl is None:
            return _decode_member(spec, self._read_payload(pspec))
        enc = spec["encoding"]
        if enc in ("ndarray", "torch_tensor") and msl.axis == 0 and spec["shape"]:
            rows, per = _row_bytes(spec)
            start, end, step = slice(msl.start, msl.end, msl.step).indices(rows)
            n = max(0, (end - start + step - 1) // step) if end > start else 0
            if n == 0:
                return _decode_member(spec, b"", [0] + list(spec["shape"][1:]))
            last = start + (n - 1) * step
            data = self._read_payload(pspec, start * per, (last - start + 1) * per)
            if step > 1:
                data = b"".join(data[i * step * per:(i * step + 1) * per] for i in range(n))
            return _decode_member(spec, data, [n] + list(spec["shape"][1:]))
        value = _decode_member(spec, self._read_payload(pspec))
        if isinstance(value, (bytes, bytearray)) and msl.axis == 0:
            return value[msl.start:msl.end:msl.step]
        ndim = len(getattr(value, "shape", ())) if not isinstance(value, list) else 1
        if msl.axis < 0 or msl.axis >= max(ndim, 1):
            raise ValueError("member %s has no axis %d" % (name, msl.axis))
        if isinstance(value, list):
            return value[msl.start:msl.end:msl.step]
        idx = [slice(None)] * ndim
        idx[msl.axis] = slice(msl.start, msl.end, msl.step)
        return value[tuple(idx)]

    def materialize(self, spec: StructuredObjectReadSpec) -> StructuredObjectResult:
        """Read the selected members of a structured object."""
        return self.materialize_into(spec, None)

    def materialize_into(self, spec: StructuredObjectReadSpec,
                         destinations: Optional[Mapping[str, Any]]) -> StructuredObjectResult:
        """materialize(); members named in ``destinations`` are copied into the given
        numpy array / torch tensor / writable buffer (same byte size; same shape for
        arrays) and that object is returned for them."""
        if not isinstance(spec, StructuredObjectReadSpec):
            raise TypeError("spec must be a StructuredObjectReadSpec")
        if destinations is not None and not isinstance(destinations, Mapping):
            raise TypeError("destinations must be a mapping or None")
        manifest = self.resolve_manifest(spec.ref)
        meta = self._object_meta(manifest)
        specs = meta.pop(STRUCTURED_FIELD_SPECS_KEY)
        names = list(specs) if spec.member_names is None else list(spec.member_names)
        for n in names + [k for k, _ in spec.member_slices] + list(destinations or {}):
            if n not in specs or n not in manifest["buffers"]:
                raise KeyError("structured object has no member %r" % n)
        objects = {}
        for n in names:
            value = self._read_member(n, specs[n], manifest["buffers"][n], spec.member_slice(n))
            if destinations and n in destinations:
                value = _copy_into(n, destinations[n], value)
            objects[n] = value
        return StructuredObjectResult(metadata=meta, objects=objects)

    @staticmethod
    def release_result(result: Any) -> None:
        """Results are plain host objects here (nothing borrowed from a pool): no-op."""
        return None

    # -- DataProto
    def put(self, data: Any, *, type: str = "dataproto", namespace: str = "default",
            partition: str = "default", stage: str = "default",
            chunk_bytes: Optional[int] = None, policy: Optional[BundleTransferPolicy] = None,
            config: Any = None,
            field_schemas: Optional[Mapping[str, FieldSchema]] = None) -> MooncakeDataProtoRef:
        """Store a DataProto-like object (``type="dataproto"``) or a flat dict."""
        if type == "dataproto":
            env = _dataproto_envelope(data)
        elif type == "dict":
            env = _flat_dict_envelope(data, field_schemas)
        else:
            raise ValueError("unsupported Mooncake payload type: %r" % (type,))
        return self._put_stage(None, env, namespace, partition, stage, chunk_bytes,
                               policy, False, config)

    def put_dataproto(self, data: Any, *, namespace: str = "default",
                      partition: str = "default", stage: str = "default",
                      chunk_bytes: Optional[int] = None,
                      policy: Optional[BundleTransferPolicy] = None,
                      field_schemas: Optional[Mapping[str, FieldSchema]] = None,
                      config: Any = None) -> MooncakeDataProtoRef:
        return self.put(data, type="dataproto", namespace=namespace, partition=partition,
                        stage=stage, chunk_bytes=chunk_bytes, policy=policy,
                        field_schemas=field_schemas, config=config)

    def append_dataproto_fields(self, ref: DataProtoRefLike, data: Any, *, stage: str,
                                overwrite: bool = False, chunk_bytes: Optional[int] = None,
                                policy: Optional[BundleTransferPolicy] = None,
                                field_schemas: Optional[Mapping[str, FieldSchema]] = None,
                                config: Any = None) -> MooncakeDataProtoRef:
        """A new ref with ``data``'s fields added as stage ``stage`` (the old ref
        stays valid). Existing field names need ``overwrite=True``."""
        ref = _resolve_dataproto_ref(ref)
        if isinstance(data, Mapping) and not hasattr(data, "batch"):
            env = _flat_dict_envelope(data, field_schemas)
        else:
            env = _dataproto_envelope(data)
        return self._put_stage(ref, env, ref.namespace, ref.partition, stage, chunk_bytes,
                               policy, overwrite, config)

    def _put_stage(self, prev, env, namespace, partition, stage, chunk_bytes, policy,
                   overwrite, config) -> MooncakeDataProtoRef:
        _check_name("namespace", namespace)
        _check_name("stage", stage)
        batch, non_tensor, meta_info = env
        fields = {**{n: ("batch", v) for n, v in batch.items()},
                  **{n: ("non_tensor_batch", v) for n, v in non_tensor.items()}}
        if set(batch) & set(non_tensor):
            raise ValueError("field names repeat across batch and non_tensor_batch: %s"
                             % sorted(set(batch) & set(non_tensor)))
        size = None
        for n, (_, v) in fields.items():
            _check_name("field name", n)
            rows = _rows_of(n, v)
            if size is None:
                size = rows
            elif rows != size:
                raise ValueError("field %s has %d rows, others have %d" % (n, rows, size))
        if prev is not None:
            if size is not None and size != prev.batch_size:
                raise ValueError("appended fields have %d rows, the DataProto has %d"
                                 % (size, prev.batch_size))
            size = prev.batch_size
            if stage in prev.stage_refs:
                raise ValueError("stage %r already exists in this DataProto" % stage)
            clash = [n for n in fields if n in prev.field_index]
            if clash and not overwrite:
                raise ValueError("fields already present (pass overwrite=True): %s" % clash)
        if size is None and prev is None:
            size = 0
        bref = self.put_structured_object(
            StructuredObjectPayload(metadata={"namespace": namespace, "stage": stage,
                                              "batch_size": size},
                                    buffers={n: v for n, (_, v) in fields.items()}),
            partition=partition, chunk_bytes=chunk_bytes, policy=policy, config=config)
        stage_refs = {} if prev is None else dict(prev.stage_refs)
        field_index = {} if prev is None else dict(prev.field_index)
        info = {} if prev is None else dict(prev.meta_info)
        stage_refs[stage] = bref
        for n, (section, _) in fields.items():
            field_index[n] = StructuredFieldLocation(stage, n, section)
        info.update(_json_safe(meta_info))
        return MooncakeDataProtoRef(batch_size=size, stage_refs=stage_refs,
                                    field_index=field_index, meta_info=info,
                                    namespace=namespace, partition=partition,
                                    global_indexes=None if prev is None else prev.global_indexes)

    def get(self, ref: DataProtoRefLike, *, type: str = "dataproto",
            fields: Optional[Sequence[str]] = None,
            batch_fields: Optional[Sequence[str]] = None,
            non_tensor_fields: Optional[Sequence[str]] = None,
            meta_info_keys: Optional[Sequence[str]] = None, data_cls: Any = None,
            destinations: Optional[Mapping[str, Any]] = None, rows: Any = None) -> Any:
        """Read selected fields (and rows) of a stored DataProto or flat dict."""
        if type not in ("dataproto", "dict"):
            raise ValueError("unsupported Mooncake payload type: %r" % (type,))
        res = self._get(ref, fields, batch_fields, non_tensor_fields, meta_info_keys,
                        destinations, rows)
        if type == "dict":
            batch, non_tensor, info = res
            return {**batch, **non_tensor, **info}
        return _build_result(*res, data_cls)

    def get_dataproto(self, ref: DataProtoRefLike, *, fields=None, batch_fields=None,
                      non_tensor_fields=None, meta_info_keys=None, data_cls=None,
                      destinations=None, rows=None) -> Any:
        return self.get(ref, type="dataproto", fields=fields, batch_fields=batch_fields,
                        non_tensor_fields=non_tensor_fields, meta_info_keys=meta_info_keys,
                        data_cls=data_cls, destinations=destinations, rows=rows)

    def _get(self, ref, fields, batch_fields, non_tensor_fields, meta_info_keys,
             destinations, rows):
        ref = _resolve_dataproto_ref(ref)
        names = _select_fields(ref, fields, batch_fields, non_tensor_fields)
        sel = _row_selection(rows, ref.batch_size)
        by_stage = {}
        for n in names:
            by_stage.setdefault(ref.field_index[n].stage, []).append(n)
        batch, non_tensor = {}, {}
        for stage, ns in by_stage.items():
            members = [ref.field_index[n].member for n in ns]
            spec = self.read_spec(ref.stage_refs[stage]).select_members(members)
            if isinstance(sel, StructuredMemberSlice):
                for m in members:
                    spec = spec.slice_member(m, 0, sel.start, sel.end, sel.step)
            res = self.materialize(spec)
            for n in ns:
                v = res.objects[ref.field_index[n].member]
                if isinstance(sel, list):
                    v = _take_rows(v, sel)
                if destinations and n in destinations:
                    v = _copy_into(n, destinations[n], v)
                (batch if ref.field_index[n].section == "batch" else non_tensor)[n] = v
        if meta_info_keys is None:
            info = dict(ref.meta_info)
        else:
            missing = [k for k in meta_info_keys if k not in ref.meta_info]
            if missing:
                raise KeyError("meta_info has no keys %s" % missing)
            info = {k: ref.meta_info[k] for k in meta_info_keys}
        return batch, non_tensor, info

    def dataproto_manifest_view(self, ref: DataProtoRefLike) -> dict:
        """Field names, sections, stages, encodings, dtypes and shapes of a DataProto."""
        ref = _resolve_dataproto_ref(ref)
        out = {"batch_size": ref.batch_size, "namespace": ref.namespace,
               "partition": ref.partition, "meta_info": dict(ref.meta_info),
               "stages": {s: r.manifest_key for s, r in ref.stage_refs.items()},
               "fields": {}}
        specs_by_stage = {}
        for n, loc in ref.field_index.items():
            if loc.stage not in specs_by_stage:
                m = self.resolve_manifest(ref.stage_refs[loc.stage])
                specs_by_stage[loc.stage] = self._object_meta(m)[STRUCTURED_FIELD_SPECS_KEY]
            spec = specs_by_stage[loc.stage].get(loc.member, {})
            out["fields"][n] = {"stage": loc.stage, "section": loc.section,
                                **{k: spec[k] for k in ("encoding", "dtype", "shape")
                                   if k in spec}}
        return out

    def cleanup_dataproto(self, ref: DataProtoRefLike) -> None:
        """Remove every stage object of a stored DataProto (a ref or a handle)."""
        ref = _resolve_dataproto_ref(ref)
        for sref in ref.stage_refs.values():
            try:
                self.remove_bundle(sref)
            except KeyError:  # manifest already gone: removed before
                pass

    def cleanup_dataproto_append(self, previous: DataProtoRefLike,
                                 appended: DataProtoRefLike) -> None:
        """Remove the stages ``appended`` added to ``previous`` (an append that will not
        be published); ``previous`` stays readable."""
        previous = _resolve_dataproto_ref(previous)
        appended = _resolve_dataproto_ref(appended)
        for stage, sref in appended.stage_refs.items():
            old = previous.stage_refs.get(stage)
            if old is not None and old.manifest_key == sref.manifest_key:
                continue
            self.remove_bundle(sref)


def _copy_into(name: str, dest: Any, value: Any) -> Any:
    if _is_torch_tensor(dest):
        import torch
        src = value if _is_torch_tensor(value) else torch.as_tensor(np.asarray(value))
        if tuple(dest.shape) != tuple(src.shape) or dest.dtype != src.dtype:
            raise ValueError("destination for %s is %s %s, the member is %s %s"
                             % (name, dest.dtype, tuple(dest.shape), src.dtype,
                                tuple(src.shape)))
        dest.copy_(src)
        return dest
    if isinstance(dest, np.ndarray):
        src = value.numpy() if _is_torch_tensor(value) else np.asarray(value)
        if dest.shape != src.shape or dest.dtype != src.dtype:
            raise ValueError("destination for %s is %s %s, the member is %s %s"
                             % (name, dest.dtype, dest.shape, src.dtype, src.shape))
        if not dest.flags.writeable:
            raise ValueError("destination for %s is read-only" % name)
        dest[...] = src
        return dest
    try:
        mv = memoryview(dest)
    except TypeError:
        raise TypeError("destination for %s must be an ndarray, a tensor or a writable "
                        "buffer, not %s" % (name, type(dest).__name__)) from None
    if mv.readonly:
        raise ValueError("destination for %s is read-only" % name)
    if isinstance(value, (bytes, bytearray)):
        data = value
    elif _is_torch_tensor(value):
        data = value.contiguous().numpy().tobytes()
    else:
        data = np.ascontiguousarray(value).tobytes()
    mv = mv.cast("B")
    if len(mv) != len(data):
        raise ValueError("destination for %s has %d bytes, the member has %d"
                         % (name, len(mv), len(data)))
    mv[:] = data
    return dest


def _rows_of(name: str, v: Any) -> int:
    if _is_torch_tensor(v) or isinstance(v, np.ndarray):
        if len(v.shape) == 0:
            raise ValueError("DataProto field %s is a scalar (needs a batch dimension)" % name)
        return int(v.shape[0])
    if isinstance(v, (list, tuple)):
        return len(v)
    raise TypeError("DataProto field %s must be a tensor, an ndarray or a list, not %s"
                    % (name, type(v).__name__))


def dataproto_batch_size(data: Any) -> int:
    """Rows of a DataProto-like object (``len()`` when it has one)."""
    try:
        return len(data)
    except TypeError:
        pass
    batch, non_tensor, _ = _dataproto_envelope(data)
    for n, v in {**batch, **non_tensor}.items():
        return _rows_of(n, v)
    return 0


def _dataproto_envelope(data: Any):
    if isinstance(data, Mapping) and "batch" in data:
        batch, non_tensor, info = (data.get("batch"), data.get("non_tensor_batch"),
                                   data.get("meta_info"))
    elif hasattr(data, "batch") and hasattr(data, "non_tensor_batch"):
        batch, non_tensor, info = data.batch, data.non_tensor_batch, \
            getattr(data, "meta_info", None)
    else:
        raise TypeError("expected a DataProto-like object (batch, non_tensor_batch, "
                        "meta_info), got %s" % type(data).__name__)
    batch = {} if batch is None else {k: batch[k] for k in batch.keys()}
    non_tensor = {} if non_tensor is None else dict(non_tensor)
    info = {} if info is None else dict(info)
    for n, v in batch.items():
        if not (_is_torch_tensor(v) or isinstance(v, np.ndarray)):
            raise TypeError("batch field %s must be a tensor or an ndarray" % n)
    return batch, non_tensor, info


def _flat_dict_envelope(data: Any, schemas: Optional[Mapping[str, FieldSchema]]):
    if not isinstance(data, Mapping):
        raise TypeError("type='dict' needs a mapping, got %s" % type(data).__name__)
    schemas = schemas or {}
    batch, non_tensor, info = {}, {}, {}
    for n, v in data.items():
        if not isinstance(n, str):
            raise TypeError("dict keys must be str")
        section = None
        sch = schemas.get(n)
        if sch is not None:
            if not isinstance(sch, FieldSchema):
                raise TypeError("field_schemas[%r] must be a FieldSchema" % n)
            section = sch.metadata.get("section")
            if section not in (None, "batch", "non_tensor_batch", "meta_info"):
                raise ValueError("field %s: unknown section %r" % (n, section))
        if section is None:
            section = "batch" if (_is_torch_tensor(v) or (isinstance(v, np.ndarray)
                                                          and v.dtype != object)) \
                else "non_tensor_batch"
        if section == "non_tensor_batch" and isinstance(v, (list, tuple)):
            arr = np.empty(len(v), dtype=object)
            for i, x in enumerate(v):
                arr[i] = x
            v = arr
        {"batch": batch, "non_tensor_batch": non_tensor, "meta_info": info}[section][n] = v
    return batch, non_tensor, info


def _select_fields(ref, fields, batch_fields, non_tensor_fields) -> list:
    for what, v in (("fields", fields), ("batch_fields", batch_fields),
                    ("non_tensor_fields", non_tensor_fields)):
        if isinstance(v, str):
            raise TypeError("%s must be a sequence of names, not a str" % what)
    if fields is None and batch_fields is None and non_tensor_fields is None:
        return list(ref.field_index)
    names = list(fields or [])
    for want, sec in ((batch_fields, "batch"), (non_tensor_fields, "non_tensor_batch")):
        for n in want or []:
            loc = ref.field_index.get(n)
            if loc is not None and loc.section != sec:
                raise ValueError("field %s is in %s, not %s" % (n, loc.section, sec))
            names.append(n)
    missing = [n for n in names if n not in ref.field_index]
    if missing:
        raise KeyError("DataProto has no fields %s" % missing)
    return list(dict.fromkeys(names))


def _row_selection(rows: Any, batch_size: int):
    if rows is None:
        return None
    if isinstance(rows, slice):
        start, end, step = rows.indices(batch_size)
        if step <= 0:
            raise ValueError("rows: only positive steps")
        return StructuredMemberSlice(0, start, end, step)
    if isinstance(rows, StructuredMemberSlice):
        if rows.axis != 0:
            raise ValueError("rows slice must be on axis 0")
        return rows
    if isinstance(rows, (str, bytes)):
        raise TypeError("rows must be a slice, a StructuredMemberSlice or a sequence of ints")
    out = []
    for i in rows:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError("row indices must be ints")
        i = int(i)
        if i < -batch_size or i >= batch_size:
            raise IndexError("row %d out of range for %d rows" % (i, batch_size))
        out.append(i % batch_size)
    return out


def _take_rows(v: Any, idx: list) -> Any:
    if _is_torch_tensor(v):
        import torch
        return v.index_select(0, torch.tensor(idx, dtype=torch.long))
    if isinstance(v, np.ndarray):
        return v[idx]
    return [v[i] for i in idx]


def _build_result(batch, non_tensor, info, data_cls):
    if data_cls is dict:
        return {"batch": batch, "non_tensor_batch": non_tensor, "meta_info": info}
    if data_cls is None:
        return SimpleNamespace(batch=batch, non_tensor_batch=non_tensor, meta_info=info)
    return data_cls(batch=batch, non_tensor_batch=non_tensor, meta_info=info)


__all__ = [
    "BundleStore", "BundleTransferPolicy", "FieldSchema", "RemoteBundleRef",
    "StructuredObjectPayload", "StructuredObjectResult", "StructuredFieldLocation",
    "MooncakeDataProtoRef", "StructuredMemberSlice", "StructuredObjectReadSpec",
    "MooncakeBundleTransfer", "is_dataproto_ref_handle", "export_dataproto_ref",
    "import_dataproto_ref", "export_ref", "import_ref", "DEFAULT_BUNDLE_CHUNK_BYTES",
    "MISSING_OBJECT_ERROR", "STRUCTURED_FIELD_SPECS_KEY", "DATAPROTO_REF_HANDLE_TYPE",
    "DATAPROTO_REF_HANDLE_VERSION", "STORAGE_GROUP_ID",
]
