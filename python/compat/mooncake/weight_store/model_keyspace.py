"""Store keys of the weight store (Mooncake's key space)."""
import hashlib
import re

_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")


def validate_checkpoint_id(checkpoint_id: str) -> None:
    if not isinstance(checkpoint_id, str) or not _ID_RE.fullmatch(checkpoint_id):
        raise ValueError("invalid checkpoint_id: %r" % (checkpoint_id,))


def _digest(text: str) -> str:
    if not isinstance(text, str) or not text:
        raise ValueError("value must not be empty")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_manifest_key(checkpoint_id: str) -> str:
    validate_checkpoint_id(checkpoint_id)
    return "weight/models/%s/manifest" % checkpoint_id


def model_file_key(checkpoint_id: str, relative_path: str) -> str:
    validate_checkpoint_id(checkpoint_id)
    return "weight/models/%s/files/%s" % (checkpoint_id, _digest(relative_path))


def model_file_chunk_key(checkpoint_id: str, relative_path: str, chunk_index: int) -> str:
    if isinstance(chunk_index, bool) or not isinstance(chunk_index, int) or chunk_index < 0:
        raise ValueError("invalid chunk_index: %r" % (chunk_index,))
    return "%s/chunks/%08d" % (model_file_key(checkpoint_id, relative_path), chunk_index)


def model_index_key() -> str:
    return "weight/index/models"


def model_id_index_key(model_id: str) -> str:
    return "weight/index/model/%s" % _digest(model_id)
