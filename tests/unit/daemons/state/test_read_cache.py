"""ReadCache: what a watched read may serve without asking ZooKeeper again."""
from __future__ import annotations

from squall.daemons.state.read_cache import ReadCache

PARENT = "/r/assignments"
A = f"{PARENT}/a"


def read(cache: ReadCache, path: str, value: object, mzxid: int = 1) -> None:
    """A read whose answer arrives with nothing happening in between."""
    ticket = cache.ticket(("data", path))
    cache.put_value(PARENT, path, (mzxid, value), ticket)


def test_a_read_is_served_until_something_says_it_changed() -> None:
    cache = ReadCache()
    assert cache.dirty([A]) == [A]  # never read
    read(cache, A, "v1")
    assert cache.dirty([A]) == []
    assert cache.values(PARENT) == {A: (1, "v1")}
    cache.invalidate(("data", A))  # a watch fired
    assert cache.dirty([A]) == [A]
    assert cache.values(PARENT) == {A: (1, "v1")}  # kept: reused when its mzxid did not move


def test_an_event_while_the_read_is_in_flight_is_not_lost() -> None:
    cache = ReadCache()
    ticket = cache.ticket(("data", A))
    cache.invalidate(("data", A))  # the node changed after the server answered
    cache.put_value(PARENT, A, (1, "old"), ticket)
    assert cache.dirty([A]) == [A]  # read again next time
    read(cache, A, "new", mzxid=2)
    assert cache.dirty([A]) == [] and cache.values(PARENT)[A] == (2, "new")


def test_own_writes_and_reconnections_make_reads_ask_again() -> None:
    cache = ReadCache()
    ticket = cache.ticket(("children", PARENT))
    cache.put_names(PARENT, ["a"], ticket)
    read(cache, A, "v1")
    assert cache.names(PARENT) == ["a"]
    cache.wrote(A, created_or_deleted=False)  # a set: the data only
    assert cache.dirty([A]) == [A] and cache.names(PARENT) == ["a"]
    read(cache, A, "v2")
    cache.wrote(f"{PARENT}/b", created_or_deleted=True)  # a create: the lists above it
    assert cache.names(PARENT) is None and cache.dirty([A]) == []
    cache.put_names(PARENT, ["a", "b"], cache.ticket(("children", PARENT)))
    in_flight = cache.ticket(("data", A))
    cache.forget_watches()  # the connection changed: events may have been missed
    assert cache.names(PARENT) is None and cache.dirty([A]) == [A]
    cache.put_value(PARENT, A, (3, "v3"), in_flight)  # sent before the change: not trusted
    assert cache.dirty([A]) == [A]


def test_gone_nodes_are_forgotten() -> None:
    cache = ReadCache()
    read(cache, A, "v1")
    read(cache, f"{PARENT}/b", "v1")
    cache.keep_only(PARENT, [A])
    assert set(cache.values(PARENT)) == {A}
    cache.put_value(PARENT, A, None, cache.ticket(("data", A)))  # deleted before it was read
    assert cache.values(PARENT) == {} and cache.dirty([A]) == [A]
