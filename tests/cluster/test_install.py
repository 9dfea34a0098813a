"""squall as users install it: `python -m build` makes the sdist and the wheel (the wheel built
from the sdist, as a release does), each installs with pip into a fresh virtual environment
with no source tree on sys.path, and what is installed runs: `squall --version`, a topology in
local mode, and (from the wheel) a two-supervisor dev cluster running word count with its
workers as users of their own, who find none of the dev cluster's secrets.

The environments live in pytest's private (0700) temporary directory, as a venv under /root
does: the dev cluster's supervisors, root here, lay out a runtime for their workers
(daemons/supervisor/worker_runtime.py) instead of running them as root."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import psutil
import pytest
import yaml

from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.client import NimbusClient
from support import dev_cluster
from support.paths import ISOLATION_TOPOLOGIES, REPO

# The build compiles the hot modules once (about a minute of CPU), and each install fetches
# the dependencies through pip's cache.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

FIRST_UID = 1900000000  # supervisor.worker.uids' default first id
# Installed package -> its folder in the repository (pyproject.toml's package-dir).
FOLDERS = {"squall": "squall", "squall/daemons": "daemons", "squall/messaging": "messaging", "squall/conf": "conf"}
DEBIAN_PYTHON = Path("/usr/bin/python3")


def run(args: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess[str]:
    """A command with a clean environment (no PYTHONPATH, no SQUALL_*), from / (no source tree)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SQUALL_", "VIRTUAL_ENV"))}
    env.update(kw.pop("env", {}))
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd="/", env=env, **kw)


def _installed_names() -> set[str]:
    """Every file the repository's package folders hold that an install must carry, named
    as installed: the Python modules, the web UI, the defaults, py.typed."""
    names = set()
    for installed, folder in FOLDERS.items():
        for path in (REPO / folder).rglob("*"):
            rel = path.relative_to(REPO / folder)
            if path.is_file() and "__pycache__" not in rel.parts and (
                    path.suffix in (".py", ".yaml", ".typed") or "webui" in rel.parts):
                if installed == "squall" and rel.parts[0] in ("daemons", "messaging", "conf"):
                    continue  # never inside squall/ itself
                names.add(f"{installed}/{rel.as_posix()}")
    return names


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel `python -m build` makes from a copy of the repository."""
    base = tmp_path_factory.mktemp("dist")
    src = base / "src"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, tracked.decode().split("\0")):  # what a clean checkout holds
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    started = time.monotonic()
    # --no-isolation: setuptools and Cython of the test environment (its "test" extra), not
    # a download of each per build; the build itself is the one a release runs, at -O0 (what
    # it makes is under test, not its speed: a seventh of the compile's CPU).
    out = run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(base / "out"), str(src)],
              timeout=600, env={"SQUALL_BUILD_OPT": "-O0"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    print(f"python -m build: {time.monotonic() - started:.1f}s")
    (sdist,) = (base / "out").glob("squall-*.tar.gz")
    (wheel,) = (base / "out").glob("squall-*.whl")
    return {"sdist": sdist, "wheel": wheel, "base": base}


def test_the_wheel_and_the_sdist_carry_every_module_the_data_and_the_compiled_build(dist):
    wheel = set(zipfile.ZipFile(dist["wheel"]).namelist())
    missing = sorted(_installed_names() - wheel)
    assert not missing, f"the wheel lacks {missing}"
    assert "squall/daemons/nimbus/webui/index.html" in wheel and "squall/conf/defaults.yaml" in wheel
    if shutil.which("cc"):  # the runtime's hot modules, compiled (squall/compiled.py)
        from squall.compiled import MODULES
        for module in MODULES:
            stem = module.replace(".", "/")
            assert any(n.startswith(stem + ".cpython-") and n.endswith(".so") for n in wheel), module
    with tarfile.open(dist["sdist"]) as tar:
        top = tar.getnames()[0].split("/")[0]
        sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for folder in FOLDERS.values():
        for path in (REPO / folder).rglob("*"):
            rel = path.relative_to(REPO)
            if path.is_file() and path.suffix in (".py", ".pxd", ".yaml", ".js", ".css", ".html"):
                assert rel.as_posix() in sdist, f"{top} lacks {rel}"


def _venv(python: str, where: Path) -> Path:
    out = run([python, "-m", "venv", str(where)])
    assert out.returncode == 0, out.stderr
    return where / "bin"


def _pip_install(bin_dir: Path, target: Path, **env: str) -> float:
    started = time.monotonic()
    out = run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(target)],
              timeout=600, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return time.monotonic() - started


def _runs_squall(bin_dir: Path) -> None:
    """`squall --version` and word count in local mode, from the installed package only."""
    out = run([str(bin_dir / "squall"), "--version"])
    assert out.returncode == 0 and re.search(r"squall, version \d", out.stdout), out.stdout + out.stderr
    where = run([str(bin_dir / "python"), "-c", "import squall, squall.daemons.http; print(squall.__file__)"])
    assert where.returncode == 0 and where.stdout.startswith(str(bin_dir.parent)), where.stdout + where.stderr
    out = run([str(bin_dir / "squall"), "run", str(REPO / "examples" / "wordcount.py"), "--local", "--duration", "5"])
    assert out.returncode == 0 and "final counts: the=" in out.stdout, out.stdout + out.stderr


def test_the_sdist_installs_and_runs_on_debians_python(dist, tmp_path):
    """The sdist through pip (it builds; plain Python, the compiled build is the wheel's
    test) on the distribution's own interpreter where there is one."""
    python = str(DEBIAN_PYTHON) if DEBIAN_PYTHON.exists() else sys.executable
    bin_dir = _venv(python, tmp_path / "venv")
    took = _pip_install(bin_dir, dist["sdist"], SQUALL_PURE="1")
    print(f"pip install of the sdist on {python}: {took:.1f}s")
    _runs_squall(bin_dir)


def _squall(bin_dir: Path, conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run([str(bin_dir / "squall"), *args], env={"SQUALL_CONF": str(conf)})


def test_the_wheel_installs_and_runs_a_dev_cluster_whose_workers_find_no_secret(dist, tmp_path, open_tmp_path):
    bin_dir = _venv(sys.executable, tmp_path / "venv")
    took = _pip_install(bin_dir, dist["wheel"])
    print(f"pip install of the wheel: {took:.1f}s")
    _runs_squall(bin_dir)
    compiled = run([str(bin_dir / "python"), "-c", "import squall.tuple as t, squall.compiled as c; "
                    "print(c.is_compiled(t))"])
    assert compiled.stdout.strip() == ("True" if shutil.which("cc") else "False"), compiled.stderr

    directory = open_tmp_path / "dev"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SQUALL_"))}
    with dev_cluster.running([str(bin_dir / "squall"), "dev-cluster", "--supervisors", "2",
                              "--slots-per-supervisor", "2", "--dir", str(directory)],
                             cwd=open_tmp_path, env=env) as (proc, banner):
        assert "SECURITY OFF" not in banner, banner  # workers as users of their own, out of the box
        conf = directory / "squall.yaml"
        client_conf = yaml.safe_load(conf.read_text())
        client = NimbusClient("127.0.0.1", client_conf["nimbus.port"], timeout=10,
                              access=ApiAccess.from_conf(client_conf))
        out = _squall(bin_dir, conf, "submit", str(REPO / "examples" / "wordcount.py"))
        assert out.returncode == 0, out.stdout + out.stderr
        sec = directory / "security"
        secrets = [conf, directory / "supervisor-1" / "squall.yaml", directory / "nimbus" / "squall.yaml",
                   directory / "zookeeper-auth.yaml", *sorted(p for p in sec.iterdir() if p.is_file())]
        out = _squall(bin_dir, conf, "submit", str(ISOLATION_TOPOLOGIES / "snoop.py"), "--name", "snoop",
                      "-c", "test.snoop.paths=[" + ", ".join(map(str, secrets)) + "]",
                      "-c", f"test.snoop.dirs=[{sec}, {directory / 'supervisor-1'}]")
        assert out.returncode == 0, out.stdout + out.stderr

        def acked() -> int:
            status = json.loads(_squall(bin_dir, conf, "status", "wordcount", "--json").stdout or "{}")
            return sum(c.get("acked", 0) for c in status.get("components", []) if c["id"] == "sentences")

        deadline = time.monotonic() + 90
        while acked() == 0:
            assert time.monotonic() < deadline, (directory / "logs" / "supervisor-1.log").read_text()[-4000:]
            time.sleep(0.5)
        deadline = time.monotonic() + 60
        while not (reports := [e["error"] for e in client.topology_errors("snoop")["errors"]
                               if e["component"] == "snoop"]):
            assert time.monotonic() < deadline, "no report from the snooping topology"
            time.sleep(0.5)
        found = [line for line in reports[-1].splitlines()[1:] if not line.startswith("DENIED ")]
        assert found == [], "a topology of the dev cluster read:\n" + "\n".join(found)
        workers = [p for p in psutil.Process(proc.pid).children(recursive=True)
                   if "squall.daemons.worker.main" in " ".join(p.cmdline())]
        uids = {p.uids().real for p in workers}
        assert len(workers) >= 2 and min(uids) >= FIRST_UID, uids
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "squall dev cluster stopped" in out, out
