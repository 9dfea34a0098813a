"""A topology's own Python environment: two topologies pinning two versions of one package
(wheels made here, installed with no index) run side by side on one supervisor, each worker
as a user of its own importing its version, and so do its multilang children; streamparse's
redis example, whose virtualenvs/ file pins redis==2.10.1 (an API the cluster's redis-py
changed), counts into a real Redis exactly; a pin no index has is reported in the
topology's errors and the slot waits; a requirements file with pip options is refused at
submit."""
from __future__ import annotations

import json
import os
import shutil
import stat

import pytest
import redis

from squall.testing.cluster import ProcessCluster
from support.paths import SP_REDIS_PROJECT, VENV_TOPOLOGY, WHEELHOUSE
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
def test_two_topologies_with_two_versions_of_one_package_run_side_by_side(zk_server, zk_root, redis_server,
                                                                          open_tmp_path):
    base = open_tmp_path
    wheels = base / "wheels"
    for version in ("1.0", "2.0"):
        make_wheel(wheels, "vpkg", version)
    pinned = sorted(WHEELHOUSE.glob("redis-2.10.1-*.whl"))
    assert pinned, f"no redis 2.10.1 wheel in {WHEELHOUSE}: scripts/test.sh cluster builds it"
    shutil.copy(pinned[0], wheels)
    os.chmod(wheels, 0o755)
    sp_project = base / "sp_redis"
    shutil.copytree(SP_REDIS_PROJECT, sp_project)
    redis_key = f"squall-test-venv-{os.getpid()}"
    # Workers as users of their own, on the runtime the supervisor lays out for them when this
    # Python is closed to them (under /root): the venvs are made with that runtime's Python.
    cluster = ProcessCluster(zk_server.port, zk_root, base / "cluster", supervisors=1, slots=4, conf={
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
        res = cluster.cli("submit", str(sp_project / "topologies" / "wordcount_redis.py"), "--name", "wc-redis",
                          "-c", "test.words=400", "-c", f"test.key={redis_key}",
                          "-c", 'topology.environment={"REDIS_PORT": "' + str(redis_server.port) + '"}')
        assert res.returncode == 0, res.stdout + res.stderr
        seen = {}
        for name in ("v-one", "v-two"):
            seen[name] = cluster.wait_for(lambda n=name: next(
                (e for e in reports(cluster, n) if e.startswith("vpkg ")), None), 180, f"{name}'s probe")
        one, two = seen["v-one"].split(), seen["v-two"].split()
        assert one[:6] == ["vpkg", "1.0", "child", "1.0", "label", "v-one"], seen
        assert two[:6] == ["vpkg", "2.0", "child", "2.0", "label", "v-two"], seen
        assert int(one[7]) >= FIRST_UID and int(two[7]) >= FIRST_UID and one[7] != two[7]  # users of their own
        # streamparse's redis example counted with redis-py 2.10.1's zincrby(name, value, amount):
        # every word once, dog by 10 (with the cluster's redis-py, every call raised).
        db = redis.Redis(port=redis_server.port, decode_responses=True)
        expected = [("cat", 100.0), ("elephant", 100.0), ("zebra", 100.0), ("dog", 1000.0)]
        cluster.wait_for(lambda: db.zrange(redis_key, 0, -1, withscores=True) == expected
                         or reports(cluster, "wc-redis"), 180, "wc-redis's counts in Redis")
        assert db.zrange(redis_key, 0, -1, withscores=True) == expected, reports(cluster, "wc-redis")
        assert sorted(db.hgetall(redis_key + ":clients").values()) == ["2.10.1", "2.10.1"]  # both bolt tasks
        assert reports(cluster, "wc-redis") == []
        db.delete(redis_key, redis_key + ":clients")

        # Three venvs, the supervisor's, which the workers' users read but cannot change.
        venvs = [p for p in (cluster.supervisor_dir(0) / "venvs").iterdir() if p.is_dir()]
        assert len(venvs) == 3
        for venv in venvs:
            for path in [venv, *venv.rglob("*")]:
                info = path.lstat()
                assert info.st_uid == 0, path
                if not stat.S_ISLNK(info.st_mode):  # a link's own mode means nothing
                    assert info.st_mode & 0o004 and not info.st_mode & 0o022, path
            assert json.loads((venv / ".squall-venv.json").read_text())["requirements"] in (
                ["vpkg==1.0"], ["vpkg==2.0"], ["streamparse", "redis==2.10.1"])

        # A pin no index has: reported once per failed build, the worker waits and is never launched.
        res = cluster.cli("submit", str(project(base, "v-three", "vpkg==3.0\n")), "--name", "v-three")
        assert res.returncode == 0, res.stdout + res.stderr
        text = cluster.wait_for(lambda: next((e for e in reports(cluster, "v-three") if "environment" in e), None),
                                120, "the failed build in v-three's errors")
        assert text.startswith("topology environment from requirements.txt could not be built: pip install "
                               "exited 1:"), text
        assert "vpkg==3.0" in text, text
        status = cluster.cli("status", "v-three")  # no worker, and the error says why: no wait for beats
        assert "No matching distribution found for vpkg==3.0" in status.stdout, status.stdout  # its last line
        assert "waiting up to" not in status.stderr, status.stderr
        assert not reports(cluster, "v-three")[0].startswith("vpkg ")

        # What a supervisor would refuse is refused at submit, naming the line.
        bad = project(base, "v-bad", "vpkg==1.0\n--extra-index-url https://example.com/simple\n")
        res = cluster.cli("submit", str(bad), "--name", "v-bad")
        assert res.returncode == 1 and "requirements.txt line 2:" in res.stderr, res.stdout + res.stderr
    finally:
        cluster.stop()
