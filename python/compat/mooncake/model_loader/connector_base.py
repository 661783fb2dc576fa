"""Connector base classes: a scratch directory for pulled files, close()."""
from __future__ import annotations

import shutil
import tempfile
import weakref
from abc import ABC, abstractmethod


class BaseConnector(ABC):
    """A remote connector with a private scratch directory (``get_local_dir``).

    Mooncake's installs SIGINT/SIGTERM handlers to remove the directory; this
    one removes it on close(), on garbage collection and at interpreter exit
    (weakref.finalize), and leaves the process' signal handlers alone."""

    def __init__(self, url: str):
        self.url = url
        self.closed = False
        self.local_dir = tempfile.mkdtemp(prefix="mooncake-model-")
        self._rm_dir = weakref.finalize(self, shutil.rmtree, self.local_dir, True)

    def get_local_dir(self) -> str:
        return self.local_dir

    @abstractmethod
    def weight_iterator(self, rank: int = 0):
        raise NotImplementedError()

    @abstractmethod
    def pull_files(self, allow_pattern=None, ignore_pattern=None) -> None:
        raise NotImplementedError()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._rm_dir()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        self.close()


class BaseKVConnector(BaseConnector):
    """Key/value connector for tensors and strings."""

    @abstractmethod
    def get(self, key: str):
        raise NotImplementedError()

    @abstractmethod
    def getstr(self, key: str):
        raise NotImplementedError()

    @abstractmethod
    def set(self, key: str, obj) -> None:
        raise NotImplementedError()

    @abstractmethod
    def setstr(self, key: str, obj: str) -> None:
        raise NotImplementedError()

    @abstractmethod
    def list(self, prefix: str):
        raise NotImplementedError()
