"""Entry points with Mooncake's command names and flags, executing crescent's daemons.

    mooncake_master [flags...]                 -> crescent-master [same flags]
    mooncake_http_metadata_server --port N     -> crescent-metadata --port N
       (also --port=N, --host H / --addr H)
    mooncake_client [flags...]                 -> crescent-node (a storage process:
       --host, --metadata_server, --master_server_address, --protocol,
       --device_names, --global_segment_size; its dummy-client RPC flags are
       accepted and ignored with a note)
    transfer_engine_bench [flags...]           -> crescent-bench te (--mode,
       --operation, --protocol, --metadata_server, --segment_id,
       --local_server_name, --block_size, --batch_size, --threads, --duration,
       --buffer_size; --use_vram=true fails: no GPU memory here)

Mooncake flags crescent's daemon does not implement (the master's offload /
HA-backend flags, the client's dummy-RPC flags) are accepted, dropped and
named on stderr; anything else unknown is passed on, so the daemon refuses
it loudly. The process is replaced (os.execv), so signals and the exit
status are the daemon's own.
"""
import os
import socket
import subprocess
import sys

from crescent import find_executable

# Mooncake master flags for features crescent's master does not have.
MASTER_IGNORED = ("enable_offload", "root_fs_dir", "global_file_segment_size",
                  "allocation_strategy", "ha_backend_type", "ha_backend_connstring",
                  "enable_metadata_cleanup_on_timeout", "offload_root_dir",
                  "enable_disk_eviction", "quota_bytes")
# mooncake_client flags of its dummy-client RPC service and tiers.
CLIENT_IGNORED = ("port", "threads", "tenant_id", "enable_offload", "start_offload_rpc_server",
                  "deployment_mode", "tiered_backend_config", "client_rpc_port",
                  "rpc_thread_num", "lock_shard_count", "enable_http_server", "http_port",
                  "config_path", "graceful_unmount_seconds", "local_buffer_size")


def _exec(name, args):
    # An installed entry point sits in the same bin/ as crescent's daemons.
    here = os.path.join(os.path.dirname(os.path.realpath(sys.argv[0] or ".")), name)
    path = here if os.path.isfile(here) and os.access(here, os.X_OK) else find_executable(name)
    if path is None:
        sys.stderr.write("%s: cannot find the crescent executable '%s' (build crescent, or set "
                         "CRESCENT_BIN_DIR or PATH)\n" % (os.path.basename(sys.argv[0]), name))
        return 127
    os.execv(path, [path] + list(args))
    return 127  # not reached


def parse_flags(argv):
    """gflags-style argv -> list of (name, value or None, original tokens).
    --f=v, --f v, -f v, --f (bool), --nof (bool false)."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-") or a in ("-", "--"):
            out.append((None, None, [a]))
            i += 1
            continue
        name, eq, val = a.lstrip("-").partition("=")
        if eq:
            out.append((name, val, [a]))
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out.append((name, argv[i + 1], [a, argv[i + 1]]))
            i += 2
        else:
            out.append((name, None, [a]))
            i += 1
    return out


def _drop(flags, ignored, cmd):
    kept = []
    for name, val, toks in flags:
        base = name[2:] if name and name.startswith("no") and name[2:] in ignored else name
        if base in ignored:
            sys.stderr.write("%s: --%s is not implemented by crescent; ignored\n" % (cmd, base))
            continue
        kept.append((name, val, toks))
    return kept


def metadata_args(argv):
    """Translates mooncake_http_metadata_server's flags (--port N, --port=N,
    --host H, --addr H) to crescent-metadata's (--port N, --host H)."""
    names = {"port": "port", "host": "host", "addr": "host"}
    out = []
    for name, val, toks in parse_flags(argv):
        if name in names and val is not None:
            out += ["--" + names[name], val]
        else:
            out += toks
    return out


def _daemon_flags(exe_name):
    path = find_executable(exe_name)
    if path is None:
        return None
    try:
        r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return {w.lstrip("-") for line in (r.stdout + r.stderr).splitlines()
            for w in line.split()[:1] if w.startswith("--")}


def master_args(argv):
    known = _daemon_flags("crescent-master")
    ignored = tuple(f for f in MASTER_IGNORED if known is None or f not in known)
    out = []
    for _, _, toks in _drop(parse_flags(argv), ignored, "mooncake_master"):
        out += toks
    return out


def _local_ip():
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def client_args(argv):
    """mooncake_client flags -> crescent-node flags."""
    out = []
    for name, val, toks in _drop(parse_flags(argv), CLIENT_IGNORED, "mooncake_client"):
        if name == "host" and val is not None:
            host = val.rpartition(":")[0] if val.count(":") == 1 else val
            if host in ("0.0.0.0", ""):
                host = _local_ip()
            elif not host.replace(".", "").isdigit():
                try:
                    host = socket.gethostbyname(host)
                except OSError:
                    pass
            out += ["--local_hostname", host]
        elif name == "device_names" and val is not None:
            if val:
                out += ["--device_name", val]
        elif name == "metadata_server" and val is not None:
            out += ["--metadata_server", "p2p" if val.upper() == "P2PHANDSHAKE" else val]
        elif name == "protocol" and val is not None and val not in ("tcp", "shm", "tcp,shm"):
            sys.stderr.write("mooncake_client: protocol %r is not available; using tcp\n" % val)
            out += ["--protocol", "tcp"]
        else:
            out += toks
    return out


def bench_args(argv):
    """transfer_engine_bench flags -> crescent-bench te flags. Raises
    ValueError for what cannot run here (GPU memory)."""
    rename = {"metadata_server": "metadata", "segment_id": "segment",
              "local_server_name": "local_name"}
    dropped = ("report_unit", "gpu_id", "auto_discovery", "device_name", "nr_devices")
    out = ["te"]
    for name, val, toks in parse_flags(argv):
        if name == "use_vram":
            if val is None or val.lower() in ("1", "true", "yes"):
                raise ValueError("--use_vram: GPU memory is not supported by crescent")
            continue
        if name in dropped:
            continue
        if name == "metadata_server" and val is not None:
            if val.upper() == "P2PHANDSHAKE":
                val = "p2p"
            elif "://" not in val:
                val = "etcd://" + val  # Mooncake: a bare host:port is etcd
            out += ["--metadata", val]
        elif name == "protocol" and val is not None and val not in ("tcp", "shm", "auto"):
            sys.stderr.write("transfer_engine_bench: protocol %r is not available; using tcp\n"
                             % val)
            out += ["--protocol", "tcp"]
        elif name == "local_server_name" and val is not None:
            host, sep, port = val.rpartition(":")
            if sep and port.isdigit():
                ip = host
                try:
                    ip = socket.gethostbyname(host)
                except OSError:
                    pass
                out += ["--nics", ip, "--port", port]
            else:
                out += ["--local_name", val]
        elif name in rename and val is not None:
            out += ["--" + rename[name], val]
        else:
            out += toks
    return out


def master_main(argv=None):
    return _exec("crescent-master", master_args(sys.argv[1:] if argv is None else argv))


def http_metadata_server_main(argv=None):
    return _exec("crescent-metadata", metadata_args(sys.argv[1:] if argv is None else argv))


def client_main(argv=None):
    return _exec("crescent-node", client_args(sys.argv[1:] if argv is None else argv))


def transfer_engine_bench_main(argv=None):
    try:
        args = bench_args(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        sys.stderr.write("transfer_engine_bench: %s\n" % e)
        return 2
    return _exec("crescent-bench", args)
