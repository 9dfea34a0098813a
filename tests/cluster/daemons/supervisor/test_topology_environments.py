"""A topology's own Python environment: two topologies pinning two versions of one package
(wheels made here, installed with no index) run side by side on one supervisor, each worker
as a user of its own importing its version, and so do its multilang children; a pin no index
has is reported in the topology's errors and the slot waits; a requirements file with pip
options is refused at submit."""
from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from squall.testing.cluster import ProcessCluster
from support.paths import VENV_TOPOLOGY
from support.wheels import make_wheel

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(os.geteuid() != 0, reason="workers as users of their own need root")]

FIRST_UID = 1900000000  # supervisor.worker.uids' default first id


def project(base, name, requirements):
    """A topology folder: the topology file and its requirements.txt."""
    folder = base / name
    folder.mkdir()
    shutil.copy(VENV_TOPOLOGY, folder / "uses_vpkg.py")
    (folder / "requirements.txt").write_text(requirements)
    os.chmod(folder, 0o755)
    return folder / "uses_vpkg.py"


def reports(cluster, name):
    """The topology's error texts, oldest first (what `squall errors` reads)."""
    return [e["error"] for e in reversed(cluster.client.topology_errors(name)["errors"])]


@pytest.mark.timeout(400)
def test_two_topologies_with_two_versions_of_one_package_run_side_by_side(zk_server, zk_root, open_tmp_path):
    base = open_tmp_path
    wheels = base / "wheels"
    for version in ("1.0", "2.0"):
        make_wheel(wheels, "vpkg", version)
    os.chmod(wheels, 0o755)
    # Workers as users of their own, on the runtime the supervisor lays out for them when this
    # Python is closed to them (under /root): the venvs are made with that runtime's Python.
    cluster = ProcessCluster(zk_server.port, zk_root, base / "cluster", supervisors=1, slots=3, conf={
        "supervisor.worker.user": None, "supervisor.worker.runtime.dir": str(base / "runtime"),
        "supervisor.venv.pip.args": ["--no-index", "--find-links", str(wheels)],
        "supervisor.venv.build.timeout.secs": 120, "supervisor.venv.retry.secs": 2})
    os.chmod(base / "cluster", 0o711)
    try:
        cluster.start()
        for name, pin in (("v-one", "vpkg==1.0\n"), ("v-two", "# the other one\nvpkg == 2.0\n")):
            res = cluster.cli("submit", str(project(base, name, pin)), "--name", name, "-c",
                              'topology.environment={"APP_LABEL": "' + name + '"}')
            assert res.returncode == 0, res.stdout + res.stderr
        seen = {}
        for name in ("v-one", "v-two"):
            seen[name] = cluster.wait_for(lambda n=name: next(
                (e for e in reports(cluster, n) if e.startswith("vpkg ")), None), 180, f"{name}'s probe")
        one, two = seen["v-one"].split(), seen["v-two"].split()
        assert one[:6] == ["vpkg", "1.0", "child", "1.0", "label", "v-one"], seen
        assert two[:6] == ["vpkg", "2.0", "child", "2.0", "label", "v-two"], seen
        assert int(one[7]) >= FIRST_UID and int(two[7]) >= FIRST_UID and one[7] != two[7]  # users of their own
        # Two venvs, the supervisor's, which the workers' users read but cannot change.
        venvs = [p for p in (cluster.supervisor_dir(0) / "venvs").iterdir() if p.is_dir()]
        assert len(venvs) == 2
        for venv in venvs:
            for path in [venv, *venv.rglob("*")]:
                info = path.lstat()
                assert info.st_uid == 0, path
                if not stat.S_ISLNK(info.st_mode):  # a link's own mode means nothing
                    assert info.st_mode & 0o004 and not info.st_mode & 0o022, path
            assert json.loads((venv / ".squall-venv.json").read_text())["requirements"] in (["vpkg==1.0"],
                                                                                          ["vpkg==2.0"])

        # A pin no index has: reported once per failed build, the worker waits and is never launched.
        res = cluster.cli("submit", str(project(base, "v-three", "vpkg==3.0\n")), "--name", "v-three")
        assert res.returncode == 0, res.stdout + res.stderr
        text = cluster.wait_for(lambda: next((e for e in reports(cluster, "v-three") if "environment" in e), None),
                                120, "the failed build in v-three's errors")
        assert text.startswith("topology environment from requirements.txt could not be built: pip install "
                               "exited 1:"), text
        assert "vpkg==3.0" in text, text
        status = cluster.cli("status", "v-three")
        assert "No matching distribution found for vpkg==3.0" in status.stdout, status.stdout  # its last line
        assert not reports(cluster, "v-three")[0].startswith("vpkg ")

        # What a supervisor would refuse is refused at submit, naming the line.
        bad = project(base, "v-bad", "vpkg==1.0\n--extra-index-url https://example.com/simple\n")
        res = cluster.cli("submit", str(bad), "--name", "v-bad")
        assert res.returncode == 1 and "requirements.txt line 2:" in res.stderr, res.stdout + res.stderr
    finally:
        cluster.stop()
