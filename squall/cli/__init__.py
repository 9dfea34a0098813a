"""The ``squall`` command line (click). Exit codes: 0 ok, 1 failure, 2 usage.

This module holds the command group; each command module lists its commands in
``COMMANDS`` and is registered below: ``squall.cli.local`` (``run --local``),
``squall.cli.cluster`` (the daemons, the nimbus client commands, ``dev-cluster``),
``squall.cli.security`` (``token``, ``secure-init``), ``squall.cli.logs`` (``logs``: worker
logs through nimbus), ``squall.cli.errors`` (``errors``: user code's tracebacks) and
``squall.cli.spark`` (``spark-run``). ``squall.command_line`` holds
what they share (the daemons' own mains use it too).
"""
from __future__ import annotations

import click

from squall.cli import cluster, errors, local, logs, security, spark


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="squall")
def main() -> None:
    """squall: a Storm-style distributed stream processor."""


for _module in (local, cluster, security, logs, errors, spark):
    for _command in _module.COMMANDS:
        main.add_command(_command)
