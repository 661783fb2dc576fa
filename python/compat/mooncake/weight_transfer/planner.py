"""Resharding planner (crescent's own implementation of Mooncake's
``mooncake.weight_transfer.planner``; same names and rules).

Given where a model's weights are (runtime fragments of source instances, or
a stored ``WeightManifest``) and where they must go (target runtime
fragments), it computes the byte ranges to copy: for each target fragment,
the source boxes that overlap it along the tensor's partition dimension, as
``CopyRange``s (one contiguous range, or ``repeat`` strided rows when the
partition dimension is not the outermost). Runtime sources come from one
complete data-parallel replica (target DP rank ``d`` reads source replica
``d mod n``), all of one lease generation. The plan also names, per parallel
rank, the executor that runs each side and a snapshot of its fragments, so an
executor can refuse a plan made for memory that has since moved.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Iterable, Sequence, Union

from .manifest import (ParallelRank, RuntimeFragment, RuntimeManifest, StoredFragment,
                       TensorDescriptor, WeightManifest, covers)

SourceFragment = Union[RuntimeFragment, StoredFragment]


@dataclass(frozen=True)
class RuntimeLeaseSnapshot:
    fragment_id: str
    tensor_id: str
    global_offset: tuple
    local_shape: tuple
    address: int
    nbytes: int
    worker_id: str
    endpoint: str
    lease_generation: int

    @classmethod
    def from_fragment(cls, fragment: RuntimeFragment) -> "RuntimeLeaseSnapshot":
        return cls(fragment.fragment_id, fragment.tensor_id, fragment.global_offset,
                   fragment.local_shape, fragment.address, fragment.nbytes,
                   fragment.worker_id, fragment.endpoint, fragment.lease_generation)


@dataclass(frozen=True)
class ExecutorTransferPlan:
    """What one parallel rank's worker runs: its fragments and operations."""
    instance_id: str
    worker_id: str
    rank: ParallelRank
    fragment_ids: tuple
    fragment_leases: tuple
    operation_indices: tuple

    def __post_init__(self) -> None:
        for name in ("fragment_ids", "fragment_leases", "operation_indices"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.instance_id or not self.worker_id or not self.fragment_ids:
            raise ValueError("executor plan identifiers must not be empty")
        if len(set(self.fragment_ids)) != len(self.fragment_ids):
            raise ValueError("executor plan has duplicate fragment IDs")
        if not all(isinstance(l, RuntimeLeaseSnapshot) for l in self.fragment_leases):
            raise ValueError("executor plan has invalid runtime lease metadata")
        if tuple(l.fragment_id for l in self.fragment_leases) != self.fragment_ids:
            raise ValueError("executor plan fragment lease IDs do not match")
        if any(type(i) is not int or i < 0 for i in self.operation_indices):
            raise ValueError("executor operation indices must be non-negative integers")


@dataclass(frozen=True)
class CopyRange:
    """``repeat`` copies of ``nbytes``: the i-th from source byte
    ``source_offset + i*source_stride`` to target byte
    ``target_offset + i*target_stride`` (offsets relative to the fragments)."""
    tensor_id: str
    source: SourceFragment
    target: RuntimeFragment
    source_offset: int
    target_offset: int
    nbytes: int
    repeat: int = 1
    source_stride: int = 0
    target_stride: int = 0

    def __post_init__(self) -> None:
        if not self.tensor_id:
            raise ValueError("copy range tensor_id must not be empty")
        if self.source.tensor_id != self.tensor_id or self.target.tensor_id != self.tensor_id:
            raise ValueError("copy range tensor mismatch")
        ints = ("source_offset", "target_offset", "nbytes", "repeat", "source_stride",
                "target_stride")
        for name in ints:
            if type(getattr(self, name)) is not int:
                raise ValueError("copy range %s must be an integer" % name)
        if min(self.source_offset, self.target_offset, self.source_stride,
               self.target_stride) < 0:
            raise ValueError("copy range values must be non-negative")
        if self.nbytes <= 0 or self.repeat <= 0:
            raise ValueError("copy range size and repeat must be positive")
        self.validate_bounds()

    def validate_bounds(self) -> None:
        last = self.repeat - 1
        if self.source_offset + last * self.source_stride + self.nbytes > self.source.nbytes:
            raise ValueError("copy range exceeds source fragment")
        if self.target_offset + last * self.target_stride + self.nbytes > self.target.nbytes:
            raise ValueError("copy range exceeds target fragment")

    @property
    def total_bytes(self) -> int:
        return self.nbytes * self.repeat

    def iter_segments(self) -> Iterable[tuple]:
        """(source_offset, target_offset, nbytes) of each contiguous piece."""
        for i in range(self.repeat):
            yield (self.source_offset + i * self.source_stride,
                   self.target_offset + i * self.target_stride, self.nbytes)


@dataclass(frozen=True)
class TransferPlan:
    model_id: str
    revision: str
    operations: tuple
    source_executors: tuple = ()
    target_executors: tuple = ()

    def __post_init__(self) -> None:
        for name in ("operations", "source_executors", "target_executors"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.model_id or not self.revision:
            raise ValueError("transfer plan identifiers must not be empty")
        for ex in self.source_executors + self.target_executors:
            if any(i >= len(self.operations) for i in ex.operation_indices):
                raise ValueError("executor operation index is out of range")

    @property
    def total_bytes(self) -> int:
        return sum(op.total_bytes for op in self.operations)


# -- helpers -----------------------------------------------------------------------

def _collect(manifests: Sequence[RuntimeManifest], label: str):
    if not manifests:
        raise ValueError("%s manifests must not be empty" % label)
    first = manifests[0]
    tensors, fragments, ids = {}, [], set()
    for m in manifests:
        if (m.model_id, m.revision) != (first.model_id, first.revision):
            raise ValueError("%s manifests describe different revisions" % label)
        for t in m.tensors:
            if tensors.setdefault(t.tensor_id, t) != t:
                raise ValueError("%s tensor descriptor mismatch: %s" % (label, t.tensor_id))
        for f in m.fragments:
            if f.fragment_id in ids:
                raise ValueError("duplicate %s fragment_id: %s" % (label, f.fragment_id))
            ids.add(f.fragment_id)
            fragments.append(f)
    return tensors, fragments


def _rank_order(r: ParallelRank) -> tuple:
    return (r.dp, r.pp, r.ep, r.tp)


def _by_rank(fragments):
    out = {}
    for f in fragments:
        out.setdefault(f.rank, []).append(f)
    return out


def _executors(manifests, operations, side):
    ops_of = {}
    for i, op in enumerate(operations):
        ops_of.setdefault(getattr(op, side).fragment_id, []).append(i)
    seen, out = set(), []
    for m in manifests:
        if not m.fragments:
            raise ValueError("%s executor manifest has no fragments" % side)
        for rank, frags in _by_rank(m.fragments).items():
            workers = {f.worker_id for f in frags}
            if len(workers) != 1:
                raise ValueError("%s executor rank spans multiple workers: %s" % (side, rank))
            if rank in seen:
                raise ValueError("duplicate %s executor rank: %s" % (side, rank))
            seen.add(rank)
            frags = sorted(frags, key=lambda f: f.fragment_id)
            out.append(ExecutorTransferPlan(
                instance_id=m.instance_id, worker_id=workers.pop(), rank=rank,
                fragment_ids=tuple(f.fragment_id for f in frags),
                fragment_leases=tuple(RuntimeLeaseSnapshot.from_fragment(f) for f in frags),
                operation_indices=tuple(sorted(i for f in frags
                                               for i in ops_of.get(f.fragment_id, ())))))
    out.sort(key=lambda e: _rank_order(e.rank))
    return tuple(out)


def resolve_executor_plans(plan: TransferPlan, manifest: RuntimeManifest, side: str) -> tuple:
    """The executors of ``side`` ("source" / "target") that ``manifest``'s
    instance runs; ValueError when its fragments no longer match the
    snapshot the plan was made from (moved, re-leased, ranks changed)."""
    if side not in ("source", "target"):
        raise ValueError("invalid executor side: %s" % side)
    executors = plan.source_executors if side == "source" else plan.target_executors
    if not executors:
        raise ValueError("transfer plan has no %s executor metadata" % side)
    if not manifest.fragments:
        raise ValueError("%s executor snapshot mismatch: no fragments" % side)
    mine = {e.rank: e for e in executors if e.instance_id == manifest.instance_id}
    if not mine:
        raise ValueError("%s executor snapshot mismatch: unknown instance" % side)
    current = _by_rank(manifest.fragments)
    if set(current) != set(mine):
        raise ValueError("%s executor snapshot mismatch: executor set changed" % side)
    for rank, frags in current.items():
        e = mine[rank]
        frags = sorted(frags, key=lambda f: f.fragment_id)
        if ({f.worker_id for f in frags} != {e.worker_id}
                or tuple(f.fragment_id for f in frags) != e.fragment_ids
                or tuple(RuntimeLeaseSnapshot.from_fragment(f) for f in frags)
                != e.fragment_leases):
            raise ValueError("%s executor snapshot mismatch" % side)
    return tuple(sorted(mine.values(), key=lambda e: _rank_order(e.rank)))


def resolve_executor_plan(plan: TransferPlan, manifest: RuntimeManifest,
                          side: str) -> ExecutorTransferPlan:
    executors = resolve_executor_plans(plan, manifest, side)
    if len(executors) != 1:
        raise ValueError("%s executor snapshot contains multiple ranks" % side)
    return executors[0]


def _same_tensor(a: TensorDescriptor, b: TensorDescriptor) -> None:
    if a.layout_fingerprint != b.layout_fingerprint:
        raise ValueError("layout mismatch for tensor %s" % a.tensor_id)
    if a != b:
        raise ValueError("tensor descriptor mismatch: %s" % a.tensor_id)


def _owner_complete(tensor, frags) -> bool:
    return covers(tensor, frags)


def _source_replicas(tensors, fragments):
    """dp -> {tensor_id: (pp, ep) owner} for every complete DP replica."""
    replicas, generations = {}, {}
    for dp in sorted({f.rank.dp for f in fragments}):
        mine = [f for f in fragments if f.rank.dp == dp]
        gens = {f.lease_generation for f in mine}
        if len(gens) != 1:
            continue
        owners = {}
        for t in tensors.values():
            groups = {}
            for f in mine:
                if f.tensor_id == t.tensor_id:
                    groups.setdefault((f.rank.pp, f.rank.ep), []).append(f)
            if not groups or not all(covers(t, g) for g in groups.values()):
                owners = None
                break
            owners[t.tensor_id] = min(groups)
        if owners is not None:
            replicas[dp], generations[dp] = owners, gens.pop()
    if not replicas:
        raise ValueError("source manifests have no complete DP replica; "
                         "tensors are not fully covered")
    if len(set(generations.values())) != 1:
        raise ValueError("source DP replicas have inconsistent lease generations")
    return replicas


def _interval(tensor, f):
    if tensor.partition_dim is None:
        return 0, 1
    d = tensor.partition_dim
    return f.global_offset[d], f.global_offset[d] + f.local_shape[d]


def _ranges(tensor, source, target, begin, end):
    d = tensor.partition_dim
    if d is None:
        return [CopyRange(tensor.tensor_id, source, target, 0, 0, source.nbytes)]
    s0, t0 = source.global_offset[d], target.global_offset[d]
    outer = prod(tensor.global_shape[:d])
    inner = prod(tensor.global_shape[d + 1:]) * tensor.itemsize
    piece = (end - begin) * inner
    s_stride, t_stride = source.local_shape[d] * inner, target.local_shape[d] * inner
    s_off, t_off = (begin - s0) * inner, (begin - t0) * inner
    if outer == 1 or (s_stride == piece and t_stride == piece):
        return [CopyRange(tensor.tensor_id, source, target, s_off, t_off, piece * outer)]
    return [CopyRange(tensor.tensor_id, source, target, s_off, t_off, piece, outer,
                      s_stride, t_stride)]


def _src_order(f):
    if isinstance(f, StoredFragment):
        return (0, 0, 0, 0, f.object_key, f.fragment_id)
    return _rank_order(f.rank) + (f.worker_id, f.fragment_id)


def _plan(model_id, revision, src_tensors, src_frags, dst_tensors, dst_frags, local=False):
    extra = sorted(set(dst_tensors) - set(src_tensors))
    if extra:
        raise ValueError("target manifests contain unknown tensors: %s" % ", ".join(extra))
    if not dst_frags:
        raise ValueError("local target manifest has no fragments" if local
                         else "target manifests have no fragments")
    if local:
        if len({f.rank for f in dst_frags}) != 1 or len({f.worker_id for f in dst_frags}) != 1:
            raise ValueError("local target manifest must describe exactly one executor")
        missing = sorted(set(dst_tensors) - {f.tensor_id for f in dst_frags})
        if missing:
            raise ValueError("local target manifest is missing fragments: %s"
                             % ", ".join(missing))
    else:
        missing = sorted(set(src_tensors) - set(dst_tensors))
        if missing:
            raise ValueError("target manifests are missing tensors: %s" % ", ".join(missing))
        for dp in sorted({f.rank.dp for f in dst_frags}):
            for t in dst_tensors.values():
                groups = {}
                for f in dst_frags:
                    if f.rank.dp == dp and f.tensor_id == t.tensor_id:
                        groups.setdefault((f.rank.pp, f.rank.ep), []).append(f)
                if not groups or not all(covers(t, g) for g in groups.values()):
                    raise ValueError("target tensor is not fully covered: %s: dp=%d"
                                     % (t.tensor_id, dp))
    runtime = all(isinstance(f, RuntimeFragment) for f in src_frags)
    if not runtime and not all(isinstance(f, StoredFragment) for f in src_frags):
        raise ValueError("source fragments mix runtime and stored locations")
    replicas = _source_replicas(src_tensors, src_frags) if runtime else {}
    replica_dps = sorted(replicas)
    # tensor -> box -> candidate sources (first in a stable order is used)
    boxes = {}
    for f in src_frags:
        boxes.setdefault(f.tensor_id, {}).setdefault((f.global_offset, f.local_shape),
                                                     []).append(f)
    ops = []
    for target in sorted(dst_frags, key=lambda f: f.fragment_id):
        t = dst_tensors[target.tensor_id]
        s = src_tensors[target.tensor_id]
        _same_tensor(s, t)
        found = []
        for group in boxes.get(t.tensor_id, {}).values():
            if runtime:
                dp = replica_dps[target.rank.dp % len(replica_dps)]
                owner = replicas[dp][t.tensor_id]
                group = [f for f in group if f.rank.dp == dp
                         and (f.rank.pp, f.rank.ep) == owner]
                if not group:
                    continue
            src = min(group, key=_src_order)
            sb, se = _interval(s, src)
            tb, te = _interval(t, target)
            b, e = max(sb, tb), min(se, te)
            if b < e:
                found.append((b, e, src))
        found.sort(key=lambda x: (x[0], x[1], x[2].fragment_id))
        cursor, end = _interval(t, target)
        for b, e, src in found:
            if b != cursor:
                raise ValueError("target fragment is not fully covered: %s" % target.fragment_id)
            cursor = e
            ops.extend(_ranges(t, src, target, b, e))
        if cursor != end:
            raise ValueError("target fragment is not fully covered: %s" % target.fragment_id)
    return _dedup(ops)


def _src_location(op):
    s = op.source
    if isinstance(s, RuntimeFragment):
        return ("runtime", s.worker_id, s.endpoint, s.lease_generation,
                s.address + op.source_offset)
    return ("stored", s.object_key, s.object_offset + op.source_offset)


def _dst_location(op):
    t = op.target
    return (t.worker_id, t.endpoint, t.lease_generation, t.address + op.target_offset,
            op.nbytes, op.repeat, op.target_stride)


def _tied(a: CopyRange, b: CopyRange) -> bool:
    """Two copies into the same bytes that the framework declared tied
    (same alias group of >= 2 names, same geometry): the second is skipped."""
    ta, tb = a.target, b.target
    return (len(ta.aliases) >= 2 and ta.aliases == tb.aliases
            and (ta.global_offset, ta.local_shape, ta.nbytes)
            == (tb.global_offset, tb.local_shape, tb.nbytes)
            and (a.source_offset, a.source_stride) == (b.source_offset, b.source_stride))


def _dedup(ops):
    kept, seen, by_dst = [], set(), {}
    for op in ops:
        ident = (_src_location(op), _dst_location(op), op.source_stride)
        if ident in seen:
            continue
        seen.add(ident)
        prev = by_dst.get(_dst_location(op))
        if prev is not None and _tied(prev, op):
            continue
        by_dst.setdefault(_dst_location(op), op)
        kept.append(op)
    kept.sort(key=lambda o: (o.target.fragment_id, o.target_offset, o.source.fragment_id,
                             o.source_offset))
    _check_disjoint_targets(kept)
    return tuple(kept)


def _check_disjoint_targets(ops) -> None:
    """ValueError when two copies would write the same target bytes."""
    spans = {}
    for op in ops:
        if op.repeat > 1 and op.target_stride < op.nbytes:
            raise ValueError("conflicting target physical range: %s" % op.target.fragment_id)
        base = op.target.address + op.target_offset
        for i in range(op.repeat):
            b = base + i * op.target_stride
            spans.setdefault((op.target.worker_id, op.target.endpoint), []).append(
                (b, b + op.nbytes, op.target.fragment_id))
    for segs in spans.values():
        segs.sort()
        for (b0, e0, _), (b1, e1, fid) in zip(segs, segs[1:]):
            if b1 < e0:
                raise ValueError("conflicting target physical range: %s" % fid)


def plan_runtime_transfer(source_manifests: Sequence[RuntimeManifest],
                          target_manifests: Sequence[RuntimeManifest]) -> TransferPlan:
    """Copies from running source instances to every target instance."""
    st, sf = _collect(source_manifests, "source")
    tt, tf = _collect(target_manifests, "target")
    s, t = source_manifests[0], target_manifests[0]
    if s.model_id != t.model_id:
        raise ValueError("source and target model_id differ")
    if s.revision != t.revision:
        raise ValueError("source and target revision differ")
    ops = _plan(s.model_id, s.revision, st, sf, tt, tf)
    return TransferPlan(s.model_id, s.revision, ops,
                        _executors(source_manifests, ops, "source"),
                        _executors(target_manifests, ops, "target"))


def plan_runtime_transfer_to_local_target(source_manifests: Sequence[RuntimeManifest],
                                          target_manifest: RuntimeManifest) -> TransferPlan:
    """Copies one independently starting target worker needs (its tensors
    only), with the whole source executor snapshot for fencing."""
    st, sf = _collect(source_manifests, "source")
    tt, tf = _collect((target_manifest,), "target")
    s = source_manifests[0]
    if s.model_id != target_manifest.model_id:
        raise ValueError("source and target model_id differ")
    if s.revision != target_manifest.revision:
        raise ValueError("source and target revision differ")
    ops = _plan(s.model_id, s.revision, st, sf, tt, tf, local=True)
    targets = _executors((target_manifest,), ops, "target")
    if len(targets) != 1:
        raise ValueError("local target manifest must describe exactly one executor")
    return TransferPlan(s.model_id, s.revision, ops,
                        _executors(source_manifests, ops, "source"), targets)


def plan_stored_transfer(source_manifest: WeightManifest,
                         target_manifests: Sequence[RuntimeManifest]) -> TransferPlan:
    """Copies from a stored weight revision into target instances."""
    tt, tf = _collect(target_manifests, "target")
    t = target_manifests[0]
    if source_manifest.model_id != t.model_id:
        raise ValueError("source and target model_id differ")
    if source_manifest.revision != t.revision:
        raise ValueError("source and target revision differ")
    st = {x.tensor_id: x for x in source_manifest.tensors}
    ops = _plan(t.model_id, t.revision, st, source_manifest.fragments, tt, tf)
    return TransferPlan(t.model_id, t.revision, ops,
                        target_executors=_executors(target_manifests, ops, "target"))


__all__ = ["CopyRange", "ExecutorTransferPlan", "RuntimeLeaseSnapshot", "TransferPlan",
           "plan_runtime_transfer", "plan_runtime_transfer_to_local_target",
           "plan_stored_transfer", "resolve_executor_plan", "resolve_executor_plans"]
