"""Whom workers run as: the modes of ``supervisor.worker.user`` and the per-topology user ids."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from squall.config import build_config
from squall.daemons.supervisor.worker_user import (
    ISOLATED,
    NAMED,
    OWN,
    ROOT,
    WorkerAccounts,
    WorkerIdentity,
    WorkerUserError,
    pick_uid,
    uid_range,
)

ACCOUNTS = {"root": SimpleNamespace(pw_uid=0, pw_gid=0, pw_dir="/root"),
            "toor": SimpleNamespace(pw_uid=0, pw_gid=0, pw_dir="/root"),
            "storm": SimpleNamespace(pw_uid=990, pw_gid=985, pw_dir="/var/lib/storm")}


def accounts(user=None, euid=0, **conf):
    full = build_config({"supervisor.worker.user": user, **conf}, user_file=False)
    return WorkerAccounts.from_conf(full, euid=euid, lookup=ACCOUNTS.__getitem__)


def no_accounts(uid):
    return False


def test_a_root_supervisor_gives_each_topology_a_user_of_its_own_by_default():
    a = accounts()
    assert a.mode == ISOLATED and a.switches and a.warnings() == []
    one = a.identity("one-1-100", "one", {}, has_account=no_accounts)
    two = a.identity("two-2-100", "two", {"one-1-100": one.uid}, has_account=no_accounts)
    assert one.uid != two.uid and one.uid == one.gid and two.uid == two.gid
    assert 1900000000 <= min(one.uid, two.uid) and max(one.uid, two.uid) < 1900000000 + 65536
    assert one.name == f"squall-{one.uid}" and one.home is None


def test_a_topology_keeps_its_uid_and_a_resubmission_under_its_name_gets_it_again():
    a = accounts()
    first = a.identity("one-1-100", "one", {}, has_account=no_accounts)
    assert a.identity("one-1-100", "one", {"one-1-100": first.uid + 1}).uid == first.uid + 1  # held: kept
    assert a.identity("one-7-900", "one", {}, has_account=no_accounts) == first  # same name, same hash


def test_pick_uid_skips_ids_taken_by_topologies_files_or_accounts():
    start = pick_uid("t", 5000, 10, set(), no_accounts)
    assert pick_uid("t", 5000, 10, set(), no_accounts) == start  # stable
    assert pick_uid("t", 5000, 10, {start}, no_accounts) == 5000 + (start - 5000 + 1) % 10
    owned = {start, 5000 + (start - 5000 + 1) % 10}
    assert pick_uid("t", 5000, 10, set(), lambda uid: uid in owned) == 5000 + (start - 5000 + 2) % 10
    with pytest.raises(WorkerUserError, match="every user id"):
        pick_uid("t", 5000, 3, {5000, 5001, 5002}, no_accounts)


def test_other_topologies_state_owners_are_not_given_out():
    a = accounts()
    free = a.identity("x-1-1", "x", {}, has_account=no_accounts).uid
    assert a.identity("x-1-1", "x", {}, taken={free}, has_account=no_accounts).uid != free


def test_a_named_user_runs_every_topology():
    a = accounts("storm")
    assert a.mode == NAMED and a.switches
    who = a.identity("one-1-100", "one", {})
    assert who == WorkerIdentity(990, 985, "storm", "/var/lib/storm") == a.probe_identity()
    assert "not from each other" in a.warnings()[0]


def test_root_is_only_ever_explicit_and_loud():
    a = accounts("root")
    assert a.mode == ROOT and not a.switches and a.identity("t", "t", {}) is None
    assert a.warnings()[0].startswith("SECURITY OFF: workers run as root")
    with pytest.raises(WorkerUserError, match="has uid 0"):
        accounts("toor")


def test_a_supervisor_that_is_not_root_runs_workers_as_itself_and_says_so():
    a = accounts(euid=1000)
    assert a.mode == OWN and a.identity("t", "t", {}) is None and a.probe_identity() is None
    assert a.warnings()[0].startswith("SECURITY OFF: the supervisor does not run as root")
    with pytest.raises(WorkerUserError, match="needs the supervisor to run as root"):
        accounts("storm", euid=1000)


def test_unknown_users_and_bad_ranges_are_refused_naming_the_key():
    with pytest.raises(WorkerUserError, match="'nobody-here' is not a user"):
        accounts("nobody-here")
    for bad in ([0, 10], [5000, 0], [5000], [2 ** 32 - 5, 10], "5000"):
        with pytest.raises(WorkerUserError, match="supervisor.worker.uids"):
            uid_range(bad)
    assert uid_range([5000, 10]) == (5000, 10)


def test_the_identity_sets_the_worker_environment():
    who = WorkerIdentity(5000, 5000, "squall-5000")
    env = who.environ({"PATH": "/bin", "HOME": "/root", "USER": "root"}, "/var/lib/squall/workers/w1")
    assert env == {"PATH": "/bin", "HOME": "/var/lib/squall/workers/w1", "USER": "squall-5000",
                   "LOGNAME": "squall-5000"}
