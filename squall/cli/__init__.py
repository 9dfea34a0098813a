"""The ``squall`` command line (click). Exit codes: 0 ok, 1 failure, 2 usage.

This module holds the command group; each command module lists its commands in
``COMMANDS``: ``squall.cli.local`` (``run``), ``squall.cli.cluster`` (the daemons and the
nimbus client commands), ``squall.cli.submit`` (``submit``), ``squall.cli.dev_cluster``
(``dev-cluster``), ``squall.cli.security`` (``token``, ``secure-init``),
``squall.cli.logs`` (``logs``: worker logs through nimbus), ``squall.cli.errors`` (``errors``:
user code's tracebacks), ``squall.cli.operate`` (``set-log-level``, ``debug``, ``profile``,
``kill-workers``, ``monitor``) and ``squall.cli.spark`` (``spark-run``). ``squall.command_line``
holds what they share (the daemons' own mains use it too).

A command's module is imported only when that command runs: ``squall --version`` and
``squall --help`` import none of them (``COMMANDS`` below keeps each one's first sentence for
the help; ``tests/unit/cli/test_cli_group.py`` holds it to the commands' own).
"""
from __future__ import annotations

import importlib

import click

# name -> (module, the first sentence of its help)
COMMANDS = {
    "activate": ("squall.cli.cluster", "Activate topology NAME (its spouts emit again)."),
    "deactivate": ("squall.cli.cluster", "Deactivate topology NAME (its spouts stop emitting)."),
    "debug": ("squall.cli.operate", "Sample the tuples topology NAME's components emit (Storm's Debug button): "
              "`squall debug NAME [COMPONENT] --sample PERCENT` starts it (every component without COMPONENT), "
              "`--off` stops it, `squall debug show NAME` prints the samples: stream, task, target task, "
              "anchors and values."),
    "dev-cluster": ("squall.cli.dev_cluster", "Run ZooKeeper, nimbus and supervisors on this machine until Ctrl-C."),
    "errors": ("squall.cli.errors", "Show the errors that topology NAME's code raised, newest first, with "
               "tracebacks; identical ones once, with how many times and where."),
    "kill": ("squall.cli.cluster", "Kill topology NAME: deactivate it now, remove it after the wait."),
    "kill-workers": ("squall.cli.operate", "Restart every worker of topology NAME (Storm's kill_workers): each "
                     "ends, and its supervisor starts it again on the same slot; unacked tuples are replayed."),
    "list": ("squall.cli.cluster", "List the topologies on the cluster."),
    "lock-zookeeper": ("squall.cli.security", "Refuse writes outside squall's root to ZooKeeper clients without "
                       "credentials."),
    "logs": ("squall.cli.logs", "Show the logs of topology NAME's workers (a worker's log holds all its "
             "executors')."),
    "monitor": ("squall.cli.operate", "Show topology NAME's rates live (as `storm monitor`): every interval, each "
                "component's (or COMPONENT's) tuples per second since the last line, until Ctrl-C."),
    "nimbus": ("squall.cli.cluster", "Run nimbus (HTTP API, scheduling, leader election) in the foreground."),
    "profile": ("squall.cli.operate", "Profile one worker of topology NAME: --stack, --record SECS or --heap "
                "(py-spy when the worker's host has it, else the standard library); waits for the result."),
    "rebalance": ("squall.cli.cluster", "Spread topology NAME anew over a number of workers and/or change "
                  "executor counts."),
    "run": ("squall.cli.local", "Run the topology defined in FILE in this process (a topology file, a streamparse "
            "topology, or with --flux a Flux YAML file); exit 1 when a component reported errors."),
    "secure-init": ("squall.cli.security", "Make tokens, a CA, nimbus's and the supervisors' certificates in "
                    "DIRECTORY, plus client.yaml (admin), prometheus-token (a viewer's) and supervisor.env (the "
                    "daemons' SQUALL_TOKEN and SQUALL_ZOOKEEPER_PASSWORD, for nimbus and supervisors)."),
    "set-log-level": ("squall.cli.operate", "Set log levels on every worker of topology NAME for a while, as "
                      "Storm's set_log_level: LOGGER is a Python logging logger (ROOT for the root logger), LEVEL "
                      "one of DEBUG, INFO, WARNING, ERROR, CRITICAL (WARN, FATAL and TRACE are taken too)."),
    "spark-run": ("squall.cli.spark", "Run the topology in FILE on Spark over bounded inputs (a backfill)."),
    "status": ("squall.cli.cluster", "Show topology NAME: components, executors with host and port, totals and "
               "rates per second over the last minute, last errors (control characters escaped unless "
               "--raw)."),
    "submit": ("squall.cli.submit", "Submit the topology defined in FILE to nimbus (a topology file, a "
               "streamparse topology, or with --flux a Flux YAML file)."),
    "supervisor": ("squall.cli.cluster", "Run a supervisor (worker slots of this host) in the foreground."),
    "token": ("squall.cli.security", "Add or remove API tokens in a token file (nimbus.auth.tokens.file)."),
}


def load_command(name: str) -> click.Command | None:
    """The command called ``name``, its module imported now; None when there is none."""
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    module = importlib.import_module(entry[0])
    return next(c for c in module.COMMANDS if c.name == name)


class LazyGroup(click.Group):
    """The ``squall`` group: commands listed from ``COMMANDS``, imported when one runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands.get(cmd_name) or load_command(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            text = COMMANDS[name][1] if name in COMMANDS else self.commands[name].get_short_help_str(limit)
            rows.append((name, click.Command(name, help=text).get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="squall")
def main() -> None:
    """squall: a Storm-style distributed stream processor."""
