"""Where a client's API token comes from: -c, then $SQUALL_TOKEN, then the user file."""
from __future__ import annotations

from pathlib import Path

import pytest

from squall.config import build_config, parse_overrides
from squall.daemons.nimbus.access import ApiAccess


@pytest.fixture
def user_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "squall.yaml"
    path.write_text("squall.token: from-the-file-0123456789\n")
    monkeypatch.setenv("SQUALL_CONF", str(path))
    monkeypatch.delenv("SQUALL_TOKEN", raising=False)
    return path


def token(*layers: dict) -> str | None:
    return ApiAccess.from_conf(build_config(*layers)).token


def test_the_file_alone(user_file: Path) -> None:
    assert token() == "from-the-file-0123456789"


def test_the_environment_wins_over_the_file(user_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQUALL_TOKEN", "from-the-environment-0123")
    assert token() == "from-the-environment-0123"


def test_c_wins_over_both(user_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQUALL_TOKEN", "from-the-environment-0123")
    assert token(parse_overrides(["squall.token=from-the-command-line-01"])) == "from-the-command-line-01"
