"""An exactly-once counter: keyed events counted in checkpointed state, with failures.

    events (a StatefulSpout: its read position is in its state) -> check (fails some
    tuples, as a flaky service would) -> count (a StatefulBolt: counts per key in its state)

Every failure rolls the whole topology back to the last committed checkpoint and the
spout replays from its committed position, so no event is counted twice or missed.

The failures are on purpose: each logs a "checkpoint failed; rolling back" warning. Both local
runs end with a line saying whether every key's count is right ("keys counted wrong: 0").

Run it in local mode:   python examples/stateful_counter.py --events 20000
or through the CLI:     squall run examples/stateful_counter.py --local --duration 15
or on a cluster:        squall submit examples/stateful_counter.py   (state in SQLite files
                        under each supervisor's state dir; -c topology.state.provider=redis
                        -c topology.state.redis.url=redis://HOST:6379/0 for Redis)
"""
from __future__ import annotations

import argparse
import collections
import time

from squall import Bolt, StatefulBolt, StatefulSpout, TopologyBuilder

CONFIG = {"counter.events": 20_000, "counter.keys": 50, "counter.fail.every": 4000,
          "topology.max.spout.pending": 50_000, "topology.state.checkpoint.interval.ms": 500}


def key_of(i: int, keys: int) -> str:
    return f"user-{(i * 7919) % keys}"


class Events(StatefulSpout):
    """Events 0 .. counter.events-1, as read from a log at an offset kept in the state."""

    def open(self, conf, context, collector):
        self.collector = collector
        self.n, self.keys = int(conf["counter.events"]), int(conf["counter.keys"])

    def init_state(self, state):  # at start, and after every rollback
        self.state = state
        self.offset = state.get("offset", 0)

    def next_tuple(self):
        if self.offset < self.n:
            self.collector.emit([key_of(self.offset, self.keys), self.offset], msg_id=self.offset)
            self.offset += 1

    def pre_prepare(self, txid):  # the position is saved with everything else
        self.state.put("offset", self.offset)

    def declare_output_fields(self, declarer):
        declarer.declare(["key", "i"])


class FlakyCheck(Bolt):
    """Fails every ``counter.fail.every``-th event the first time it sees it."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.every = int(conf.get("counter.fail.every", 0))
        self.seen: set[int] = set()

    def execute(self, t):
        i = t["i"]
        if self.every and i % self.every == self.every - 1 and i not in self.seen:
            self.seen.add(i)
            self.collector.fail(t)  # the topology rolls back and replays
            return
        self.collector.emit(list(t.values), anchors=t)
        self.collector.ack(t)

    def declare_output_fields(self, declarer):
        declarer.declare(["key", "i"])


class Count(StatefulBolt):
    def execute(self, t):
        key = t["key"]
        self.state.put(key, self.state.get(key, 0) + 1)
        self.collector.ack(t)


def topology():
    b = TopologyBuilder()
    b.set_spout("events", Events())
    b.set_bolt("check", FlakyCheck(), 2).shuffle("events")
    b.set_bolt("count", Count(), 2).fields("check", ["key"])
    return b.build()


STORE = {"topology.state.provider": "memory"}  # local mode's store


def committed_offset(name: str) -> int:
    """How far the spout's committed position is (0 before the first checkpoint)."""
    from squall.state.inspect import committed_state, read_record

    record = read_record(STORE, name)
    if record is None:
        return 0
    return committed_state(STORE, name, "events", 0, record.restore_point())[1].get("offset", 0)


def verdict(name: str, events: int, keys: int) -> str:
    """Compare the committed counts with the events the spout has committed reading."""
    from squall.state.inspect import committed_state, read_record

    record = read_record(STORE, name)
    if record is None:
        return "no checkpoint committed yet: run longer"
    done = committed_offset(name)
    counts = collections.Counter()
    for task in range(2):
        counts.update(committed_state(STORE, name, "count", task, record.restore_point())[1])
    want = collections.Counter(key_of(i, keys) for i in range(done))
    wrong = sum(1 for k in want.keys() | counts.keys() if counts[k] != want[k])
    part = "" if done >= events else f" committed so far (run longer for all {events:,})"
    return (f"counted {sum(counts.values()):,} of {done:,} events{part} over {len(counts)} keys; keys counted wrong: "
            f"{wrong}; rollbacks: {record.recoveries - 1} (checkpoint txid {record.txid})")


def local_run_report(cluster, name, conf) -> str:
    """What ``squall run --local`` prints at the end: whether the counts are right."""
    return verdict(name, int(conf["counter.events"]), int(conf["counter.keys"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--fail-every", type=int, default=4000, help="0: no failures")
    args = parser.parse_args()

    from squall import LocalCluster
    from squall.logs import configure

    configure("console", "ERROR")  # rollbacks log warnings; the summary counts them
    conf = {**CONFIG, "counter.events": args.events, "counter.keys": args.keys,
            "counter.fail.every": args.fail_every}
    name = "stateful-counter"
    started = time.monotonic()
    with LocalCluster() as cluster:
        cluster.submit(name, conf, topology())
        while committed_offset(name) < args.events:  # until a checkpoint holds the last event
            time.sleep(0.2)
    print(f"{verdict(name, args.events, args.keys)}; {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
