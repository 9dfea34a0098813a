"""A supervisor's topology environments without building one (that starts processes: see
tests/cluster/daemons/test_topology_environments.py): what a bundle asks for, when a worker
may launch, what it is handed, and what the cache keeps."""
import json
import os
import re
import time

import pytest

from squall.config import build_config
from squall.daemons.requirements import MARKER
from squall.daemons.supervisor.environments import EnvBuildError, TopologyEnvironments, open_to_workers
from squall.multilang.codedir import VENV_ENV


def bundle(code_root, topology_id, conf, files=()):
    root = code_root / topology_id
    (root / "code").mkdir(parents=True)
    (root / "conf.json").write_text(json.dumps(conf))
    for name, text in dict(files).items():
        path = root / "code" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def envs(tmp_path):
    conf = build_config({"supervisor.venv.cache.max": 1})
    return TopologyEnvironments(tmp_path / "venvs", tmp_path / "topologies", conf, None, lambda: None)


def finish(envs, venv):
    """What a finished build leaves (without running pip)."""
    site = venv / "lib" / "site-packages"
    site.mkdir(parents=True)
    (venv / MARKER).write_text(json.dumps({"site": str(site)}))


def test_a_bundle_without_requirements_launches_with_its_variables_only(envs, tmp_path):
    bundle(tmp_path / "topologies", "plain-1", {"topology.environment": {"APP_MODE": "x"}})
    assert envs.status("plain-1", "d").ready
    assert envs.launch_env("plain-1", "d", "/usr/bin") == {"APP_MODE": "x"}


def test_a_bundle_with_requirements_waits_for_its_venv_then_gets_it_first_on_path(envs, tmp_path):
    bundle(tmp_path / "topologies", "v1-1", {"topology.python.requirements": "requirements.txt",
                                             "topology.environment": {"APP_MODE": "x"}},
           {"requirements.txt": "vpkg==1.0\n"})
    status = envs.status("v1-1", "d")
    assert not status.ready and status.failure is None
    venv = envs.venv(envs.spec("v1-1", "d"))
    with pytest.raises(EnvBuildError, match="is gone"):
        envs.launch_env("v1-1", "d", "/usr/bin")
    finish(envs, venv)
    assert envs.status("v1-1", "d").ready
    assert envs.launch_env("v1-1", "d", "/usr/bin") == {
        "APP_MODE": "x", VENV_ENV: str(venv), "VIRTUAL_ENV": str(venv), "PATH": f"{venv}/bin:/usr/bin"}


def test_same_requirements_share_one_venv_and_other_versions_get_another(envs, tmp_path):
    for tid, pin in (("a-1", "vpkg==1.0"), ("b-1", "vpkg == 1.0  # the same, spelled otherwise"),
                     ("c-1", "vpkg==2.0")):
        bundle(tmp_path / "topologies", tid, {"topology.python.requirements": "requirements.txt"},
               {"requirements.txt": pin + "\n"})
    a, b, c = (envs.venv(envs.spec(t, "d")) for t in ("a-1", "b-1", "c-1"))
    assert a == b != c and a.parent == c.parent == tmp_path / "venvs"


@pytest.mark.parametrize("conf, files, message", [
    ({"topology.python.requirements": "requirements.txt"}, {"requirements.txt": "-i https://evil/simple\n"},
     "requirements.txt line 1: .* is not a plain requirement"),
    ({"topology.python.requirements": "../../etc/passwd"}, {}, "inside the topology's folder"),
    ({"topology.python.requirements": "missing.txt"}, {}, "cannot read the requirements file 'missing.txt'"),
    ({"topology.environment": {"PATH": "/tmp"}}, {}, "conf.json: .*PATH is set by squall"),
])
def test_a_bundle_the_supervisor_refuses_is_a_failure_to_report_not_a_build(envs, tmp_path, conf, files, message):
    bundle(tmp_path / "topologies", "bad-1", conf, files)
    status = envs.status("bad-1", "d")
    assert not status.ready and status.failure is not None
    assert status.failure[1].startswith("topology environment refused: ")
    assert re.search(message, status.failure[1]), status.failure[1]
    envs.request("bad-1", "d")  # nothing to build: no thread, nothing in flight
    assert envs.status("bad-1", "d") == status


def test_cleanup_keeps_what_kept_topologies_use_and_the_most_recent_spare(envs, tmp_path):
    for tid, pin in (("a-1", "vpkg==1.0"), ("b-1", "vpkg==2.0"), ("c-1", "other==1")):
        bundle(tmp_path / "topologies", tid, {"topology.python.requirements": "requirements.txt"},
               {"requirements.txt": pin + "\n"})
    a, b, c = (envs.venv(envs.spec(t, "d")) for t in ("a-1", "b-1", "c-1"))
    for venv in (a, b, c):
        finish(envs, venv)
    old = time.time() - 100
    os.utime(b / MARKER, (old, old))  # used longer ago than c
    partial = tmp_path / "venvs" / "0123456789abcdef0123456789abcdef"
    partial.mkdir()  # a build that did not finish
    removed = envs.cleanup({"a-1"})  # b and c are spare; cache.max is 1: c, used last, stays
    assert sorted(removed) == sorted([b.name, partial.name])
    assert a.is_dir() and c.is_dir() and not b.exists() and not partial.exists()


def test_a_built_venv_is_readable_by_everyone_and_writable_by_its_owner_only(tmp_path):
    venv = tmp_path / "v"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "tool").write_text("#!/bin/sh\n")
    os.chmod(venv / "bin" / "tool", 0o700)
    (venv / "lib.py").write_text("x = 1\n")
    os.chmod(venv / "lib.py", 0o600)
    os.chmod(venv / "bin", 0o700)
    open_to_workers(venv)
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in (venv, venv / "bin", venv / "bin" / "tool",
                                                            venv / "lib.py")} == {
        "v": "0o755", "bin": "0o755", "tool": "0o755", "lib.py": "0o644"}

