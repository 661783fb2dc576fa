"""Weights through the store (crescent's own implementation of Mooncake's
``mooncake.weight_transfer.store``; same names, key layout and protocol).

Upload: ``prepare_upload`` picks one complete DP replica of the source
instances and names one payload object per fragment
(``<prefix>/<namespace>/<model>/<revision>/payload/<upload id>/<digest>``);
each source worker ``upload``s its own fragments (``batch_put_from`` straight
from its registered memory); ``commit`` writes a decision record and then the
manifest. Both are written with ``put``, which never replaces an existing
object, so when two uploads race for one revision the first decision / the
first manifest wins and the loser's payload is removed ("conflicting weight
revision"). ``abort_upload`` records "abort" and removes the payload.
Load: ``plan_load`` computes the copies from the stored fragments into the
target fragments; each target worker ``load``s its share with
``get_into_ranges`` straight into its registered memory.
Weights and records are hard-pinned (``with_hard_pin``), payloads typed
``ObjectDataType.WEIGHT``, records ``METADATA``.
"""
from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Literal, Mapping, Optional, Sequence
from urllib.parse import quote
from uuid import uuid4

from .manifest import (RuntimeFragment, RuntimeManifest, StoredFragment, WeightManifest,
                       covers)
from .planner import TransferPlan, plan_stored_transfer, resolve_executor_plans

OBJECT_NOT_FOUND = -704

StoreRecordType = Literal["payload", "metadata"]


class WeightStoreError(RuntimeError):
    pass


@dataclass(frozen=True)
class UploadOperation:
    source: RuntimeFragment
    target: StoredFragment


@dataclass(frozen=True)
class WeightUploadPlan:
    manifest: WeightManifest
    session_group_id: str
    control_key: str
    operations: tuple


@dataclass(frozen=True)
class UploadReceipt:
    fragment_id: str
    object_key: str
    worker_id: str


@dataclass(frozen=True)
class WeightLoadPlan:
    manifest: WeightManifest
    transfer: TransferPlan


def _default_config_factory(group_ids: Sequence[str], record_type: StoreRecordType) -> Any:
    from mooncake.store import ObjectDataType, ReplicateConfig
    if record_type not in ("payload", "metadata"):
        raise ValueError("invalid weight Store record type: %s" % record_type)
    config = ReplicateConfig()
    config.group_ids = list(group_ids)
    config.with_hard_pin = True
    config.data_type = ObjectDataType.WEIGHT if record_type == "payload" \
        else ObjectDataType.METADATA
    return config


def _same_view(a: RuntimeFragment, b: RuntimeFragment) -> bool:
    """Same memory view: geometry, address, size, worker, endpoint, lease."""
    return ((a.tensor_id, a.global_offset, a.local_shape, a.address, a.nbytes, a.worker_id,
             a.endpoint, a.lease_generation)
            == (b.tensor_id, b.global_offset, b.local_shape, b.address, b.nbytes, b.worker_id,
                b.endpoint, b.lease_generation))


def _upload_sources(manifests: Sequence[RuntimeManifest]):
    """(model, revision, tensors, fragments of the first complete DP replica)."""
    if not manifests:
        raise ValueError("source manifests must not be empty")
    model_id, revision = manifests[0].model_id, manifests[0].revision
    tensors, by_dp, ids = {}, {}, set()
    for m in manifests:
        if (m.model_id, m.revision) != (model_id, revision):
            raise ValueError("source manifests describe different revisions")
        for t in m.tensors:
            if tensors.setdefault(t.tensor_id, t) != t:
                raise ValueError("tensor descriptor mismatch: %s" % t.tensor_id)
        for f in m.fragments:
            if f.fragment_id in ids:
                raise ValueError("duplicate source fragment_id: %s" % f.fragment_id)
            ids.add(f.fragment_id)
            by_dp.setdefault(f.rank.dp, []).append(f)
    tensors = tuple(sorted(tensors.values(), key=lambda t: t.tensor_id))
    complete = []
    for dp, frags in sorted(by_dp.items()):
        gens = {f.lease_generation for f in frags}
        if len(gens) != 1:
            continue
        pick = {}
        for f in sorted(frags, key=lambda f: (f.rank.dp, f.rank.pp, f.rank.ep, f.rank.tp,
                                              f.worker_id, f.fragment_id)):
            pick.setdefault((f.tensor_id, f.global_offset, f.local_shape), f)
        chosen = sorted(pick.values(), key=lambda f: (f.tensor_id, f.global_offset,
                                                       f.local_shape))
        if all(covers(t, [f for f in chosen if f.tensor_id == t.tensor_id])
               and (t.partition_dim is not None
                    or sum(f.tensor_id == t.tensor_id for f in chosen) == 1)
               for t in tensors):
            complete.append((gens.pop(), chosen))
    if not complete:
        raise ValueError("source manifests have no complete generation-consistent DP replica")
    if len({g for g, _ in complete}) != 1:
        raise ValueError("complete source DP replicas have inconsistent lease generations")
    return model_id, revision, tensors, complete[0][1]


def _digest(manifest: WeightManifest) -> str:
    return hashlib.sha256(manifest.to_json().encode()).hexdigest()


def _decision_record(plan: WeightUploadPlan, decision: str) -> bytes:
    return json.dumps({"decision": decision, "format_version": 1,
                       "plan_digest": _digest(plan.manifest),
                       "record_type": "weight-upload-decision"},
                      sort_keys=True, separators=(",", ":")).encode()


def _parse_decision(raw_bytes) -> tuple:
    """(plan_digest, decision) of a decision record; ValueError if malformed."""
    raw = json.loads(raw_bytes)
    if not isinstance(raw, Mapping) or set(raw) != {"decision", "format_version",
                                                    "plan_digest", "record_type"}:
        raise ValueError("upload decision schema fields do not match format_version")
    if type(raw["format_version"]) is not int or raw["format_version"] != 1:
        raise ValueError("unsupported upload decision format_version")
    if raw["record_type"] != "weight-upload-decision":
        raise ValueError("invalid upload decision record_type")
    if raw["decision"] not in ("abort", "commit"):
        raise ValueError("invalid upload decision")
    d = raw["plan_digest"]
    if type(d) is not str or len(d) != 64 or d.strip("0123456789abcdef"):
        raise ValueError("invalid upload decision plan_digest")
    return d, raw["decision"]


class WeightStore:
    def __init__(self, store: Any, *, key_prefix: str = "weights",
                 config_factory: Optional[Callable[[Sequence[str], StoreRecordType], Any]] = None,
                 max_range_bytes: int = 64 * 1024 * 1024,
                 max_ranges_per_request: int = 1024) -> None:
        if max_range_bytes <= 0 or max_ranges_per_request <= 0:
            raise ValueError("range limits must be positive")
        self.store = store
        self.key_prefix = key_prefix.strip("/")
        self.config_factory = config_factory or _default_config_factory
        self.max_range_bytes = max_range_bytes
        self.max_ranges_per_request = max_ranges_per_request

    # -- upload ------------------------------------------------------------------------

    def prepare_upload(self, source_manifests: Sequence[RuntimeManifest], *,
                       namespace: str = "default") -> WeightUploadPlan:
        model_id, revision, tensors, sources = _upload_sources(source_manifests)
        base = "/".join([self.key_prefix] + [quote(x, safe="._-")
                                             for x in (namespace, model_id, revision)])
        upload_id = uuid4().hex
        ops, stored = [], []
        for src in sources:
            fid = hashlib.sha256(("%s|%s|%s" % (src.tensor_id, src.global_offset,
                                                src.local_shape)).encode()).hexdigest()[:24]
            dst = StoredFragment(fragment_id=fid, tensor_id=src.tensor_id,
                                 global_offset=src.global_offset, local_shape=src.local_shape,
                                 object_key="%s/payload/%s/%s" % (base, upload_id, fid),
                                 object_offset=0, nbytes=src.nbytes)
            stored.append(dst)
            ops.append(UploadOperation(source=src, target=dst))
        manifest = WeightManifest(
            namespace=namespace, model_id=model_id, revision=revision, group_id=base,
            manifest_key=base + "/manifest", tensors=tensors, fragments=tuple(stored),
            created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
        session = "%s/sessions/%s" % (base, upload_id)
        return WeightUploadPlan(manifest=manifest, session_group_id=session,
                                control_key=session + "/decision", operations=tuple(ops))

    def upload(self, plan: WeightUploadPlan, runtime_manifest: RuntimeManifest, *,
               pre_registered: bool = False) -> tuple:
        """Put this worker's planned fragments; returns their receipts."""
        if (runtime_manifest.model_id, runtime_manifest.revision) != \
                (plan.manifest.model_id, plan.manifest.revision):
            raise WeightStoreError("runtime manifest revision mismatch")
        self._require_writable(plan)
        local = {f.fragment_id: f for f in runtime_manifest.fragments}
        workers = {runtime_manifest.instance_id} | {f.worker_id for f in local.values()}
        mine = [op for op in plan.operations if op.source.worker_id in workers]
        missing = sorted({op.source.fragment_id for op in mine} - set(local))
        if missing:
            raise WeightStoreError("missing planned source fragment: %s" % ", ".join(missing))
        for op in mine:
            if not _same_view(local[op.source.fragment_id], op.source):
                raise WeightStoreError("stale source fragment: %s" % op.source.fragment_id)
        if not mine:
            return ()
        srcs = [local[op.source.fragment_id] for op in mine]
        keys = [op.target.object_key for op in mine]
        with self._registered(srcs, pre_registered=pre_registered):
            rcs = self.store.batch_put_from(
                keys, [f.address for f in srcs], [f.nbytes for f in srcs],
                self.config_factory([plan.manifest.group_id] * len(mine), "payload"))
            if len(rcs) != len(mine) or any(rc != 0 for rc in rcs):
                raise WeightStoreError("batch_put_from failed: %s" % (list(rcs),))
            self._require_present(keys)
        self._require_writable(plan, cleanup_keys=keys)
        return tuple(UploadReceipt(fragment_id=op.target.fragment_id,
                                   object_key=op.target.object_key, worker_id=f.worker_id)
                     for op, f in zip(mine, srcs))

    def commit(self, plan: WeightUploadPlan, receipts: Sequence[UploadReceipt]
               ) -> WeightManifest:
        """Publish the manifest once every fragment's receipt is in."""
        self._check_receipts(plan, receipts, complete=True)
        keys = [r.object_key for r in receipts]
        if self._decision(plan) is None:
            self._require_present(keys)
        self._claim(plan, "commit")  # an earlier "abort" wins: raises
        self._require_present(keys)
        existing = self._manifest_if_present(plan.manifest.manifest_key)
        if existing is None:
            err, rc = None, None
            try:
                rc = self.store.put(plan.manifest.manifest_key,
                                    plan.manifest.to_json().encode(),
                                    self.config_factory([plan.manifest.group_id], "metadata"))
            except Exception as e:  # the store's exception, re-raised below
                err = e
            existing = self._manifest_if_present(plan.manifest.manifest_key)
            if existing is None:
                raise WeightStoreError("manifest put failed: %s" % (err if err else rc)) from err
        return self._settle(plan, existing, keys)

    def abort_upload(self, plan: WeightUploadPlan, receipts: Sequence[UploadReceipt]) -> None:
        self._check_receipts(plan, receipts, complete=False)
        if self._manifest_if_present(plan.manifest.manifest_key) == plan.manifest:
            raise WeightStoreError("cannot abort a published weight revision")
        self._claim(plan, "abort")
        self._drop_unpublished(plan)

    def finalize_upload_session(self, plan: WeightUploadPlan) -> None:
        """After a crash: finish what the recorded decision says."""
        decision = self._decision(plan)
        persisted = self._manifest_if_present(plan.manifest.manifest_key)
        if decision is None:
            if persisted != plan.manifest:
                raise WeightStoreError("upload session has no terminal decision")
            self._claim(plan, "commit")
            decision = "commit"
        if decision == "commit":
            if persisted is None:
                raise WeightStoreError("committed upload session has no manifest")
            if persisted != plan.manifest:
                self._drop_unpublished(plan, persisted)
        else:
            if persisted == plan.manifest:
                raise WeightStoreError("aborted upload has a published manifest")
            self._drop_unpublished(plan, persisted)

    # -- load ---------------------------------------------------------------------------

    def load_manifest(self, manifest_key: str) -> WeightManifest:
        try:
            raw = self.store.get(manifest_key)
        except Exception as e:
            raise WeightStoreError("manifest get failed: %s" % manifest_key) from e
        try:
            m = WeightManifest.from_json(raw)
        except Exception as e:
            raise WeightStoreError("invalid weight manifest: %s" % manifest_key) from e
        if m.manifest_key != manifest_key:
            raise WeightStoreError("manifest key mismatch: expected %s, got %s"
                                   % (manifest_key, m.manifest_key))
        return m

    def plan_load(self, manifest: WeightManifest,
                  target_manifests: Sequence[RuntimeManifest]) -> WeightLoadPlan:
        return WeightLoadPlan(manifest=manifest,
                              transfer=plan_stored_transfer(manifest, target_manifests))

    def load(self, plan: WeightLoadPlan, runtime_manifest: RuntimeManifest, *,
             pre_registered: bool = False) -> None:
        """Read this worker's share of the plan into its fragments."""
        if (runtime_manifest.model_id, runtime_manifest.revision) != \
                (plan.manifest.model_id, plan.manifest.revision):
            raise WeightStoreError("runtime manifest revision mismatch")
        try:
            executors = resolve_executor_plans(plan.transfer, runtime_manifest, "target")
        except ValueError as e:
            raise WeightStoreError(str(e)) from e
        local = {f.fragment_id: f for f in runtime_manifest.fragments}
        by_target = {}
        for i in sorted(i for e in executors for i in e.operation_indices):
            op = plan.transfer.operations[i]
            if not _same_view(local[op.target.fragment_id], op.target):
                raise WeightStoreError("stale target fragment: %s" % op.target.fragment_id)
            by_target.setdefault(op.target.fragment_id, []).append(op)
        if not by_target:
            return
        targets = [local[fid] for fid in sorted(by_target)]
        with self._registered(targets, pre_registered=pre_registered):
            batch = []
            for t in targets:
                for op in sorted(by_target[t.fragment_id],
                                 key=lambda o: (o.target_offset, o.source.object_key,
                                                o.source_offset)):
                    for s_off, t_off, n in op.iter_segments():
                        for c in range(0, n, self.max_range_bytes):
                            batch.append((t, op.source.object_key, t_off + c,
                                          op.source.object_offset + s_off + c,
                                          min(self.max_range_bytes, n - c)))
                            if len(batch) == self.max_ranges_per_request:
                                self._read_ranges(batch)
                                batch = []
            if batch:
                self._read_ranges(batch)

    # -- internals ----------------------------------------------------------------------

    def _read_ranges(self, ranges) -> None:
        grouped = {}
        for t, key, t_off, s_off, n in ranges:
            per_key = grouped.setdefault(t.fragment_id, (t, {}))[1]
            lists = per_key.setdefault(key, ([], [], []))
            lists[0].append(t_off)
            lists[1].append(s_off)
            lists[2].append(n)
        bufs, keys, dsts, srcs, sizes = [], [], [], [], []
        for t, per_key in grouped.values():
            bufs.append(t.address)
            keys.append(list(per_key))
            dsts.append([v[0] for v in per_key.values()])
            srcs.append([v[1] for v in per_key.values()])
            sizes.append([v[2] for v in per_key.values()])
        results = self.store.get_into_ranges(bufs, keys, dsts, srcs, sizes)
        if len(results) != len(keys):
            raise WeightStoreError("get_into_ranges returned invalid buffer count")
        for ks, want_groups, got_groups in zip(keys, sizes, results):
            if len(got_groups) != len(ks):
                raise WeightStoreError("get_into_ranges returned invalid object count")
            for k, want, got in zip(ks, want_groups, got_groups):
                if list(got) != list(want):
                    raise WeightStoreError("get_into_ranges failed for %s: expected %s, got %s"
                                           % (k, list(want), list(got)))

    def _decision(self, plan: WeightUploadPlan) -> Optional[str]:
        rc = self.store.is_exist(plan.control_key)
        if rc == 0:
            return None
        if rc != 1:
            raise WeightStoreError("upload decision existence check failed: %s: %s"
                                   % (plan.control_key, rc))
        try:
            digest, decision = _parse_decision(self.store.get(plan.control_key))
        except Exception as e:
            raise WeightStoreError("invalid upload decision: %s" % plan.control_key) from e
        if digest != _digest(plan.manifest):
            raise WeightStoreError("upload decision belongs to another plan")
        return decision

    def _claim(self, plan: WeightUploadPlan, decision: str) -> None:
        """Record ``decision`` unless one is already recorded (put keeps the
        first); WeightStoreError when the recorded one differs."""
        err, rc = None, None
        try:
            rc = self.store.put(plan.control_key, _decision_record(plan, decision),
                                self.config_factory([plan.session_group_id], "metadata"))
        except Exception as e:
            err = e
        recorded = self._decision(plan)
        if recorded is None:
            raise WeightStoreError("upload decision is not complete; retry: %s"
                                   % (err if err else rc)) from err
        if recorded != decision:
            raise WeightStoreError("weight upload already chose %s" % recorded)

    def _require_writable(self, plan: WeightUploadPlan, cleanup_keys: Sequence[str] = ()):
        decision = self._decision(plan)
        if decision is None:
            return
        persisted = self._manifest_if_present(plan.manifest.manifest_key)
        if decision == "commit" and persisted in (None, plan.manifest):
            return
        keep = set() if persisted is None else {f.object_key for f in persisted.fragments}
        failures = self._remove([k for k in cleanup_keys if k not in keep])
        msg = ("weight upload already chose abort" if decision == "abort"
               else "weight upload lost to a conflicting revision")
        if failures:
            msg += "; cleanup failed: %s" % failures
        raise WeightStoreError(msg)

    def _manifest_if_present(self, key: str) -> Optional[WeightManifest]:
        rc = self.store.is_exist(key)
        if rc == 0:
            return None
        if rc != 1:
            raise WeightStoreError("manifest existence check failed: %s: %s" % (key, rc))
        return self.load_manifest(key)

    def _settle(self, plan, persisted: WeightManifest, keys) -> WeightManifest:
        if persisted == plan.manifest:
            return persisted
        keep = {f.object_key for f in persisted.fragments}
        failures = self._remove([k for k in keys if k not in keep])
        msg = "conflicting weight revision: %s" % plan.manifest.manifest_key
        if failures:
            msg += "; cleanup failed: %s" % failures
        raise WeightStoreError(msg)

    def _drop_unpublished(self, plan, persisted: Optional[WeightManifest] = None) -> None:
        keep = set() if persisted is None else {f.object_key for f in persisted.fragments}
        failures = self._remove([op.target.object_key for op in plan.operations
                                 if op.target.object_key not in keep])
        if failures:
            raise WeightStoreError("upload cleanup failed: %s" % failures)

    def _require_present(self, keys: Sequence[str]) -> None:
        absent = []
        for i in range(0, len(keys), self.max_ranges_per_request):
            chunk = list(keys[i:i + self.max_ranges_per_request])
            rcs = self.store.batch_is_exist(chunk)
            if len(rcs) != len(chunk):
                raise WeightStoreError("payload existence check returned invalid count")
            for k, rc in zip(chunk, rcs):
                if rc == 0:
                    absent.append(k)
                elif rc != 1:
                    raise WeightStoreError("payload existence check failed for %s: %s"
                                           % (k, rc))
        if absent:
            raise WeightStoreError("payload is not complete: %s" % ", ".join(sorted(absent)))

    @staticmethod
    def _check_receipts(plan, receipts, *, complete: bool) -> None:
        ids = [r.fragment_id for r in receipts]
        if len(set(ids)) != len(ids):
            raise WeightStoreError("duplicate upload receipt")
        planned = {op.target.fragment_id: op for op in plan.operations}
        unknown = sorted(set(ids) - set(planned))
        if unknown:
            raise WeightStoreError("unexpected upload receipts: %s" % ", ".join(unknown))
        for r in receipts:
            op = planned[r.fragment_id]
            if r.object_key != op.target.object_key or r.worker_id != op.source.worker_id:
                raise WeightStoreError("invalid upload receipt: %s" % r.fragment_id)
        if complete:
            missing = sorted(set(planned) - set(ids))
            if missing:
                raise WeightStoreError("missing upload receipts: %s" % ", ".join(missing))

    def _remove(self, keys: Sequence[str]) -> list:
        failures = []
        for k in keys:
            try:
                rc = self.store.remove(k, True)
            except Exception as e:
                failures.append((k, repr(e)))
                continue
            if rc not in (0, OBJECT_NOT_FOUND):
                failures.append((k, rc))
        return failures

    def _registered(self, fragments: Sequence[RuntimeFragment], *, pre_registered: bool):
        if pre_registered:
            return _nothing()
        return registered(self.store.register_buffer, self.store.unregister_buffer, fragments,
                          WeightStoreError, "register_buffer", "unregister_buffer")


@contextmanager
def _nothing():
    yield


@contextmanager
def registered(register, unregister, fragments, error, reg_name, unreg_name):
    """Register each distinct fragment address for the body (the largest
    size asked for it) and unregister in reverse order even when the body
    fails; a failed unregister is reported with the body's own error."""
    sizes = {}
    for f in fragments:
        sizes[f.address] = max(sizes.get(f.address, 0), f.nbytes)
    owned, primary = [], None
    try:
        for addr, n in sizes.items():
            try:
                rc = register(addr, n)
            except Exception as e:
                raise error("%s failed for %#x: %s" % (reg_name, addr, e)) from e
            if rc != 0:
                raise error("%s failed for %#x: %s" % (reg_name, addr, rc))
            owned.append(addr)
        yield
    except BaseException as e:
        primary = e
    failures = []
    for addr in reversed(owned):
        try:
            rc = unregister(addr)
        except Exception as e:
            failures.append((addr, repr(e)))
            continue
        if rc != 0:
            failures.append((addr, rc))
    if failures:
        msg = "%s failed: %s" % (unreg_name, failures)
        if primary is not None:
            raise error("%s; %s" % (primary, msg)) from primary
        raise error(msg)
    if primary is not None:
        raise primary

__all__ = ["OBJECT_NOT_FOUND", "UploadOperation", "UploadReceipt", "WeightLoadPlan",
           "WeightStore", "WeightStoreError", "WeightUploadPlan"]
