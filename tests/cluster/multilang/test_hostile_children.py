"""Children that die, hang, write garbage, flood or break the handshake: each is reported
through the component's errors, killed and restarted while the worker stays up, and the
tuples it held fail and replay, so every input still gets through."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import structlog

from squall import LocalCluster, TopologyBuilder
from squall.multilang import ShellBolt, ShellSpout
from squall.testing.components import FixedTupleSpout, RecordingBolt
from squall.testing.waiting import wait_for
from support.multilang.harness import SUPPORT, error_text, run_until

CONF = {"squall.log.level": "INFO", "topology.message.timeout.secs": 20,
        "topology.subprocess.timeout.secs": 1.5, "topology.multilang.max.message.bytes": 1 << 20}
ROWS = [[f"w{i}"] for i in range(60)]


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("mode, expected", [
    ("die", "is gone; exit code 3"),
    ("fork", "is gone (it exited; a process it started kept its pipes open); exit code 0"),
    ("hang", "did not answer the heartbeat"),
    ("garbage", "broke the protocol: not JSON"),
    ("huge", "longer than 1048576 bytes"),
    ("wrong-handshake", "wrong handshake"),
    ("no-handshake", "did not answer the handshake"),
    ("deaf", "stopped reading its input"),
])
def test_hostile_bolt_child_is_reported_restarted_and_nothing_is_lost(code_dir, names, tmp_path, mode, expected):
    marker = tmp_path / "first-child"
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout(names("s"), ROWS, ["word"]))
    b.set_bolt("hostile", ShellBolt(["python3", "hostile_child.py", mode, "20", str(marker)], ["word", "tag"])
               ).shuffle("s")
    b.set_bolt("rec", RecordingBolt(names("rec"))).shuffle("hostile")
    with LocalCluster(CONF) as c:
        errors = run_until(c, b.build(), {}, lambda: set(names.get("s.acked")) == set(range(60)) and
                           expected in error_text(c.errors("t"), "hostile"),
                           "every row acked after the restart, the child's failure reported", timeout=90)
    text = error_text(errors, "hostile")
    assert expected in text, text
    assert {v[0] for *_, v in names.get("rec") if v[1] == "ok"} == {w for [w] in ROWS}  # nothing lost
    assert gone(int(marker.read_text()))  # the misbehaving child was killed
    if mode == "fork":
        assert gone(int((tmp_path / "first-child.fork").read_text()))  # and what it forked


def test_spout_child_that_hangs_is_restarted(code_dir, names, tmp_path):
    marker = tmp_path / "first-child"

    b = TopologyBuilder()
    b.set_spout("spout", ShellSpout(["python3", "hostile_child.py", "hang", "10", str(marker)], ["word"]))
    b.set_bolt("rec", RecordingBolt(names("rec"))).shuffle("spout")
    with LocalCluster(CONF) as c:
        errors = run_until(c, b.build(), {}, lambda: len(names.get("rec")) >= 20, "both children's tuples",
                           timeout=60)
    assert "did not sync within topology.subprocess.timeout.secs" in error_text(errors, "spout")
    assert {v[0] for *_, v in names.get("rec")} == {f"w{i}" for i in range(10)}
    assert gone(int(marker.read_text()))


def test_flooding_child_is_bounded_and_keeps_working(code_dir, names, tmp_path):
    marker = tmp_path / "first-child"
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout(names("s"), ROWS[:20], ["word"]))
    b.set_bolt("flood", ShellBolt(["python3", "hostile_child.py", "flood", "0", str(marker)], ["word", "tag"])
               ).shuffle("s")
    b.set_bolt("rec", RecordingBolt(names("rec"))).shuffle("flood")
    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        with LocalCluster({**CONF, "topology.multilang.log.lines.per.sec": 20}) as c:
            errors = run_until(c, b.build(), {}, lambda: len(names.get("s.acked")) == 20, "every row acked")
    elapsed = time.monotonic() - started
    assert errors == {}
    assert sorted(v[0] for *_, v in names.get("rec")) == sorted(w for [w] in ROWS[:20])
    stderr = [e for e in logs if e["event"] == "shell child stderr"]
    child_logs = [e for e in logs if e["event"] == "shell child log" and "flood" in e.get("msg", "")]
    # 20 tuples x 200 lines each way were written; a budget of 20 a second lets few through
    assert 0 < len(stderr) <= 20 * (elapsed + 2) and len(stderr) < 4000
    assert 0 < len(child_logs) <= 20 * (elapsed + 2) and len(child_logs) < 4000
    assert any(e.get("dropped_before") or e.get("dropped") for e in logs)


def test_a_child_that_never_stops_asking_for_task_ids_does_not_hold_the_executor_thread(code_dir, names, tmp_path):
    """Its bolt answers every emit at once, yet the executors that share its thread (here
    the spout and a bolt beside it) still get their turns."""
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout(names("s"), ROWS[:20], ["word"]))
    b.set_bolt("chatter", ShellBolt(["python3", "hostile_child.py", "chatter", "0", str(tmp_path / "first")],
                                    ["word", "tag"])).shuffle("s")
    b.set_bolt("rec", RecordingBolt(names("rec"))).shuffle("s")
    with LocalCluster(CONF) as c:
        c.submit("t", {}, b.build())

        def chatted():
            return sum(s["emitted"].get("default", 0) for s in c.stats("t") if s["component"] == "chatter")

        try:
            wait_for(lambda: len(names.get("rec")) == 20 and chatted() > 200, 60,
                     "every row beside the chatter, and the chatter answered", lambda: str(c.errors("t")))
            assert c.errors("t") == {}
        finally:
            c.kill("t")


def test_missing_command_is_reported_and_tuples_fail(code_dir, names):
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout(names("s"), ROWS[:3], ["word"], reliable=True))
    b.set_bolt("nope", ShellBolt(["no-such-program-anywhere"], ["x"])).shuffle("s")
    with LocalCluster(CONF) as c:
        c.submit("t", {}, b.build())
        wait_for(lambda: "could not be started" in error_text(c.errors("t"), "nope"), 30, "the error")
        wait_for(lambda: len(names.get("s.failed")) >= 3, 30, "the rows failed while it is down")
        c.kill("t")


def test_children_die_with_a_killed_worker(tmp_path):
    """SIGKILL the process running the topology (no cleanup runs): its children follow."""
    pids = tmp_path / "pids.txt"
    script = tmp_path / "topo.py"
    script.write_text(
        "from squall import TopologyBuilder\n"
        "from squall.multilang import ShellBolt\n"
        "from squall.testing.components import FixedTupleSpout\n"
        f"CMD = ['python3', {str(SUPPORT / 'hostile_child.py')!r}, 'ok', '0', {str(tmp_path / 'marker')!r}]\n"
        "def topology():\n"
        "    b = TopologyBuilder()\n"
        "    b.set_spout('s', FixedTupleSpout('s', [['a']], ['word']))\n"
        "    b.set_bolt('b', ShellBolt(['sh', '-c', f'echo $$ >> {PIDS}; exec \"$@\"', 'sh', *CMD], ['w', 't']), 3)"
        ".shuffle('s')\n"
        "    return b.build()\n".replace("{PIDS}", str(pids)))
    proc = subprocess.Popen([sys.executable, "-m", "squall.cli", "run", str(script), "--local",
                             "-c", "squall.log.level=WARNING"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 3, 60, "three children")
        children = [int(p) for p in pids.read_text().split()]
        assert not any(gone(p) for p in children)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        wait_for(lambda: all(gone(p) for p in children), 10, "the children gone with their worker")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
