"""The ``squall`` command line (click). Exit codes: 0 ok, 1 failure, 2 usage.

This module holds the command group; each command module lists its commands in
``COMMANDS`` and is registered below: ``squall.cli.local`` (``run --local``),
``squall.cli.cluster`` (the daemons, the nimbus client commands, ``dev-cluster``),
``squall.cli.security`` (``token``, ``secure-init``), ``squall.cli.logs`` (``logs``: worker
logs through nimbus) and ``squall.cli.spark`` (``spark-run``). ``squall.command_line`` holds
what they share (the daemons' own mains use it too).
"""
from __future__ import annotations

import importlib

import click

COMMAND_MODULES = ("squall.cli.local", "squall.cli.cluster", "squall.cli.security", "squall.cli.logs",
                   "squall.cli.spark")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="squall")
def main() -> None:
    """squall: a Storm-style distributed stream processor."""


def _register() -> None:
    for module in COMMAND_MODULES:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        for command in getattr(mod, "COMMANDS", []):
            main.add_command(command)


_register()
