"""crescent: KVCache-centric disaggregated serving infrastructure (C11) for Python.

    from crescent.store import DistributedStore, ReplicateConfig
    from crescent.engine import TransferEngine

The native parts live in the C extension ``crescent._crescent``; the
``mooncake`` compatibility package (python/compat) re-exports these classes
under Mooncake's names.
"""
try:
    from crescent import _crescent
except ImportError as _e:  # pragma: no cover - depends on the interpreter
    import sys as _sys
    raise ImportError(
        "crescent's C extension could not be loaded into %s (Python %d.%d): %s. It is built "
        "for the interpreter CMake found (/usr/bin/python3 by default); run that one, with "
        "PYTHONPATH=<build>/python" % (_sys.executable, _sys.version_info[0],
                                       _sys.version_info[1], _e)) from _e
from crescent._crescent import strerror

__version__ = _crescent.__version__

__all__ = ["strerror", "__version__", "find_executable"]


def find_executable(name):
    """Path of a crescent executable (``crescent-master``, ``crescent-metadata``,
    ...): $CRESCENT_BIN_DIR, then the package's bin/ (pip installs), then the
    prefix's bin/ (`cmake --install`, whatever the prefix), then the build tree
    this package was built in, then $PATH. Returns None when not found."""
    import os
    import shutil

    cands = []
    env = os.environ.get("CRESCENT_BIN_DIR")
    if env:
        cands.append(os.path.join(env, name))
    # installed by pip: the daemons ship inside the package
    cands.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name))
    try:
        from crescent import _paths

        b = getattr(_paths, "BIN_DIR", None)
        if b:
            cands.append(os.path.join(b, name))
        b = getattr(_paths, "BUILD_DIR", None)
        if b:
            cands += [os.path.join(b, "tools", name, name), os.path.join(b, "tools", name),
                      os.path.join(b, "bin", name), os.path.join(b, name)]
    except ImportError:
        pass
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return shutil.which(name)
