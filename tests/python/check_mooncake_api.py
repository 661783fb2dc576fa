#!/usr/bin/env python3
"""Checks crescent's mooncake.store / mooncake.engine / mooncake._kv_codec against the names and
parameter lists of Mooncake's Python API in mooncake_api_names.txt.

    PYTHONPATH=build/python:python/compat /usr/bin/python3 tests/python/check_mooncake_api.py

Prints one line per name that is absent or whose parameters differ
(a parameter missing, another default, required parameters in another
order) and a summary; exits 1 when any differs. --docs FILE also lists the
names no row of FILE (docs/python.md) mentions. test_mooncake_api.py runs
it as a test.
"""
import ast
import importlib
import inspect
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = os.path.join(HERE, "mooncake_api_names.txt")
_MISSING = object()


def parse_names(path=NAMES):
    """[(module, dotted name, params or None)]; params: [(name, default or
    _MISSING, variadic)], or None when the line has no or "..." params."""
    out = []
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        mod, spec = line.split(None, 1)
        m = re.fullmatch(r"([\w.]+)(?:\((.*)\))?", spec)
        if not m:
            raise ValueError("bad line: %r" % line)
        name, params = m.group(1), m.group(2)
        plist = None
        if params is not None and params.strip() != "...":
            plist = []
            for p in filter(None, (x.strip() for x in params.split(","))):
                if p.startswith("*"):
                    plist.append((p[1:], _MISSING, True))
                elif "=" in p:
                    k, v = p.split("=", 1)
                    v = v.strip()
                    plist.append((k.strip(), v if v == "ReplicateConfig" else ast.literal_eval(v),
                                  False))
                else:
                    plist.append((p, _MISSING, False))
        out.append((mod, name, plist))
    return out


def _resolve(module, dotted):
    obj = module
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        # an instance field (pybind def_readwrite): __slots__, or a default instance
        if inspect.isclass(obj) and i == len(parts) - 1:
            for k in inspect.getmro(obj):
                if part in getattr(k, "__slots__", ()):
                    return True, None
            try:
                inst = obj()
            except Exception:  # noqa: BLE001 - not constructible without arguments
                inst = None
            if inst is not None and hasattr(inst, part):
                return True, getattr(inst, part)
            # a field its constructor sets (self.<part> = ...)
            for k in inspect.getmro(obj):
                try:
                    src = inspect.getsource(k.__init__)
                except (TypeError, OSError):
                    continue
                if re.search(r"\bself\.%s\s*=" % re.escape(part), src):
                    return True, None
        return False, None
    return True, obj


def _same_default(want, got):
    if want == "ReplicateConfig":
        return got is None or type(got).__name__ == "ReplicateConfig"
    return type(want) is type(got) and want == got or (want is None and got is None)


def check_params(obj, plist):
    """List of differences between Mooncake's params and obj's signature."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ["signature not inspectable"]
    params = [p for p in sig.parameters.values() if p.name != "self"]
    byname = {p.name: p for p in params}
    has_varkw = any(p.kind is p.VAR_KEYWORD for p in params)
    diffs = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    # Mooncake's positional parameters: those before a variadic one (after
    # *parts a parameter can only be given by keyword)
    want_pos = []
    for n, _d, var in plist:
        if var:
            break
        want_pos.append(n)
    for name, default, var in plist:
        if var:
            if not any(p.kind is p.VAR_POSITIONAL for p in params):
                diffs.append("*%s not accepted" % name)
            continue
        p = byname.get(name)
        if p is None:
            if not has_varkw:
                diffs.append("parameter %s missing" % name)
            continue
        if default is not _MISSING and p.default is not p.empty and \
                not _same_default(default, p.default):
            diffs.append("%s default %r, Mooncake %r" % (name, p.default, default))
        if default is not _MISSING and p.default is p.empty:
            diffs.append("%s required, Mooncake's defaults to %r" % (name, default))
        # a parameter Mooncake requires has no default value here either.
        # Allowed: None (crescent's extension, e.g. a size taken from the
        # buffer object given instead of an address) and a marker default
        # (_mooncake_required) standing for "required unless Mooncake's other
        # overload is called" (setup(config_dict))
        if default is _MISSING and p.default is not p.empty and p.default is not None and \
                not getattr(p.default, "_mooncake_required", False):
            diffs.append("%s defaults to %r, Mooncake requires it" % (name, p.default))
    # Mooncake's positional parameters are crescent's first positional ones,
    # in Mooncake's order: a call with Mooncake's positional arguments binds
    # every value to the same parameter (an extra of crescent's may follow
    # them, or be keyword-only)
    if positional[:len(want_pos)] != want_pos:
        diffs.append("positional parameters %s, Mooncake %s"
                     % (positional[:len(want_pos) + 1], want_pos))
    return diffs


def check(docs=None):
    mods = {"store": importlib.import_module("mooncake.store"),
            "engine": importlib.import_module("mooncake.engine"),
            "kv_codec": importlib.import_module("mooncake._kv_codec")}
    entries = parse_names()
    absent, differ, uninspectable = [], [], []
    doc_text = open(docs, encoding="utf-8").read() if docs else None
    undocumented = []
    for mod, name, plist in entries:
        ok, obj = _resolve(mods[mod], name)
        if not ok:
            absent.append("%s.%s" % (mod, name))
            continue
        if plist is not None:
            d = check_params(obj, plist)
            if d == ["signature not inspectable"]:
                uninspectable.append("%s.%s" % (mod, name))
            elif d:
                differ.append("%s.%s: %s" % (mod, name, "; ".join(d)))
        if doc_text is not None:
            leaf = name.split(".")[-1]
            if not re.search(r"`[^`]*\b%s\b" % re.escape(leaf), doc_text):
                undocumented.append("%s.%s" % (mod, name))
    return entries, absent, differ, uninspectable, undocumented


def main(argv):
    docs = argv[argv.index("--docs") + 1] if "--docs" in argv else None
    entries, absent, differ, unins, undoc = check(docs)
    for a in absent:
        print("ABSENT   ", a)
    for d in differ:
        print("DIFFERS  ", d)
    for u in unins:
        print("NO-SIG   ", u)
    for u in undoc:
        print("NO-DOC   ", u)
    print("%d Mooncake names: %d present, %d absent, %d with other parameters, "
          "%d not inspectable%s" % (len(entries), len(entries) - len(absent), len(absent),
                                    len(differ), len(unins),
                                    ", %d not in the docs" % len(undoc) if docs else ""))
    return 1 if absent or differ or undoc else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
