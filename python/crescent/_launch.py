"""Console scripts of a pip-installed crescent: run the daemon shipped in the
package's bin/ (crescent-master, crescent-node, crescent-metadata,
crescent-bench) with the same arguments, replacing this process."""
import os
import sys

from crescent import find_executable


def _run(name):
    path = find_executable(name)
    if path is None:
        sys.stderr.write("%s: not found in this installation\n" % name)
        return 127
    os.execv(path, [path] + sys.argv[1:])
    return 127  # not reached


def master():
    return _run("crescent-master")


def node():
    return _run("crescent-node")


def metadata():
    return _run("crescent-metadata")


def bench():
    return _run("crescent-bench")
