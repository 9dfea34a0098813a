"""Where ``squall run`` and ``squall submit`` get a topology: a topology file (a Python
module with ``topology()``, or a streamparse Topology class), or with ``--flux`` a Flux YAML
file. Also the shell components' scripts that must travel in the code bundle.

A streamparse topology file's code directory (what ``squall submit`` ships, where shell
components run) is its project folder, the one ``sparse quickstart`` made."""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import click

from squall import config as _config
from squall.command_line import Failure
from squall.daemons import requirements
from squall.loader import TopologyFileError, load_module, load_topology
from squall.multilang import codedir, flux, streamparse_topology
from squall.topology import Topology, TopologyError


@dataclass
class Source:
    topology: Topology
    conf: dict[str, Any]
    name: str       # the default topology name
    root: Path      # the code directory: shipped by submit, where shell components run
    module: ModuleType | None = None  # a Python topology file's module (its local_run_report)
    streamparse: bool = False  # a streamparse project's topology (its virtualenvs/<name>.txt)


def flux_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--flux``, ``--filter`` and ``--env-filter`` (Flux's own names)."""
    command = click.option("--env-filter", "env_filter", is_flag=True,
                           help="Flux: replace ${ENV-NAME} with environment variables.")(command)
    command = click.option("--filter", "filter_file", type=click.Path(dir_okay=False), default=None,
                           help="Flux: replace ${name} with values from this .properties file.")(command)
    return click.option("--flux", is_flag=True, help="FILE is a Flux YAML topology (Storm's Flux format).")(command)


def code_root(path: str | Path) -> Path:
    """The folder a topology file's code lives in: the streamparse project, or its own."""
    return streamparse_topology.project_root(path) or Path(path).resolve().parent


def _load_python(file: str, settings: dict[str, Any]) -> Source:
    """A topology file: ``topology()`` as squall.loader reads it, or a streamparse Topology
    class (its project's src/ goes on sys.path before the file is imported)."""
    project = streamparse_topology.project_root(file)
    if project is not None and str(project / streamparse_topology.SRC_DIR) not in sys.path:
        sys.path.insert(0, str(project / streamparse_topology.SRC_DIR))
    module = load_module(file)
    if callable(getattr(module, "topology", None)):
        topology, conf, module = load_topology(file)
        return Source(topology, conf, module.__name__, code_root(file), module)
    found = [v for v in vars(module).values() if streamparse_topology.is_streamparse_topology(v)]
    if not found:
        raise TopologyFileError(f"{file} defines no topology() function and no streamparse Topology class")
    own = [c for c in found if c.__module__ == module.__name__] or found
    if len(own) > 1:
        raise TopologyFileError(f"{file} defines several streamparse Topology classes: "
                                f"{sorted(c.__name__ for c in own)}")
    serializer = streamparse_topology.project_serializer(project) if project else "json"
    topology, conf = streamparse_topology.build(own[0], settings, serializer)
    return Source(topology, _config.validate(conf), module.__name__, code_root(file), module, project is not None)


def load(file: str, use_flux: bool, filter_file: str | None, env_filter: bool,
         settings: dict[str, Any]) -> Source:
    """The topology FILE describes; any problem is a Failure naming it."""
    if not use_flux and (filter_file or env_filter):
        raise click.UsageError("--filter and --env-filter apply to --flux files")
    try:
        if use_flux:
            topology, conf, name = flux.load(file, filter_file, env_filter)
            return Source(topology, _config.validate(conf), name or Path(file).stem, Path(file).resolve().parent)
        return _load_python(file, settings)
    except (TopologyFileError, TopologyError, _config.ConfigError, flux.FluxError) as exc:
        raise Failure(str(exc)) from None


def shell_scripts(topology: Topology) -> list[tuple[str, str]]:
    """(component, script path relative to the code directory) of every shell component."""
    out: list[tuple[str, str]] = []
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


def pick_requirements(source: Source, conf: dict[str, Any], shipped: Iterable[str]) -> str | None:
    """Set ``topology.python.requirements`` in the topology's ``conf`` when the bundle ships a
    requirements file (a streamparse project's ``virtualenvs/<file>.txt``, named after the
    topology's file as ``sparse submit`` names it, whatever ``--name`` says; else
    ``requirements.txt``) and it does not name one, and check the file as supervisors will:
    a Failure names what they would refuse. Returns the file, or None."""
    shipped = set(shipped)
    path = conf.get(requirements.REQUIREMENTS_KEY)
    if path is None:
        path = requirements.default_file(shipped, source.name, source.streamparse)
        if path is None:
            return None
    try:
        rel = requirements.check_path(path)
        if rel not in shipped:
            raise Failure(f"{requirements.REQUIREMENTS_KEY} names {path!r}, which is not in the code bundle "
                          f"of {source.root}")
        requirements.check_requirements((source.root / rel).read_bytes(), rel)
    except requirements.RequirementsError as exc:
        raise Failure(str(exc)) from None
    except OSError as exc:
        raise Failure(f"cannot read the requirements file {path!r}: {exc}") from None
    conf[requirements.REQUIREMENTS_KEY] = rel
    return rel
