"""``squall nimbus``: nimbus in the foreground (exit codes: 0 stopped, 1 cannot start or
failed, 2 usage)."""
from __future__ import annotations

import os
import signal

import click
import structlog

from squall.daemons.nimbus.daemon import Nimbus, NimbusStartError

log = structlog.get_logger("squall.nimbus")


@click.command("nimbus")
@click.option("-c", "overrides", multiple=True, metavar="KEY=VALUE", help="Configuration override; repeatable.")
@click.option("--log-format", type=click.Choice(["console", "json"]), default=None,
              help="Log as readable lines (console) or JSON lines.")
def nimbus_command(overrides: tuple[str, ...], log_format: str | None) -> None:
    """Run nimbus (the HTTP API on nimbus.host:nimbus.port) in the foreground."""
    from squall import logs
    from squall.cli.options import base_config, parse_overrides

    conf = base_config(parse_overrides(overrides))
    logs.configure_from(conf, log_format, daemon="nimbus")
    os.umask(0o077)  # local state, code and logs: readable by this user only (workers inherit it)
    nimbus = Nimbus(conf)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: nimbus.stop())
    try:
        nimbus.start()
    except NimbusStartError as exc:
        log.error("nimbus cannot start", error=str(exc))
        raise SystemExit(1) from None
    log.info("nimbus API serving", address=nimbus.identifier)
    raise SystemExit(nimbus.run())
