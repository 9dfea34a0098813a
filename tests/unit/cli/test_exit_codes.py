"""The client commands' exit codes, run in this process by click's runner: 2 for a usage
error, 1 with one line naming nimbus's address when nimbus cannot be reached. (That
``python -m squall.cli`` exits with them is tested once each in tests/cluster/cli.)"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from squall.cli import main
from squall.testing.zookeeper import free_port
from support.paths import TOPOLOGIES


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user file as $SQUALL_CONF, no token from the shell, the run in tmp_path."""
    path = tmp_path / "squall.yaml"
    path.write_text("{}", encoding="utf-8")
    monkeypatch.setenv("SQUALL_CONF", str(path))
    monkeypatch.delenv("SQUALL_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    return path


@pytest.mark.parametrize("args", [
    ["kill"], ["status"], ["list", "--bogus"], ["kill", "x", "--wait", "-1"], ["rebalance", "x", "-e", "count"],
    ["rebalance", "x", "-n", "0"], ["submit"], ["list", "-c", "topology.bogus=1"],
], ids=" ".join)
def test_usage_errors_are_exit_2(conf: Path, args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # click's usage error, not a crash


def test_nimbus_down_is_exit_1_naming_the_address(conf: Path, tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    conf.write_text(yaml.safe_dump({"nimbus.host": "127.0.0.1", "nimbus.port": port}), encoding="utf-8")
    topology = tmp_path / "words_topo.py"
    topology.write_text((TOPOLOGIES / "words_topo.py").read_text(encoding="utf-8"), encoding="utf-8")
    for args in (["list"], ["status", "x"], ["kill", "x"], ["activate", "x"], ["rebalance", "x", "-n", "2"],
                 ["submit", str(topology)]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (args, result.output)
        assert result.stderr.strip().splitlines() == [f"Error: cannot reach nimbus at 127.0.0.1:{port}: "
                                                      "Connection refused"], (args, result.stderr)
