"""Operating a running topology, as Storm's CLI does: ``squall set-log-level`` (Storm's
set_log_level), ``debug`` and ``debug show`` (the event logger behind the UI's Debug button),
``profile`` (the UI's jstack and heap dump, for Python), ``kill-workers`` and ``monitor``.

Nimbus checks and authorizes every request (the topology's owner or an admin) and logs who
asked for what; the topology's workers carry it out (see
``squall.daemons.nimbus.operator``). Exit codes: 0 ok, 1 failure (one line), 2 usage.
"""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from squall.cli.calls import nimbus_call
from squall.cli.status_view import duration, plural, rate, table
from squall.cli.terminal import printable
from squall.command_line import OVERRIDES, Failure, base_config, parse_overrides
from squall.daemons.nimbus.client import NimbusClient, NimbusError

JSON_OUT = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
TIMEOUT = click.option("--timeout", "timeout", type=click.FloatRange(min=1, max=86_400), default=None,
                       help="Seconds until it ends by itself (default 600, at most a day).")
def _client(overrides: tuple[str, ...]) -> NimbusClient:
    return NimbusClient.from_conf(base_config(parse_overrides(overrides)))


def _until(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


# -- set-log-level ------------------------------------------------------------------------

@click.command("set-log-level")
@click.argument("name")
@click.argument("levels", nargs=-1, metavar="[LOGGER=LEVEL]...")
@TIMEOUT
@click.option("-r", "--reset", "resets", multiple=True, metavar="LOGGER",
              help="Put this logger's level back now; repeatable.")
@OVERRIDES
def set_log_level(name: str, levels: tuple[str, ...], timeout: float | None, resets: tuple[str, ...],
                  overrides: tuple[str, ...]) -> None:
    """Set log levels on every worker of topology NAME for a while, as Storm's set_log_level:
    LOGGER is a Python logging logger (ROOT for the root logger), LEVEL one of DEBUG, INFO,
    WARNING, ERROR, CRITICAL (WARN, FATAL and TRACE are taken too). Each level goes back to
    what it was after --timeout seconds."""
    wanted: dict[str, str] = {}
    for pair in levels:
        logger, sep, level = pair.partition("=")
        if not sep or not logger or not level:
            raise click.BadParameter(f"{pair!r} is not LOGGER=LEVEL", param_hint="LOGGER=LEVEL")
        wanted[logger] = level
    wanted.update(dict.fromkeys(resets, "RESET"))
    if not wanted:
        raise click.UsageError("say what to set: LOGGER=LEVEL (e.g. ROOT=DEBUG or myapp.bolts=INFO), "
                               "or -r LOGGER to put one back")
    reply = nimbus_call(_client(overrides).set_log_levels, name, wanted, timeout)
    for logger, level in sorted(wanted.items()):
        if level == "RESET":
            click.echo(f"{logger}: put back on every worker of {reply['name']}")
    for logger, entry in sorted(reply["log_levels"].items()):
        click.echo(f"{logger}={entry['level']} on every worker of {reply['name']} until {_until(entry['until'])}")


# -- debug --------------------------------------------------------------------------------

class _DebugGroup(click.Group):
    """``squall debug NAME [COMPONENT] --sample P`` and ``squall debug show NAME``: a word
    that is not a subcommand starts the first form."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                             list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            return "sample", self.commands["sample"], args
        return super().resolve_command(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "NAME [COMPONENT] (--sample PERCENT | --off) | show NAME [COMPONENT]")


@click.group(cls=_DebugGroup, name="debug")
def debug() -> None:
    """Sample the tuples topology NAME's components emit (Storm's Debug button):
    `squall debug NAME [COMPONENT] --sample PERCENT` starts it (every component without
    COMPONENT), `--off` stops it, `squall debug show NAME` prints the samples: stream, task,
    target task, anchors and values."""


@debug.command("sample", hidden=True)
@click.argument("name")
@click.argument("component", required=False)
@click.option("--sample", "percent", type=click.FloatRange(min=0, max=100, min_open=True), default=None,
              help="Percent of the emits to sample (above 0, at most 100).")
@click.option("--off", is_flag=True, help="Stop sampling (COMPONENT's, or every component's).")
@TIMEOUT
@OVERRIDES
def debug_sample(name: str, component: str | None, percent: float | None, off: bool, timeout: float | None,
                 overrides: tuple[str, ...]) -> None:
    """Start or stop sampling emits."""
    if off == (percent is not None):
        raise click.UsageError("give --sample PERCENT to start sampling or --off to stop it")
    reply = nimbus_call(_client(overrides).debug, name, component, 0 if off else percent, timeout)
    what = f"component {component}" if component else "every component"
    if off:
        click.echo(f"sampling of {what} of {reply['name']} stopped")
    else:
        until = (reply["debug"].get(component or "*") or {}).get("until")
        click.echo(f"sampling {percent:g}% of what {what} of {reply['name']} emits"
                   + (f" until {_until(until)}" if until else "") + f"; see them: squall debug show {name}")


def render_samples(samples: list[Mapping[str, Any]]) -> str:
    """One line per sample, oldest first."""
    if not samples:
        return "no samples yet"
    rows: list[list[Any]] = [["TIME", "COMPONENT", "TASK", "STREAM", "TO", "ANCHORS", "VALUES"]]
    for s in samples:
        anchors = ",".join(s.get("anchors") or {}) or "-"
        values = json.dumps(s["values"], ensure_ascii=False)
        if s.get("values_left_out"):
            values += f" (+{s['values_left_out']} more)"
        stamp = time.strftime("%H:%M:%S", time.localtime(s["time"])) + f".{int(s['time'] * 1000) % 1000:03d}"
        rows.append([stamp, printable(str(s["component"])), s["task"], printable(str(s["stream"])), s["target"],
                     anchors, printable(values)])
    return table(rows)


@debug.command("show")
@click.argument("name")
@click.argument("component", required=False)
@click.option("-n", "count", type=click.IntRange(1, 1000), default=50, show_default=True,
              help="The newest this many samples.")
@JSON_OUT
@OVERRIDES
def debug_show(name: str, component: str | None, count: int, as_json: bool, overrides: tuple[str, ...]) -> None:
    """Show the tuples sampled from topology NAME (of COMPONENT), oldest first."""
    client = _client(overrides)
    reply = nimbus_call(client.debug_samples, name, component, count)
    if as_json:
        click.echo(json.dumps(reply, indent=2))
        return
    click.echo(render_samples(reply["samples"]))
    for miss in reply.get("unread") or []:
        click.echo(f"warning: worker {miss['node']}:{miss['port']} not read: {miss['error']}", err=True)
    if not reply["samples"]:
        asked = nimbus_call(client.operations, name)["debug"]
        click.echo("nothing is sampled now: start with squall debug NAME [COMPONENT] --sample PERCENT"
                   if not asked else "sampling is on; samples reach the workers' events logs within a second",
                   err=True)


# -- profile ------------------------------------------------------------------------------

@click.command()
@click.argument("name")
@click.option("--worker", required=True, metavar="HOST:PORT", help="The worker (as `squall status` shows it).")
@click.option("--stack", "kind", flag_value="stack", help="Every thread's stack, now.")
@click.option("--record", "record_secs", type=click.FloatRange(min=1, max=300), default=None, metavar="SECS",
              help="A sampling profile over SECS seconds (collapsed stacks, for flame graphs).")
@click.option("--heap", "kind", flag_value="heap", help="Live objects by type, and the lines that allocated "
              "the most memory over --secs (default 5).")
@click.option("--secs", "heap_secs", type=click.FloatRange(min=1, max=300), default=None,
              help="With --heap: seconds of allocation tracing.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the profile to this file instead of printing it.")
@OVERRIDES
def profile(name: str, worker: str, kind: str | None, record_secs: float | None, heap_secs: float | None,
            output: str | None, overrides: tuple[str, ...]) -> None:
    """Profile one worker of topology NAME: --stack, --record SECS or --heap (py-spy when the
    worker's host has it, else the standard library); waits for the result."""
    if record_secs is not None:
        if kind is not None:
            raise click.UsageError("give one of --stack, --record SECS, --heap")
        kind = "record"
    if kind is None:
        raise click.UsageError("say what to take: --stack, --record SECS or --heap")
    if heap_secs is not None and kind != "heap":
        raise click.UsageError("--secs goes with --heap")
    client = _client(overrides)
    secs = record_secs if kind == "record" else heap_secs
    reply = nimbus_call(client.profile, name, worker, kind, secs)
    asked = reply["profile"]
    click.echo(f"profile {asked['profile_id']} ({kind}) asked of {asked['host']}:{asked['port']}; waiting", err=True)
    deadline = time.monotonic() + asked["secs"] + 60
    while True:
        try:
            result = client.profile_result(name, asked["profile_id"])
            break
        except NimbusError as exc:
            if exc.status != 404 or "not ready" not in str(exc) or time.monotonic() > deadline:
                raise Failure(printable(str(exc))) from None
        time.sleep(0.5)
    if output:
        Path(output).write_text(result["text"], encoding="utf-8")
        click.echo(f"profile {asked['profile_id']} written to {output} ({len(result['text']):,} characters)")
    else:
        click.echo(printable(result["text"]), nl=False)
    if result.get("truncated"):
        click.echo("warning: the profile was cut at the logviewer's size limit", err=True)


# -- kill-workers -------------------------------------------------------------------------

@click.command("kill-workers")
@click.argument("name")
@OVERRIDES
def kill_workers(name: str, overrides: tuple[str, ...]) -> None:
    """Restart every worker of topology NAME (Storm's kill_workers): each ends, and its
    supervisor starts it again on the same slot; unacked tuples are replayed."""
    reply = nimbus_call(_client(overrides).kill_workers, name)
    click.echo(f"restarting {plural(reply['workers'], 'worker')} of {reply['name']}")


# -- monitor ------------------------------------------------------------------------------

MONITOR_COLUMNS = ("TIME", "COMPONENT", "EXECUTORS", "EMIT/S", "EXEC/S", "ACK/S", "FAIL/S", "EXEC MS", "COMPLETE MS")


def monitor_rows(before: Mapping[str, Any], after: Mapping[str, Any], secs: float,
                 component: str | None) -> list[list[str]]:
    """Rates per component between two statuses ``secs`` apart (a worker restart, whose
    counters start over, shows as 0), and the latencies of the later one."""
    prior = {c["id"]: c for c in before["components"]}
    rows = []
    stamp = time.strftime("%H:%M:%S")
    for comp in after["components"]:
        if comp["id"].startswith("__") or (component is not None and comp["id"] != component):
            continue
        old = prior.get(comp["id"], {})
        rates = [max(0, comp[k] - old.get(k, 0)) / secs for k in ("emitted", "executed", "acked", "failed")]
        lat = comp.get("execute_latency_ms"), comp.get("complete_latency_ms")
        rows.append([stamp, printable(comp["id"]), str(len(comp["executors"])), *(rate(r) for r in rates),
                     *("-" if v is None else f"{v:.3f}" for v in lat)])
    return rows


@click.command()
@click.argument("name")
@click.argument("component", required=False)
@click.option("-i", "--interval", type=click.FloatRange(min=1, max=3600), default=4.0, show_default=True,
              help="Seconds between lines (stats reach nimbus every few seconds).")
@click.option("--count", type=click.IntRange(min=1), default=None, help="Stop after this many reports.")
@OVERRIDES
def monitor(name: str, component: str | None, interval: float, count: int | None, overrides: tuple[str, ...]) -> None:
    """Show topology NAME's rates live (as `storm monitor`): every interval, each component's
    (or COMPONENT's) tuples per second since the last line, until Ctrl-C."""
    client = _client(overrides)
    before = nimbus_call(client.topology, name)
    if component is not None and component not in {c["id"] for c in before["components"]}:
        raise Failure(f"topology {before['name']!r} has no component {component!r}")
    click.echo(f"topology {before['name']}: rates every {interval:g}s, Ctrl-C to stop")
    click.echo(table([MONITOR_COLUMNS]))
    widths = [len(c) for c in MONITOR_COLUMNS]
    shown_reports = 0
    started = time.monotonic()
    try:
        while count is None or shown_reports < count:
            time.sleep(interval)
            after = nimbus_call(client.topology, name)
            secs = time.monotonic() - started
            started = time.monotonic()
            for row in monitor_rows(before, after, secs, component):
                widths = [max(w, len(c)) for w, c in zip(widths, row)]
                click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
            sys.stdout.flush()
            before = after
            shown_reports += 1
    except KeyboardInterrupt:
        pass


def render_windows(st: Mapping[str, Any]) -> str:
    """Each component's rates and latencies over Storm's windows (10m, 3h, 1d) and all time."""
    rows: list[list[Any]] = [["COMPONENT", "WINDOW", "EMIT/S", "EXEC/S", "ACK/S", "FAIL/S", "EXEC MS",
                              "COMPLETE MS", "EMITTED", "ACKED", "FAILED"]]
    for comp in st["components"]:
        windows = comp.get("windows") or {}
        for label in ("10m", "3h", "1d", "all"):
            w = windows.get(label)
            if w is None:
                continue
            span = f"{label} ({duration(w['secs'])})" if "secs" in w else label
            rows.append([printable(comp["id"]), span,
                         *(rate(w.get(f"{k}_per_sec")) for k in ("emitted", "executed", "acked", "failed")),
                         *("-" if w.get(k) is None else f"{w[k]:.3f}"
                           for k in ("execute_latency_ms", "complete_latency_ms")),
                         f"{w['emitted']:,}", f"{w['acked']:,}", f"{w['failed']:,}"])
    if len(rows) == 1:
        return "no history yet: nimbus keeps it from the first beats it hears"
    return table(rows)


COMMANDS = [set_log_level, debug, profile, kill_workers, monitor]
