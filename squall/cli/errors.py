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


def render(errors: list[Mapping[str, Any]], brief: bool = False) -> str:
    """Errors as text, newest first: a heading line each, then the traceback, indented."""
    if not errors:
        return "no errors reported"
    out = []
    for e in errors:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["time"]))
        head = f"{when}  {e['component']} task {e['task']} on {e['host']}:{e['port']}"
        if brief:
            out.append(f"{head}: {last_line(e['error'])}")
        else:
            out.append(head)
            out.extend(f"    {line}" for line in e["error"].rstrip().splitlines())
    return "\n".join(out)


@click.command()
@click.argument("name")
@click.option("--component", default=None, help="Only this component's errors.")
@click.option("-n", "count", type=click.IntRange(min=1), default=10, show_default=True,
              help="At most this many errors (the newest).")
@click.option("--brief", is_flag=True, help="One line each: the exception, without the traceback.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@RAW
@OVERRIDES
def errors(name: str, component: str | None, count: int, brief: bool, as_json: bool, raw: bool,
           overrides: tuple[str, ...]) -> None:
    """Show the errors that topology NAME's code raised, newest first, with tracebacks."""
    conf = base_config(parse_overrides(overrides))
    try:
        reply = NimbusClient.from_conf(conf).topology_errors(name)
    except NimbusError as exc:
        raise Failure(printable(str(exc))) from None
    rows = [e for e in reply["errors"] if component is None or e["component"] == component][:count]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        echo(render(rows, brief), raw)


COMMANDS = [errors]
