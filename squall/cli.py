"""The ``squall`` command line (click). Exit codes: 0 ok, 1 failure, 2 usage."""
from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any

import click

from squall import config as _config
from squall import logs

LOG_FORMAT = click.option("--log-format", type=click.Choice(["console", "json"]), default=None,
                          help="Log as readable lines (console) or JSON lines.")
OVERRIDES = click.option("-c", "overrides", multiple=True, metavar="KEY=VALUE",
                         help="Configuration override; repeatable.")


class Failure(click.ClickException):
    """A command that could not do its job: exit code 1 with the reason."""

    exit_code = 1


def parse_overrides(pairs: tuple[str, ...]) -> dict[str, Any]:
    try:
        return _config.parse_overrides(pairs)
    except _config.ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="-c") from None


def base_config(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Defaults, the user file and ``overrides``; a bad file or key is a Failure."""
    try:
        return _config.build_config(overrides)
    except _config.ConfigError as exc:
        raise Failure(str(exc)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="squall")
def main() -> None:
    """squall: a Storm-style distributed stream processor."""


def wait_for_stop(duration: float | None) -> None:
    """Block until ``duration`` passes or SIGINT/SIGTERM arrives."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait(duration)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--local", is_flag=True, required=True, help="Run in this process (local mode).")
@click.option("--duration", type=click.FloatRange(min=0), default=None, help="Stop after this many seconds.")
@click.option("--name", default=None, help="Topology name (default: the file's stem).")
@OVERRIDES
@LOG_FORMAT
def run(file: str, local: bool, duration: float | None, name: str | None, overrides: tuple[str, ...],
        log_format: str | None) -> None:
    """Run the topology defined in FILE in local mode."""
    from squall.loader import TopologyFileError, load_topology
    from squall.local import LocalCluster
    from squall.topology import TopologyError

    extra = parse_overrides(overrides)
    conf = base_config(extra)
    logs.configure_from(conf, log_format)
    try:
        topology, file_conf, module = load_topology(file)
    except (TopologyFileError, TopologyError, _config.ConfigError) as exc:
        raise Failure(str(exc)) from None
    name = name or module.__name__
    with LocalCluster(conf) as cluster:
        try:
            cluster.submit(name, {**file_conf, **extra}, topology)
        except TopologyError as exc:
            raise Failure(str(exc)) from None
        started = time.monotonic()
        wait_for_stop(duration)
        stats = cluster.stats(name)
        elapsed = time.monotonic() - started
        cluster.kill(name)
    emitted = sum(sum(s["emitted"].values()) for s in stats if s["kind"] == "spout")
    acked = sum(s.get("acked", 0) for s in stats if s["kind"] == "spout")
    failed = sum(s.get("failed", 0) for s in stats if s["kind"] == "spout")
    click.echo(f"ran {name} for {elapsed:.1f}s: spouts emitted {emitted}, acked {acked}, failed {failed}")


# Command modules register themselves here (one line each).
def _register() -> None:
    import importlib

    for module in ("squall.cluster_cli", "squall.spark.cli"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        for command in getattr(mod, "COMMANDS", []):
            main.add_command(command)


_register()

if __name__ == "__main__":
    sys.exit(main())
