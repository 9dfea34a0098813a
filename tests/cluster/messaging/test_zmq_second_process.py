"""ZeroMQ between two processes: 100 k messages from a second interpreter arrive exactly once,
in order."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from squall.config import build_config
from squall.messaging import make_context
from squall.testing.waiting import wait_for
from squall.testing.zookeeper import free_port

SENDER_SCRIPT = r"""
import sys
from squall.config import build_config
from squall.messaging import make_context

port, total, batch = (int(a) for a in sys.argv[1:4])
ctx = make_context(build_config({"squall.messaging.transport": "zmq"}, user_file=False))
client = ctx.connect("topo-1", "127.0.0.1", port)
for start in range(0, total, batch):
    client.send([(i % 7 + 1, b"m%d" % i) for i in range(start, min(start + batch, total))])
client.close()
ctx.term()  # returns once every queued batch is delivered (or the linger runs out)
print("sent", total, flush=True)
"""


@pytest.mark.timeout(120)
def test_zmq_100k_messages_from_a_second_process_arrive_exactly_once(tmp_path):
    total, batch = 100_000, 500
    zctx = make_context(build_config({"squall.messaging.transport": "zmq", "zmq.bind.host": "127.0.0.1"},
                                     user_file=False))
    server = zctx.bind("topo-1", free_port())
    batches: list[list[tuple[int, bytes]]] = []
    server.register_recv(lambda got: batches.append([(t, p) for t, p in got]))
    messages = lambda: [m for b in batches for m in b]  # noqa: E731
    # cwd outside the repo: the checkout must not shadow the installed squall packages.
    proc = subprocess.Popen([sys.executable, "-c", SENDER_SCRIPT, str(server.port), str(total),
                             str(batch)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.strip() == f"sent {total}"
        wait_for(lambda: len(messages()) >= total, timeout=30, what=f"{total} messages")
        time.sleep(0.1)  # a duplicate would show up right behind the last message
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        zctx.term()
    msgs = messages()
    assert len(msgs) == total
    assert len(batches) == total // batch
    assert sorted(msgs, key=lambda m: int(m[1][1:])) == [(i % 7 + 1, b"m%d" % i) for i in range(total)]
    assert msgs == [(i % 7 + 1, b"m%d" % i) for i in range(total)]  # one sender: in order
