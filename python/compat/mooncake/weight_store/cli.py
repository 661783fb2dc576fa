"""``python3 -m mooncake.weight_store.cli``: the weight store from the shell.

    [store flags] config init
    [store flags] model import --checkpoint-id ID --model-id M --revision R --source DIR
                               [--replica-num N] [--file-chunk-size 64MB]
    [store flags] model list | inspect ID | verify ID | delete ID
    [store flags] model materialize-file ID --path P --output FILE

Store flags (anywhere on the line; defaults from the JSON file named by
--config / $MOONCAKE_WEIGHT_STORE_CONFIG, ~/.config/mooncake/weight_store.json):
--local-hostname, --metadata-server, --protocol, --rdma-devices,
--master-server-addr, and crescent's --local-buffer-size (default 512MB).
The command is a pure store client (it mounts no segment). Results are JSON
on stdout; a failure prints "error: ..." on stderr and exits 1.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from mooncake.mooncake_config import _size
from mooncake.weight_store.model import DEFAULT_FILE_CHUNK_SIZE, ModelFileCacheClient

DEFAULT_CONFIG_PATH = "~/.config/mooncake/weight_store.json"
_STORE_KEYS = ("local_hostname", "metadata_server", "protocol", "rdma_devices",
               "master_server_addr", "local_buffer_size")
_MAX_CONFIG_BYTES = 1 << 20


def _defaults(config_path):
    d = {"local_hostname": "localhost", "metadata_server": "http://127.0.0.1:8080/metadata",
         "protocol": "tcp", "rdma_devices": "", "master_server_addr": "127.0.0.1:50051",
         "local_buffer_size": "512MB", "replica_num": 1, "file_chunk_size": DEFAULT_FILE_CHUNK_SIZE}
    path = Path(config_path).expanduser()
    if path.is_file():
        if path.stat().st_size > _MAX_CONFIG_BYTES:
            raise ValueError("config file %s is too large" % path)
        loaded = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(loaded, dict):
            raise ValueError("config file %s is not a JSON object" % path)
        d.update({k: v for k, v in loaded.items() if k in d})
    return d


def build_parser(argv=None) -> argparse.ArgumentParser:
    argv = sys.argv[1:] if argv is None else list(argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=os.environ.get("MOONCAKE_WEIGHT_STORE_CONFIG",
                                                        DEFAULT_CONFIG_PATH))
    known, _ = pre.parse_known_args(argv)
    d = _defaults(known.config)
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument("--config", default=known.config)
    for k in _STORE_KEYS:
        store.add_argument("--" + k.replace("_", "-"), default=d[k])
    p = argparse.ArgumentParser(prog="mooncake.weight_store.cli", parents=[store],
                                description="Manage the Mooncake model weight cache.")
    sub = p.add_subparsers(dest="command", required=True)
    cfg = sub.add_parser("config", parents=[store]).add_subparsers(dest="config_command",
                                                                     required=True)
    cfg.add_parser("init", parents=[store]).set_defaults(handler=_config_init)
    model = sub.add_parser("model", parents=[store]).add_subparsers(dest="model_command",
                                                                      required=True)
    imp = model.add_parser("import", parents=[store])
    for flag in ("--checkpoint-id", "--model-id", "--revision", "--source"):
        imp.add_argument(flag, required=True)
    imp.add_argument("--replica-num", type=int, default=d["replica_num"])
    imp.add_argument("--file-chunk-size", default=d["file_chunk_size"])
    imp.set_defaults(handler=lambda a: _client(a).import_model(
        checkpoint_id=a.checkpoint_id, model_id=a.model_id, revision=a.revision,
        source_uri=a.source))
    model.add_parser("list", parents=[store]).set_defaults(
        handler=lambda a: _client(a).list_models())
    for name, fn in (("inspect", "inspect_model"), ("verify", "verify_model")):
        sp = model.add_parser(name, parents=[store])
        sp.add_argument("checkpoint_id")
        sp.set_defaults(handler=lambda a, fn=fn: getattr(_client(a), fn)(a.checkpoint_id))
    sp = model.add_parser("delete", parents=[store])
    sp.add_argument("checkpoint_id")
    sp.set_defaults(handler=lambda a: (_client(a).delete_model(a.checkpoint_id),
                                       {"checkpoint_id": a.checkpoint_id, "deleted": True})[1])
    sp = model.add_parser("materialize-file", parents=[store])
    sp.add_argument("checkpoint_id")
    sp.add_argument("--path", required=True)
    sp.add_argument("--output", required=True)
    sp.set_defaults(handler=lambda a: (
        _client(a).materialize_file(a.checkpoint_id, a.path, a.output),
        {"checkpoint_id": a.checkpoint_id, "path": a.path, "output": a.output})[1])
    return p


def _config_init(args):
    path = Path(args.config).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: getattr(args, k) for k in _STORE_KEYS}, indent=2) + "\n",
                    encoding="utf-8")
    return {"config": str(path), "written": True}


def _client(args) -> ModelFileCacheClient:
    from mooncake.store import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    rc = store.setup(args.local_hostname, args.metadata_server, 0, _size(args.local_buffer_size),
                     args.protocol, args.rdma_devices, args.master_server_addr)
    if rc != 0:
        store.close()
        raise RuntimeError("failed to setup MooncakeDistributedStore: %d" % rc)
    kw = {}
    if getattr(args, "replica_num", None) is not None:
        kw["replica_num"] = args.replica_num
    if getattr(args, "file_chunk_size", None) is not None:
        kw["file_chunk_size"] = _size(args.file_chunk_size)
    args._store = store
    return ModelFileCacheClient(store, progress=True, **kw)


def main(argv=None) -> int:
    args = build_parser(argv).parse_args(sys.argv[1:] if argv is None else argv)
    try:
        result = args.handler(args)
    except (ValueError, KeyError, RuntimeError, OSError) as e:
        print("error: %s" % (e.args[0] if isinstance(e, KeyError) and e.args else e),
              file=sys.stderr)
        return 1
    finally:
        if getattr(args, "_store", None) is not None:
            args._store.close()
    if hasattr(result, "to_dict"):
        result = result.to_dict()
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
