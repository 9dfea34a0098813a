"""A real Redis server for tests: Debian's ``redis-server`` on a free 127.0.0.1 port, with
its own directory and no persistence, stopped by PID."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from squall.errors import SquallError
from squall.testing.zookeeper import free_port


class RedisError(SquallError, RuntimeError):
    """redis-server is not installed, cannot be installed, or did not start."""


def ensure_redis_installed() -> str:
    """The redis-server executable, installing Debian's package if it is missing."""
    found = shutil.which("redis-server")
    if found:
        return found
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise RedisError("redis-server not found: run `apt-get install -y redis-server` as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["install", "-y", "redis-server"], ["update"], ["install", "-y", "redis-server"]):
        subprocess.run(["apt-get", *args], env=env, capture_output=True, timeout=600)
        found = shutil.which("redis-server")
        if found:
            return found
    raise RedisError("`apt-get install -y redis-server` did not provide redis-server")


class RedisServer:
    def __init__(self, directory: str | Path | None = None) -> None:
        self._tmp: str | None = None
        if not directory:
            directory = self._tmp = tempfile.mkdtemp(prefix="squall-redis-")
        self.dir = Path(directory)
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> "RedisServer":
        exe = ensure_redis_installed()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        log = open(self.dir / "redis.log", "ab")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.dir), "--protected-mode", "yes", "--daemonize", "no"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.proc.poll() is not None:
                raise RedisError(f"redis-server exited with {self.proc.returncode}; see {self.dir / 'redis.log'}")
            if time.monotonic() > deadline:
                self.stop()
                raise RedisError(f"redis-server did not answer within {timeout}s")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
