"""``mooncake.mooncake_config``: the JSON / environment configuration that
integrations (vLLM's and SGLang's Mooncake connectors) load, crescent's own
implementation with Mooncake's field names, defaults and variables.

File (MOONCAKE_CONFIG_PATH), required: local_hostname, metadata_server,
master_server_address; optional: global_segment_size, local_buffer_size
(ints or "4GB"-style strings), protocol, device_name, enable_ssd_offload,
ssd_offload_path, tenant_id. Without a file, MOONCAKE_MASTER must be set and
MOONCAKE_LOCAL_HOSTNAME, MOONCAKE_TE_META_DATA_SERVER, MOONCAKE_PROTOCOL,
MOONCAKE_DEVICE, MOONCAKE_GLOBAL_SEGMENT_SIZE, MOONCAKE_LOCAL_BUFFER_SIZE,
MOONCAKE_OFFLOAD_ENABLED, MOONCAKE_OFFLOAD_FILE_STORAGE_PATH and
MOONCAKE_TENANT_ID fill the rest.
"""
import json
import os
from dataclasses import dataclass, asdict
from typing import Optional

__all__ = ["MooncakeConfig", "DEFAULT_GLOBAL_SEGMENT_SIZE", "DEFAULT_LOCAL_BUFFER_SIZE"]

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB
DEFAULT_LOCAL_BUFFER_SIZE = 1 << 30

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def _size(value):
    """Bytes of an int or a string such as "512MB", "1.5 GiB", "4096"."""
    if isinstance(value, bool):
        raise ValueError("invalid size: %r" % (value,))
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    s = str(value).strip().lower()
    num = s.rstrip("kmgtib ")
    unit = s[len(num):].strip()
    if not num or unit not in _UNITS:
        raise ValueError("invalid size: %r" % (value,))
    return int(float(num) * _UNITS[unit])


# Mooncake's name for the size parser (its tests import it).
_parse_segment_size = _size


def _bool(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if value is None:
        return False
    s = str(value).strip().lower()
    if s in ("", "false", "0", "no", "off"):
        return False
    if s in ("true", "1", "yes", "on"):
        return True
    raise ValueError("invalid boolean: %r" % (value,))


@dataclass
class MooncakeConfig:
    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: Optional[str]
    master_server_address: str
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    tenant_id: str = "default"

    @staticmethod
    def from_file(file_path):
        """Loads a JSON config file (ValueError for a missing required field)."""
        with open(file_path) as f:
            cfg = json.load(f)
        if not isinstance(cfg, dict):
            raise ValueError("%s: the config must be a JSON object" % file_path)
        for field in ("local_hostname", "metadata_server", "master_server_address"):
            if field not in cfg:
                raise ValueError("Missing required config field: %s" % field)
        path = cfg.get("ssd_offload_path")
        tenant = cfg.get("tenant_id")
        return MooncakeConfig(
            local_hostname=cfg["local_hostname"],
            metadata_server=cfg["metadata_server"],
            global_segment_size=_size(cfg.get("global_segment_size",
                                              DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_size(cfg.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=cfg.get("protocol", "tcp"),
            device_name=cfg.get("device_name", ""),
            master_server_address=cfg["master_server_address"],
            enable_ssd_offload=_bool(cfg.get("enable_ssd_offload", False)),
            ssd_offload_path="" if path is None else str(path),
            tenant_id="default" if tenant is None else str(tenant))

    @staticmethod
    def load_from_env():
        """From the file named by MOONCAKE_CONFIG_PATH, else from MOONCAKE_*
        variables (ValueError when neither that nor MOONCAKE_MASTER is set)."""
        path = os.getenv("MOONCAKE_CONFIG_PATH")
        if path is not None:
            return MooncakeConfig.from_file(path)
        if not os.getenv("MOONCAKE_MASTER"):
            raise ValueError("Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor "
                             "'MOONCAKE_MASTER' is set.")
        env = os.getenv
        return MooncakeConfig(
            local_hostname=env("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata_server=env("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size=_size(env("MOONCAKE_GLOBAL_SEGMENT_SIZE",
                                          DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_size(env("MOONCAKE_LOCAL_BUFFER_SIZE", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=env("MOONCAKE_PROTOCOL", "tcp"),
            device_name=env("MOONCAKE_DEVICE", ""),
            master_server_address=env("MOONCAKE_MASTER"),
            enable_ssd_offload=_bool(env("MOONCAKE_OFFLOAD_ENABLED", "false")),
            ssd_offload_path=env("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=env("MOONCAKE_TENANT_ID", "default"))

    def to_dict(self):
        return asdict(self)

    def setup_args(self):
        """The positional arguments of MooncakeDistributedStore.setup()."""
        return (self.local_hostname, self.metadata_server, self.global_segment_size,
                self.local_buffer_size, self.protocol, self.device_name or "",
                self.master_server_address)
