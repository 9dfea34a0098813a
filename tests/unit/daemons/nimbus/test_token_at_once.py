"""A token added with ``squall token add`` works on its first request to the nimbus that
reads the file: no wait for the reload period (the clock here never moves)."""
from __future__ import annotations

from pathlib import Path

import pytest

from squall.daemons.nimbus.auth import TokenFile, add_token
from squall.daemons.nimbus.guard import ApiError, Guard
from squall.daemons.timers import FakeClock


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def test_a_new_token_works_at_once(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "tokens.yaml"
    admin = add_token(path, "admin", "admin")
    guard = Guard(TokenFile(path, clock), clock)
    assert guard.principal(bearer(admin)).user == "admin"
    carol = add_token(path, "carol", "viewer")  # what `squall token add` does
    principal = guard.principal(bearer(carol))
    assert (principal.user, principal.role) == ("carol", "viewer")
    with pytest.raises(ApiError) as refused:
        guard.principal(bearer("not-a-token-of-anyone"))
    assert refused.value.status == 401
    assert guard.principal(bearer(admin)).user == "admin"


def test_a_broken_file_keeps_the_tokens_in_force(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "tokens.yaml"
    admin = add_token(path, "admin", "admin")
    guard = Guard(TokenFile(path, clock), clock)
    path.write_text("tokens: [oops\n")
    with pytest.raises(ApiError):
        guard.principal(bearer("unknown-token-0123456789"))
    assert guard.principal(bearer(admin)).user == "admin"
