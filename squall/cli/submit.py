"""``squall submit``: a topology file (or a streamparse topology, or a Flux file) checked,
bundled with its code and sent to nimbus. A module of its own: loading and checking a
topology imports much of squall (the topology model, Flux, streamparse's reader), which the
other client commands (``squall list``, ``status``, ``kill``, ...) never need."""
from __future__ import annotations

import click

from squall.checks import check_runnable
from squall.cli import topology_source
from squall.cli.calls import nimbus_call
from squall.cli.status_view import plural
from squall.cli.terminal import printable
from squall.command_line import OVERRIDES, Failure, base_config, parse_overrides
from squall.daemons.credentials import DAEMON_SECRET_KEYS
from squall.daemons.nimbus.client import NimbusClient
from squall.daemons.nimbus.code_files import code_files
from squall.daemons.nimbus.code_store import build_bundle
from squall.topology import TopologyError


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--name", default=None, help="Topology name (default: the file's stem).")
@click.option("--carry-state", is_flag=True,
              help="Start from the checkpointed state of your last topology of this name (by default a "
                   "topology starts with empty state).")
@OVERRIDES
@topology_source.flux_options
def submit(file: str, name: str | None, carry_state: bool, overrides: tuple[str, ...], flux: bool,
           filter_file: str | None, env_filter: bool) -> None:
    """Submit the topology defined in FILE to nimbus (a topology file, a streamparse
    topology, or with --flux a Flux YAML file)."""
    extra = parse_overrides(overrides)
    if carry_state:
        extra["topology.state.carry.over"] = True
    conf = base_config(extra)
    source = topology_source.load(file, flux, filter_file, env_filter, conf)
    topology, file_conf = source.topology, source.conf
    name = name or source.name
    # -c applies to this command too (e.g. -c squall.token=...): secrets stay out of the topology.
    topology_conf = {k: v for k, v in {**file_conf, **extra}.items() if k not in DAEMON_SECRET_KEYS}
    topology_conf["topology.name"] = name
    # Resolve the worker and acker counts here, into conf.json: nimbus and every worker then
    # compute the same task ids, whatever their own config files say (Storm's nimbus does
    # this normalization; ours cannot edit the bundle, whose digest is fixed).
    topology_conf.setdefault("topology.workers", conf["topology.workers"])
    if topology_conf.get("topology.acker.executors", conf["topology.acker.executors"]) is None:
        topology_conf["topology.acker.executors"] = topology_conf["topology.workers"]
    else:
        topology_conf.setdefault("topology.acker.executors", conf["topology.acker.executors"])
    # The consumers decide which system bolts take task ids: fixed here too.
    topology_conf.setdefault("topology.metrics.consumer.register", conf["topology.metrics.consumer.register"])
    try:
        warnings = check_runnable(topology, {**conf, **topology_conf})
    except TopologyError as exc:
        raise Failure(str(exc)) from None
    shipped = [rel for rel, _ in code_files(source.root)]
    topology_source.check_shipped(topology, shipped)
    topology_source.pick_requirements(source, topology_conf, shipped)
    try:
        bundle = build_bundle(file, topology, topology_conf, root=source.root)
    except (OSError, TypeError, ValueError) as exc:
        raise Failure(f"cannot build the code bundle of {file}: {exc}") from None
    limit = int(conf["nimbus.code.max.upload.bytes"])
    if len(bundle) > limit:
        raise Failure(f"the code bundle is {len(bundle)} bytes, above nimbus.code.max.upload.bytes "
                      f"({limit}); move large data out of {source.root}")
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    reply = nimbus_call(NimbusClient.from_conf(conf).submit, name, bundle)
    click.echo(f"submitted topology {reply['name']} as {reply['id']} "
               f"({plural(reply.get('workers', 0), 'worker')}, {plural(reply.get('executors', 0), 'executor')})")
    if reply.get("warning"):
        click.echo(f"warning: {printable(reply['warning'])}", err=True)


COMMANDS = [submit]
