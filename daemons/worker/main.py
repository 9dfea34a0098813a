"""``worker start <topology-id> <supervisor-id> <port> <worker-id>``: one worker process.

The supervisor launches this (``python -m squall.daemons.worker.main start ...`` or the
``worker`` console script) with ``SQUALL_CONF`` naming its configuration without the
daemons' secrets and ``SQUALL_WORKER_CREDENTIALS`` naming the topology's credentials file;
the topology's conf.json comes from the extracted code bundle. Exit codes: 0 clean stop,
1 failure, 2 usage, 3 its port is held by another process (its supervisor takes the slot out of
use while it is).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

import click
import structlog

from squall import config as _config
from squall import logs
from squall.daemons import local_state
from squall.daemons.credentials import ENV_VAR as CREDENTIALS_ENV
from squall.daemons.credentials import read_credentials
from squall.daemons.shutdown import flush_and_exit
from squall.daemons.worker.daemon import EXIT_FAILURE, Worker
from squall.rotating_log import RotatingLogFile


def worker_base_conf(overrides: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Defaults, the supervisor's file ($SQUALL_CONF, else the usual user file) and
    ``overrides``; also whether ``squall.log.format`` was set explicitly."""
    path = os.environ.get("SQUALL_CONF")
    layer = _config.read_yaml_file(path) if path else {}
    conf = _config.build_config(layer, overrides, user_file=not path)
    explicit = "squall.log.format" in layer or "squall.log.format" in overrides
    if not path:
        user = _config.user_config_path()
        explicit = explicit or (user is not None and "squall.log.format" in _config.read_yaml_file(user))
    return conf, explicit


def worker_log_file(conf: dict[str, Any], worker_id: str) -> RotatingLogFile:
    """``workers/<id>/worker.log``, rotated by ``worker.log.max.bytes`` and
    ``worker.log.backups``; stdout and stderr follow it."""
    path = local_state.LocalLayout.from_conf(conf).worker_log(worker_id)
    return RotatingLogFile(path, int(conf["worker.log.max.bytes"]), int(conf["worker.log.backups"]),
                           capture_std=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """squall worker process (launched by a supervisor)."""


@main.command()
@click.argument("topology_id")
@click.argument("supervisor_id")
@click.argument("port", type=click.IntRange(1, 65535))
@click.argument("worker_id")
@click.option("-c", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Configuration override; repeatable.")
@click.option("--log-format", type=click.Choice(["console", "json"]), default=None,
              help="Log as JSON lines (the default for workers) or readable lines.")
def start(topology_id: str, supervisor_id: str, port: int, worker_id: str,
          overrides: tuple[str, ...], log_format: str | None) -> None:
    """Run the worker for TOPOLOGY_ID on slot SUPERVISOR_ID:PORT until stopped."""
    if not local_state.valid_id(worker_id):
        raise click.BadParameter(f"{worker_id!r} cannot be used as a worker id", param_hint="WORKER_ID")
    try:
        extra = _config.parse_overrides(overrides)
    except _config.ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="-c") from None
    try:
        conf, explicit = worker_base_conf(extra)
    except _config.ConfigError as exc:
        click.echo(f"worker: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
    # Worker output goes to its own rotating file (the supervisor captured what came
    # before this in worker.out): JSON lines unless the configuration asks otherwise.
    try:
        sink = worker_log_file(conf, worker_id)
    except (OSError, ValueError) as exc:
        click.echo(f"worker: cannot open its log file: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
    fmt = log_format or (conf["squall.log.format"] if explicit else "json")
    logs.configure_from(conf, fmt, sink, daemon="worker", topology=topology_id, port=port, worker=worker_id)
    logging.basicConfig(level=logging.WARNING, stream=sink,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    creds_path = os.environ.pop(CREDENTIALS_ENV, None)  # user code need not see where it was
    credentials = None
    if creds_path:
        try:
            credentials = read_credentials(creds_path, topology_id)
        except (OSError, ValueError) as exc:
            structlog.get_logger("squall.worker").error("cannot read the worker's credentials",
                                                        path=creds_path, error=str(exc))
            flush_and_exit(EXIT_FAILURE)
    worker = Worker(conf, topology_id, supervisor_id, port, worker_id, extra, credentials=credentials)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: worker.stop(
            0, f"received {signal.Signals(signum).name}"))
    code = worker.run()
    # os._exit: the exit code must not depend on library threads winding down.
    flush_and_exit(code)


if __name__ == "__main__":
    main()
