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

mooncake_master's offload, HA-backend and cleanup flags are translated
where crescent has the feature (--ha_backend_type=etcd +
--ha_backend_connstring -> --enable_ha --etcd_endpoints; --enable_offload:
crescent's master offloads to the disk tier of nodes started with
--ssd_path) and refused with exit status 2 and the reason where it does not
(a shared-filesystem tier, quotas, other HA backends, other allocation
strategies). mooncake_client's dummy-client RPC flags are accepted, dropped
and named on stderr. As with gflags, --noNAME turns a boolean flag off
(--NAME=false), and glog's --v=N (verbosity) sets CRESCENT_LOG=debug for the
daemon when N >= 1. Anything else unknown is passed on, so the daemon
refuses it loudly. The process is replaced (os.execve), so signals and the
exit status are the daemon's own.
"""
import os
import re
import socket
import subprocess
import sys

from crescent import find_executable

_TRUE = ("", "1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class Refused(Exception):
    """A Mooncake flag value naming a feature crescent does not have."""


def _bool(name, val):
    v = ("" if val is None else val).strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise Refused("--%s=%s is not a boolean" % (name, val))


def _master_flag(name, val, flags):
    """crescent-master arguments for one of Mooncake's master flags crescent's
    master does not spell the same way: (args, note or None). Refused raises."""
    empty = val is None or val.strip() in ("", "0", "0B", '""', "''")
    if name == "enable_offload":
        on = _bool(name, val)
        return [], ("--enable_offload=%s: crescent's master offloads to the disk tier of "
                    "nodes started with --ssd_path (crescent-node), none otherwise"
                    % ("true" if on else "false"))
    if name == "enable_disk_eviction":
        if not _bool(name, val):
            raise Refused("--enable_disk_eviction=false: crescent always evicts its disk "
                          "tier at --tier_ssd_high_watermark")
        return [], None
    if name in ("root_fs_dir", "offload_root_dir", "global_file_segment_size"):
        if empty:
            return [], None
        raise Refused("--%s: crescent has no shared-filesystem tier (only node-local disks: "
                      "crescent-node --ssd_path)" % name)
    if name == "quota_bytes":
        if empty:
            return [], None
        raise Refused("--quota_bytes: crescent's master has no quotas")
    if name == "allocation_strategy":
        if (val or "random").strip().lower() == "random":
            return [], None
        raise Refused("--allocation_strategy=%s: crescent places replicas one way only "
                      "(preferred segments, then a rotating cursor)" % val)
    if name == "enable_metadata_cleanup_on_timeout":
        if _bool(name, val):
            return [], None  # crescent drops a silent client's segments at --client_ttl
        raise Refused("--enable_metadata_cleanup_on_timeout=false: crescent always drops the "
                      "segments of a client silent longer than --client_ttl")
    if name == "ha_backend_type":
        kind = (val or "").strip().lower()
        if kind in ("", "none"):
            return [], None
        if kind != "etcd":
            raise Refused("--ha_backend_type=%s: crescent's master HA uses etcd only" % val)
        conn = flags.get("ha_backend_connstring")
        if not conn:
            raise Refused("--ha_backend_type=etcd needs --ha_backend_connstring")
        return ["--enable_ha=true", "--etcd_endpoints=%s" % conn], None
    if name == "ha_backend_connstring":
        return [], None  # used by ha_backend_type
    return None


MASTER_TRANSLATED = ("enable_offload", "enable_disk_eviction", "root_fs_dir", "offload_root_dir",
                     "global_file_segment_size", "quota_bytes", "allocation_strategy",
                     "enable_metadata_cleanup_on_timeout", "ha_backend_type",
                     "ha_backend_connstring")
# mooncake_client flags of its dummy-client RPC service and tiers.
CLIENT_IGNORED = ("port", "threads", "tenant_id", "enable_offload", "start_offload_rpc_server",
                  "deployment_mode", "tiered_backend_config", "client_rpc_port",
                  "rpc_thread_num", "lock_shard_count", "enable_http_server", "http_port",
                  "config_path", "graceful_unmount_seconds", "local_buffer_size")


def _exec(name, args, env=None):
    # An installed entry point sits in the same bin/ as crescent's daemons.
    here = os.path.join(os.path.dirname(os.path.realpath(sys.argv[0] or ".")), name)
    path = here if os.path.isfile(here) and os.access(here, os.X_OK) else find_executable(name)
    if path is None:
        sys.stderr.write("%s: cannot find the crescent executable '%s' (build crescent, or set "
                         "CRESCENT_BIN_DIR or PATH)\n" % (os.path.basename(sys.argv[0]), name))
        return 127
    os.execve(path, [path] + list(args), os.environ if env is None else env)
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


_HELP_LINE = re.compile(r"^\s*--(\w+)\s.*\((\w+), default: [^()]*\)\s*$")


def _daemon_flags(exe_name):
    """{flag name: type ("bool", "int", ...)} from the daemon's --help, or
    None when it cannot be run."""
    path = find_executable(exe_name)
    if path is None:
        return None
    try:
        r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    flags = {}
    for line in (r.stdout + r.stderr).splitlines():
        m = _HELP_LINE.match(line)
        if m:
            flags[m.group(1)] = m.group(2)
        elif line.split()[:1] and line.split()[0].startswith("--"):
            flags.setdefault(line.split()[0].lstrip("-"), None)
    return flags


def _glog_gflags(parsed, daemon_flags, env, cmd):
    """What gflags and glog accept for any program and crescent's daemons
    spell otherwise: --noNAME for a boolean flag NAME of the daemon becomes
    --NAME=false; --v=N / --v N (glog verbosity, VLOG levels up to N) sets
    CRESCENT_LOG=debug in env for N >= 1 (0 or less: the default level).
    Returns the other flags. Raises Refused for a --v that is not an int."""
    kept = []
    for name, val, toks in parsed:
        bool_off = name and val is None and name.startswith("no") and name not in daemon_flags
        if bool_off and daemon_flags.get(name[2:]) == "bool":
            kept.append((name[2:], "false", ["--%s=false" % name[2:]]))
        elif name == "v" and "v" not in daemon_flags:
            try:
                level = int(val)
            except (TypeError, ValueError):
                raise Refused("--v%s: glog's verbosity is an integer"
                              % ("" if val is None else "=" + val)) from None
            if level >= 1 and env is not None:
                env["CRESCENT_LOG"] = "debug"
                sys.stderr.write("%s: --v=%d: crescent logs at debug level (CRESCENT_LOG=debug)\n"
                                 % (cmd, level))
        else:
            kept.append((name, val, toks))
    return kept


def master_args(argv, env=None):
    """crescent-master's argv for mooncake_master's; env (a dict, optional)
    gets the environment --v asks for. Raises Refused for a flag value
    naming a feature crescent does not have."""
    known = _daemon_flags("crescent-master") or {}
    parsed = _glog_gflags(parse_flags(argv), known, env, "mooncake_master")
    values = {n: v for n, v, _ in parsed if n}
    out = []
    for name, val, toks in parsed:
        base = name[2:] if name and name.startswith("no") and name[2:] in MASTER_TRANSLATED \
            else name
        if base in MASTER_TRANSLATED and base not in known:
            if base != name:
                val = "false"  # --noflag
            args, note = _master_flag(base, val, values)
            if note:
                sys.stderr.write("mooncake_master: %s\n" % note)
            out += args
            continue
        out += toks
    return out


def _local_ip():
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def client_args(argv, env=None):
    """mooncake_client flags -> crescent-node flags (env as for
    master_args). Raises Refused for a --v that is not an int."""
    parsed = _drop(parse_flags(argv), CLIENT_IGNORED, "mooncake_client")
    parsed = _glog_gflags(parsed, _daemon_flags("crescent-node") or {}, env, "mooncake_client")
    out = []
    for name, val, toks in parsed:
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


def _translate_exec(cmd, exe_name, translate, argv):
    """Runs crescent's exe_name with translate(argv, env)'s arguments and
    environment; exit status 2 with the reason for Refused."""
    env = dict(os.environ)
    try:
        args = translate(sys.argv[1:] if argv is None else argv, env)
    except Refused as e:
        sys.stderr.write("%s: not supported: %s\n" % (cmd, e))
        return 2
    return _exec(exe_name, args, env)


def master_main(argv=None):
    return _translate_exec("mooncake_master", "crescent-master", master_args, argv)


def http_metadata_server_main(argv=None):
    return _exec("crescent-metadata", metadata_args(sys.argv[1:] if argv is None else argv))


def client_main(argv=None):
    return _translate_exec("mooncake_client", "crescent-node", client_args, argv)


def transfer_engine_bench_main(argv=None):
    try:
        args = bench_args(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        sys.stderr.write("transfer_engine_bench: %s\n" % e)
        return 2
    return _exec("crescent-bench", args)
