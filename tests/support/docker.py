"""A Docker engine of the test's own: Debian's dockerd with its own socket, exec root and pid
file, so that it never meets a Docker the host runs (DESIGN.md's practical notes).

Its data root (images and the build cache) stays between runs in ``DATA_ROOT``, so a second
run builds only what changed; one engine at a time uses it (a lock file: another test run on
this machine waits for it). ``start`` says in one line why no engine can run here."""
from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DATA_ROOT = Path(os.environ.get("SQUALL_TEST_DOCKER_ROOT", "/var/lib/squall-test-docker"))
READY_SECS = 30.0
LOCK_WAIT_SECS = 900.0  # another run's compose test: a few minutes at most
STOP_SECS = 20.0


class NoDocker(RuntimeError):
    """No Docker engine can run here; the message says why in one line."""


@dataclass
class DockerEngine:
    run_dir: Path
    proc: subprocess.Popen[bytes]
    lock: int
    env: dict[str, str] = field(default_factory=dict)

    @property
    def host(self) -> str:
        return f"unix://{self.run_dir / 'docker.sock'}"

    def docker(self, *args: str, timeout: float = 120, check: bool = True, **kw) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, env=self.env, **kw)
        if check and out.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)}: {out.stderr.strip()[-2000:]}")
        return out

    def stop(self) -> None:
        """Stop dockerd by its PID, unmount what it leaves mounted, remove its run dir."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(STOP_SECS)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            for mount in _mounts_under(self.run_dir):
                subprocess.run(["umount", "-l", mount], capture_output=True, timeout=30)
            shutil.rmtree(self.run_dir, ignore_errors=True)
        finally:
            os.close(self.lock)


def _mounts_under(path: Path) -> list[str]:
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    points = [line.split()[1] for line in lines if len(line.split()) > 1]
    return sorted((p for p in points if p.startswith(str(path) + "/")), key=len, reverse=True)


def start() -> DockerEngine:
    """dockerd, ready; NoDocker naming why when it cannot run."""
    if os.geteuid() != 0:
        raise NoDocker("no Docker engine: dockerd needs root and this test runs as uid "
                       f"{os.geteuid()}")
    for tool in ("dockerd", "docker", "docker-compose"):
        if shutil.which(tool) is None:
            raise NoDocker(f"no Docker engine: {tool} is missing (scripts/test.sh installs docker.io and "
                           "docker-compose from Debian)")
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    os.chmod(DATA_ROOT, 0o700)
    lock = os.open(DATA_ROOT.parent / f".{DATA_ROOT.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + LOCK_WAIT_SECS
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(lock)
                raise NoDocker(f"no Docker engine: {DATA_ROOT} stayed in use by another test run") from None
            time.sleep(1)
    run_dir = Path(tempfile.mkdtemp(prefix="sqd-", dir="/tmp"))  # short: socket paths are bounded
    log = open(run_dir / "dockerd.log", "wb")  # noqa: SIM115 - dockerd's own log, read on failure
    proc = subprocess.Popen(
        ["dockerd", "--data-root", str(DATA_ROOT), "--exec-root", str(run_dir / "exec"),
         "--pidfile", str(run_dir / "docker.pid"), "--host", f"unix://{run_dir / 'docker.sock'}"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    env = {**os.environ, "DOCKER_HOST": f"unix://{run_dir / 'docker.sock'}"}
    env.pop("DOCKER_CONTEXT", None)
    engine = DockerEngine(run_dir, proc, lock, env)
    deadline = time.monotonic() + READY_SECS
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = (run_dir / "dockerd.log").read_text(errors="replace").strip().splitlines()[-1:]
            engine.stop()
            raise NoDocker(f"no Docker engine: dockerd did not start ({' '.join(tail) or 'no output'})")
        if engine.docker("version", check=False, timeout=10).returncode == 0:
            return engine
        time.sleep(0.3)
