"""What a supervisor hands a worker so that it can start while ZooKeeper is away: the launch
assignment file (hostile input to the worker). The supervisor's remembered secrets and
ClusterState's background connection are tested against a real ZooKeeper in
tests/cluster/daemons/test_starting_without_zookeeper.py."""
from __future__ import annotations

import os

import pytest

from squall.daemons.launch_assignment import (
    MAX_FILE_BYTES,
    LaunchAssignment,
    LaunchAssignmentError,
    check_launch_assignment,
    read_launch_assignment,
    write_launch_assignment,
)
from squall.daemons.state import Assignment
from squall.daemons.state.records import encode

ASSIGNMENT = Assignment("t1", {(1, 2): ("n1", 6700), (3, 3): ("n2", 6701)}, {"n1": "h1", "n2": "h2"},
                        {(1, 2): 5.0, (3, 3): 5.0}, "digest", 7)


def launch_bytes(payload: dict) -> bytes:
    return encode("assignment.json", payload)


# --- the file: written by the supervisor, checked by the worker --------------------------

def test_a_written_launch_assignment_reads_back_whole_and_private(tmp_path):
    path = write_launch_assignment(tmp_path / "assignment.json", LaunchAssignment(ASSIGNMENT, True))
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["assignment.json"]
    launch = read_launch_assignment(path, "t1", "n1", 6700)
    assert launch == LaunchAssignment(ASSIGNMENT, True)
    # The whole assignment (the worker sends to other slots), not just this slot's rows.
    assert launch.assignment.executors_on("n2", 6701) == [(3, 3)]


@pytest.mark.parametrize("data, problem", [
    (b"{not json", "malformed: JSONDecodeError"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"v": 2, "active": true}', "unsupported format version"),
    (launch_bytes({"active": True}), "'assignment'"),
    (launch_bytes({"assignment": {**ASSIGNMENT.to_dict(), "executors": [[1, 2, "n1"]]}, "active": True}),
     "malformed: ValueError"),
    (launch_bytes({"assignment": ASSIGNMENT.to_dict(), "active": "yes"}), "not a boolean"),
    (b'{"v": 1, "a": ' + b"[" * 100 + b"]" * 100 + b"}", "nested deeper"),
])
def test_a_malformed_launch_assignment_is_refused_naming_the_problem(data, problem):
    with pytest.raises(LaunchAssignmentError, match=problem):
        check_launch_assignment(data, "t1", "n1", 6700)


def test_a_launch_assignment_for_another_topology_or_slot_is_refused():
    data = launch_bytes(LaunchAssignment(ASSIGNMENT, True).to_dict())
    with pytest.raises(LaunchAssignmentError, match="for topology 't1', not 't2'"):
        check_launch_assignment(data, "t2", "n1", 6700)
    with pytest.raises(LaunchAssignmentError, match="no executors on n1:6701"):
        check_launch_assignment(data, "t1", "n1", 6701)
    with pytest.raises(LaunchAssignmentError, match="no executors on n3:6700"):
        check_launch_assignment(data, "t1", "n3", 6700)


def test_a_launch_assignment_over_the_size_bound_is_refused_unparsed(tmp_path):
    big = b'{"v": 1, "pad": "' + b"x" * MAX_FILE_BYTES + b'"}'
    with pytest.raises(LaunchAssignmentError, match=f"above {MAX_FILE_BYTES}"):
        check_launch_assignment(big, "t1", "n1", 6700)
    path = tmp_path / "assignment.json"
    path.write_bytes(big)
    path.chmod(0o600)
    with pytest.raises(LaunchAssignmentError, match=f"larger than {MAX_FILE_BYTES} bytes"):
        read_launch_assignment(path, "t1", "n1", 6700)
    # The supervisor refuses to write one either (the worker then needs ZooKeeper).
    rows = {(i, i): ("n1", 6700) for i in range(60_000)}
    with pytest.raises(ValueError, match="above ZooKeeper's"):
        write_launch_assignment(path, LaunchAssignment(Assignment("t1", rows), True))


def test_a_launch_assignment_file_must_be_the_workers_own_private_regular_file(tmp_path):
    good = write_launch_assignment(tmp_path / "good.json", LaunchAssignment(ASSIGNMENT, False))
    with pytest.raises(LaunchAssignmentError, match="does not exist"):
        read_launch_assignment(tmp_path / "missing.json", "t1", "n1", 6700)
    loose = tmp_path / "loose.json"
    loose.write_bytes(good.read_bytes())
    loose.chmod(0o644)
    with pytest.raises(LaunchAssignmentError, match="mode 0600"):
        read_launch_assignment(loose, "t1", "n1", 6700)
    link = tmp_path / "link.json"
    link.symlink_to(good)
    with pytest.raises(LaunchAssignmentError, match="link"):
        read_launch_assignment(link, "t1", "n1", 6700)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(LaunchAssignmentError, match="not a regular file"):  # and it did not block
        read_launch_assignment(fifo, "t1", "n1", 6700)
    assert read_launch_assignment(good, "t1", "n1", 6700).active is False


