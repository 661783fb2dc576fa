"""mooncake.dataproto_catalog: logical rows -> immutable DataProto fragments.

crescent's own implementation of Mooncake's catalog (names, call shapes and
result dicts are Mooncake's). A *fragment* is one stored DataProto (one
``structured_object_store`` stage, identified by its manifest key) holding
rows for a list of logical keys. ``DataProtoCatalog`` is plain in-memory
bookkeeping run by one host (calls serialized by that host, e.g. an actor):

* ``update`` / ``publish`` point (partition, key) rows at fragment rows and
  merge tags; ``publish`` is idempotent per ``operation_id`` and marks the
  fragment *managed* (its store objects follow the references);
* ``resolve`` turns an ordered read into fragment locations (``pin=True``
  keeps the fragments alive until ``release_read``);
* ``remove`` / ``drain`` drop references; a managed fragment with no
  reference and no reader is *retired*: returned in ``retired_handles``
  until ``ack_retired`` says its objects were removed.

``DataProtoCatalogTransfer(transfer, catalog_call)`` is the client side:
``transfer`` is a ``MooncakeBundleTransfer``, ``catalog_call(name, *args,
**kw)`` reaches the catalog (a local ``getattr`` or an RPC). It stores a
fragment then publishes it, removes retired fragments from the store, and
(crescent's addition) ``get`` reads rows of logical keys back in key order.
"""
from __future__ import annotations

import copy
import logging
import threading
import uuid
from typing import Any, Callable, Mapping, Optional, Sequence

logger = logging.getLogger(__name__)

MAX_PENDING = 4096  # publications / acks / results kept for retry, per client


def _nonempty_string(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("%s must be a non-empty string" % name)
    return value


def _names(values: Any, label: str) -> tuple:
    if isinstance(values, str) or values is None:
        raise ValueError("%s must be a sequence of non-empty strings" % label)
    out = tuple(values)
    if not out or any(not isinstance(v, str) or not v for v in out):
        raise ValueError("%s must be non-empty strings" % label)
    if len(out) != len(set(out)):
        raise ValueError("%s must be unique" % label)
    return out


def _tags(tags: Any, count: int) -> Optional[list]:
    if tags is None:
        return None
    if isinstance(tags, (str, bytes, Mapping)):
        raise TypeError("tags must be a sequence of mappings")
    tags = list(tags)
    if len(tags) != count:
        raise ValueError("tags must have the same length as keys")
    if any(not isinstance(t, Mapping) for t in tags):
        raise TypeError("tags must be mappings")
    return [copy.deepcopy(dict(t)) for t in tags]


def _normalize_handle(handle: Mapping) -> tuple:
    from mooncake.structured_object_store import export_dataproto_ref, import_dataproto_ref
    ref = import_dataproto_ref(handle)
    if len(ref.stage_refs) != 1:
        raise ValueError("catalog fragments must contain exactly one DataProto stage")
    fid = _nonempty_string(next(iter(ref.stage_refs.values())).manifest_key, "manifest_key")
    return ref, fid, export_dataproto_ref(ref)


class DataProtoCatalog:
    """Which fragment row holds each field of each logical key (see module doc)."""

    def __init__(self) -> None:
        self._partitions: dict = {}      # partition -> key -> {"tag", "fields": {f: (fid, row)}}
        self._fragments: dict = {}       # fid -> normalized handle
        self._refs: dict = {}            # fid -> field references
        self._managed: set = set()
        self._readers: dict = {}         # fid -> pinned reads
        self._pins: dict = {}            # token -> fids
        self._retired: dict = {}         # fid -> handle, until ack_retired
        self._publications: dict = {}    # operation_id -> result
        self._next_token = 0
        self._drained = False

    def update(self, partition: str, keys: Sequence[str], *, tags=None, handle=None) -> dict:
        return self._update(partition, keys, tags, handle, managed=False)

    def publish(self, operation_id: str, partition: str, keys: Sequence[str], *, tags=None,
                handle=None) -> dict:
        """update() once per operation_id (a retried publish returns the first result);
        a fragment published with a handle is managed."""
        operation_id = _nonempty_string(operation_id, "operation_id")
        if operation_id in self._publications:
            return copy.deepcopy(self._publications[operation_id])
        result = self._update(partition, keys, tags, handle, managed=handle is not None)
        self._publications[operation_id] = copy.deepcopy(result)
        return result

    def ack_publication(self, operation_id: str) -> None:
        self._publications.pop(_nonempty_string(operation_id, "operation_id"), None)

    def _update(self, partition, keys, tags, handle, managed) -> dict:
        if self._drained:
            raise RuntimeError("DataProto catalog is drained")
        partition = _nonempty_string(partition, "partition")
        keys = _names(keys, "keys")
        tags = _tags(tags, len(keys))
        frag = None
        if handle is not None:
            ref, fid, stored = _normalize_handle(handle)
            if ref.batch_size != len(keys):
                raise ValueError("DataProto batch size %r does not match %d logical keys"
                                 % (ref.batch_size, len(keys)))
            fields = tuple(ref.field_index)
            if not fields:
                raise ValueError("DataProto catalog fragments cannot be empty")
            old = self._fragments.get(fid)
            if old is not None and old != stored:
                raise ValueError("DataProto fragment id collision: %r" % fid)
            if old is not None and (fid in self._managed) != managed:
                raise ValueError("DataProto fragment management mismatch: %r" % fid)
            if fid in self._retired:
                raise ValueError("DataProto fragment id is pending retirement: %r" % fid)
            frag = (fid, stored, fields)
        if tags is None and frag is None:
            raise ValueError("catalog update requires tags or a DataProto handle")
        # everything is checked: apply
        entries = self._partitions.setdefault(partition, {})
        if frag is not None:
            fid, stored, fields = frag
            self._fragments.setdefault(fid, stored)
            self._refs.setdefault(fid, 0)
            if managed:
                self._managed.add(fid)
        out_tags = []
        for row, key in enumerate(keys):
            entry = entries.setdefault(key, {"tag": {}, "fields": {}})
            if tags is not None:
                entry["tag"].update(tags[row])
            out_tags.append(copy.deepcopy(entry["tag"]))
            if frag is None:
                continue
            for f in fields:
                loc = (fid, row)
                old = entry["fields"].get(f)
                if old == loc:
                    continue
                entry["fields"][f] = loc
                if old is not None and old[0] == fid:
                    continue
                if old is not None:
                    self._drop_ref(old[0])
                self._refs[fid] += 1
        return {"keys": list(keys), "tags": out_tags, "fields": _field_union(entries, keys),
                **self._retired_result()}

    def resolve(self, partition: str, keys: Sequence[str], fields=None, *, pin: bool = False) -> dict:
        """Fragment locations of an ordered read: ``field_groups`` (fields sharing the
        same per-key locations), ``handles`` by fragment id, merged ``meta_info``."""
        partition = _nonempty_string(partition, "partition")
        keys = _names(keys, "keys")
        entries = self._partitions.get(partition, {})
        missing = [k for k in keys if k not in entries]
        if missing:
            raise ValueError("keys were not found in partition %r: %s" % (partition, missing))
        selected = list(_names(fields, "field names")) if fields is not None \
            else _field_union(entries, keys)
        if not selected:
            raise ValueError("requested keys do not contain any fields")
        for k in keys:
            absent = [f for f in selected if f not in entries[k]["fields"]]
            if absent:
                raise ValueError("fields are not ready for key %r: %s" % (k, absent))
        groups: dict = {}
        fids = set()
        for f in selected:
            locs = tuple(entries[k]["fields"][f] for k in keys)
            groups.setdefault(locs, []).append(f)
            fids.update(l[0] for l in locs)
        handles = {fid: copy.deepcopy(self._fragments[fid]) for fid in fids}
        meta_info: dict = {}
        for h in handles.values():
            for name, value in h.get("meta_info", {}).items():
                if name in meta_info and meta_info[name] != value:
                    raise ValueError("conflicting DataProto meta_info value for %r" % name)
                meta_info[name] = copy.deepcopy(value)
        result = {"keys": list(keys), "tags": [copy.deepcopy(entries[k]["tag"]) for k in keys],
                  "fields": selected,
                  "field_groups": [{"fields": fs, "locations": list(locs)}
                                   for locs, fs in groups.items()],
                  "handles": handles, "meta_info": meta_info}
        if pin:
            self._next_token += 1
            self._pins[self._next_token] = tuple(fids)
            for fid in fids:
                self._readers[fid] = self._readers.get(fid, 0) + 1
            result["read_token"] = self._next_token
        return result

    def release_read(self, token: int) -> dict:
        """End a pinned resolve (idempotent); returns the retired handles."""
        fids = self._pins.pop(token, None)
        for fid in fids or ():
            n = self._readers[fid] - 1
            if n:
                self._readers[fid] = n
                continue
            del self._readers[fid]
            if fid not in self._refs:
                self._retire(fid)
        return self._retired_result()

    def list(self, partition: Optional[str] = None) -> dict:
        """{partition: {key: tag}} (one partition, or all)."""
        if partition is not None:
            partition = _nonempty_string(partition, "partition")
            parts = [partition] if partition in self._partitions else []
        else:
            parts = list(self._partitions)
        return {p: {k: copy.deepcopy(e["tag"]) for k, e in self._partitions[p].items()}
                for p in parts}

    def remove(self, partition: str, keys: Sequence[str]) -> dict:
        """Drop logical keys; unknown keys are ignored."""
        partition = _nonempty_string(partition, "partition")
        keys = _names(keys, "keys")
        entries = self._partitions.get(partition)
        if entries is not None:
            for k in keys:
                entry = entries.pop(k, None)
                for fid, _row in (entry or {"fields": {}})["fields"].values():
                    self._drop_ref(fid)
            if not entries:
                del self._partitions[partition]
        return self._retired_result()

    def drain(self) -> dict:
        """Retire everything (no pinned read may be active); the catalog refuses updates."""
        if self._pins:
            raise RuntimeError("cannot drain DataProto catalog with %d active read(s)"
                               % len(self._pins))
        for fid in self._managed:
            self._retired[fid] = self._fragments[fid]
        for d in (self._partitions, self._fragments, self._refs, self._readers,
                  self._publications):
            d.clear()
        self._managed.clear()
        self._drained = True
        return self._retired_result()

    def ack_retired(self, handles: Sequence[Mapping]) -> dict:
        """Forget retired fragments whose store objects were removed."""
        for h in handles:
            _ref, fid, norm = _normalize_handle(h)
            pending = self._retired.get(fid)
            if pending is None:
                continue
            if pending != norm:
                raise ValueError("retired DataProto fragment mismatch: %r" % fid)
            del self._retired[fid]
        return self._retired_result()

    def _drop_ref(self, fid: str) -> None:
        n = self._refs[fid] - 1
        if n:
            self._refs[fid] = n
            return
        del self._refs[fid]
        if not self._readers.get(fid):
            self._retire(fid)

    def _retire(self, fid: str) -> None:
        handle = self._fragments.pop(fid)
        if fid in self._managed:
            self._managed.discard(fid)
            self._retired[fid] = handle

    def _retired_result(self) -> dict:
        return {"retired_handles": [copy.deepcopy(h) for h in self._retired.values()]}


def _field_union(entries: Mapping, keys: Sequence[str]) -> list:
    return list(dict.fromkeys(f for k in keys for f in entries[k]["fields"]))


class DataProtoCatalogTransfer:
    """Client side: store fragments, publish them, clean up what the catalog retires."""

    _RESULTS_ATTR = "_mooncake_catalog_results"

    def __init__(self, transfer: Any, catalog_call: Callable[..., Any]) -> None:
        if not callable(catalog_call):
            raise TypeError("catalog_call must be callable: catalog_call(name, *args, **kw)")
        self.transfer = transfer
        self._catalog_call = catalog_call
        self._pending_publications: list = []
        self._pending_publication_acks: list = []
        self._pending_results: list = []
        self._lock = threading.RLock()

    def put(self, data: Any, *, partition: str, keys: Sequence[str], tags=None,
            **put_kwargs: Any) -> dict:
        """Store ``data`` (rows in ``keys`` order) as one fragment and publish it."""
        self._retry_pending("_pending_publication_acks", (),
                            lambda op: self._catalog_call("ack_publication", op),
                            "acknowledge DataProto Catalog publication")
        self._retry_pending("_pending_publications", (), self._publish,
                            "publish pending DataProto fragment", strict=True)
        partition = _nonempty_string(partition, "partition")
        keys = _names(keys, "keys")
        tags = _tags(tags, len(keys))
        if data is None and tags is None:
            raise ValueError("catalog update requires tags or DataProto data")
        handle = None
        if data is not None:
            from mooncake.structured_object_store import dataproto_batch_size, \
                export_dataproto_ref
            n = dataproto_batch_size(data)
            if n != len(keys):
                raise ValueError("DataProto batch size %d does not match %d logical keys"
                                 % (n, len(keys)))
            handle = export_dataproto_ref(self.transfer.put(data, type="dataproto",
                                                            partition=partition, **put_kwargs))
        pub = {"operation_id": uuid.uuid4().hex, "partition": partition, "keys": list(keys),
               "tags": tags, "handle": handle}
        try:
            return self._publish(pub)
        except Exception:
            logger.exception("Retrying DataProto Catalog publication")
        try:
            return self._publish(pub)
        except Exception:
            with self._lock:
                if len(self._pending_publications) < MAX_PENDING:
                    self._pending_publications.append(pub)
            raise

    def resolve(self, partition: str, keys: Sequence[str], fields=None) -> dict:
        return self._catalog_call("resolve", partition, keys, fields, pin=True)

    def release_read(self, token: int) -> None:
        self._cleanup_retired(self._catalog_call("release_read", token))

    def get(self, partition: str, keys: Sequence[str], fields=None, *, data_cls=None) -> Any:
        """Rows of ``keys`` (in that order) with ``fields``, gathered from their
        fragments; tags and merged meta_info come along (crescent's addition)."""
        import numpy as np
        res = self.resolve(partition, keys, fields)
        try:
            batch, non_tensor = {}, {}
            for group in res["field_groups"]:
                by_frag: dict = {}
                for i, (fid, row) in enumerate(group["locations"]):
                    by_frag.setdefault(fid, []).append((i, row))
                parts: dict = {}
                for fid, rows in by_frag.items():
                    out = self.transfer.get(res["handles"][fid], fields=group["fields"],
                                            rows=[r for _, r in rows], data_cls=dict)
                    for section, sink in (("batch", batch), ("non_tensor_batch", non_tensor)):
                        for f, v in out[section].items():
                            parts.setdefault((section, f), []).append(([i for i, _ in rows], v))
                for (section, f), pieces in parts.items():
                    order = [None] * len(res["keys"])
                    for idxs, v in pieces:
                        for j, i in enumerate(idxs):
                            order[i] = v[j]
                    sink = batch if section == "batch" else non_tensor
                    if hasattr(order[0], "dim") and hasattr(order[0], "unsqueeze"):
                        import torch
                        sink[f] = torch.stack(order)
                    elif section == "non_tensor_batch":
                        arr = np.empty(len(order), dtype=object)
                        for i, v in enumerate(order):
                            arr[i] = v
                        sink[f] = arr
                    else:
                        sink[f] = np.stack(order)
            meta = dict(res["meta_info"])
        finally:
            self.release_read(res["read_token"])
        from mooncake.structured_object_store import _build_result
        out = _build_result(batch, non_tensor, meta, data_cls)
        if data_cls is None:
            out.tags = res["tags"]
        return out

    def attach_results(self, output: Any, results: Sequence[Any]) -> None:
        setattr(output, self._RESULTS_ATTR, list(results))

    def release_result(self, output: Any) -> None:
        results = getattr(output, self._RESULTS_ATTR, ()) or ()
        setattr(output, self._RESULTS_ATTR, [])
        self.discard_results(results)

    def discard_results(self, results: Sequence[Any], *, strict: bool = False) -> None:
        self._retry_pending("_pending_results", results, self.transfer.release_result,
                            "release DataProto read buffer", attempts=2, strict=strict)

    def list(self, partition: Optional[str] = None) -> dict:
        return self._catalog_call("list", partition)

    def remove(self, partition: str, keys: Sequence[str]) -> None:
        self._cleanup_retired(self._catalog_call("remove", partition, keys))

    def drain(self) -> None:
        try:
            self._cleanup_retired(self._catalog_call("drain"), strict=True)
        except Exception:
            logger.exception("Retrying DataProto Catalog drain")
            self._cleanup_retired(self._catalog_call("drain"), strict=True)

    def close(self) -> None:
        self.discard_results((), strict=True)
        self._retry_pending("_pending_publications", (), self._publish,
                            "publish pending DataProto fragment", strict=True)
        self._retry_pending("_pending_publication_acks", (),
                            lambda op: self._catalog_call("ack_publication", op),
                            "acknowledge DataProto Catalog publication", strict=True)

    def _cleanup_retired(self, result: Mapping, *, strict: bool = False) -> None:
        removed, failures = [], 0
        for handle in result.get("retired_handles", ()):
            try:
                self.transfer.cleanup_dataproto(handle)
            except Exception:
                failures += 1
                logger.exception("Failed to clean up retired DataProto fragment")
            else:
                removed.append(handle)
        if removed:
            try:
                self._catalog_call("ack_retired", removed)
            except Exception:
                logger.exception("Failed to acknowledge retired DataProto fragments")
                if strict:
                    raise
        if strict and failures:
            raise RuntimeError("failed to clean up %d retired DataProto fragment(s)" % failures)

    def _publish(self, pub: Mapping) -> dict:
        op = pub["operation_id"]
        result = self._catalog_call("publish", op, pub["partition"], pub["keys"],
                                    tags=pub["tags"], handle=pub["handle"])
        self._cleanup_retired(result)
        try:
            self._catalog_call("ack_publication", op)
        except Exception:
            logger.exception("Failed to acknowledge DataProto Catalog publication")
            with self._lock:
                if op not in self._pending_publication_acks and \
                        len(self._pending_publication_acks) < MAX_PENDING:
                    self._pending_publication_acks.append(op)
        return result

    def _retry_pending(self, attr: str, items: Sequence[Any], action: Callable, label: str, *,
                       attempts: int = 1, strict: bool = False) -> None:
        with self._lock:
            pending = [*getattr(self, attr), *items]
            setattr(self, attr, [])
        for _ in range(attempts):
            failed = []
            for item in pending:
                try:
                    action(item)
                except Exception:
                    logger.exception("Failed to %s", label)
                    failed.append(item)
            pending = failed
        with self._lock:
            getattr(self, attr).extend(pending[:MAX_PENDING])
            count = len(getattr(self, attr))
        if strict and count:
            raise RuntimeError("failed to %s for %d item(s)" % (label, count))


__all__ = ["DataProtoCatalog", "DataProtoCatalogTransfer"]
