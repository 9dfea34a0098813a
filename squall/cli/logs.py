"""``squall logs TOPOLOGY [--component C | --task N] [--follow] [--lines N] [--raw]``: worker
logs from any machine that reaches nimbus (nimbus asks the supervisors' logviewers), control
characters shown escaped unless ``--raw`` (``squall.cli.terminal``)."""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click

from squall.cli.terminal import RAW, echo, printable
from squall.command_line import OVERRIDES, Failure, base_config, parse_overrides
from squall.daemons.nimbus.client import NimbusClient, NimbusError

FOLLOW_POLL_SECS = 1.0
RESOLVE_EVERY_SECS = 10.0  # how often --follow looks again for workers that moved


@dataclass(frozen=True)
class LogSlot:
    node: str
    host: str
    port: int

    @property
    def label(self) -> str:
        return f"{self.host}:{self.port}"


def log_slots(status: Mapping[str, Any], component: str | None = None,
              task: int | None = None) -> list[LogSlot]:
    """The worker slots whose logs to show: every worker of the topology, those running
    ``component``'s executors, or the one running ``task``; ValueError naming the problem."""
    comps = status.get("components") or []
    if component is not None and component not in {c["id"] for c in comps}:
        known = ", ".join(sorted(c["id"] for c in comps))
        raise ValueError(f"topology {status['name']} has no component {component!r} (it has: {known})")
    slots: set[LogSlot] = set()
    for comp in comps:
        if component is not None and comp["id"] != component:
            continue
        for ex in comp["executors"]:
            start, end = ex["executor"]
            if task is not None and not start <= task <= end:
                continue
            if ex.get("node") and ex.get("port") is not None:
                slots.add(LogSlot(ex["node"], ex.get("host") or "?", ex["port"]))
    if not slots:
        what = (f"task {task}" if task is not None else
                f"component {component!r}" if component is not None else "it")
        raise ValueError(f"no worker of topology {status['name']} runs {what} now")
    return sorted(slots, key=lambda s: (s.host, s.port, s.node))


def _echo(slot: LogSlot, text: str, prefixed: bool, raw: bool) -> None:
    if not text:
        return
    if prefixed:
        text = "".join(f"{slot.label} | {line}" for line in text.splitlines(keepends=True))
    echo(text, raw, nl=not text.endswith("\n"))


def _resolve(client: NimbusClient, name: str, component: str | None, task: int | None) -> list[LogSlot]:
    try:
        return log_slots(client.topology(name), component, task)
    except ValueError as exc:
        raise Failure(printable(str(exc))) from None


@click.command("logs")
@click.argument("name")
@click.option("--component", default=None, help="Only the workers that run this component.")
@click.option("--task", type=click.IntRange(min=1), default=None, help="Only the worker that runs this task.")
@click.option("--lines", "-n", type=click.IntRange(1, 100_000), default=100, show_default=True,
              help="Lines to show from the end of each worker's log.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@RAW
@OVERRIDES
def logs(name: str, component: str | None, task: int | None, lines: int, follow: bool, raw: bool,
         overrides: tuple[str, ...]) -> None:
    """Show the logs of topology NAME's workers (a worker's log holds all its executors').

    With several workers, each line starts with the worker's host:port. Control characters
    are shown escaped unless --raw."""
    if component is not None and task is not None:
        raise click.UsageError("give --component or --task, not both")
    client = NimbusClient.from_conf(base_config(parse_overrides(overrides)))
    try:
        slots = _resolve(client, name, component, task)
        cursors: dict[LogSlot, tuple[int, int]] = {}
        failures = 0
        for slot in slots:
            try:
                reply = client.worker_log(name, slot.node, slot.port, lines=lines)
            except NimbusError as exc:
                failures += 1
                click.echo(f"{slot.label}: {printable(str(exc))}", err=True)
                continue
            _echo(slot, reply["text"], len(slots) > 1, raw)
            cursors[slot] = (reply["next_offset"], reply["inode"])
        if failures == len(slots):
            raise Failure(f"no worker log of topology {name} could be read")
        if follow:
            _follow(client, name, component, task, lines, cursors, raw)
    except NimbusError as exc:
        raise Failure(printable(str(exc))) from None
    except KeyboardInterrupt:
        pass


def _follow(client: NimbusClient, name: str, component: str | None, task: int | None, lines: int,
            cursors: dict[LogSlot, tuple[int, int]], raw: bool) -> None:
    """Poll every worker for what follows its cursor; look for moved workers now and then."""
    resolved_at = time.monotonic()
    while True:
        time.sleep(FOLLOW_POLL_SECS)
        if time.monotonic() - resolved_at >= RESOLVE_EVERY_SECS:
            resolved_at = time.monotonic()
            current = set(_resolve(client, name, component, task))
            for slot in current - cursors.keys():
                cursors[slot] = (-1, 0)  # a new worker: start with its last lines
            for slot in cursors.keys() - current:
                del cursors[slot]
        prefixed = len(cursors) > 1
        for slot, (offset, inode) in list(cursors.items()):
            try:
                reply = (client.worker_log(name, slot.node, slot.port, lines=lines) if offset < 0 else
                         client.worker_log(name, slot.node, slot.port, offset=offset, inode=inode))
            except NimbusError as exc:
                if exc.status == 404:
                    continue  # the worker is moving; the next resolve finds it
                raise
            _echo(slot, reply["text"], prefixed, raw)
            cursors[slot] = (reply["next_offset"], reply["inode"])


COMMANDS = [logs]
