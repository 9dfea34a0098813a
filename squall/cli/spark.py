"""``squall spark-run``: run a topology file over bounded inputs on Spark.

Registered with the ``squall`` command group through ``COMMANDS``; pyspark is imported
only when the command runs, so ``squall`` works without the ``spark`` extra.
"""
from __future__ import annotations

import importlib.util
import sys
import time

import click
import structlog

from squall import config as _config
from squall import logs
from squall.cli.status_view import plural
from squall.command_line import LOG_FORMAT, OVERRIDES, Failure, base_config, parse_overrides
from squall.extras import needs
from squall.loader import TopologyFileError, load_topology
from squall.spark import progress as _progress
from squall.spark.engine import run
from squall.spark.io import INPUT_FORMATS, OUTPUT_FORMATS, existing_outputs, read_input, session, write_sinks
from squall.spark.plan import BackfillError, make_plan
from squall.topology import TopologyError


def _pairs(values: tuple[str, ...], option: str, left: str) -> list[tuple[str, str]]:
    out = []
    for v in values:
        key, sep, val = v.partition("=")
        if not sep or not key or not val:
            raise click.BadParameter(f"{v!r} is not of the form {left}=VALUE", param_hint=option)
        out.append((key.strip(), val.strip()))
    return out


def _summary(result, spark_secs: float, total: float, written: dict[str, str], fmt: str) -> list[str]:
    lines = [f"ran {plural(len(result.order), 'component')} in {result.seconds:.1f}s "
             f"(Spark start {spark_secs:.1f}s, total {total:.1f}s)"]
    for comp in result.order:
        s = result.stats.get(comp, {})
        emitted = sum(s.get("emitted", {}).values())
        if "executed" in s:
            lines.append(f"  {comp}: tasks {s.get('tasks', 0)}, executed {s['executed']}, emitted {emitted}, "
                         f"acked {s.get('acked', 0)}, failed {s.get('failed', 0)}, errors {s.get('errors', 0)}")
            for text in s.get("error_texts", [])[:1]:
                lines.append("    first error: " + text.strip().splitlines()[-1])
        else:
            lines.append(f"  {comp}: input rows {emitted}")
    for key, bad in result.malformed.items():
        if bad:
            lines.append(f"  input {key}: skipped {bad} malformed lines")
            for text in sorted(result.malformed_texts.get(key, []))[:3]:
                lines.append("    " + text)
    if result.excluded:
        live = f" ({', '.join(result.live)}: live output, left out by themselves)" if result.live else ""
        lines.append(f"  excluded: {', '.join(result.excluded)}{live}")
    for sink, path in written.items():
        lines.append(f"wrote {sink}: {result.rows[sink]} rows -> {path} ({fmt})")
    return lines


def _reporter(log_format: str | None) -> tuple:
    """(report, seconds between reports): a line on a terminal, else a log line every 5 s."""
    if sys.stderr.isatty() and log_format != "json":
        return _progress.terminal_reporter(sys.stderr), 1.0
    return _progress.log_reporter(structlog.get_logger("squall.spark")), 5.0


@click.command("spark-run")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--input", "inputs", multiple=True, metavar="SPOUT[:STREAM]=PATH",
              help="Bounded input replacing a spout (stream); repeatable. PATH may be a file, "
                   "directory or glob, or kafka:[TOPICS][?from=..&to=..&group=..] for an offset range "
                   "of the spout's topics (default: earliest to the group's committed offsets).")
@click.option("--input-format", type=click.Choice(INPUT_FORMATS), default="jsonl", show_default=True,
              help="Format of every input.")
@click.option("--output", required=True, metavar="PATH",
              help="Directory of the sinks: PATH/COMPONENT, or PATH/COMPONENT.STREAM.")
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default="parquet", show_default=True)
@click.option("--sink", "sinks", multiple=True, metavar="COMPONENT[:STREAM]",
              help="Stream to write; repeatable. Default: every bolt stream no running bolt reads.")
@click.option("--exclude", multiple=True, metavar="COMPONENT",
              help="Do not run this component (nor anything downstream of it); repeatable.")
@click.option("--ticks", is_flag=True,
              help="Send each task of a tick-driven bolt one tick tuple after its last input.")
@click.option("--state-from", default=None, metavar="TOPOLOGY",
              help="Start stateful bolts from the last committed checkpoint of the live topology "
                   "TOPOLOGY (read from the store topology.state.* configures); default: empty.")
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option("--spark-conf", multiple=True, metavar="KEY=VALUE", help="Spark configuration; repeatable.")
@click.option("--overwrite", is_flag=True, help="Replace existing sink directories.")
@click.option("--name", default=None, help="Topology name (default: the file's stem).")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Report progress while running: a line on a terminal, log lines otherwise.")
@OVERRIDES
@LOG_FORMAT
def spark_run(file: str, inputs: tuple[str, ...], input_format: str, output: str, output_format: str,
              sinks: tuple[str, ...], exclude: tuple[str, ...], ticks: bool, state_from: str | None, master: str,
              spark_conf: tuple[str, ...], overwrite: bool, name: str | None, progress: bool,
              overrides: tuple[str, ...], log_format: str | None) -> None:
    """Run the topology in FILE on Spark over bounded inputs (a backfill).

    Spouts are replaced by the inputs (columns named as the spout's declared fields),
    bolts run as Spark tasks (one bolt instance per squall task, groupings as
    partitioning), and the sink streams are written under --output. Exits 1 when a
    tuple failed.
    """
    started = time.monotonic()
    extra = parse_overrides(overrides)
    if state_from:
        extra["topology.state.snapshot"] = state_from
    conf = base_config(extra)
    logs.configure_from(conf, log_format)
    input_pairs = _pairs(inputs, "--input", "SPOUT")
    spark_pairs = dict(_pairs(spark_conf, "--spark-conf", "KEY"))
    try:
        topology, file_conf, module = load_topology(file)
    except (TopologyFileError, TopologyError, _config.ConfigError) as exc:
        raise Failure(str(exc)) from None
    name = name or module.__name__
    topo_conf = {**conf, **file_conf, **extra}
    keys = [k for k, _ in input_pairs]
    if len(set(keys)) != len(keys):
        raise click.BadParameter("the same input is given twice", param_hint="--input")
    try:
        # Everything that can be refused is refused before Spark starts.
        plan = make_plan(topology, keys, list(sinks) or None, topo_conf, ticks, exclude)
    except BackfillError as exc:
        raise Failure(str(exc)) from None
    if not plan.sinks:
        raise Failure(f"nothing would be written under {output}: every stream of the running bolts is read by "
                      "another bolt, or they declare none (a bolt that writes files itself, such as a "
                      "ParquetSink, writes where its own configuration says); name a stream with "
                      "--sink COMPONENT[:STREAM], or --exclude such bolts")
    if not overwrite:
        there = existing_outputs(output, list(plan.sinks))
        if there:
            raise Failure(f"output {there[0]} exists; pass --overwrite to replace it")
    if importlib.util.find_spec("pyspark") is None:
        raise Failure(needs("spark-run", "pyspark", "spark"))

    spark, created = session(master, spark_pairs, f"squall-{name}")
    spark_secs = time.monotonic() - started
    try:
        frames = {key: read_input(spark, key, path, input_format) for key, path in input_pairs}
        report, every = _reporter(log_format or conf.get("squall.log.format")) if progress else (None, 1.0)
        result = run(topology, spark, frames, list(sinks) or None, topo_conf, ticks, exclude, name,
                     progress=report, progress_interval=every)
        written = write_sinks(result, output, output_format, overwrite)
    except BackfillError as exc:
        raise Failure(str(exc)) from None
    finally:
        if created:
            spark.stop()
    for line in _summary(result, spark_secs, time.monotonic() - started, written, output_format):
        click.echo(line)
    if result.failed:
        raise Failure(f"{result.failed} tuples failed; the outputs were written but lack what they "
                      "would have produced")


COMMANDS = [spark_run]
