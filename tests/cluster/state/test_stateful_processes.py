"""Stateful topologies with real processes around them: state in a real Redis server (through a
kill and resubmit, and frozen mid-run), and the stateful examples run as scripts."""
import os
import signal
import subprocess
import sys
import time

from squall import LocalCluster
from squall.checks import check_runnable
from squall.config import build_config
from squall.loader import load_module
from squall.testing.redis import RedisServer
from squall.testing.state import wait_committed
from support.keyed import KC, committed_counts, run_twice, spout_done, unique
from support.paths import REPO


def test_state_in_redis_survives_killing_and_resubmitting_the_topology(redis_server):
    run_twice({"topology.state.provider": "redis", "topology.state.redis.url": redis_server.url}, unique("again"))


def test_a_store_that_stops_answering_costs_rollbacks_not_counts(tmp_path):
    """Redis frozen (SIGSTOP) mid-run: checkpoints fail and roll back until it answers again."""
    n, keys, name = 4000, 11, unique("frozen")
    with RedisServer(tmp_path / "redis") as redis:
        store = {"topology.state.provider": "redis", "topology.state.redis.url": redis.url,
                 "topology.state.redis.timeout.secs": 0.5}
        conf = {**KC.CONFIG, **store, "keyed.events": n, "keyed.keys": keys, "keyed.rate": 500}
        with LocalCluster() as cluster:
            cluster.submit(name, conf, KC.topology())
            wait_committed(store, name, lambda txid: txid >= 2, 30, "checkpoints committing")
            os.kill(redis.proc.pid, signal.SIGSTOP)
            try:
                time.sleep(1.5)
            finally:
                os.kill(redis.proc.pid, signal.SIGCONT)
            record = wait_committed(store, name, spout_done(store, name, n), 60)
            errors = cluster.errors(name)
        counts = committed_counts(store, name, record.restore_point())
    assert counts == KC.reference(n, keys)
    assert "redis state" in str(errors)  # the freeze was felt (and reported), not counted


def test_the_examples_run():
    out = subprocess.run([sys.executable, str(REPO / "examples" / "stateful_counter.py"), "--events", "3000",
                          "--fail-every", "1000"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "counted 3,000 of 3,000 events" in out.stdout and "keys counted wrong: 0" in out.stdout
    words = load_module(REPO / "examples" / "rolling_top_words.py")
    check_runnable(words.topology(), build_config(words.CONFIG, user_file=False))
