"""The local state a supervisor and its workers share: layout, atomic writes, pid files and
the local heartbeat, written by one side and read by the other through the same module."""
from __future__ import annotations

import json
import os
import re

import pytest

from squall.daemons import local_state as ls


def test_layout_places_every_file_under_the_local_dir(tmp_path):
    layout = ls.LocalLayout.from_conf({"squall.local.dir": str(tmp_path / "x")})
    assert layout.root == tmp_path / "x"
    assert layout.heartbeat_file("w1") == tmp_path / "x" / "workers" / "w1" / "heartbeat.json"
    assert layout.topology_dir("t1") == tmp_path / "x" / "topologies" / "t1"
    assert layout.supervisor_state_file.parent == layout.root


def test_write_atomic_replaces_whole_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "d" / "f.json"
    ls.write_atomic(path, b"one")
    ls.write_atomic(path, b"two")
    assert path.read_bytes() == b"two"
    assert os.listdir(path.parent) == ["f.json"]


def test_a_heartbeat_written_by_the_worker_side_reads_back_on_the_supervisor_side(tmp_path):
    layout = ls.LocalLayout(tmp_path)
    assert ls.read_heartbeat(layout, "w1") is None
    ls.write_heartbeat(layout, ls.heartbeat_of(12.5, "t1", 6700, "w1", 42, [(3, 4), (1, 1)]))
    raw = json.loads(layout.heartbeat_file("w1").read_bytes())
    assert raw == {"time": 12.5, "topology_id": "t1", "port": 6700, "worker_id": "w1", "pid": 42,
                   "executors": [[1, 1], [3, 4]]}
    beat = ls.read_heartbeat(layout, "w1")
    assert beat is not None and beat.time == 12.5 and beat.executors == frozenset({(1, 1), (3, 4)})
    ls.remove_heartbeat(layout, "w1")
    assert ls.read_heartbeat(layout, "w1") is None


@pytest.mark.parametrize("content, problem", [
    (b"[1]", "JSON object"),
    (b'{"time": "soon"}', "field 'time'"),
    (b'{"time": 1, "worker_id": "other"}', "names worker 'other'"),
    (b'{"time": 1, "executors": [[1, "x"]]}', "is not [start, end]"),
    (b'{"time": 1, "executors": 5}', "is not a list"),
])
def test_a_malformed_heartbeat_is_refused_naming_the_problem(tmp_path, content, problem):
    layout = ls.LocalLayout(tmp_path)
    layout.heartbeat_file("w1").parent.mkdir(parents=True)
    layout.heartbeat_file("w1").write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(problem)):
        ls.read_heartbeat(layout, "w1")


def test_pid_file_round_trip_and_garbage(tmp_path):
    layout = ls.LocalLayout(tmp_path)
    assert ls.read_pid(layout, "w1") is None
    ls.write_pid(layout, "w1", 4242)
    assert ls.read_pid(layout, "w1") == 4242
    layout.pid_file("w1").write_text("not a pid")
    assert ls.read_pid(layout, "w1") is None


@pytest.mark.parametrize("value, ok", [("abc", True), ("a/b", False), ("..", False), ("a b", False),
                                       ("", False), ("x\n", False)])
def test_valid_id(value, ok):
    assert ls.valid_id(value) is ok


def test_early_output_is_emptied_past_its_bound_and_appenders_go_on(tmp_path):
    path = tmp_path / "worker.out"
    writer = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # as the launched worker has it
    os.write(writer, b"x" * 100)
    assert not ls.truncate_if_over(path, 100) and path.stat().st_size == 100
    os.write(writer, b"y")
    assert ls.truncate_if_over(path, 100) and path.stat().st_size == 0
    os.write(writer, b"after\n")
    os.close(writer)
    assert path.read_bytes() == b"after\n"
    assert not ls.truncate_if_over(tmp_path / "missing", 1)


def test_a_heartbeat_says_whether_the_worker_finished_starting(tmp_path):
    layout = ls.LocalLayout(tmp_path)
    for ready in (False, True):
        ls.write_heartbeat(layout, ls.heartbeat_of(1.0, "t1", 6700, "w1", 42, [(1, 1)], ready=ready))
        assert ls.read_heartbeat(layout, "w1").ready is ready
    layout.heartbeat_file("w1").write_text(json.dumps({"time": 1.0, "ready": "yes"}))
    with pytest.raises(ValueError, match="'ready'"):
        ls.read_heartbeat(layout, "w1")


# --- what a worker may plant in its own directory ----------------------------------------------

def test_files_read_from_a_worker_directory_are_never_links_fifos_or_too_large(tmp_path):
    layout = ls.LocalLayout(tmp_path)
    secret = tmp_path / "secret.key"
    secret.write_text("-----BEGIN PRIVATE KEY-----")
    wdir = layout.worker_dir("w1")
    wdir.mkdir(parents=True)
    layout.heartbeat_file("w1").symlink_to(secret)
    layout.metrics_file("w1").symlink_to(secret)
    layout.pid_file("w1").symlink_to(secret)
    with pytest.raises(OSError):
        ls.read_heartbeat(layout, "w1")
    with pytest.raises(OSError):
        ls.read_metrics(layout, "w1")
    assert ls.read_pid(layout, "w1") is None
    layout.heartbeat_file("w1").unlink()
    os.mkfifo(layout.heartbeat_file("w1"))  # opening it to read would wait for a writer forever
    with pytest.raises(ValueError, match="not a regular file"):
        ls.read_heartbeat(layout, "w1")
    layout.heartbeat_file("w1").unlink()
    layout.heartbeat_file("w1").write_bytes(b" " * (ls.HEARTBEAT_MAX_BYTES + 1))
    with pytest.raises(ValueError, match="larger than"):
        ls.read_heartbeat(layout, "w1")


def test_early_output_is_bounded_through_no_link(tmp_path):
    target = tmp_path / "someone-elses.log"
    target.write_bytes(b"x" * 100)
    out = tmp_path / "worker.out"
    out.symlink_to(target)
    with pytest.raises(OSError):
        ls.truncate_if_over(out, 10)
    assert target.stat().st_size == 100  # untouched
    out.unlink()
    out.write_bytes(b"x" * 100)
    assert ls.truncate_if_over(out, 10) and out.stat().st_size == 0
    assert not ls.truncate_if_over(out, 10) and not ls.truncate_if_over(tmp_path / "none", 10)
