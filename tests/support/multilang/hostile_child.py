"""A multilang bolt or spout child that misbehaves on purpose (raw protocol, no library).

    hostile_child.py MODE N MARKER

The first child (the MARKER file does not exist yet) writes its pid to MARKER, behaves for N
tuples (or spout commands) and then does MODE; a restarted child (MARKER exists) behaves.
Behaving means: a bolt emits [word, "ok"] anchored to each input and acks it, answers
heartbeats with sync; a spout emits ids 0..N-1 (word "w<i>") and syncs. Modes: die, hang,
garbage, huge, flood, wrong-handshake, no-handshake, fork (a process it forks carries on
behaving with its pipes, its pid in MARKER.fork, while the original exits), chatter (emits
for ever, reading the task ids of each as storm.py does, one emit ahead), deaf (emits for
ever, asking for task ids it never reads), ok.
"""
import json
import os
import sys
import time

mode, n, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
first = not os.path.exists(marker)
if first:
    with open(marker, "w") as fh:
        fh.write(str(os.getpid()))
else:
    mode = "ok"


def read():
    lines = []
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        if line.rstrip("\n") == "end":
            return json.loads("\n".join(lines))
        lines.append(line.rstrip("\n"))


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\nend\n")
    sys.stdout.flush()


def misbehave():
    global mode
    if mode == "die":
        sys.stderr.write("hostile child: dying now\n")
        sys.stderr.flush()
        os._exit(3)
    if mode == "hang":
        time.sleep(3600)
    if mode == "garbage":
        sys.stdout.write("this is not json\nend\n")
        sys.stdout.flush()
        time.sleep(3600)
    if mode == "fork":
        pid = os.fork()
        if pid:
            with open(marker + ".fork", "w") as fh:
                fh.write(str(pid))
            os._exit(0)
        mode = "ok"
        return
    if mode == "chatter":  # one emit always ahead of the answer it waits for
        send({"command": "emit", "tuple": ["chat", "ok"]})
        while True:
            send({"command": "emit", "tuple": ["chat", "ok"]})
            while not isinstance(read(), list):
                pass
    if mode == "deaf":
        while True:
            send({"command": "emit", "tuple": ["deaf", "deaf"]})
    if mode == "huge":
        sys.stdout.write('{"command": "log", "msg": "' + "x" * (3 << 20))
        sys.stdout.flush()
        time.sleep(3600)


setup = read()
if mode == "no-handshake":
    time.sleep(3600)
if mode == "wrong-handshake":
    send({"command": "sync"})
    time.sleep(3600)
open(os.path.join(setup["pidDir"], str(os.getpid())), "w").close()
send({"pid": os.getpid()})
spout = setup["context"]["componentid"].startswith("spout")
handled = 0
emitted = 0
while True:
    msg = read()
    if isinstance(msg, list):
        continue  # task ids
    if mode == "flood":
        for i in range(200):
            sys.stderr.write(f"flood line {i} " + "y" * 100 + "\n")
            send({"command": "log", "msg": f"flood log {i}"})
        sys.stderr.flush()
    if spout:
        if msg.get("command") == "next":
            if handled >= n and first:
                misbehave()
            if emitted < n:
                send({"command": "emit", "id": emitted, "tuple": [f"w{emitted}"], "need_task_ids": False})
                emitted += 1
            handled += 1
        send({"command": "sync"})
        continue
    if msg.get("stream") == "__heartbeat":
        send({"command": "sync"})
        continue
    if handled >= n and first:
        misbehave()
    handled += 1
    send({"command": "emit", "anchors": [msg["id"]], "tuple": [msg["tuple"][0], "ok"], "need_task_ids": False})
    send({"command": "ack", "id": msg["id"]})
