"""Cluster commands of the ``squall`` CLI: the daemons and the nimbus client commands
(``submit`` is in ``squall.cli.submit``, ``dev-cluster`` in ``squall.cli.dev_cluster``: what
they import, these commands, which scripts call in loops, never need).

``squall nimbus`` / ``squall supervisor`` load their daemon module only when run (so a
missing or broken daemon module never breaks the other commands, and ``squall list`` does
not import the HTTP server). The client commands talk to nimbus at ``nimbus.host`` /
``nimbus.port`` (user file, ``SQUALL_CONF`` or ``-c``). Exit codes: 0 ok, 1 failure (with a
one-line reason), 2 usage.
"""
from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Mapping
from typing import Any

import click

from squall.cli.calls import nimbus_call
from squall.cli.operate import render_windows
from squall.cli.status_view import duration as _duration
from squall.cli.status_view import plural
from squall.cli.status_view import render as render_status
from squall.cli.status_view import table as _table
from squall.cli.terminal import RAW, echo, printable, shown
from squall.command_line import OVERRIDES, Failure, base_config, parse_overrides
from squall.daemons.nimbus.client import NimbusClient


class LazyCommand(click.Command):
    """A command whose implementation (a click command at ``module:attr``) is imported on use."""

    def __init__(self, name: str, target: str, short_help: str) -> None:
        super().__init__(name, short_help=short_help, help=short_help)
        self.target = target
        self._real: click.Command | None = None

    def _load(self) -> click.Command:
        if self._real is None:
            module, _, attr = self.target.partition(":")
            try:
                real = getattr(importlib.import_module(module), attr)
            except ModuleNotFoundError as exc:
                raise Failure(f"`squall {self.name}` is not available: module {exc.name} is missing") from None
            except AttributeError:
                raise Failure(f"`squall {self.name}` is not available: {module} has no {attr}") from None
            self._real = real
        return self._real

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return self._load().get_params(ctx)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return self._load().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        return self._load().invoke(ctx)

    def get_help(self, ctx: click.Context) -> str:
        return self._load().get_help(ctx)

    def get_short_help_str(self, limit: int = 45) -> str:
        return self.short_help or ""


nimbus = LazyCommand("nimbus", "squall.daemons.nimbus.main:nimbus_command",
                     "Run nimbus (HTTP API, scheduling, leader election) in the foreground.")
supervisor = LazyCommand("supervisor", "squall.daemons.supervisor.main:supervisor_command",
                         "Run a supervisor (worker slots of this host) in the foreground.")

JSON_OUT = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")


def _client(conf: Mapping[str, Any]) -> NimbusClient:
    return NimbusClient.from_conf(conf)


@click.command()
@click.argument("name")
@click.option("--wait", "wait_secs", type=click.FloatRange(min=0), default=None,
              help="Seconds between deactivation and removal (default: topology.message.timeout.secs).")
@OVERRIDES
def kill(name: str, wait_secs: float | None, overrides: tuple[str, ...]) -> None:
    """Kill topology NAME: deactivate it now, remove it after the wait."""
    conf = base_config(parse_overrides(overrides))
    reply = nimbus_call(_client(conf).kill, name, wait_secs)
    click.echo(f"killed topology {reply['name']} ({reply['id']}); removal in {reply['wait_secs']:g}s")


@click.command()
@click.argument("name")
@OVERRIDES
def activate(name: str, overrides: tuple[str, ...]) -> None:
    """Activate topology NAME (its spouts emit again)."""
    conf = base_config(parse_overrides(overrides))
    reply = nimbus_call(_client(conf).activate, name)
    click.echo(f"topology {reply['name']} is {reply['status']}")


@click.command()
@click.argument("name")
@OVERRIDES
def deactivate(name: str, overrides: tuple[str, ...]) -> None:
    """Deactivate topology NAME (its spouts stop emitting)."""
    conf = base_config(parse_overrides(overrides))
    reply = nimbus_call(_client(conf).deactivate, name)
    click.echo(f"topology {reply['name']} is {reply['status']}")


def _parse_executors(pairs: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for pair in pairs:
        component, sep, raw = pair.rpartition("=")
        if not sep or not component or not raw.strip().isdigit() or int(raw) < 1:
            raise click.BadParameter(f"{pair!r} is not COMPONENT=N with N >= 1", param_hint="-e")
        out[component] = int(raw)
    return out


@click.command()
@click.argument("name")
@click.option("-n", "--num-workers", type=click.IntRange(min=1), default=None, help="New number of workers.")
@click.option("-e", "--executors", "executor_pairs", multiple=True, metavar="COMPONENT=N",
              help="New executor count of a component (at most its task count); repeatable.")
@click.option("--wait", "wait_secs", type=click.FloatRange(min=0), default=None,
              help="Seconds the topology is deactivated before the move (default: topology.message.timeout.secs).")
@OVERRIDES
def rebalance(name: str, num_workers: int | None, executor_pairs: tuple[str, ...], wait_secs: float | None,
              overrides: tuple[str, ...]) -> None:
    """Spread topology NAME anew over a number of workers and/or change executor counts."""
    executors = _parse_executors(executor_pairs)
    if num_workers is None and not executors:
        raise click.UsageError("say what to change: -n WORKERS and/or -e COMPONENT=N (to spread a "
                               "topology anew over as many workers as it has, give -n with that number)")
    conf = base_config(parse_overrides(overrides))
    reply = nimbus_call(_client(conf).rebalance, name, num_workers, executors, wait_secs)
    if reply["status"] == "rebalancing":
        click.echo(f"rebalancing topology {reply['name']} to {plural(reply['num_workers'], 'worker')} "
                   f"in {reply['wait_secs']:g}s")
    else:
        click.echo(f"rebalanced topology {reply['name']}: {plural(reply.get('workers', 0), 'worker')}, "
                   f"status {reply['status']}")
    if reply.get("warning"):
        click.echo(f"warning: {printable(reply['warning'])}", err=True)


@click.command("list")
@JSON_OUT
@OVERRIDES
def list_(as_json: bool, overrides: tuple[str, ...]) -> None:
    """List the topologies on the cluster."""
    conf = base_config(parse_overrides(overrides))
    rows = nimbus_call(_client(conf).topologies)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no topologies")
        return
    table = [("NAME", "ID", "OWNER", "STATUS", "WORKERS", "EXECUTORS", "UPTIME")]
    table += [(r["name"], r["id"], r.get("owner") or "-", r["status"], r["workers"], r["executors"],
               _duration(r["uptime"])) for r in rows]
    click.echo(printable(_table(table)))


FIRST_BEAT_WAIT_SECS = 30.0  # how long `status` waits for a new topology's first beats


@click.command()
@click.argument("name")
@JSON_OUT
@click.option("--watch", is_flag=True, help="Redraw the table every --interval seconds until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True,
              help="Seconds between redraws with --watch.")
@click.option("--windows", is_flag=True, help="Also each component's rates and latencies over Storm's "
              "windows: 10 minutes, 3 hours, 1 day and all time.")
@click.option("--wait", "wait_secs", type=click.FloatRange(min=0, max=600), default=None,
              help=f"Seconds to wait for the first beats and rates of a topology whose executors do not "
                   f"all have them yet (default {FIRST_BEAT_WAIT_SECS:g} for a topology that started less than "
                   f"that ago; 0: do not wait).")
@RAW
@OVERRIDES
def status(name: str, as_json: bool, watch: bool, interval: float, windows: bool, wait_secs: float | None,
           raw: bool, overrides: tuple[str, ...]) -> None:
    """Show topology NAME: components, executors with host and port, totals and rates per
    second over the last minute, last errors (control characters escaped unless --raw)."""
    if watch and as_json:
        raise click.UsageError("--watch redraws the table; use --json without it")
    conf = base_config(parse_overrides(overrides))
    client = _client(conf)

    def draw(st: Mapping[str, Any]) -> str:
        return render_status(st) + (f"\n{render_windows(st)}" if windows else "")

    if not watch:
        st = _first_beats(client, name, wait_secs)
        if as_json:
            click.echo(json.dumps(st, indent=2))
        else:
            echo(draw(st), raw)
        return
    _watch(lambda: shown(draw(nimbus_call(client.topology, name)), raw), interval)


def _unheard(st: Mapping[str, Any]) -> bool:
    """Some executor of the topology has no figures yet: no beat (its worker is starting), or
    no rate (a rate needs two beats; the first beat of a new worker is all zeros)."""
    return any(ex["uptime"] is None or not ex.get("rates") for c in st["components"] for ex in c["executors"])


def _awaited(st: Mapping[str, Any]) -> bool:
    """Figures still to come: some executor unheard, and no worker error to show instead."""
    return _unheard(st) and not st.get("worker_error")


def _first_beats(client: NimbusClient, name: str, wait_secs: float | None) -> dict[str, Any]:
    """The status, once every executor has reported and has rates: a topology submitted a
    moment ago has no beats yet (its workers are starting), then beats of zeros, and a table of
    zeros would say nothing. Waits (and says so on stderr) only until the topology is
    FIRST_BEAT_WAIT_SECS old, unless ``wait_secs`` asks, and never once nimbus holds a worker
    error (an environment that could not be built, a memory kill): that is the news."""
    st = nimbus_call(client.topology, name)
    wait = wait_secs if wait_secs is not None else max(0.0, FIRST_BEAT_WAIT_SECS - (st.get("uptime") or 0))
    if not _awaited(st) or wait <= 0:
        return st
    click.echo(f"waiting up to {wait:g}s for the first beats and rates of {st['name']}'s executors "
               "(--wait 0 shows the status at once)...", err=True)
    deadline = time.monotonic() + wait
    while _awaited(st) and time.monotonic() < deadline:
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        st = nimbus_call(client.topology, name)
    if _awaited(st):
        click.echo(f"some executors have no rates after {wait:g}s: see `squall logs {st['name']}`", err=True)
    return st


def _watch(draw: Any, interval: float) -> None:
    """Redraw ``draw()`` every ``interval`` seconds until Ctrl-C (exit 0). On a terminal the
    screen is cleared first; a failure (nimbus away) is shown and the watch goes on."""
    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
    try:
        while True:
            try:
                text = draw()
            except Failure as exc:
                text = f"error: {exc.message}"
            stamp = time.strftime("%H:%M:%S")
            click.echo(f"{clear}every {interval:g}s, Ctrl-C to stop; {stamp}\n{text}\n")
            time.sleep(interval)
    except KeyboardInterrupt:
        pass


COMMANDS = [nimbus, supervisor, kill, activate, deactivate, rebalance, list_, status]
