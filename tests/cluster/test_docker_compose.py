"""docker-compose.yml for real: a Docker engine of the test's own (support/docker.py) builds
the images (scripts/docker-images.sh makes the base, ZooKeeper and Prometheus images from
Debian's packages where no registry answers; the squall image is built from this tree), runs
`docker-compose up` with `squall secure-init` material, takes word count submitted from this
host, loses a supervisor container and carries on, and is taken down leaving no container,
network or volume. Where no Docker engine can run, the test fails saying why in one line.

What the compose files say is checked without an engine in tests/cluster/test_compose.py and
tests/unit/test_compose_files.py."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.client import NimbusClient, NimbusError
from squall.testing.zookeeper import free_port
from support import docker
from support.paths import REPO

# A cold run makes the base images (a few minutes); a warm one rebuilds only what this tree changed.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1500)]

# What the image is built from (the Dockerfile's COPY lines and .dockerignore), and the files
# docker-compose.yml mounts.
SOURCES = ["Dockerfile", ".dockerignore", "pyproject.toml", "setup.py", "README.md", "docker-compose.yml",
           "squall", "daemons", "messaging", "conf"]
SQUALL = [sys.executable, "-m", "squall.cli"]
FIRST_UID = 1900000000  # supervisor.worker.uids' default first id


@pytest.fixture(scope="module")
def engine():
    try:
        engine = docker.start()
    except docker.NoDocker as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        # What a run that died midway left (the data root is kept for its images): gone first,
        # so that the end of this test can ask for an engine holding nothing but images.
        for kind in ("container", "network", "volume"):
            engine.docker(kind, "prune", "-f")
        yield engine
    finally:
        engine.stop()


def _project(tmp_path: Path) -> Path:
    """This tree's sources and compose files in a directory of the test's own."""
    project = tmp_path / "project"
    project.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc", "*.egg-info")
    for name in SOURCES:
        src = REPO / name
        (shutil.copytree(src, project / name, ignore=ignore) if src.is_dir() else shutil.copy2(src, project / name))
    return project


def _extra_ca() -> str:
    """The CA certificates this host adds to Debian's (a TLS-inspecting network's), for pip in the build."""
    return "".join(Path(p).read_text() for p in sorted(glob.glob("/usr/local/share/ca-certificates/*.crt")))


def _cli(conf: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SQUALL, *args], capture_output=True, text=True, timeout=timeout, cwd="/",
                          env={**os.environ, "SQUALL_CONF": str(conf)})


def _status(conf: Path) -> dict:
    out = _cli(conf, "status", "wordcount", "--json")
    return json.loads(out.stdout) if out.returncode == 0 else {}


def _acked(status: dict) -> int:
    return sum(c.get("acked", 0) for c in status.get("components", []) if c["id"] == "sentences")


def _wait(what: str, check, timeout: float, log) -> float:
    """Seconds until ``check()`` holds; fails with the compose logs' tail after ``timeout``."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            pytest.fail(f"{what} not within {timeout:g}s\n{log()}")
        time.sleep(0.5)
    return time.monotonic() - started


def test_compose_runs_word_count_survives_a_lost_supervisor_and_leaves_nothing_behind(engine, tmp_path):
    project = _project(tmp_path)
    name = f"squalltest{uuid.uuid4().hex[:8]}"
    # -O0: the image's hot modules compiled in a seventh of the CPU (what they do is under test here).
    env = {**engine.env, "COMPOSE_PROJECT_NAME": name, "SQUALL_EXTRA_CA_CERTS": _extra_ca(),
           "SQUALL_NIMBUS_PORT": str(free_port()), "SQUALL_PROMETHEUS_PORT": str(free_port()),
           "SQUALL_BUILD_OPT": "-O0"}

    def compose(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(["docker-compose", *args], cwd=project, env=env, capture_output=True, text=True,
                             timeout=timeout)
        assert out.returncode == 0, f"docker-compose {' '.join(args)}:\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
        return out

    def logs() -> str:
        out = subprocess.run(["docker-compose", "logs", "--no-color", "--tail", "15"], cwd=project, env=env,
                             capture_output=True, text=True, timeout=60)
        return out.stdout[-6000:]

    figures: dict[str, float] = {}
    started = time.monotonic()
    images = subprocess.run(["bash", str(REPO / "scripts" / "docker-images.sh")], env=env, capture_output=True,
                            text=True, timeout=900)
    assert images.returncode == 0, images.stdout + images.stderr
    figures["base images"] = time.monotonic() - started
    secrets = project / "secrets"  # first: compose reads the env files it names even to build
    init = subprocess.run([*SQUALL, "secure-init", str(secrets), "--host", "127.0.0.1", "--host", "nimbus",
                           "--supervisor-host", "supervisor-1", "--supervisor-host", "supervisor-2",
                           "--uid", "1000"], capture_output=True, text=True, timeout=60)
    assert init.returncode == 0, init.stdout + init.stderr
    client = tmp_path / "client.yaml"  # secrets/client.yaml, at the port published here
    conf = yaml.safe_load((secrets / "client.yaml").read_text())
    client.write_text(yaml.safe_dump({**conf, "nimbus.port": int(env["SQUALL_NIMBUS_PORT"])}))
    started = time.monotonic()
    # The build stage tagged too, so that the cache it is (the dependencies' layer above all)
    # outlives the pruning below of what earlier runs left untagged: the data root stays bounded.
    engine.docker("build", "-q", "--force-rm", "--target", "build", "-t", "squall-build-stage:local",
                  "--build-arg", f"EXTRA_CA_CERTS={env['SQUALL_EXTRA_CA_CERTS']}",
                  "--build-arg", f"SQUALL_BUILD_OPT={env['SQUALL_BUILD_OPT']}", str(project), timeout=1200)
    # nimbus's build is the squall image (squall:local) of every squall service: compose v1
    # builds a shared image once per service that names it, four times over (10 s more, cached).
    compose("build", "--quiet", "--force-rm", "nimbus")
    engine.docker("image", "prune", "-f")
    figures["squall image build"] = time.monotonic() - started
    try:
        started = time.monotonic()
        compose("up", "-d", timeout=300)
        nimbus = NimbusClient("127.0.0.1", int(env["SQUALL_NIMBUS_PORT"]), timeout=5,
                              access=ApiAccess.from_conf(conf))

        def registered() -> int:
            try:
                return len(nimbus.cluster()["supervisors"])
            except NimbusError:
                return 0

        _wait("nimbus answering with two supervisors", lambda: registered() == 2, 120, logs)
        submit = _cli(client, "submit", str(REPO / "examples" / "wordcount.py"), "-c", "topology.workers=2")
        assert submit.returncode == 0, submit.stdout + submit.stderr
        _wait("word count acked", lambda: _acked(_status(client)) > 0, 120, logs)
        figures["up to first ack"] = time.monotonic() - started
        status = _status(client)
        hosts = {w["host"] for w in status["workers"]}
        assert hosts <= {"supervisor-1", "supervisor-2"} and hosts, status["workers"]
        # Workers run as users of their own in the containers, never as root.
        victim = sorted(hosts)[0]
        container = compose("ps", "-q", victim).stdout.strip()
        top = engine.docker("top", container, "-eo", "pid,uid,args")  # docker top wants the pid column
        worker_uids = {int(line.split()[1]) for line in top.stdout.splitlines()[1:]
                       if "squall.daemons.worker.main" in line}
        assert worker_uids and min(worker_uids) >= FIRST_UID, top.stdout + top.stderr

        killed = time.monotonic()
        compose("kill", "-s", "SIGKILL", victim)
        before = _acked(_status(client))

        def moved() -> bool:
            now = _status(client)
            workers = now.get("workers", [])
            return bool(workers) and all(w["host"] != victim for w in workers) and _acked(now) > before

        _wait(f"executors moved off {victim} and acking again", moved, 180, logs)
        figures["supervisor kill to acking again"] = time.monotonic() - killed
    finally:
        sizes = engine.docker("images", "--format", "{{.Repository}}:{{.Tag}} {{.Size}}", check=False).stdout
        print("compose figures (s):", {k: round(v, 1) for k, v in figures.items()}, "\n" + sizes)
        started = time.monotonic()
        down = subprocess.run(["docker-compose", "down", "-v", "--remove-orphans", "--timeout", "5"], cwd=project,
                              env=env, capture_output=True, text=True, timeout=180)
        print(f"docker-compose down: {time.monotonic() - started:.1f}s")
    assert down.returncode == 0, down.stderr
    # Nothing left: no container, no network of the project, no volume.
    assert engine.docker("ps", "-aq").stdout.strip() == ""
    assert engine.docker("volume", "ls", "-q").stdout.strip() == ""
    networks = engine.docker("network", "ls", "--format", "{{.Name}}").stdout.split()
    assert sorted(networks) == ["bridge", "host", "none"], networks
