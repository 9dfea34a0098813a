"""A real Spark standalone cluster on this machine, from the pyspark package.

``SparkStandalone`` starts a master and one worker (``spark-class
org.apache.spark.deploy.master.Master`` / ``...worker.Worker``) on free 127.0.0.1 ports,
with their web UIs on free loopback ports too, logs and work directories under a base
directory, and ``SPARK_LOCAL_IP=127.0.0.1``. ``stop()`` ends them by PID (SIGTERM, then
SIGKILL), and with them any executor JVM the worker left behind.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

import psutil

from squall.errors import SquallError
from squall.testing.zookeeper import free_port

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


class SparkClusterError(SquallError, RuntimeError):
    """The master or worker did not start."""


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkStandalone:
    def __init__(self, base: Path, cores: int = 2, memory: str = "2g") -> None:
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.cores, self.memory = cores, memory
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_LOG_DIR": str(self.base / "logs"), "SPARK_WORKER_DIR": str(self.base / "work"),
                    "SPARK_NO_DAEMONIZE": "1"}

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.base / f"{name}.log", "ab")
        try:
            proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], stdout=log,
                                    stderr=subprocess.STDOUT, env=self.env, cwd=self.base, start_new_session=True)
        finally:
            log.close()
        self.procs[name] = proc
        return proc

    def _wait_log(self, name: str, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        path = self.base / f"{name}.log"
        while True:
            if text in path.read_text(errors="replace"):
                return
            if self.procs[name].poll() is not None:
                raise SparkClusterError(f"spark {name} exited with {self.procs[name].returncode}; see {path}")
            if time.monotonic() > deadline:
                raise SparkClusterError(f"spark {name} did not log {text!r} within {timeout}s; see {path}")
            time.sleep(0.1)

    def start(self, timeout: float = 90.0) -> "SparkStandalone":
        try:
            self._spawn("master", MASTER, "--host", "127.0.0.1", "--port", str(self.port),
                        "--webui-port", str(free_port()))
            self._wait_log("master", "I have been elected leader", timeout)
            self._spawn("worker", WORKER, self.url, "--host", "127.0.0.1", "--cores", str(self.cores),
                        "--memory", self.memory, "--webui-port", str(free_port()),
                        "--work-dir", str(self.base / "work"))
            self._wait_log("worker", "Successfully registered with master", timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        children: list[psutil.Process] = []
        for proc in self.procs.values():
            try:
                children += psutil.Process(proc.pid).children(recursive=True)
            except psutil.Error:
                pass
        for proc in reversed(list(self.procs.values())):  # the worker first
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for child in children:  # executors the worker did not take down with it
            try:
                child.kill()
            except psutil.Error:
                pass

    def __enter__(self) -> "SparkStandalone":
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
