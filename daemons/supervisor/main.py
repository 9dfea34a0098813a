"""``squall supervisor``: the supervisor daemon in the foreground (exit codes: 0 stopped,
1 cannot start, 2 usage)."""
from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from typing import Any

import click
import structlog

from squall import config as _config
from squall import logs
from squall.command_line import LOG_FORMAT, OVERRIDES, Failure, base_config, parse_overrides
from squall.daemons.local_state import valid_id
from squall.daemons.shutdown import StopDeadline
from squall.daemons.supervisor.daemon import Supervisor, SupervisorError
from squall.daemons.supervisor.worker_user import WorkerUserError, uid_range

log = structlog.get_logger("squall.supervisor")

SHUTDOWN_DEADLINE_SECS = 10.0


def check_conf(conf: Mapping[str, Any]) -> None:
    """Supervisor-specific checks beyond the schema; ConfigError naming the key."""
    ports = conf["supervisor.slots.ports"]
    if not ports:
        raise _config.ConfigError("config key 'supervisor.slots.ports' must list at least one port")
    for port in ports:
        if not 1 <= port <= 65535:
            raise _config.ConfigError(f"config key 'supervisor.slots.ports' has port {port} outside 1-65535")
    if len(set(ports)) != len(ports):
        raise _config.ConfigError(f"config key 'supervisor.slots.ports' repeats a port: {ports}")
    for key in ("supervisor.monitor.frequency.secs", "supervisor.heartbeat.frequency.secs",
                "supervisor.worker.start.timeout.secs", "supervisor.worker.timeout.secs"):
        if conf[key] <= 0:
            raise _config.ConfigError(f"config key {key!r} must be positive, got {conf[key]!r}")
    for key in ("supervisor.worker.shutdown.sleep.secs", "supervisor.restart.grace.secs"):
        if conf[key] < 0:
            raise _config.ConfigError(f"config key {key!r} must not be negative")
    fixed = conf.get("supervisor.id")
    if fixed is not None and not valid_id(fixed):
        raise _config.ConfigError(f"config key 'supervisor.id' {fixed!r} cannot be used as a node id")
    if conf.get("supervisor.worker.command") == []:
        raise _config.ConfigError("config key 'supervisor.worker.command' must not be empty (null: the default)")
    try:
        uid_range(conf["supervisor.worker.uids"])
    except WorkerUserError as exc:
        raise _config.ConfigError(f"config key {exc}") from None
    memory = conf.get("worker.memory.max.mb")
    if memory is not None and memory <= 0:
        raise _config.ConfigError(f"config key 'worker.memory.max.mb' must be positive (null: no limit), got {memory}")


# --- command line -----------------------------------------------------------------------------

@click.command("supervisor")
@OVERRIDES
@LOG_FORMAT
@click.option("--kill-workers-on-exit", is_flag=True,
              help="Stop this node's workers when the supervisor stops (default: leave them running).")
def supervisor_command(overrides: tuple[str, ...], log_format: str | None, kill_workers_on_exit: bool) -> None:
    """Run this host's supervisor in the foreground.

    It registers the ports in supervisor.slots.ports, follows the assignments and runs the
    workers. SIGTERM or SIGINT stops it; its workers keep running and are adopted by the next
    supervisor started on the same local dir.
    """
    conf = base_config(parse_overrides(overrides))
    try:
        check_conf(conf)
    except _config.ConfigError as exc:
        raise Failure(str(exc)) from None
    logs.configure_from(conf, log_format, daemon="supervisor")
    os.umask(0o077)  # local state, code and logs: readable by this user only (workers inherit it)
    supervisor = Supervisor(conf, kill_workers_on_exit=kill_workers_on_exit)
    # SIGTERM ends the process within the deadline, whatever ZooKeeper does (killing the
    # workers on exit may take their shutdown sleep on top).
    secs = SHUTDOWN_DEADLINE_SECS + (2 * conf["supervisor.worker.shutdown.sleep.secs"] + 5
                                     if kill_workers_on_exit else 0)
    deadline = StopDeadline(secs, lambda: 0, supervisor.release_zookeeper, "supervisor").start()

    def on_signal(*_: object) -> None:
        supervisor.stop()
        deadline.request()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        supervisor.start()
    except SupervisorError as exc:
        log.error("supervisor cannot start", error=str(exc))
        raise Failure(str(exc)) from None
    supervisor.run()
    deadline.done()


if __name__ == "__main__":
    supervisor_command(prog_name="squall supervisor")

