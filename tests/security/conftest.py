"""Fixtures for the security tests: a cluster with security on (a cluster key
generated per module) and one with security off; helpers in secutil.py."""
import shutil

import pytest

from secutil import make_cluster


@pytest.fixture(scope="module")
def secure():
    c = make_cluster(key=True)
    yield c
    c["daemons"].stop()
    shutil.rmtree(c["dir"], ignore_errors=True)  # the cluster key does not linger in /tmp


@pytest.fixture(scope="module")
def open_cluster():
    c = make_cluster(key=False)
    yield c
    c["daemons"].stop()
    shutil.rmtree(c["dir"], ignore_errors=True)  # the cluster key does not linger in /tmp
