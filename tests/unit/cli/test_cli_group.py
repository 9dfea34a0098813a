"""The ``squall`` group: every command listed, imported only when it runs (that ``--version``
and ``--help`` import no command module is checked in a fresh interpreter:
tests/cluster/cli/test_operate_cli.py)."""
from __future__ import annotations

import importlib

from click.testing import CliRunner

from squall import cli

MODULES = ("local", "cluster", "submit", "dev_cluster", "security", "logs", "errors", "spark", "operate")


def test_the_table_lists_every_command_with_its_own_first_sentence():
    found = {}
    for name in MODULES:
        module = importlib.import_module(f"squall.cli.{name}")
        for command in module.COMMANDS:
            found[command.name] = (module.__name__, command.get_short_help_str(limit=10**6))
    assert found == cli.COMMANDS


def test_a_command_runs_through_the_lazy_group():
    result = CliRunner().invoke(cli.main, ["set-log-level", "--help"])
    assert result.exit_code == 0 and "LOGGER=LEVEL" in result.output
    assert CliRunner().invoke(cli.main, ["no-such-command"]).exit_code == 2
