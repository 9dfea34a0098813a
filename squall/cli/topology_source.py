"""Where ``squall run`` and ``squall submit`` get a topology: a topology file (a Python
module with ``topology()``, or a streamparse Topology class), or with ``--flux`` a Flux YAML
file. Also the shell components' scripts that must travel in the code bundle."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from squall import config as _config
from squall.cli.options import Failure
from squall.loader import TopologyFileError, code_root, load_topology
from squall.multilang import codedir, flux
from squall.topology import Topology, TopologyError


@dataclass
class Source:
    topology: Topology
    conf: dict[str, Any]
    name: str       # the default topology name
    root: Path      # the code directory: shipped by submit, where shell components run


def flux_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--flux``, ``--filter`` and ``--env-filter`` (Flux's own names)."""
    command = click.option("--env-filter", "env_filter", is_flag=True,
                           help="Flux: replace ${ENV-NAME} with environment variables.")(command)
    command = click.option("--filter", "filter_file", type=click.Path(dir_okay=False), default=None,
                           help="Flux: replace ${name} with values from this .properties file.")(command)
    return click.option("--flux", is_flag=True, help="FILE is a Flux YAML topology (Storm's Flux format).")(command)


def load(file: str, use_flux: bool, filter_file: str | None, env_filter: bool,
         settings: dict[str, Any]) -> Source:
    """The topology FILE describes; any problem is a Failure naming it."""
    if not use_flux and (filter_file or env_filter):
        raise click.UsageError("--filter and --env-filter apply to --flux files")
    try:
        if use_flux:
            topology, conf, name = flux.load(file, filter_file, env_filter)
            return Source(topology, _config.validate(conf), name or Path(file).stem, Path(file).resolve().parent)
        topology, conf, module = load_topology(file, settings)
        return Source(topology, conf, module.__name__, code_root(file))
    except (TopologyFileError, TopologyError, _config.ConfigError, flux.FluxError) as exc:
        raise Failure(str(exc)) from None


def shell_scripts(topology: Topology) -> list[tuple[str, str]]:
    """(component, script path relative to the code directory) of every shell component."""
    out = []
    for spec in topology.components.values():
        component = spec.instantiate()
        paths = getattr(component, "script_paths", None)
        if callable(paths):
            out.extend((spec.id, p) for p in paths())
    return out


def check_shipped(topology: Topology, shipped: Iterable[str]) -> None:
    """Refuse a bundle that lacks a script its shell components run."""
    problems = codedir.missing_files(shell_scripts(topology), set(shipped))
    if problems:
        raise Failure("; ".join(problems))
