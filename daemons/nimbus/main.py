"""``squall nimbus``: nimbus in the foreground (exit codes: 0 stopped, 1 cannot start or
failed, 2 usage)."""
from __future__ import annotations

import os
import signal

import click
import structlog

from squall import logs
from squall.command_line import LOG_FORMAT, OVERRIDES, base_config, parse_overrides
from squall.daemons.nimbus.daemon import Nimbus, NimbusStartError
from squall.daemons.shutdown import StopDeadline

log = structlog.get_logger("squall.nimbus")

SHUTDOWN_DEADLINE_SECS = 10.0


@click.command("nimbus")
@OVERRIDES
@LOG_FORMAT
def nimbus_command(overrides: tuple[str, ...], log_format: str | None) -> None:
    """Run nimbus (the HTTP API on nimbus.host:nimbus.port) in the foreground."""
    conf = base_config(parse_overrides(overrides))
    logs.configure_from(conf, log_format, daemon="nimbus")
    os.umask(0o077)  # local state, code and logs: readable by this user only (workers inherit it)
    nimbus = Nimbus(conf)
    # SIGTERM ends the process within SHUTDOWN_DEADLINE_SECS, whatever ZooKeeper does.
    deadline = StopDeadline(SHUTDOWN_DEADLINE_SECS, lambda: nimbus.exit_code, nimbus.release_zookeeper,
                            "nimbus").start()

    def on_signal(*_: object) -> None:
        nimbus.stop()
        deadline.request()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        nimbus.start()
    except NimbusStartError as exc:
        log.error("nimbus cannot start", error=str(exc))
        raise SystemExit(1) from None
    log.info("nimbus API serving", address=nimbus.identifier)
    code = nimbus.run()
    deadline.done()
    raise SystemExit(code)
