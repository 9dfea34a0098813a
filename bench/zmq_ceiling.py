"""The transport ceiling: tuples/s between two plain Python processes over ZeroMQ.

The sender builds Storm-shaped tuples ``[src_task, "default", [value], None]`` in batches
of 1000, packs each batch with msgpack (one payload per batch, as the runtime does), wraps
it in one squall frame and PUSHes it over 127.0.0.1. The receiver (this process) PULLs,
decodes the frame and unpacks the payload. No squall runtime is involved: this is the
figure the runtime can approach, not exceed. With ``curve`` both sockets use CurveZMQ
(keys passed to the sender in SQUALL_BENCH_CURVE), as workers do by default.

    python bench/zmq_ceiling.py [seconds]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import msgpack
import psutil
import zmq

from squall.messaging import CurveKeys, codec
from squall.messaging.curve import apply_curve

BATCH = 1000
_WARMUP_SECS = 0.5


def _sender(port: int, seconds: float) -> None:
    """Child process: push batches until ``seconds`` pass (the parent kills it anyway)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    keys = os.environ.get("SQUALL_BENCH_CURVE")
    if keys:
        apply_curve(sock, CurveKeys(*keys.split(",")), server=False)
    sock.setsockopt(zmq.SNDHWM, 1000)
    sock.setsockopt(zmq.LINGER, 0)  # the parent stops counting before we stop sending
    sock.connect(f"tcp://127.0.0.1:{port}")
    packb, encode, send = msgpack.packb, codec.encode_tasks, sock.send
    deadline = time.monotonic() + seconds
    src_task, value = 1, 0
    while time.monotonic() < deadline:
        rows = [[src_task, "default", [v], None] for v in range(value, value + BATCH)]
        value += BATCH
        send(encode([(7, packb(rows))]))
    sock.close()
    ctx.term()


def run(duration: float, curve: bool = False) -> dict:
    """Measure for ``duration`` seconds after a short warm-up; returns tuples/s."""
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    env = dict(os.environ)
    if curve:  # no ZAP handler here: any client with the server key is let in
        keys = CurveKeys.generate()
        apply_curve(pull, keys, server=True)
        env["SQUALL_BENCH_CURVE"] = f"{keys.public},{keys.secret}"
    pull.setsockopt(zmq.RCVHWM, 1000)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    # The child outlives the window by a margin so the window is always full; it is killed
    # by PID once we are done. cwd outside the repo so the checkout cannot shadow squall.
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--send", str(port),
         str(duration + _WARMUP_SECS + 5.0)],
        cwd=tempfile.gettempdir(), env=env)
    try:
        unpackb, decode, recv = msgpack.unpackb, codec.decode, pull.recv
        if not pull.poll(10_000):
            raise RuntimeError("sender sent nothing within 10 s")
        warm_end = time.monotonic() + _WARMUP_SECS
        while time.monotonic() < warm_end:
            for _task, payload in decode(recv())[1]:
                unpackb(payload)
        tuples = 0
        # CPU time of both processes over the window: unlike tuples/s, it hardly depends on
        # what else the machine runs.
        sender = psutil.Process(child.pid)
        cpu0 = time.process_time() + sum(sender.cpu_times()[:2])
        started = time.monotonic()
        end = started + duration
        while True:
            # The time check every frame is cheap next to unpacking 1000 tuples.
            now = time.monotonic()
            if now >= end:
                break
            if not pull.poll(1000):
                raise RuntimeError("sender stopped sending")
            for _task, payload in decode(recv())[1]:
                tuples += len(unpackb(payload))
        seconds = now - started
        cpu = time.process_time() + sum(sender.cpu_times()[:2]) - cpu0
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        pull.close()
        ctx.term()
    return {"tuples_per_sec": tuples / seconds, "tuples": tuples, "seconds": seconds,
            "cpu_ns_per_tuple": 1e9 * cpu / max(tuples, 1)}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--send":
        _sender(int(sys.argv[2]), float(sys.argv[3]))
    else:
        print(json.dumps(run(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0)))
