"""Weight placement manifests (crescent's own implementation of Mooncake's
``mooncake.weight_transfer.manifest``; same names, fields and checks).

A model's tensors are described once (``TensorDescriptor``: shape, dtype,
the dimension it is sharded on) and cut into fragments: a
``RuntimeFragment`` is a live view in some worker's memory (address,
endpoint, lease generation), a ``StoredFragment`` a range of a store object,
a ``PlacementFragment`` the address-free logical box a parallel rank owns.
Every record validates itself when built: a bad value raises ValueError
naming the field, never a half-built manifest.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from math import prod
from typing import Any, Callable, Mapping, Optional, Sequence, Union

_U64_MAX = (1 << 64) - 1


# -- field checks (ValueError with the field's name) ---------------------------

def _check_str(value: Any, name: str) -> None:
    if type(value) is not str or value == "":
        raise ValueError("%s must be a non-empty string" % name)


def _check_int(value: Any, name: str, *, minimum: Optional[int] = None) -> None:
    if type(value) is not int:
        raise ValueError("%s must be an integer" % name)
    if minimum is not None and value < minimum:
        raise ValueError("%s must be at least %d" % (name, minimum))


def _check_u64(value: Any, name: str, *, minimum: int = 0) -> None:
    _check_int(value, name, minimum=minimum)
    if value > _U64_MAX:
        raise ValueError("%s must fit in an unsigned 64-bit integer" % name)


def _check_range(address: Any, nbytes: Any) -> None:
    _check_u64(address, "address", minimum=1)
    _check_u64(nbytes, "nbytes", minimum=1)
    if address + nbytes - 1 > _U64_MAX:
        raise ValueError("address range must fit in an unsigned 64-bit integer")


def _int_tuple(value: Any, name: str, *, minimum: int) -> tuple:
    if isinstance(value, (str, bytes, bytearray)):
        raise ValueError("%s must contain integers" % name)
    try:
        items = tuple(value)
    except TypeError as e:
        raise ValueError("%s must contain integers" % name) from e
    for item in items:
        _check_int(item, name, minimum=minimum)
    return items


def _aliases(value: Any) -> tuple:
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        raise ValueError("aliases must contain non-empty strings")
    items = tuple(value)
    if any(type(a) is not str or not a for a in items):
        raise ValueError("aliases must contain non-empty strings")
    if len(set(items)) != len(items):
        raise ValueError("aliases must not contain duplicates")
    return tuple(sorted(items))


def _field(record: Any, name: str) -> Any:
    try:
        return record[name] if isinstance(record, Mapping) else getattr(record, name)
    except (KeyError, AttributeError) as e:
        raise ValueError("missing required field: %s" % name) from e


def _opt_field(record: Any, name: str) -> Any:
    if isinstance(record, Mapping):
        return record.get(name)
    return getattr(record, name, None)


def _exact(value: Any, names: frozenset, label: str) -> Mapping:
    if not isinstance(value, Mapping) or set(value) != names:
        raise ValueError("%s schema fields do not match format_version" % label)
    return value


def _json_object(text: Any, label: str) -> Mapping:
    def no_constant(c):
        raise ValueError("non-finite JSON number is unsupported: %s" % c)

    def no_duplicates(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                raise ValueError("duplicate JSON field: %s" % k)
            out[k] = v
        return out

    try:
        raw = json.loads(text, parse_constant=no_constant, object_pairs_hook=no_duplicates)
    except (TypeError, json.JSONDecodeError) as e:
        raise ValueError("%s is not valid JSON" % label) from e
    if not isinstance(raw, Mapping):
        raise ValueError("%s must be a JSON object" % label)
    return raw


# -- records ---------------------------------------------------------------------

@dataclass(frozen=True)
class ParallelRank:
    """Which parallel rank owns a fragment (routing only)."""
    dp: int = 0
    tp: int = 0
    pp: int = 0
    ep: int = 0

    def __post_init__(self) -> None:
        for axis in ("dp", "tp", "pp", "ep"):
            _check_int(getattr(self, axis), "parallel rank " + axis, minimum=0)


@dataclass(frozen=True)
class TensorDescriptor:
    """A logical tensor: identity, global shape, dtype, sharded dimension."""
    tensor_id: str
    global_shape: tuple
    dtype: str
    itemsize: int
    partition_dim: Optional[int]
    layer_id: Optional[int] = None
    expert_id: Optional[int] = None
    layout_fingerprint: str = "contiguous"

    def __post_init__(self) -> None:
        shape = _int_tuple(self.global_shape, "global_shape", minimum=1)
        if not shape:
            raise ValueError("global_shape must not be empty")
        object.__setattr__(self, "global_shape", shape)
        _check_str(self.tensor_id, "tensor_id")
        _check_str(self.dtype, "dtype")
        _check_int(self.itemsize, "itemsize", minimum=1)
        if self.partition_dim is not None:
            _check_int(self.partition_dim, "partition_dim", minimum=0)
            if self.partition_dim >= len(shape):
                raise ValueError("partition_dim is out of range")
        for name in ("layer_id", "expert_id"):
            if getattr(self, name) is not None:
                _check_int(getattr(self, name), name, minimum=0)
        _check_str(self.layout_fingerprint, "layout_fingerprint")

    @property
    def nbytes(self) -> int:
        return prod(self.global_shape) * self.itemsize


def _box(obj, offset_name="global_offset", shape_name="local_shape"):
    object.__setattr__(obj, offset_name, _int_tuple(getattr(obj, offset_name), offset_name,
                                                    minimum=0))
    object.__setattr__(obj, shape_name, _int_tuple(getattr(obj, shape_name), shape_name,
                                                   minimum=1))


@dataclass(frozen=True)
class RuntimeFragment:
    """One contiguous view of a tensor box in a worker's memory. ``address``
    is the first byte of the view; ``owner`` keeps the allocation alive."""
    fragment_id: str
    tensor_id: str
    global_offset: tuple
    local_shape: tuple
    address: int
    nbytes: int
    worker_id: str
    endpoint: str
    rank: ParallelRank
    lease_generation: int
    owner: Any = field(default=None, compare=False, repr=False)
    aliases: tuple = ()

    def __post_init__(self) -> None:
        _box(self)
        for name in ("fragment_id", "tensor_id", "worker_id", "endpoint"):
            _check_str(getattr(self, name), name)
        _check_range(self.address, self.nbytes)
        _check_u64(self.lease_generation, "lease_generation")
        if not isinstance(self.rank, ParallelRank):
            raise ValueError("rank must be a ParallelRank")
        object.__setattr__(self, "aliases", _aliases(self.aliases))


@dataclass(frozen=True)
class StoredFragment:
    """A tensor box held in a store object, from ``object_offset``."""
    fragment_id: str
    tensor_id: str
    global_offset: tuple
    local_shape: tuple
    object_key: str
    object_offset: int
    nbytes: int
    checksum: Optional[str] = None

    def __post_init__(self) -> None:
        _box(self)
        for name in ("fragment_id", "tensor_id", "object_key"):
            _check_str(getattr(self, name), name)
        _check_int(self.object_offset, "object_offset", minimum=0)
        _check_int(self.nbytes, "nbytes", minimum=1)
        if self.checksum is not None:
            _check_str(self.checksum, "checksum")


@dataclass(frozen=True)
class PlacementFragment:
    """An address-free logical tensor box assigned to one parallel rank."""
    placement_fragment_id: str
    tensor_id: str
    global_offset: tuple
    local_shape: tuple
    nbytes: int
    rank: ParallelRank
    aliases: tuple = ()

    def __post_init__(self) -> None:
        _box(self)
        for name in ("placement_fragment_id", "tensor_id"):
            _check_str(getattr(self, name), name)
        _check_u64(self.nbytes, "nbytes", minimum=1)
        if not isinstance(self.rank, ParallelRank):
            raise ValueError("rank must be a ParallelRank")
        object.__setattr__(self, "aliases", _aliases(self.aliases))

    @property
    def fragment_id(self) -> str:
        return self.placement_fragment_id


Fragment = Union[RuntimeFragment, StoredFragment, PlacementFragment]


# -- geometry ----------------------------------------------------------------------

def _check_fragments(tensors: Sequence[TensorDescriptor], fragments: Sequence[Any]) -> None:
    by_id = {}
    for t in tensors:
        if t.tensor_id in by_id:
            raise ValueError("duplicate tensor_id: %s" % t.tensor_id)
        by_id[t.tensor_id] = t
    seen = set()
    for f in fragments:
        if f.fragment_id in seen:
            raise ValueError("duplicate fragment_id: %s" % f.fragment_id)
        seen.add(f.fragment_id)
        t = by_id.get(f.tensor_id)
        if t is None:
            raise ValueError("unknown tensor_id: %s" % f.tensor_id)
        check_fragment_geometry(t, f)


def check_fragment_geometry(tensor: TensorDescriptor, frag: Any) -> None:
    """ValueError unless ``frag`` is a box of ``tensor`` cut along its
    partition dimension only, of exactly ``prod(local_shape) * itemsize`` bytes."""
    ndim = len(tensor.global_shape)
    if len(frag.global_offset) != ndim or len(frag.local_shape) != ndim:
        raise ValueError("fragment rank mismatch: %s" % frag.fragment_id)
    for off, ext, total in zip(frag.global_offset, frag.local_shape, tensor.global_shape):
        if off + ext > total:
            raise ValueError("fragment is out of bounds: %s" % frag.fragment_id)
    if tensor.partition_dim is None:
        if any(frag.global_offset):
            raise ValueError("replicated fragment has an offset: %s" % frag.fragment_id)
        if frag.local_shape != tensor.global_shape:
            raise ValueError("replicated fragment is incomplete: %s" % frag.fragment_id)
    else:
        for d in range(ndim):
            if d == tensor.partition_dim:
                continue
            if frag.global_offset[d] != 0:
                raise ValueError("fragment offset uses a non-partition axis: %d" % d)
            if frag.local_shape[d] != tensor.global_shape[d]:
                raise ValueError("fragment shape uses a non-partition axis: %d" % d)
    want = prod(frag.local_shape) * tensor.itemsize
    if frag.nbytes != want:
        raise ValueError("fragment byte size mismatch: %s: expected %d, got %d"
                         % (frag.fragment_id, want, frag.nbytes))


def covers(tensor: TensorDescriptor, fragments: Sequence[Any]) -> bool:
    """True when the distinct boxes among ``fragments`` tile ``tensor`` exactly
    along its partition dimension (one whole box for a replicated tensor)."""
    boxes = {(f.global_offset, f.local_shape) for f in fragments
             if f.tensor_id == tensor.tensor_id}
    if tensor.partition_dim is None:
        return len(boxes) == 1
    d = tensor.partition_dim
    cursor = 0
    for begin, end in sorted((o[d], o[d] + s[d]) for o, s in boxes):
        if begin != cursor:
            return False
        cursor = end
    return cursor == tensor.global_shape[d]


def _tensor_from_record(record: Any) -> TensorDescriptor:
    return TensorDescriptor(
        tensor_id=_field(record, "tensor_id"),
        global_shape=tuple(_field(record, "global_shape")),
        dtype=_field(record, "dtype"), itemsize=_field(record, "itemsize"),
        partition_dim=_field(record, "partition_dim"),
        layer_id=_opt_field(record, "layer_id"), expert_id=_opt_field(record, "expert_id"),
        layout_fingerprint=_opt_field(record, "layout_fingerprint") or "contiguous")


def _rank_from_record(record: Any) -> ParallelRank:
    r = _field(record, "rank")
    return ParallelRank(dp=_field(r, "dp"), tp=_field(r, "tp"), pp=_field(r, "pp"),
                        ep=_field(r, "ep"))


# -- manifests -----------------------------------------------------------------------

@dataclass(frozen=True)
class RuntimeManifest:
    """The fragments one model instance holds in memory right now."""
    model_id: str
    revision: str
    instance_id: str
    tensors: tuple
    fragments: tuple
    lease_id: Optional[str] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tensors", tuple(self.tensors))
        object.__setattr__(self, "fragments", tuple(self.fragments))
        for name in ("model_id", "revision", "instance_id"):
            _check_str(getattr(self, name), name)
        if self.lease_id is not None:
            _check_str(self.lease_id, "lease_id")
        if not all(isinstance(t, TensorDescriptor) for t in self.tensors):
            raise ValueError("RuntimeManifest tensors must be TensorDescriptor")
        if not all(isinstance(f, RuntimeFragment) for f in self.fragments):
            raise ValueError("RuntimeManifest fragments must be RuntimeFragment")
        _check_fragments(self.tensors, self.fragments)

    @classmethod
    def from_runtime_inventory(cls, inventory: Any, *,
                               owner_resolver: Optional[Callable[[Any], Any]] = None
                               ) -> "RuntimeManifest":
        """Build from a framework's inventory (mapping or object): format_version
        1, a ``generation`` every record's ``lease_generation`` must equal."""
        version = _field(inventory, "format_version")
        _check_int(version, "format_version", minimum=1)
        if version != 1:
            raise ValueError("unsupported runtime inventory format_version: %d" % version)
        generation = _field(inventory, "generation")
        _check_int(generation, "generation", minimum=0)
        tensors, fragments = {}, []
        for record in _field(inventory, "tensors"):
            t = _tensor_from_record(record)
            if tensors.setdefault(t.tensor_id, t) != t:
                raise ValueError("runtime inventory descriptor mismatch: %s" % t.tensor_id)
            lease = _field(record, "lease_generation")
            _check_int(lease, "lease_generation", minimum=0)
            if lease != generation:
                raise ValueError("runtime inventory lease generation mismatch: %d != %d"
                                 % (lease, generation))
            fragments.append(RuntimeFragment(
                fragment_id=_field(record, "fragment_id"), tensor_id=t.tensor_id,
                global_offset=tuple(_field(record, "global_offset")),
                local_shape=tuple(_field(record, "local_shape")),
                address=_field(record, "address"), nbytes=_field(record, "nbytes"),
                worker_id=_field(record, "worker_id"), endpoint=_field(record, "endpoint"),
                rank=_rank_from_record(record), lease_generation=lease,
                owner=owner_resolver(record) if owner_resolver is not None else None,
                aliases=tuple(_opt_field(record, "aliases") or ())))
        return cls(model_id=_field(inventory, "model_id"),
                   revision=_field(inventory, "revision"),
                   instance_id=_field(inventory, "instance_id"),
                   tensors=tuple(sorted(tensors.values(), key=lambda t: t.tensor_id)),
                   fragments=tuple(fragments), lease_id=_opt_field(inventory, "lease_id"))


_TENSOR_FIELDS = frozenset({"tensor_id", "global_shape", "dtype", "itemsize", "partition_dim",
                            "layer_id", "expert_id", "layout_fingerprint"})
_STORED_FIELDS = frozenset({"fragment_id", "tensor_id", "global_offset", "local_shape",
                            "object_key", "object_offset", "nbytes", "checksum"})
_MANIFEST_FIELDS = frozenset({"namespace", "model_id", "revision", "group_id", "manifest_key",
                              "tensors", "fragments", "created_at", "format_version"})


@dataclass(frozen=True)
class WeightManifest:
    """A committed weight revision in the store: every tensor covered exactly
    once by fragments whose objects live under ``<group_id>/payload/``."""
    namespace: str
    model_id: str
    revision: str
    group_id: str
    manifest_key: str
    tensors: tuple
    fragments: tuple
    created_at: str
    format_version: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "tensors", tuple(self.tensors))
        object.__setattr__(self, "fragments", tuple(self.fragments))
        _check_int(self.format_version, "format_version", minimum=1)
        if self.format_version != 1:
            raise ValueError("unsupported format_version: %d" % self.format_version)
        for name in ("namespace", "model_id", "revision", "group_id", "manifest_key",
                     "created_at"):
            _check_str(getattr(self, name), name)
        if self.manifest_key != self.group_id + "/manifest":
            raise ValueError("manifest_key does not belong to manifest group")
        if not all(isinstance(t, TensorDescriptor) for t in self.tensors):
            raise ValueError("WeightManifest tensors must be TensorDescriptor")
        if not all(isinstance(f, StoredFragment) for f in self.fragments):
            raise ValueError("WeightManifest fragments must be StoredFragment")
        prefix = self.group_id + "/payload/"
        if any(not f.object_key.startswith(prefix) for f in self.fragments):
            raise ValueError("payload object_key does not belong to manifest group")
        _check_fragments(self.tensors, self.fragments)
        boxes = set()
        for f in self.fragments:
            box = (f.tensor_id, f.global_offset, f.local_shape)
            if box in boxes:
                raise ValueError("duplicate fragment geometry: %s" % f.tensor_id)
            boxes.add(box)
        for t in self.tensors:
            mine = [f for f in self.fragments if f.tensor_id == t.tensor_id]
            if not covers(t, mine) or (t.partition_dim is None and len(mine) != 1):
                raise ValueError("tensor is not fully covered: %s" % t.tensor_id)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False)

    @classmethod
    def from_json(cls, value: Union[str, bytes, bytearray]) -> "WeightManifest":
        return cls.from_dict(_json_object(value, "weight manifest"))

    @classmethod
    def from_dict(cls, raw: Mapping) -> "WeightManifest":
        raw = _exact(raw, _MANIFEST_FIELDS, "weight manifest")
        if not isinstance(raw["tensors"], list) or not isinstance(raw["fragments"], list):
            raise ValueError("weight manifest tensors and fragments must be lists")
        tensors = tuple(TensorDescriptor(**_exact(t, _TENSOR_FIELDS, "tensor descriptor"))
                        for t in raw["tensors"])
        fragments = tuple(StoredFragment(**_exact(f, _STORED_FIELDS, "stored fragment"))
                          for f in raw["fragments"])
        return cls(namespace=raw["namespace"], model_id=raw["model_id"],
                   revision=raw["revision"], group_id=raw["group_id"],
                   manifest_key=raw["manifest_key"], tensors=tensors, fragments=fragments,
                   created_at=raw["created_at"], format_version=raw["format_version"])


def _placement_id(model_id, revision, tensors, fragments) -> str:
    content = {"schema": "weight-placement", "model_id": model_id, "revision": revision,
               "tensors": [asdict(t) for t in tensors],
               "fragments": [asdict(f) for f in fragments]}
    blob = json.dumps(content, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


_PLACEMENT_FIELDS = frozenset({"model_id", "revision", "placement_id", "tensors", "fragments"})
_PFRAG_FIELDS = frozenset({"placement_fragment_id", "tensor_id", "global_offset", "local_shape",
                           "nbytes", "rank", "aliases"})
_RANK_FIELDS = frozenset({"dp", "tp", "pp", "ep"})


@dataclass(frozen=True)
class PlacementManifest:
    """A serializable, address-free placement whose ``placement_id`` is the
    SHA-256 of its canonical content (a given id that does not match raises)."""
    model_id: str
    revision: str
    tensors: tuple
    fragments: tuple
    placement_id: Optional[str] = None

    def __post_init__(self) -> None:
        for name in ("model_id", "revision"):
            _check_str(getattr(self, name), name)
        for items, kind, label in ((self.tensors, TensorDescriptor, "tensors"),
                                   (self.fragments, PlacementFragment, "fragments")):
            if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) or \
                    not all(isinstance(i, kind) for i in items):
                raise ValueError("PlacementManifest %s must contain %s" % (label, kind.__name__))
        object.__setattr__(self, "tensors",
                           tuple(sorted(self.tensors, key=lambda t: t.tensor_id)))
        object.__setattr__(self, "fragments", tuple(sorted(
            self.fragments, key=lambda f: f.placement_fragment_id)))
        _check_fragments(self.tensors, self.fragments)
        logical = set()
        for f in self.fragments:
            key = (f.tensor_id, f.rank, f.global_offset, f.local_shape)
            if key in logical:
                raise ValueError("duplicate logical fragment for tensor and parallel rank: %s"
                                 % f.fragment_id)
            logical.add(key)
        pid = _placement_id(self.model_id, self.revision, self.tensors, self.fragments)
        if self.placement_id is None:
            object.__setattr__(self, "placement_id", pid)
        else:
            _check_str(self.placement_id, "placement_id")
            if self.placement_id != pid:
                raise ValueError("placement_id does not match canonical logical content")

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, value: str) -> "PlacementManifest":
        raw = _exact(_json_object(value, "placement manifest"), _PLACEMENT_FIELDS,
                     "placement manifest")
        tensors = [TensorDescriptor(**_exact(t, _TENSOR_FIELDS, "placement tensor"))
                   for t in raw["tensors"]]
        fragments = []
        for f in raw["fragments"]:
            f = dict(_exact(f, _PFRAG_FIELDS, "placement fragment"))
            f["rank"] = ParallelRank(**_exact(f["rank"], _RANK_FIELDS, "placement rank"))
            fragments.append(PlacementFragment(**f))
        return cls(model_id=raw["model_id"], revision=raw["revision"], tensors=tuple(tensors),
                   fragments=tuple(fragments), placement_id=raw["placement_id"])

    @classmethod
    def from_runtime_inventory(cls, inventory: Any) -> "PlacementManifest":
        tensors, fragments = {}, []
        for record in _field(inventory, "tensors"):
            t = _tensor_from_record(record)
            if tensors.setdefault(t.tensor_id, t) != t:
                raise ValueError("placement descriptor mismatch: %s" % t.tensor_id)
            fragments.append(PlacementFragment(
                placement_fragment_id=_field(record, "placement_fragment_id"),
                tensor_id=t.tensor_id, global_offset=_field(record, "global_offset"),
                local_shape=_field(record, "local_shape"), nbytes=_field(record, "nbytes"),
                rank=_rank_from_record(record),
                aliases=tuple(_opt_field(record, "aliases") or ())))
        return cls(model_id=_field(inventory, "model_id"),
                   revision=_field(inventory, "revision"), tensors=tuple(tensors.values()),
                   fragments=tuple(fragments),
                   placement_id=_opt_field(inventory, "placement_id"))


def placement_manifest_from_runtime_manifest(manifest: RuntimeManifest) -> PlacementManifest:
    """The address-free placement of a runtime manifest (fragment ids kept)."""
    return PlacementManifest(
        model_id=manifest.model_id, revision=manifest.revision, tensors=manifest.tensors,
        fragments=tuple(PlacementFragment(
            placement_fragment_id=f.fragment_id, tensor_id=f.tensor_id,
            global_offset=f.global_offset, local_shape=f.local_shape, nbytes=f.nbytes,
            rank=f.rank, aliases=f.aliases) for f in manifest.fragments))


__all__ = ["ParallelRank", "TensorDescriptor", "RuntimeFragment", "StoredFragment",
           "PlacementFragment", "RuntimeManifest", "WeightManifest", "PlacementManifest",
           "placement_manifest_from_runtime_manifest", "check_fragment_geometry", "covers"]
