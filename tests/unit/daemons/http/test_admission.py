"""Who gets a connection and a thread, by client address: the server's bookkeeping, without
sockets."""
from __future__ import annotations

import pytest

from squall.daemons.http.admission import Admission, address_key, thread_shares


@pytest.mark.parametrize("address, key", [
    ("127.0.0.2", "127.0.0.2"),
    ("::ffff:10.1.2.3", "10.1.2.3"),                     # IPv4 on a dual-stack socket
    ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),        # a host holds its whole /64
    ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
    ("fe80::1%eth0", "fe80::/64"),
    ("not an address", "not an address"),
])
def test_an_address_counts_as_itself_or_its_slash_64(address, key):
    assert address_key(address) == key


def test_one_address_cannot_take_every_connection():
    adm = Admission(max_connections=10, max_per_address=4, threads=16)
    assert [adm.connect("a") for _ in range(5)] == [None] * 4 + ["per-address"]
    assert [adm.connect("b") for _ in range(4)] == [None] * 4
    assert adm.connect("c") is None and adm.connect("d") is None
    assert adm.connect("e") == "capacity" and adm.connections == 10
    adm.disconnect("a")
    assert adm.connect("a") is None  # its place is free again
    for key in "aaaabbbbcd":
        adm.disconnect(key)
    assert adm.connections == 0


@pytest.mark.parametrize("threads, shares", [(16, (4, 12)), (8, (2, 6)), (4, (2, 3)), (2, (2, 1)), (1, (1, 1))])
def test_thread_shares(threads, shares):
    assert thread_shares(threads) == shares


def test_requests_with_a_body_leave_threads_to_those_without():
    adm = Admission(max_connections=100, max_per_address=100, threads=16)
    for i in range(12):  # twelve uploads from twelve addresses
        assert adm.may_run(f"up{i}", body=True)
        adm.run(f"up{i}", body=True)
    assert not adm.may_run("up12", body=True)   # a thirteenth waits
    assert adm.may_run("admin", body=False)     # a list does not
    for _ in range(4):  # and one address runs four at most
        adm.run("admin", body=False)
    assert not adm.may_run("admin", body=False) and adm.may_run("other", body=False)
    adm.ran("up0", body=True)
    assert adm.may_run("up12", body=True)
