"""``squall run FILE``: a topology file (or a streamparse topology, or with ``--flux`` a Flux
YAML file) in this process (local mode; ``--local`` is accepted and changes nothing) until a
duration or a signal. It exits 1 when a component reported an error (``run_failure``).

A topology file may define ``local_run_report(cluster, name, conf)``: called with the
``LocalCluster``, the topology's name and its configuration before the topology stops, it
returns a line to print (whether the results are right, say)."""
from __future__ import annotations

import signal
import threading
import time
from typing import Any

import click

from squall import logs
from squall.cli import topology_source
from squall.cli.live_rates import LiveRates
from squall.command_line import LOG_FORMAT, OVERRIDES, Failure, base_config, parse_overrides
from squall.local import LocalCluster  # only `squall run` imports this module (squall/cli/__init__.py)
from squall.logs import last_line
from squall.multilang.codedir import set_code_dir
from squall.topology import TopologyError


def wait_for_stop(duration: float | None) -> None:
    """Block until ``duration`` passes or SIGINT/SIGTERM arrives."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait(duration)


REPORT_HOOK = "local_run_report"


def _report(module: Any, cluster: Any, name: str, conf: dict[str, Any]) -> str | None:
    """What the topology file's ``local_run_report(cluster, name, conf)`` says about the run
    (e.g. whether its results are right), called before the topology stops; None without one."""
    hook = getattr(module, REPORT_HOOK, None)
    if not callable(hook):
        return None
    try:
        return str(hook(cluster, name, conf))
    except Exception as exc:  # noqa: BLE001 - the user's code; the run itself is done
        return f"{REPORT_HOOK}() raised {type(exc).__name__}: {exc}"


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--local", is_flag=True, help="Run in this process (local mode): the only mode of `run`, so optional.")
@click.option("--duration", type=click.FloatRange(min=0), default=None, help="Stop after this many seconds.")
@click.option("--name", default=None, help="Topology name (default: the file's stem).")
@click.option("--rates-every", "rates_every", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Seconds between the lines of live rates on stderr (0: none).")
@OVERRIDES
@LOG_FORMAT
@topology_source.flux_options
def run(file: str, local: bool, duration: float | None, name: str | None, rates_every: float,
        overrides: tuple[str, ...], log_format: str | None, flux: bool, filter_file: str | None,
        env_filter: bool) -> None:
    """Run the topology defined in FILE in this process (a topology file, a streamparse
    topology, or with --flux a Flux YAML file); exit 1 when a component reported errors."""
    extra = parse_overrides(overrides)
    conf = base_config(extra)
    logs.configure_from(conf, log_format)
    source = topology_source.load(file, flux, filter_file, env_filter, conf)
    set_code_dir(source.root)  # shell components run from here, as from a worker's code/
    name = name or source.name
    with LocalCluster(conf) as cluster:
        try:
            cluster.submit(name, {**source.conf, **extra}, source.topology)
        except TopologyError as exc:
            raise Failure(str(exc)) from None
        started = time.monotonic()
        live = LiveRates(lambda: cluster.stats(name), rates_every).start()
        wait_for_stop(duration)
        live.stop()
        verdict = _report(source.module, cluster, name, {**conf, **source.conf, **extra})
        stats = cluster.stats(name)
        errors = cluster.errors(name)
        elapsed = time.monotonic() - started
        cluster.kill(name)
    emitted = sum(sum(s["emitted"].values()) for s in stats if s["kind"] == "spout")
    acked = sum(s.get("acked", 0) for s in stats if s["kind"] == "spout")
    failed = sum(s.get("failed", 0) for s in stats if s["kind"] == "spout")
    click.echo(f"ran {name} for {elapsed:.1f}s: spouts emitted {emitted}, acked {acked}, failed {failed}")
    if verdict:
        click.echo(verdict)
    failure = run_failure(stats, errors)
    if failure is not None:
        raise Failure(failure)


def run_failure(stats: list[dict[str, Any]], errors: dict[str, list[dict[str, Any]]]) -> str | None:
    """The one rule of a run's exit code: it failed when any component reported an error (a
    bolt or spout raised, a child broke, a source stayed away), so a CI job tells a broken
    topology from a good one. Prints a line per such component (how many, the last one) and
    returns the failure's one line, or None when none did."""
    counts: dict[str, int] = {}
    emitted: dict[str, int] = {}
    for s in stats:
        component = s["component"]
        counts[component] = counts.get(component, 0) + s.get("errors", 0)
        if s["kind"] == "spout":
            emitted[component] = emitted.get(component, 0) + sum(s["emitted"].values())
    failed = []
    for component, kept in sorted(errors.items()):
        if not kept:
            continue
        n = max(counts.get(component, 0), len(kept))
        click.echo(f"errors in {component}: {n} (last: {last_line(kept[-1]['error'])}; tracebacks in the "
                   "log above)", err=True)
        idle = "; a spout that emitted nothing" if emitted.get(component) == 0 else ""
        failed.append(f"{component} ({n}{idle})")
    if not failed:
        return None
    return f"components reported errors: {', '.join(failed)}"


COMMANDS = [run]
