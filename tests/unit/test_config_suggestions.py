"""Misspelt keys are caught with a suggestion, and a bad key in a file names the file."""
from __future__ import annotations

from pathlib import Path

import pytest

from squall.config import ConfigError, build_config, parse_overrides, validate_key


def test_unknown_own_key_suggests_the_known_one() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'nimbus.prot': did you mean 'nimbus.port'\?"):
        validate_key("nimbus.prot", 1)
    with pytest.raises(ConfigError, match=r"^unknown config key 'nimbus.nothing.like.it'$"):
        validate_key("nimbus.nothing.like.it", 1)


def test_a_misspelt_namespace_is_not_a_user_key() -> None:
    with pytest.raises(ConfigError, match=r"'topolgy.workers': did you mean 'topology.workers'\?"):
        parse_overrides(["topolgy.workers=3"])


def test_user_keys_still_pass() -> None:
    for key in ("wordcount.archive", "counter.events", "words.rate", "workers", "my.topology.workers"):
        validate_key(key, 1)
    assert parse_overrides(["counter.keys=50"]) == {"counter.keys": 50}


def test_a_bad_key_in_the_user_file_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "squall.yaml"
    path.write_text("nimbus.host: 127.0.0.1\nnimbus.prot: 6627\n")
    monkeypatch.setenv("SQUALL_CONF", str(path))
    with pytest.raises(ConfigError, match=rf"config file {path}: unknown config key 'nimbus.prot': "
                                          r"did you mean 'nimbus.port'\?"):
        build_config()
