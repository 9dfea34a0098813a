#!/usr/bin/env python3
"""A shell bolt's conversation with its child alone: ``python bench/conversation_cost.py
SCENARIO [--turns N] [--json]``.

The parent's side of one round trip of Storm's ``storm.py`` (which waits for the task ids of
every emit), as squall's ShellBolt does it, without the rest of a worker: wait for the
child's output (``ChildProcess.converse``), read and check its messages
(``ChildLink.receive``: the framing, the JSON, the protocol's checks), answer the task ids
(``encode_task_ids``, ``send``). The child is a real process that writes one message per
answer it reads. Reports the process CPU time per message; under ``valgrind
--tool=callgrind`` (``compare_trees.py --conversation --callgrind``) the instruction count
per message, which the machine's load does not move (the child is not traced, and the
parent waits in one ``select`` per message whatever the child's speed). Scenarios:

- ``storm-py-emit``: the emit storm.py's split writes per word (one anchor, one value);
- ``storm-py-emit-crlf``: the same with CRLF line ends (a child on Windows): the framing's
  walk of each line.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import structlog

from squall.logs import configure
from squall.multilang import protocol
from squall.multilang.link import READY, ChildLink
from squall.multilang.settings import ShellSettings

EMIT = b'{"command": "emit", "anchors": ["17"], "tuple": ["jumps"]}'
CHILD = r"""
import os, sys
msg = sys.argv[1].encode() + sys.argv[2].encode().decode("unicode_escape").encode()
os.write(1, b'{"pid": %d}\nend\n' % os.getpid())
for line in sys.stdin.buffer:  # an answer ends with its "end" line
    if line == b"end\n":
        os.write(1, msg)
"""
SCENARIOS = {"storm-py-emit": "\\nend\\n", "storm-py-emit-crlf": "\\r\\nend\\r\\n"}


def converse(scenario: str, turns: int) -> dict[str, float]:
    settings = ShellSettings.from_conf({})
    link = ChildLink("bolt", [sys.executable, "-c", CHILD, EMIT.decode(), SCENARIOS[scenario]], None,
                     {"PATH": "/usr/bin:/bin"}, settings, {}, {}, structlog.get_logger(),
                     lambda text: print(text, file=sys.stderr))
    link.start(time.monotonic())
    child = link.child
    assert child is not None
    answers, started = 0, time.process_time()
    try:
        while answers < turns:
            if not child.converse(5.0):
                raise SystemExit("the child wrote nothing for 5 s")
            for msg in link.receive(time.monotonic(), protocol.BOLT_COMMANDS):
                if msg.command != "emit":
                    raise SystemExit(f"the child sent {msg.command!r}")
                link.send(link.encode_task_ids((5,)))
                answers += 1
            if answers == 0 and link.state == READY and not child.pending:
                link.send(link.encode_task_ids((5,)))  # after the handshake: the first answer starts it
        cpu = time.process_time() - started
    finally:
        link.close()
    return {"cpu_ns_per_tuple": round(cpu * 1e9 / turns), "tuples": turns}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--turns", type=int, default=20_000, help="messages answered")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    configure("console", "WARNING")
    result = converse(args.scenario, args.turns)
    print(json.dumps(result) if args.json else f"{args.scenario}: {result['cpu_ns_per_tuple']} ns CPU per message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
