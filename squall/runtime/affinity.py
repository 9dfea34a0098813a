"""CPU affinity for a worker's runtime threads."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any


def spread_key(port: int, slot_ports: Sequence[int], local_pid: int | None = None) -> int:
    """The number that spreads a worker over the CPUs: its slot's place among its
    supervisor's ``slot_ports`` (sorted), so a host's workers take the CPUs in turn whatever
    its ports are (by port alone, two workers on ports of the same parity, e.g. a dev
    cluster's free ports, shared one CPU and left the other idle); the port itself where the
    slots are unknown; plus ``local_pid`` in local mode, where every process numbers from 1."""
    ports = sorted(set(slot_ports))
    key = ports.index(port) if port in ports else port
    return key + (local_pid or 0)


def choose_cpu(key: int) -> int | None:
    """The CPU for a worker's runtime threads: ``key`` spreads workers (a worker's port
    on a cluster host; port plus pid in local mode, where every process numbers from 1)."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return allowed[key % len(allowed)] if len(allowed) > 1 else None


def worker_cpu(conf: Mapping[str, Any], port: int) -> int | None:
    """The CPU a worker's threads run on (None: not pinned, ``worker.pin.cpu`` off or one CPU)."""
    if not conf.get("worker.pin.cpu"):
        return None
    local = conf.get("squall.messaging.transport") == "local"
    return choose_cpu(spread_key(port, conf.get("supervisor.slots.ports") or (), os.getpid() if local else None))


def io_cpus(cpu: int | None) -> tuple[int, ...]:
    """The CPUs for a worker's threads that run no Python (ZeroMQ's I/O): every CPU it may
    use but ``cpu``, where its executor thread runs; () (any) when it is not pinned."""
    if cpu is None:
        return ()
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return ()
    return tuple(sorted(allowed - {cpu}))


def pin_thread(cpu: int | None) -> None:
    """Pin the calling thread (Linux affinity is per thread) to ``cpu``. Only one thread
    of a process runs Python at a time; letting them hop between cores makes every GIL
    handoff a cross-core wake-up with cold caches (measured here: about 25% throughput)."""
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:
            pass
