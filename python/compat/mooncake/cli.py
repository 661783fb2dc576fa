"""Entry points with Mooncake's command names, executing crescent's daemons.

    mooncake_master [flags...]                 -> crescent-master [same flags]
    mooncake_http_metadata_server --port N     -> crescent-metadata --port N
       (also --port=N, --host H / --addr H)

The process is replaced (os.execv), so signals and the exit status are the
daemon's own.
"""
import os
import sys

from crescent import find_executable


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


def metadata_args(argv):
    """Translates mooncake_http_metadata_server's flags (--port N, --port=N,
    --host H, --addr H) to crescent-metadata's (--port N, --host H)."""
    names = {"port": "port", "host": "host", "addr": "host"}
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-"):
            name, eq, val = a.lstrip("-").partition("=")
            if name in names:
                if eq:
                    out += ["--" + names[name], val]
                    i += 1
                    continue
                if i + 1 < len(argv):
                    out += ["--" + names[name], argv[i + 1]]
                    i += 2
                    continue
        out.append(a)
        i += 1
    return out


def master_main(argv=None):
    return _exec("crescent-master", sys.argv[1:] if argv is None else argv)


def http_metadata_server_main(argv=None):
    return _exec("crescent-metadata", metadata_args(sys.argv[1:] if argv is None else argv))
