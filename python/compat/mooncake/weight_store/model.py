"""ModelFileCacheClient: import, list, inspect, verify, delete and materialize
checkpoint directories kept in the store."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from mooncake.weight_store.model_keyspace import (model_file_chunk_key, model_file_key,
                                                  model_id_index_key, model_index_key,
                                                  model_manifest_key, validate_checkpoint_id)

SCHEMA_VERSION = 1
READY = "READY"
FAILED = "FAILED"
VALID_STATUSES = {READY, FAILED}
DEFAULT_FILE_CHUNK_SIZE = 64 * 1024 * 1024
WEIGHT_SUFFIXES = {".bin", ".gguf", ".pt", ".pth", ".safetensors"}
MAX_CONTROL_BYTES = 64 << 20  # manifests, indexes, safetensors index files
MISSING = -704


@dataclass(frozen=True)
class ModelFileRecord:
    path: str
    type: str
    key: str
    size: int
    sha256: str
    chunks: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class ModelFileManifest:
    checkpoint_id: str
    model_id: str
    revision: str
    status: str
    source_uri: str
    created_at: int
    updated_at: int
    total_size: int
    files: List[ModelFileRecord]
    error: Optional[str]
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.status not in VALID_STATUSES:
            raise ValueError("invalid model status: %r" % (self.status,))

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def to_json_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True,
                          separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_json_bytes(cls, payload: bytes) -> "ModelFileManifest":
        data = json.loads(bytes(payload).decode("utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            raise ValueError("not a model file manifest")
        files = []
        for item in data["files"]:
            if not isinstance(item, dict):
                raise ValueError("not a model file manifest")
            item = dict(item)
            item.setdefault("chunks", [item.get("key")])  # older manifests: one object
            files.append(ModelFileRecord(**item))
        data["files"] = files
        return cls(**data)


def _file_type(rel: str) -> str:
    return "WEIGHT" if os.path.splitext(rel)[1] in WEIGHT_SUFFIXES else "METADATA"


def _list_model_files(source: Path) -> List[Path]:
    """Regular files under source (symlinks and hidden entries skipped), sorted."""
    out = []
    for root, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            p = Path(root) / name
            if name.startswith(".") or p.is_symlink() or not p.is_file():
                continue
            out.append(p)
    return out


def _validate_weight_map(weight_map: Any, paths) -> None:
    if not isinstance(weight_map, dict):
        raise ValueError("model.safetensors.index.json weight_map must be an object")
    missing = sorted({v for v in weight_map.values() if v not in paths})
    if missing:
        raise ValueError("safetensors index names missing files: %s" % missing)


def _validate_safetensors_index(source: Path, files: List[Path]) -> None:
    index = source / "model.safetensors.index.json"
    if index not in files:
        return
    if index.stat().st_size > MAX_CONTROL_BYTES:
        raise ValueError("%s is too large" % index)
    data = json.loads(index.read_text(encoding="utf-8"))
    _validate_weight_map(data.get("weight_map", {}),
                         {p.relative_to(source).as_posix() for p in files})


class ModelFileCacheClient:
    """Checkpoint directories in a Mooncake store (see the package doc)."""

    def __init__(self, store, *, replica_num: int = 1, hard_pin_weights: bool = True,
                 hard_pin_metadata: bool = True, file_chunk_size: int = DEFAULT_FILE_CHUNK_SIZE,
                 progress: bool = False) -> None:
        if isinstance(file_chunk_size, bool) or not isinstance(file_chunk_size, int) \
                or file_chunk_size <= 0:
            raise ValueError("file_chunk_size must be positive")
        if isinstance(replica_num, bool) or not isinstance(replica_num, int) or replica_num < 1:
            raise ValueError("replica_num must be a positive int")
        self.store = store
        self.replica_num = replica_num
        self.hard_pin_weights = hard_pin_weights
        self.hard_pin_metadata = hard_pin_metadata
        self.file_chunk_size = file_chunk_size
        self.progress = progress
        self.file_key = model_file_key

    # -- public
    def import_model(self, *, checkpoint_id: str, model_id: str, revision: str,
                     source_uri: str) -> ModelFileManifest:
        """Copy every file of the directory ``source_uri`` into the store; READY
        manifest and indexes on success (verified), a FAILED manifest otherwise."""
        validate_checkpoint_id(checkpoint_id)
        for what, v in (("model_id", model_id), ("revision", revision)):
            if not isinstance(v, str) or not v:
                raise ValueError("%s must be a non-empty string" % what)
        source = Path(source_uri)
        if not source.is_dir():
            raise ValueError("source_uri must be a directory: %s" % source_uri)
        if self._exists(model_manifest_key(checkpoint_id)):
            raise ValueError("model checkpoint already exists: %s" % checkpoint_id)
        files = _list_model_files(source)
        if not files:
            raise ValueError("model directory has no files: %s" % source_uri)
        _validate_safetensors_index(source, files)
        now = int(time.time())
        records: List[ModelFileRecord] = []
        try:
            for i, path in enumerate(files, 1):
                rel = path.relative_to(source).as_posix()
                ftype = _file_type(rel)
                size, digest, chunks = self._put_file(checkpoint_id, rel, path, ftype)
                records.append(ModelFileRecord(path=rel, type=ftype,
                                               key=self.file_key(checkpoint_id, rel), size=size,
                                               sha256=digest, chunks=chunks))
                if self.progress:
                    print("[weight_store] %d/%d %s (%d bytes, %d chunks)"
                          % (i, len(files), rel, size, len(chunks)), file=sys.stderr)
            manifest = self._manifest(checkpoint_id, model_id, revision, READY, source, now,
                                      records, None)
            self._write_manifest(manifest)
            self._index_update(manifest, add=True)
            self.verify_model(checkpoint_id)
            return manifest
        except BaseException as exc:
            self._write_manifest(self._manifest(checkpoint_id, model_id, revision, FAILED,
                                                source, now, records, repr(exc)))
            raise

    def list_models(self) -> List[str]:
        return sorted(self._read_index(model_index_key()))

    def inspect_model(self, checkpoint_id: str) -> ModelFileManifest:
        return self._read_manifest(checkpoint_id)

    def verify_model(self, checkpoint_id: str) -> ModelFileManifest:
        """Re-read every file: sizes and SHA-256 must match, and the safetensors
        index must name only files of the checkpoint. ValueError otherwise."""
        manifest = self._read_manifest(checkpoint_id)
        if manifest.status != READY:
            raise ValueError("model checkpoint %r is not READY: %s"
                             % (checkpoint_id, manifest.status))
        paths = {r.path for r in manifest.files}
        index_payload = None
        for r in manifest.files:
            keep = r.path == "model.safetensors.index.json"
            digest, size, parts = hashlib.sha256(), 0, []
            for key in self._chunks(r):
                chunk = self._get(key)
                digest.update(chunk)
                size += len(chunk)
                if keep and size <= MAX_CONTROL_BYTES:
                    parts.append(chunk)
            if size != r.size:
                raise ValueError("file size mismatch for %s: expected %d, got %d"
                                 % (r.path, r.size, size))
            if digest.hexdigest() != r.sha256:
                raise ValueError("sha256 mismatch for %s: expected %s, got %s"
                                 % (r.path, r.sha256, digest.hexdigest()))
            if keep:
                index_payload = b"".join(parts)
        if index_payload is not None:
            _validate_weight_map(json.loads(index_payload.decode("utf-8")).get("weight_map", {}),
                                 paths)
        return manifest

    def delete_model(self, checkpoint_id: str) -> None:
        """Remove the files, the manifest and the index entries of a checkpoint."""
        manifest = self._read_manifest(checkpoint_id)
        for r in manifest.files:
            for key in self._chunks(r):
                self._remove(key)
        self._remove(model_manifest_key(checkpoint_id))
        self._index_update(manifest, add=False)

    def materialize_file(self, checkpoint_id: str, path: str, output_path: str) -> None:
        """Write one file of the checkpoint to ``output_path`` (size and digest checked;
        a mismatch leaves no output file)."""
        manifest = self._read_manifest(checkpoint_id)
        record = next((r for r in manifest.files if r.path == path), None)
        if record is None:
            raise KeyError(path)
        out = Path(output_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".part")
        digest, size = hashlib.sha256(), 0
        try:
            with tmp.open("wb") as f:
                for key in self._chunks(record):
                    chunk = self._get(key)
                    f.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
            if size != record.size:
                raise ValueError("file size mismatch for %s: expected %d, got %d"
                                 % (record.path, record.size, size))
            if digest.hexdigest() != record.sha256:
                raise ValueError("sha256 mismatch for %s" % record.path)
            os.replace(tmp, out)
        finally:
            if tmp.exists():
                tmp.unlink()

    # -- internals
    @staticmethod
    def _manifest(cid, model_id, revision, status, source, now, records, error):
        return ModelFileManifest(checkpoint_id=cid, model_id=model_id, revision=revision,
                                 status=status, source_uri=str(source), created_at=now,
                                 updated_at=int(time.time()),
                                 total_size=sum(r.size for r in records),
                                 files=sorted(records, key=lambda r: r.path), error=error)

    def _config(self, type_name: str, hard_pin: bool):
        from mooncake.store import ObjectDataType, ReplicateConfig
        c = ReplicateConfig()
        c.replica_num = self.replica_num
        c.with_hard_pin = hard_pin
        c.data_type = getattr(ObjectDataType, type_name)
        return c

    def _put_file(self, cid, rel, path: Path, ftype):
        digest, size, chunks = hashlib.sha256(), 0, []
        config = self._config(ftype, self.hard_pin_weights if ftype == "WEIGHT"
                              else self.hard_pin_metadata)
        try:
            with path.open("rb") as f:
                for i, chunk in enumerate(iter(lambda: f.read(self.file_chunk_size), b"")):
                    key = model_file_chunk_key(cid, rel, i)
                    rc = self.store.put(key, chunk, config)
                    if rc != 0:
                        raise RuntimeError("failed to put %s: %d" % (key, rc))
                    chunks.append(key)
                    digest.update(chunk)
                    size += len(chunk)
        except BaseException:
            for key in chunks:
                self.store.remove(key, True)
            raise
        return size, digest.hexdigest(), chunks

    @staticmethod
    def _chunks(record: ModelFileRecord) -> List[str]:
        if record.size == 0:
            return []
        return list(record.chunks) if record.chunks else [record.key]

    def _put_control(self, key: str, value: bytes) -> None:
        # control objects change: an upsert replaces them atomically
        rc = self.store.upsert(key, value, self._config("METADATA", self.hard_pin_metadata))
        if rc != 0:
            raise RuntimeError("failed to write control object %s: %d" % (key, rc))

    def _write_manifest(self, manifest: ModelFileManifest) -> None:
        self._put_control(model_manifest_key(manifest.checkpoint_id), manifest.to_json_bytes())

    def _read_manifest(self, checkpoint_id: str) -> ModelFileManifest:
        payload = self.store.get(model_manifest_key(checkpoint_id))
        if not payload:
            raise KeyError("model checkpoint %r has no readable manifest" % checkpoint_id)
        try:
            return ModelFileManifest.from_json_bytes(payload)
        except (ValueError, TypeError) as exc:
            raise ValueError("model checkpoint %r manifest is not valid" % checkpoint_id) from exc

    def _read_index(self, key: str) -> set:
        payload = self.store.get(key) if self._exists(key) else b""
        if not payload:
            return set()
        values = json.loads(bytes(payload).decode("utf-8"))
        if not isinstance(values, list):
            raise ValueError("weight store index %s is not a list" % key)
        return set(values)

    def _index_update(self, manifest: ModelFileManifest, add: bool) -> None:
        for key in (model_index_key(), model_id_index_key(manifest.model_id)):
            ids = self._read_index(key)
            (ids.add if add else ids.discard)(manifest.checkpoint_id)
            self._put_control(key, json.dumps(sorted(ids), separators=(",", ":")).encode())

    def _get(self, key: str) -> bytes:
        value = self.store.get(key)
        if not value:
            raise KeyError(key)
        return bytes(value)

    def _remove(self, key: str) -> None:
        rc = self.store.remove(key, True)
        if rc not in (0, MISSING):
            raise RuntimeError("failed to remove %s: %d" % (key, rc))

    def _exists(self, key: str) -> bool:
        rc = self.store.is_exist(key)
        if rc < 0:
            raise RuntimeError("failed to query %s: %d" % (key, rc))
        return rc == 1
