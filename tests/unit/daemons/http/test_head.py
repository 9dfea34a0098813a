"""A request's head and its body's framing, parsed strictly, as plain functions of bytes:
what a well-formed head gives, and the status each malformed one gets (never a crash)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from squall.daemons.http.head import (
    MAX_FIELDS,
    Framing,
    HeadError,
    framing,
    keeps_alive,
    parse_chunk_size,
    parse_head,
)


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def test_a_well_formed_head():
    h = parse_head(head("POST /api/v1/topologies?name=a%20b HTTP/1.1", "Host: x", "Authorization:  Bearer t0k ",
                        "X-Multi: 1", "x-multi: 2", "Content-Length: 12", "X-Latin: caf\xe9"))
    assert (h.method, h.target, h.version) == ("POST", "/api/v1/topologies?name=a%20b", "HTTP/1.1")
    assert h.get("authorization") == "Bearer t0k" and h.get("x-multi") == "1, 2" and h.get("nope") is None
    assert h.get("x-latin") == "caf\xe9"
    assert framing(h) == Framing(length=12)
    assert parse_head(head("GET / HTTP/1.0")).version == "HTTP/1.0"


@pytest.mark.parametrize("data, status", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n", 400),                      # the head never ends
    (head("GET / HTTP/1.1", "Host: x").replace(b"\r\nHost", b"\nHost"), 400),   # a bare LF
    (head("GET /  HTTP/1.1"), 400),                               # two spaces
    (head("GET / HTTP/1.1 extra"), 400),
    (head("G(T / HTTP/1.1"), 400),                                # not a token
    (head("GET / HTTP/2.0"), 505),
    (head("GET / HTTPS/1.1"), 400),
    (head("GET http://elsewhere/ HTTP/1.1"), 400),                # proxy form
    (head("GET /a\x7fb HTTP/1.1"), 400),
    (head("GET / HTTP/1.1", "Host : x"), 400),                    # space before the colon
    (head("GET / HTTP/1.1", "Host: x", " folded"), 400),          # obs-fold
    (head("GET / HTTP/1.1", "NoColon"), 400),
    (head("GET / HTTP/1.1", "X: a\x00b"), 400),
    (head("GET / HTTP/1.1", *[f"X-{i}: {i}" for i in range(MAX_FIELDS + 1)]), 431),
])
def test_malformed_heads_get_their_status(data, status):
    with pytest.raises(HeadError) as info:
        parse_head(data)
    assert info.value.status == status, str(info.value)


@pytest.mark.parametrize("fields, status", [
    (["Content-Length: 5", "Transfer-Encoding: chunked"], 400),   # smuggling's favourite
    (["Content-Length: 5", "Content-Length: 6"], 400),
    (["Content-Length: 5, 6"], 400),
    (["Content-Length: -1"], 400),
    (["Content-Length: 0x10"], 400),
    (["Content-Length: 99999999999999999999"], 400),
    (["Transfer-Encoding: gzip, chunked"], 501),
])
def test_ambiguous_framing_is_refused(fields, status):
    with pytest.raises(HeadError) as info:
        framing(parse_head(head("POST / HTTP/1.1", *fields)))
    assert info.value.status == status


def test_framing_of_a_body():
    assert framing(parse_head(head("POST / HTTP/1.1", "Transfer-Encoding: Chunked"))) == Framing(chunked=True)
    assert framing(parse_head(head("POST / HTTP/1.1", "Content-Length: 7", "Content-Length: 7"))).length == 7
    assert framing(parse_head(head("GET / HTTP/1.1"))).empty
    with pytest.raises(HeadError):  # HTTP/1.0 has no chunked bodies
        framing(parse_head(head("POST / HTTP/1.0", "Transfer-Encoding: chunked")))


def test_who_keeps_the_connection():
    assert keeps_alive(parse_head(head("GET / HTTP/1.1")))
    assert keeps_alive(parse_head(head("GET / HTTP/1.1", "Connection: keep-alive, Upgrade")))
    assert not keeps_alive(parse_head(head("GET / HTTP/1.1", "Connection: Keep-Alive, close")))
    assert not keeps_alive(parse_head(head("GET / HTTP/1.0", "Connection: keep-alive")))


def test_chunk_sizes():
    assert parse_chunk_size(b"1a") == 26 and parse_chunk_size(b"0;name=value") == 0
    for bad in (b"", b"-1", b"g", b"1" * 17, b" ;x"):
        with pytest.raises(HeadError):
            parse_chunk_size(bad)


@given(st.binary(max_size=300))
def test_any_bytes_give_a_head_or_a_head_error(data):
    try:
        parse_head(data + b"\r\n\r\n")
    except HeadError as exc:
        assert exc.status in (400, 431, 505)
