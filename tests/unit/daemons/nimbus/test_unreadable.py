"""A topology whose ZooKeeper node is malformed, as nimbus shows it: found by id, its name
(taken until it is killed) read from the id, status unreadable, owned by no one."""
from __future__ import annotations

from squall.daemons.nimbus.status import UNREADABLE, name_of_id, topology_rows, with_unreadable
from squall.daemons.state import TopologyInfo


def test_the_name_comes_from_the_id_nimbus_made():
    assert name_of_id("word-count-12-1795786512") == "word-count"
    assert name_of_id("hand-made") == "hand-made"


def test_an_unreadable_topology_is_listed_without_inventing_numbers():
    good = TopologyInfo("a-1-10", "a", "active", 2, {"s": 1}, "d", 10.0, {}, "alice")
    infos = with_unreadable({"a-1-10": good, "b-2-20": None})
    assert infos["a-1-10"] is good
    stand_in = infos["b-2-20"]
    assert (stand_in.name, stand_in.status, stand_in.owner) == ("b", UNREADABLE, "")
    rows = {r["id"]: r for r in topology_rows(infos, {}, now=100.0)}
    assert rows["b-2-20"]["uptime"] is None and rows["b-2-20"]["requested_workers"] is None
    assert rows["a-1-10"]["uptime"] == 90.0
