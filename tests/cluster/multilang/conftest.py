"""Fixtures of the multilang tests that start child processes: the support folder as the
topology code directory, per-test Recorder names, and a check that no child outlives its test."""
import psutil
import pytest

from squall.multilang.codedir import CODE_DIR_ENV
from support.multilang.harness import SUPPORT, Names


@pytest.fixture
def code_dir(monkeypatch):
    monkeypatch.setenv(CODE_DIR_ENV, str(SUPPORT))
    return SUPPORT


@pytest.fixture
def names(request):
    n = Names(request.node.name)
    yield n
    n.clear()


@pytest.fixture(autouse=True)
def no_children_left():
    """Every child a test's shell components start is gone when its topology is."""
    yield
    me = psutil.Process()
    left = []
    for child in me.children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
            if child.status() != psutil.STATUS_ZOMBIE and ("streamparse_run" in cmd or "hostile_child" in cmd
                                                           or "node_" in cmd or "storm_style" in cmd):
                left.append((child.pid, cmd))
        except psutil.Error:
            continue
    assert not left, f"shell children outlived their topology: {left}"
