"""Hosts on one machine: network namespaces joined by a bridge, for multi-host tests.

``Hosts(["a", "b", "c"])`` makes one namespace per host plus one holding a bridge (the
switch), a veth pair from each host to the bridge, and the address ``10.231.0.<n>`` on each
host (its own loopback up too). Only processes inside these namespaces can use those
addresses: the root namespace routes 10.x off the machine. ``run_in(host, fn)`` runs ``fn`` on
a thread that has entered the host's namespace, so that whatever it starts (ZooKeeper,
nimbus, clients) lives there; ``prefix(host)`` is the command prefix that starts a process
on another host. ``link_down(host)`` pulls a host's cable. ``close()`` ends every process
left in the namespaces (ours: nothing else runs there) and deletes them, whatever happened.

Needs root and ``ip`` (iproute2); ``unavailable()`` says why not, for a skip.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
SUBNET = "10.231.0"
_LIBC = ctypes.CDLL(None, use_errno=True)


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (this suite runs as root locally and in CI)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make network namespaces"
    probe = f"sqprobe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")


class Hosts:
    """Namespaced hosts on one bridge (see the module doc)."""

    def __init__(self, names: list[str]) -> None:
        tag = uuid.uuid4().hex[:5]
        self.names = list(names)
        self.switch = f"sq{tag}-sw"
        self.ns = {name: f"sq{tag}-{name}" for name in names}
        self.address = {name: f"{SUBNET}.{i + 1}" for i, name in enumerate(names)}
        self._port = {name: f"sq{tag}p{i}" for i, name in enumerate(names)}  # the switch's end
        self._made: list[str] = []
        try:
            self._make(tag)
        except BaseException:
            self.close()
            raise

    def _make(self, tag: str) -> None:
        subprocess.run(["ip", "netns", "add", self.switch], check=True, capture_output=True)
        self._made.append(self.switch)
        _ip("link", "add", "br0", "type", "bridge", ns=self.switch)
        _ip("link", "set", "br0", "up", ns=self.switch)
        for i, name in enumerate(self.names):
            ns, port, nic = self.ns[name], self._port[name], f"sq{tag}h{i}"
            subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
            self._made.append(ns)
            _ip("link", "add", nic, "type", "veth", "peer", "name", port)
            _ip("link", "set", nic, "netns", ns)
            _ip("link", "set", port, "netns", self.switch)
            _ip("link", "set", port, "master", "br0", ns=self.switch)
            _ip("link", "set", port, "up", ns=self.switch)
            _ip("link", "set", "lo", "up", ns=ns)
            _ip("link", "set", nic, "name", "eth0", ns=ns)
            _ip("addr", "add", f"{self.address[name]}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)

    def prefix(self, host: str) -> list[str]:
        """The command prefix that runs a process on ``host``."""
        return ["ip", "netns", "exec", self.ns[host]]

    def run_in(self, host: str, fn: Callable[[], T], timeout: float) -> T:
        """``fn()`` on a thread inside ``host``'s namespace (and whatever it starts there);
        its result, or its exception re-raised here."""
        out: dict[str, Any] = {}

        def body() -> None:
            fd = os.open(f"/var/run/netns/{self.ns[host]}", os.O_RDONLY)
            try:
                if _LIBC.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {self.ns[host]} failed")
            finally:
                os.close(fd)
            try:
                out["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                out["error"] = exc

        thread = threading.Thread(target=body, name=f"in-{host}", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"what ran on host {host} did not finish within {timeout}s")
        if "error" in out:
            raise out["error"]
        return out["value"]

    def link_down(self, host: str) -> None:
        """Pull ``host``'s cable: its end at the switch goes down."""
        _ip("link", "set", self._port[host], "down", ns=self.switch)

    def close(self) -> None:
        """End every process left in the hosts' namespaces, then delete the namespaces."""
        for ns in self._made:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self._made.clear()

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
