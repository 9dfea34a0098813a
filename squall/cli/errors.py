"""``squall errors NAME``: the errors a topology's user code raised, with their tracebacks.

Workers report each error (throttled per component) to ZooKeeper, where nimbus keeps the
last ``topology.errors.kept`` of each component, each at most a few thousand characters;
this prints them newest first. ``squall status`` shows only each component's last line.
Control characters in them are shown escaped unless ``--raw`` (``squall.cli.terminal``).
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import click

from squall.cli.terminal import RAW, echo, printable
from squall.command_line import OVERRIDES, Failure, base_config, parse_overrides
from squall.daemons.nimbus.client import NimbusClient, NimbusError
from squall.logs import last_line


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _lines(head: str, error: str, brief: bool) -> list[str]:
    """One error under its heading: the exception's line beside it (brief), else the
    traceback below it, indented."""
    if brief:
        return [f"{head}: {last_line(error)}"]
    return [head, *(f"    {line}" for line in error.rstrip().splitlines())]


def _group_head(g: Mapping[str, Any]) -> str:
    # at_least: the component's kept errors are full (topology.errors.kept), older ones let go
    more = "+" if g.get("at_least") else ""
    times = f"{g['count']}{more} times, {_when(g['first'])} to {_when(g['last'])}" if g["count"] > 1 or more \
        else f"once, {_when(g['last'])}"
    tasks = ", ".join(str(t) for t in g["tasks"])
    return f"{g['component']} task{'s' if len(g['tasks']) > 1 else ''} {tasks} on {', '.join(g['workers'])}: {times}"


def render_groups(groups: list[Mapping[str, Any]], brief: bool = False) -> str:
    """Identical errors once each, newest first, with how many times and where."""
    if not groups:
        return "no errors reported"
    return "\n".join(line for g in groups for line in _lines(_group_head(g), g["error"], brief))


def render(errors: list[Mapping[str, Any]], brief: bool = False) -> str:
    """Errors as text, newest first: a heading line each, then the traceback, indented."""
    if not errors:
        return "no errors reported"
    return "\n".join(line for e in errors for line in _lines(
        f"{_when(e['time'])}  {e['component']} task {e['task']} on {e['host']}:{e['port']}", e["error"], brief))


@click.command()
@click.argument("name")
@click.option("--component", default=None, help="Only this component's errors.")
@click.option("-n", "count", type=click.IntRange(min=1), default=10, show_default=True,
              help="At most this many errors (the newest).")
@click.option("--brief", is_flag=True, help="One line each: the exception, without the traceback.")
@click.option("--each", is_flag=True, help="Every error on its own, not identical ones grouped with a count.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@RAW
@OVERRIDES
def errors(name: str, component: str | None, count: int, brief: bool, each: bool, as_json: bool, raw: bool,
           overrides: tuple[str, ...]) -> None:
    """Show the errors that topology NAME's code raised, newest first, with tracebacks;
    identical ones once, with how many times and where."""
    conf = base_config(parse_overrides(overrides))
    try:
        reply = NimbusClient.from_conf(conf).topology_errors(name)
    except NimbusError as exc:
        raise Failure(printable(str(exc))) from None
    key = "errors" if each or "groups" not in reply else "groups"  # a nimbus of an earlier squall: no groups
    rows = [e for e in reply[key] if component is None or e["component"] == component][:count]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        echo(render(rows, brief) if key == "errors" else render_groups(rows, brief), raw)


COMMANDS = [errors]
