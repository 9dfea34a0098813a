"""Kafka through a real cluster while workers are SIGKILLed and the broker goes away.

``plain``: N keyed records (plus undecodable ones and a 900 kB one) go from a topic through
KafkaSpout -> tag -> KafkaBolt to another topic. Every decodable input reaches the output
at least once, every undecodable one reaches the dead-letter topic, and whenever the
group's committed offsets are sampled, every input below them is already in the output.
Then the broker is away for 30 s (every connection reset, connections refused) and comes
back: nothing is lost and no worker ends. ``eos``: the same records through a
CheckpointedKafkaSpout into a stateful count whose every update a TransactionalKafkaBolt
writes to another topic, through 5 kills and the broker stopped for 20 s: the committed
counts are exact and the output, read committed, holds every count exactly once.

SQUALL_KAFKA_CHAOS_LONG=1 runs more records and kills. Prints
``kafka-chaos: records=N kills=K lost=0 duplicates=D ...``.
"""
from __future__ import annotations

import collections
import os
import random
import signal
import time

import pytest

from squall.testing.cluster import ProcessCluster
from squall.testing.state import committed_component, wait_committed
from support.kafka import committed, create_topic, produce, read_all
from support.kafka_log import read_committed_log
from support.paths import CLUSTER_TOPOLOGIES

pytestmark = pytest.mark.cluster

TOPOLOGY = CLUSTER_TOPOLOGIES / "kafka_pipeline.py"
LONG = os.environ.get("SQUALL_KAFKA_CHAOS_LONG") == "1"
PARTITIONS, KEYS = 4, 23
BAD = 5            # undecodable records (not UTF-8)
LATE_BAD = 2       # more of them, sent at the end
HUGE = 900_000     # bytes of the one huge record (Kafka's default limit is 1 MB)
SECRET_ENV, SECRET = "KPIPE_TEST_SECRET", "s3cret-value-that-must-never-show"


def inputs(n: int) -> list[tuple[bytes, bytes]]:
    recs = [(f"k{i % KEYS}".encode(), str(i).encode()) for i in range(n)]
    for j in range(BAD):
        recs.insert((j + 1) * n // (BAD + 1), (b"bad", b"\xff\xfe bad " + str(j).encode()))
    recs.insert(n // 3, (b"huge", b"h" * HUGE))
    return recs


def submit(cluster: ProcessCluster, name: str, env: dict[str, str], bootstrap: str, *extra: str) -> None:
    os.environ.update(env)  # the topology file reads its topics at build time (the CLI's process)
    try:
        res = cluster.cli("submit", str(TOPOLOGY), "--name", name, "-c", "topology.workers=3",
                          "-c", f"kafka.bootstrap.servers={bootstrap}", *extra)
    finally:
        for k in env:
            os.environ.pop(k, None)
    assert res.returncode == 0, res.stdout + res.stderr


def kill_workers(cluster: ProcessCluster, rng: random.Random, kills: int, progress, what: str) -> int:
    """SIGKILL a random worker ``kills`` times, each after some progress; returns kills done."""
    done = 0
    for _ in range(kills):
        before = progress()
        cluster.wait_for(lambda: progress() > before + 500, 120, f"progress before a kill ({what})", interval=0.5)
        pids = cluster.worker_pids()
        victim = rng.choice(sorted(pids.values()))
        os.kill(victim, signal.SIGKILL)
        done += 1
        cluster.wait_for(lambda: len(cluster.worker_pids()) == 3 and victim not in cluster.worker_pids().values(),
                         90, "the killed worker relaunched")
    return done


def settled_workers(cluster: ProcessCluster, quiet: float = 7.0, timeout: float = 90.0) -> set[int]:
    """The workers' pids once the set has held still for ``quiet`` seconds. A killed worker's
    supervisor relaunches it at once, but nimbus, noticing the dead executors' heartbeats only
    after nimbus.task.timeout.secs (5 s here), may then move them to another slot, ending the
    relaunched worker: a set taken before that is not the one an outage must leave alone."""
    deadline = time.monotonic() + timeout
    pids, since = set(cluster.worker_pids().values()), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            raise AssertionError(f"the workers did not settle within {timeout:.0f}s: {sorted(pids)}")
        time.sleep(0.5)
        now = set(cluster.worker_pids().values())
        if now != pids or len(now) != 3:
            pids, since = now, time.monotonic()
    return pids


def sample_value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.timeout(900)
def test_kafka_at_least_once_under_kills_and_a_broker_outage(kafka_broker, zk_server, zk_root, tmp_path, capsys):
    n, kills = (60_000, 5) if LONG else (12_000, 2)
    rng = random.Random(int(os.environ.get("SQUALL_CHAOS_SEED", "19")))
    bs = kafka_broker.bootstrap
    t_in, t_out, t_dead = (kafka_broker.topic_name(s) for s in ("in", "out", "dead"))
    group = f"g-{t_in}"
    create_topic(bs, t_in, PARTITIONS)
    create_topic(bs, t_out, 2)
    create_topic(bs, t_dead, 1)
    recs = inputs(n)
    produce(bs, t_in, recs)
    want = {}  # (partition, offset) -> value of every decodable input, read back as stored
    bad = set()
    for m in read_all(bs, t_in, len(recs)):
        try:
            want[(m.partition(), m.offset())] = m.value().decode()
        except UnicodeDecodeError:
            bad.add((m.partition(), m.offset()))
    assert len(want) == n + 1 and len(bad) == BAD

    def out_coords() -> collections.Counter:
        return collections.Counter(tuple(map(int, m.value().decode().split(":", 2)[:2]))
                                   for m in read_all(bs, t_out, idle=1.0))

    started = time.monotonic()
    cluster = ProcessCluster(zk_server.port, zk_root, tmp_path / "cluster", supervisors=2, slots=2)
    violations, samples = [], 0
    os.environ[SECRET_ENV] = SECRET  # the supervisors' environment, which their workers inherit
    try:
        cluster.start()
        os.environ.pop(SECRET_ENV)
        # A secret by reference: the workers resolve it (a missing one would stop the spout's open).
        submit(cluster, "kpipe", {"KPIPE_IN": t_in, "KPIPE_OUT": t_out, "KPIPE_DEAD": t_dead, "KPIPE_GROUP": group},
               bs, "-c", f'kafka.secrets={{"sasl.password": "env:{SECRET_ENV}"}}')
        cluster.wait_for(lambda: len(cluster.worker_pids()) == 3, 60, "three workers")

        def progress() -> int:
            return sum(committed(bs, group, t_in, PARTITIONS).values())

        def check_commits() -> None:
            """Sampled committed offsets, then the output: every input below them is there."""
            nonlocal samples
            samples += 1
            marks = committed(bs, group, t_in, PARTITIONS)
            seen = out_coords()
            for (p, o) in want:
                if o < marks.get(p, 0) and (p, o) not in seen:
                    violations.append((p, o, marks[p]))

        done_kills = kill_workers(cluster, rng, kills, progress, "kills")
        check_commits()
        # The broker goes away for 30 s while records flow, then comes back.
        before = settled_workers(cluster)
        kafka_broker.gate.away(30)
        time.sleep(31)
        cluster.wait_for(lambda: progress() > 0 and set(cluster.worker_pids().values()) == before, 10,
                         "workers alive after the outage")
        check_commits()
        total = len(want) + BAD
        cluster.wait_for(lambda: progress() >= total, 300, f"all {total} offsets committed", interval=1.0)
        check_commits()
        # Counters start over in a relaunched worker: the metric check uses undecodable
        # records sent now, after the last kill, which the running workers must count.
        produce(bs, t_in, [(b"bad", b"\xff\xfe late " + str(j).encode()) for j in range(LATE_BAD)])
        cluster.wait_for(lambda: progress() >= total + LATE_BAD, 120, "the late records committed", interval=0.5)
        seen = out_coords()
        dead = read_all(bs, t_dead, BAD + LATE_BAD, idle=1.0)
        token = cluster.credentials.add_user("prom", "viewer")
        metrics = cluster.wait_for(lambda: (lambda t: t if sample_value(
            t, "squall_metric_kafka_decode_failures_total") >= LATE_BAD else None)(cluster.scrape(token)),
            60, "decode failures in the supervisors' /metrics")
        status = cluster.cli("status", "kpipe")
        worker_alive = set(cluster.worker_pids().values()) == before
        shown = cluster.client.topology_conf("kpipe")  # what the web UI's configuration table shows
        refused = cluster.cli("submit", str(TOPOLOGY), "--name", "leaky", "-c",
                              f'kafka.client.config={{"sasl.password": "{SECRET}"}}')
    finally:
        os.environ.pop(SECRET_ENV, None)
        cluster.stop()
    # The secret is nowhere a reader of the topology looks: its conf, its status, any log.
    assert shown["conf"]["kafka.secrets"] == {"sasl.password": f"env:{SECRET_ENV}"}
    assert SECRET not in repr(shown) and SECRET not in status.stdout + status.stderr
    assert refused.returncode != 0 and "kafka.secrets" in refused.stdout + refused.stderr
    assert SECRET not in refused.stdout + refused.stderr
    logs = [p for p in (tmp_path / "cluster").rglob("*.log*") if p.is_file()]
    assert logs and not [p for p in logs if SECRET.encode() in p.read_bytes()]
    lost = [k for k in want if k not in seen]
    dups = sum(c - 1 for k, c in seen.items() if k in want)
    dead_coords = {(m.key(), m.value()) for m in dead}
    line = (f"kafka-chaos: records={len(want) + BAD} kills={done_kills} lost={len(lost)} duplicates={dups} "
            f"undecodable={BAD + LATE_BAD} dead_letters={len(dead)} commit_samples={samples} "
            f"violations={len(violations)} "
            f"broker_away_secs=30 seconds={time.monotonic() - started:.0f}")
    with capsys.disabled():
        print("\n" + line)
    assert not lost, (line, lost[:10])
    assert not violations, violations[:10]
    assert len({v for _, v in dead_coords}) == BAD + LATE_BAD
    assert all(v.startswith(b"\xff\xfe") for _, v in dead_coords)
    assert worker_alive, "a worker ended during the broker outage"
    assert sample_value(metrics, "squall_metric_kafka_committed_offset", component="kafka") > 0
    assert 'squall_metric_kafka_lag{' in metrics
    assert status.returncode == 0 and "kafka_lag" in status.stdout and "kafka_decode_failures" in status.stdout, \
        status.stdout + status.stderr


@pytest.mark.timeout(600)
def test_kafka_exactly_once_count_into_kafka_under_kills_and_a_broker_pause(kafka_broker, zk_server, zk_root,
                                                                             tmp_path, capsys):
    """Kafka -> CheckpointedKafkaSpout -> stateful count -> TransactionalKafkaBolt -> Kafka,
    through 5 worker SIGKILLs and the broker stopped (SIGSTOP) for 20 s: the committed state
    counts are exact, and the output topic, read committed, has every ``key n`` exactly once."""
    n, kills = (40_000, 8) if LONG else (12_000, 5)
    rng = random.Random(int(os.environ.get("SQUALL_CHAOS_SEED", "23")))
    bs = kafka_broker.bootstrap
    t_in, t_out = kafka_broker.topic_name("eos-in"), kafka_broker.topic_name("eos-out")
    group = f"g-{t_in}"
    create_topic(bs, t_in, PARTITIONS)
    create_topic(bs, t_out, 2)
    recs = [(f"k{(i * 7919) % KEYS}".encode(), str(i).encode()) for i in range(n)]
    produce(bs, t_in, recs)
    reference = collections.Counter(k.decode() for k, _ in recs)
    want = collections.Counter(f"{k} {i}" for k, c in reference.items() for i in range(1, c + 1))
    state_conf = {"topology.state.provider": "embedded", "supervisor.state.dir": str(tmp_path / "host-state")}
    cluster = ProcessCluster(zk_server.port, zk_root, tmp_path / "cluster", supervisors=2, slots=2,
                             conf={"supervisor.state.dir": state_conf["supervisor.state.dir"]})
    reader = dict(state_conf)
    started = time.monotonic()
    try:
        cluster.start()
        submit(cluster, "keos", {"KPIPE_IN": t_in, "KPIPE_OUT": t_out, "KPIPE_GROUP": group, "KPIPE_MODE": "eos"},
               bs, "-c", "topology.state.provider=embedded")
        cluster.wait_for(lambda: len(cluster.worker_pids()) == 3, 60, "three workers")

        def progress() -> int:
            return sum(committed(bs, group, t_in, PARTITIONS).values())

        done_kills = kill_workers(cluster, rng, kills - 1, progress, "eos")
        # The broker stops answering for 20 s mid-stream (connections open, nothing moves);
        # then one more kill right after it comes back.
        before = progress()
        cluster.wait_for(lambda: progress() > before + 500, 120, "progress before the pause", interval=0.5)
        kafka_broker.tansu.pause(20)
        done_kills += kill_workers(cluster, rng, 1, progress, "eos after the pause")

        state = cluster.state_namespace("keos")  # nimbus's choice: the topology's own id

        def all_read(txid: int) -> bool:
            spouts = committed_component(reader, state, "kafka", 2, txid)
            return sum(sum((s.get("offsets") or {}).values()) for s in spouts) >= n

        record = wait_committed(reader, state, all_read, 240, f"all {n} records in a committed checkpoint")
        counts = collections.Counter()
        for part in committed_component(reader, state, "count", 3, record.restore_point()):
            counts.update({k: v for k, v in part.items() if not str(k).startswith("__")})
        group_done = cluster.wait_for(lambda: progress() >= n, 60, "the group's offsets after the checkpoints")
        logs = cluster.wait_for(lambda: (lambda ls: ls if sum(len(lg.committed) for lg in ls) >= n else None)(
            [read_committed_log(bs, t_out, p) for p in range(2)]), 60, "every count committed to the output")
        status = cluster.cli("status", "keos")
        token = cluster.credentials.add_user("prom", "viewer")
        metrics = cluster.wait_for(lambda: (lambda t: t if sample_value(
            t, "squall_metric_kafka_transactions_committed_total") > 0 else None)(cluster.scrape(token)),
            60, "transactions in the supervisors' /metrics")
    finally:
        cluster.stop()
    seen = collections.Counter(r.value.decode() for lg in logs for r in lg.committed)
    # What librdkafka's read_committed consumer gets from this broker (Tansu lists no aborted
    # transactions): the committed records and the aborted ones, for the line below.
    plain = len(read_all(bs, t_out, idle=1.0))
    wrong = sum(1 for k in set(reference) | set(counts) if counts.get(k) != reference.get(k))
    dups = sum(c - 1 for c in seen.values() if c > 1)
    missing = sum(1 for k in want if k not in seen)
    line = (f"kafka-eos-chaos: records={n} keys={KEYS} kills={done_kills} broker_paused_secs=20 "
            f"state_wrong={wrong} output={sum(seen.values())} duplicates={dups} missing={missing} "
            f"aborted_records={sum(lg.aborted for lg in logs)} aborts={sum(lg.markers['abort'] for lg in logs)} "
            f"commits={sum(lg.markers['commit'] for lg in logs)} read_by_librdkafka={plain} "
            f"restores={record.recoveries - 1} seconds={time.monotonic() - started:.0f}")
    with capsys.disabled():
        print("\n" + line)
    assert wrong == 0 and sum(counts.values()) == n and group_done, line
    assert dups == 0 and missing == 0 and set(seen) == set(want), line
    assert status.returncode == 0 and "kafka_transactions_committed" in status.stdout, status.stdout + status.stderr
    for family in ("kafka_in_flight", "kafka_lag", "kafka_committed_offset"):
        assert f"squall_metric_{family}{{" in metrics, family
