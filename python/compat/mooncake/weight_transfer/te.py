"""Direct weight movers over the Transfer Engine (crescent's own
implementation of Mooncake's ``mooncake.weight_transfer.te``).

``MooncakeTransferEngineSink`` runs on a source worker and WRITEs its planned
ranges into the target workers' memory; ``MooncakeTransferEngineReader`` runs
on a target worker and READs its planned ranges from the source workers.
Both check the plan against the current fragments (a moved or re-leased
fragment is refused, never written), check memory registration leases,
register what they own for the call, and send at most
``max_batch_operations`` ranges per ``batch_transfer_sync_*`` call. Any
engine with Mooncake's ``TransferEngine`` methods works (``mooncake.engine``
here: tcp / shm; device memory is not supported on this machine).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from .manifest import RuntimeFragment, RuntimeManifest
from .planner import TransferPlan, resolve_executor_plans
from .store import _nothing, _same_view, registered


class TransferEngineError(RuntimeError):
    pass


@dataclass(frozen=True)
class DirectTransferReceipt:
    source_worker_id: str
    target_endpoint: str
    operation_count: int
    nbytes: int


@dataclass(frozen=True)
class DirectReadReceipt:
    source_endpoint: str
    target_worker_id: str
    operation_count: int
    nbytes: int


@dataclass(frozen=True)
class MemoryRegistrationLease:
    """Proof that a fragment's memory is registered with the engine."""
    fragment_id: str
    worker_id: str
    address: int
    nbytes: int
    lease_generation: int
    runtime_lease_id: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.fragment_id or not self.worker_id:
            raise ValueError("registration lease identifiers must not be empty")
        for name in ("address", "nbytes", "lease_generation"):
            if type(getattr(self, name)) is not int:
                raise ValueError("registration lease %s must be an integer" % name)
        if self.address <= 0 or self.nbytes <= 0 or self.lease_generation < 0:
            raise ValueError("registration lease values are invalid")
        if self.runtime_lease_id is not None and (type(self.runtime_lease_id) is not str
                                                  or not self.runtime_lease_id):
            raise ValueError("registration runtime_lease_id must be a non-empty string")

    @classmethod
    def from_fragment(cls, fragment: RuntimeFragment, *,
                      runtime_lease_id: Optional[str] = None) -> "MemoryRegistrationLease":
        return cls(fragment.fragment_id, fragment.worker_id, fragment.address,
                   fragment.nbytes, fragment.lease_generation, runtime_lease_id)


def _leases(registrations, label) -> dict:
    if registrations is None:
        raise TransferEngineError("%s registration leases are required" % label)
    out = {}
    for r in registrations:
        if r.fragment_id in out:
            raise TransferEngineError("duplicate %s registration lease: %s"
                                      % (label, r.fragment_id))
        out[r.fragment_id] = r
    return out


def _check_lease(f: RuntimeFragment, leases: dict, label: str) -> None:
    r = leases.get(f.fragment_id)
    if r is None or (r.worker_id, r.address, r.nbytes, r.lease_generation) != \
            (f.worker_id, f.address, f.nbytes, f.lease_generation):
        raise TransferEngineError("%s registration lease mismatch: %s" % (label, f.fragment_id))


def _check_identity(plan: TransferPlan, m: RuntimeManifest, label: str) -> None:
    if m.model_id != plan.model_id:
        raise TransferEngineError("%s model_id mismatch" % label)
    if m.revision != plan.revision:
        raise TransferEngineError("%s revision mismatch" % label)


def _resolve(plan, m, side):
    try:
        return resolve_executor_plans(plan, m, side)
    except ValueError as e:
        raise TransferEngineError(str(e)) from e


def _gather(plan, manifests, side):
    """All fragments of ``manifests`` (one executor set covering the plan's)."""
    frags, ranks, lease_ids = {}, set(), {}
    for m in manifests:
        _check_identity(plan, m, side)
        for e in _resolve(plan, m, side):
            if e.rank in ranks:
                raise TransferEngineError("duplicate %s executor rank: %s" % (side, e.rank))
            ranks.add(e.rank)
        for f in m.fragments:
            if f.fragment_id in frags:
                raise TransferEngineError("duplicate %s fragment: %s" % (side, f.fragment_id))
            frags[f.fragment_id] = f
            lease_ids[f.fragment_id] = m.lease_id
    executors = plan.source_executors if side == "source" else plan.target_executors
    if ranks != {e.rank for e in executors}:
        raise TransferEngineError("%s executor set is incomplete" % side)
    return frags, lease_ids


class _Mover:
    def __init__(self, engine: Any, *, max_batch_operations: int = 1024) -> None:
        if max_batch_operations <= 0:
            raise ValueError("max_batch_operations must be positive")
        self.engine = engine
        self.max_batch_operations = max_batch_operations

    def _registered(self, fragments, label):
        return registered(self.engine.register_memory, self.engine.unregister_memory,
                          fragments, TransferEngineError, label + " register_memory",
                          label + " unregister_memory")

    def _run(self, endpoint, triples, call, what):
        """Send (local, remote, size) triples to ``endpoint`` in bounded
        batches; returns (ranges, bytes)."""
        count = total = 0
        for i in range(0, len(triples), self.max_batch_operations):
            chunk = triples[i:i + self.max_batch_operations]
            try:
                rc = call(endpoint, [t[0] for t in chunk], [t[1] for t in chunk],
                          [t[2] for t in chunk])
            except Exception as e:
                raise TransferEngineError("batch transfer %s %s failed: %s"
                                          % (what, endpoint, e)) from e
            if rc != 0:
                raise TransferEngineError("batch transfer %s %s failed: %s"
                                          % (what, endpoint, rc))
            count += len(chunk)
            total += sum(t[2] for t in chunk)
        return count, total


class MooncakeTransferEngineSink(_Mover):
    """Source-side push: WRITE this source worker's planned ranges."""

    def execute(self, plan: TransferPlan, source_manifest: RuntimeManifest,
                target_manifests: Sequence[RuntimeManifest], *,
                target_registrations: Optional[Sequence[MemoryRegistrationLease]] = None,
                source_pre_registered: bool = False,
                source_registrations: Optional[Sequence[MemoryRegistrationLease]] = None
                ) -> tuple:
        _check_identity(plan, source_manifest, "source")
        if not target_manifests:
            raise TransferEngineError("target manifests must not be empty")
        executors = _resolve(plan, source_manifest, "source")
        workers = {e.worker_id for e in executors}
        if len(workers) != 1:
            raise TransferEngineError("source manifest spans multiple workers")
        worker = workers.pop()
        targets, _ = _gather(plan, target_manifests, "target")
        ops = [plan.operations[i] for e in executors for i in e.operation_indices]
        if not ops:
            return ()
        local = {f.fragment_id: f for f in source_manifest.fragments}
        target_leases = _leases(target_registrations, "target")
        per_endpoint, used = {}, {}
        for op in ops:
            if not isinstance(op.source, RuntimeFragment):
                raise TransferEngineError("MooncakeTransferEngineSink requires runtime sources")
            src = local[op.source.fragment_id]
            if not _same_view(src, op.source):
                raise TransferEngineError("stale source fragment: %s" % op.source.fragment_id)
            dst = targets.get(op.target.fragment_id)
            if dst is None:
                raise TransferEngineError("missing planned target fragment: %s"
                                          % op.target.fragment_id)
            if not _same_view(dst, op.target):
                raise TransferEngineError("stale target fragment: %s" % op.target.fragment_id)
            try:
                op.validate_bounds()
            except ValueError as e:
                raise TransferEngineError("invalid copy range for %s: %s"
                                          % (op.tensor_id, e)) from e
            _check_lease(dst, target_leases, "target")
            used[src.fragment_id] = src
            per_endpoint.setdefault(dst.endpoint, []).append((op, src, dst))
        if source_pre_registered:
            source_leases = _leases(source_registrations, "source")
            for f in used.values():
                _check_lease(f, source_leases, "source")
        elif source_registrations is not None:
            raise TransferEngineError(
                "source registration leases require source_pre_registered=True")
        receipts = []
        ctx = _nothing() if source_pre_registered else self._registered(used.values(),
                                                                         "source")
        with ctx:
            for endpoint in sorted(per_endpoint):
                triples = sorted(((src.address + s, dst.address + t, n)
                                  for op, src, dst in per_endpoint[endpoint]
                                  for s, t, n in op.iter_segments()),
                                 key=lambda x: (x[1], x[0]))
                count, total = self._run(endpoint, triples,
                                         self.engine.batch_transfer_sync_write, "to")
                receipts.append(DirectTransferReceipt(worker, endpoint, count, total))
        return tuple(receipts)


class MooncakeTransferEngineReader(_Mover):
    """Target-side pull: READ this target worker's planned ranges from the
    (pre-registered) source workers."""

    def execute(self, plan: TransferPlan, source_manifests: Sequence[RuntimeManifest],
                target_manifest: RuntimeManifest, *, source_pre_registered: bool = True,
                source_registrations: Optional[Sequence[MemoryRegistrationLease]] = None,
                target_pre_registered: bool = False,
                target_registrations: Optional[Sequence[MemoryRegistrationLease]] = None
                ) -> tuple:
        if not source_pre_registered:
            raise TransferEngineError("remote source memory must be pre-registered")
        source_leases = _leases(source_registrations, "source")
        if target_registrations is not None and not target_pre_registered:
            raise TransferEngineError("target_registrations require target_pre_registered=True")
        _check_identity(plan, target_manifest, "target")
        executors = _resolve(plan, target_manifest, "target")
        if len(executors) != 1:
            raise TransferEngineError("target manifest must describe one local executor")
        me = executors[0]
        sources, lease_ids = _gather(plan, source_manifests, "source")
        targets = {f.fragment_id: f for f in target_manifest.fragments}
        target_leases = _leases(target_registrations, "target") if target_pre_registered \
            else {}
        per_endpoint, used = {}, {}
        for i in me.operation_indices:
            op = plan.operations[i]
            if not isinstance(op.source, RuntimeFragment):
                raise TransferEngineError(
                    "MooncakeTransferEngineReader requires runtime sources")
            src = sources.get(op.source.fragment_id)
            if src is None or not _same_view(src, op.source):
                raise TransferEngineError("stale source fragment: %s" % op.source.fragment_id)
            lease_id = lease_ids[src.fragment_id]
            if lease_id is None:
                raise TransferEngineError("source runtime lease_id is required: %s"
                                          % src.fragment_id)
            _check_lease(src, source_leases, "source")
            if source_leases[src.fragment_id].runtime_lease_id != lease_id:
                raise TransferEngineError("source registration lease mismatch: %s"
                                          % src.fragment_id)
            dst = targets.get(op.target.fragment_id)
            if dst is None or not _same_view(dst, op.target):
                raise TransferEngineError("stale target fragment: %s" % op.target.fragment_id)
            if target_pre_registered:
                _check_lease(dst, target_leases, "target")
            op.validate_bounds()
            used[dst.fragment_id] = dst
            per_endpoint.setdefault(src.endpoint, []).append((op, src, dst))
        receipts = []
        ctx = _nothing() if target_pre_registered else self._registered(used.values(),
                                                                        "target")
        with ctx:
            for endpoint in sorted(per_endpoint):
                triples = sorted(((dst.address + t, src.address + s, n)
                                  for op, src, dst in per_endpoint[endpoint]
                                  for s, t, n in op.iter_segments()),
                                 key=lambda x: (x[0], x[1]))
                count, total = self._run(endpoint, triples,
                                         self.engine.batch_transfer_sync_read, "from")
                receipts.append(DirectReadReceipt(endpoint, me.worker_id, count, total))
        return tuple(receipts)


__all__ = ["DirectReadReceipt", "DirectTransferReceipt", "MemoryRegistrationLease",
           "MooncakeTransferEngineReader", "MooncakeTransferEngineSink", "TransferEngineError"]
