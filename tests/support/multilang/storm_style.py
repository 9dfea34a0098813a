"""A split bolt that talks to its parent the way Storm's own ``storm.py`` adapter does
(written here, not Storm's file): every emit waits for its task ids, and the tuples that
arrive meanwhile are queued; heartbeats are answered with ``sync``; each tuple is acked
after its words (storm.py's BasicBolt). Line-per-line JSON messages ended by ``end``.

``python3 storm_style.py`` splits the tuple's last field into words, one tuple each; with
``--report-ids`` it then emits [word, the task ids it got for it] on the stream ``ids``."""
import json
import os
import sys
from collections import deque

commands = deque()  # tuples read while waiting for task ids
REPORT_IDS = "--report-ids" in sys.argv[1:]


def read_message():
    lines = []
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)  # the parent closed stdin
        if line.rstrip("\n") == "end":
            return json.loads("".join(lines))
        lines.append(line)


def send(message):
    sys.stdout.write(json.dumps(message) + "\nend\n")
    sys.stdout.flush()


def task_ids():
    while True:
        message = read_message()
        if isinstance(message, list):
            return message
        commands.append(message)


def next_command():
    return commands.popleft() if commands else read_message()


def main():
    setup = read_message()
    pid = os.getpid()
    send({"pid": pid})
    open(os.path.join(setup["pidDir"], str(pid)), "w").close()
    while True:
        tup = next_command()
        if isinstance(tup, list):
            continue  # task ids nobody waits for
        if tup.get("task") == -1 and tup.get("stream") == "__heartbeat":
            send({"command": "sync"})
            continue
        for word in str(tup["tuple"][-1]).split():
            send({"command": "emit", "anchors": [tup["id"]], "tuple": [word]})  # no need_task_ids: true
            ids = task_ids()
            if REPORT_IDS:
                send({"command": "emit", "stream": "ids", "anchors": [tup["id"]], "tuple": [word, ids]})
                task_ids()
        send({"command": "ack", "id": tup["id"]})


if __name__ == "__main__":
    main()
