"""streamparse topologies: a ``streamparse.Topology`` subclass read into a squall Topology.

Each component spec becomes a squall component: a Python (pystorm) spout or bolt runs
in-process (``PystormSpout``/``PystormBolt``) or, with topology.streamparse.mode: multilang,
as a child process exactly as Storm runs it (``streamparse_run module.Class`` from the
project's ``src/``); a ``ShellBolt.spec(command=..., script=...)`` component is always a
child. Java components are refused with their class name.

streamparse itself is not imported here: the classes are read by their attributes, so a
topology file that does not use streamparse costs nothing.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from squall.grouping import GROUPINGS
from squall.multilang.pystorm_adapter import PystormBolt, PystormSpout
from squall.multilang.shell_bolt import ShellBolt
from squall.multilang.shell_component import TICK_KEY
from squall.multilang.shell_spout import ShellSpout
from squall.multilang.storm_conf import split_storm_conf
from squall.topology import Topology, TopologyBuilder, TopologyError

log = structlog.get_logger("squall.multilang")
MODE_KEY = "topology.streamparse.mode"
SRC_DIR = "src"  # where `sparse jar` takes the code that Storm runs from resources/


def is_streamparse_topology(obj: Any) -> bool:
    """Is ``obj`` a subclass of streamparse.Topology (not that class itself)?"""
    if not isinstance(obj, type):
        return False
    mro = obj.__mro__
    return any(c.__name__ == "Topology" and c.__module__ == "streamparse.dsl.topology" for c in mro[1:])


def _inherits(cls: type, module: str, name: str) -> bool:
    return any(c.__module__ == module and c.__name__ == name for c in getattr(cls, "__mro__", ()))


def project_root(topology_file: str | os.PathLike[str]) -> Path | None:
    """The streamparse project a topology file belongs to (the folder above it holding
    config.json and src/), or None."""
    folder = Path(topology_file).resolve().parent
    root = folder.parent
    if (root / "config.json").is_file() and (root / SRC_DIR).is_dir():
        return root
    return None


def project_serializer(root: Path) -> str:
    """config.json's ``serializer`` (json unless it says msgpack)."""
    try:
        data = json.loads((root / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TopologyError(f"{root / 'config.json'}: {exc}") from None
    value = data.get("serializer", "json") if isinstance(data, dict) else "json"
    if value not in ("json", "msgpack"):
        raise TopologyError(f"{root / 'config.json'}: serializer {value!r} is not json or msgpack")
    return value


def _component_config(spec: Any) -> dict[str, Any]:
    raw = getattr(spec, "config", None)
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise TopologyError(f"component {spec.name!r}: config is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise TopologyError(f"component {spec.name!r}: config must be a dict, got {type(raw).__name__}")
    kept, dropped = split_storm_conf(raw)
    if dropped:
        log.warning("Storm-only config keys ignored", component=spec.name, keys=dropped)
    return kept


def _outputs(spec: Any) -> tuple[dict[str, list[str]], list[str]]:
    streams = spec.outputs or {}
    outputs = {name: list(info.output_fields) for name, info in streams.items()}
    direct = [name for name, info in streams.items() if getattr(info, "direct", False)]
    return outputs, direct


def _component(spec: Any, is_spout: bool, mode: str, serializer: str, topology_tick: Any) -> Any:
    name = spec.name
    shell = getattr(spec.component_object, "shell", None)
    if shell is None:
        java = getattr(spec.component_object, "java_object", None)
        what = getattr(java, "full_class_name", None) or "serialized Java"
        raise TopologyError(f"component {name!r} is the Java class {what}; squall runs Python and "
                            "shell components only")
    par = spec.par
    if not isinstance(par, int) or isinstance(par, bool):
        raise TopologyError(f"component {name!r}: par must be an integer here (per-environment par "
                            f"dicts are a `sparse` feature), got {par!r}")
    config = _component_config(spec)
    outputs, direct = _outputs(spec)
    cls = spec.component_cls
    python = shell.execution_command == "streamparse_run"
    base = ("pystorm.spout", "Spout") if is_spout else ("pystorm.bolt", "Bolt")
    in_process = (mode == "in-process" and python and _inherits(cls, *base)
                  and not _inherits(cls, "pystorm.bolt", "TicklessBatchingBolt"))  # threads and signals
    if in_process:
        target = f"{cls.__module__}:{cls.__qualname__}"
        if not is_spout and topology_tick is not None:
            config.setdefault(TICK_KEY, topology_tick)
        adapter = PystormSpout if is_spout else PystormBolt
        return adapter(target, outputs, direct=direct, import_dir=SRC_DIR, config=config)
    script = shell.script or ""
    if python and serializer == "msgpack":
        script = f"-s msgpack {script}"  # what `sparse` does (set_topology_serializer)
    command = [shell.execution_command] + ([script] if script else [])  # Storm passes the script as one argument
    if is_spout:
        return ShellSpout(command, outputs, direct=direct, cwd=SRC_DIR, serializer=serializer, config=config)
    bolt = ShellBolt(command, outputs, direct=direct, cwd=SRC_DIR, serializer=serializer, config=config)
    if bolt.tick_secs is None and topology_tick is not None:
        bolt.add_component_config(TICK_KEY, topology_tick)
    return bolt


def _subscribe(declarer: Any, spec: Any) -> None:
    for stream_id, grouping in (spec.inputs or {}).items():
        source, stream = stream_id.componentId, stream_id.streamId
        # The field of Storm's Thrift Grouping union that is set names it (GROUPINGS: ``thrift``).
        kind = next((k for k in GROUPINGS.names() if _thrift_value(grouping, k) is not None), None)
        if kind is None:
            raise TopologyError(f"bolt {spec.name!r}: the grouping on {source}/{stream} is a custom Java "
                                "grouping, which squall cannot run")
        if not GROUPINGS.get(kind).fields:
            declarer.grouping(source, kind, stream=stream)
        elif fields := list(_thrift_value(grouping, kind)):
            declarer.grouping(source, kind, fields=fields, stream=stream)
        else:
            declarer.global_(source, stream=stream)  # streamparse's GLOBAL is fields([])


def _thrift_value(grouping: Any, kind: str) -> Any:
    """What a streamparse grouping holds in the Thrift field of a registered grouping."""
    field = GROUPINGS.get(kind).thrift
    return None if field is None else getattr(grouping, field, None)


def declare(builder: TopologyBuilder, topology_cls: type, conf: Mapping[str, Any] | None = None,
            serializer: str = "json") -> dict[str, Any]:
    """Add the components of a streamparse Topology class to ``builder``; returns its
    topology config. ``conf`` (the command's settings) chooses the mode unless the
    topology's own config does."""
    topo_conf = getattr(topology_cls, "config", None) or {}
    if not isinstance(topo_conf, dict):
        raise TopologyError(f"{topology_cls.__name__}.config must be a dict")
    topo_conf, dropped = split_storm_conf(topo_conf)
    if dropped:
        log.warning("Storm-only config keys ignored", topology=topology_cls.__name__, keys=dropped)
    mode = topo_conf.get(MODE_KEY, (conf or {}).get(MODE_KEY, "in-process"))
    if mode not in ("in-process", "multilang"):
        raise TopologyError(f"{MODE_KEY} must be in-process or multilang, got {mode!r}")
    tick = topo_conf.get(TICK_KEY)
    specs = list(getattr(topology_cls, "specs", ()))
    if not specs:
        raise TopologyError(f"{topology_cls.__name__} declares no components")
    for spec in specs:
        is_spout = "Spout" in type(spec).__name__
        component = _component(spec, is_spout, mode, serializer, tick)
        if is_spout:
            builder.set_spout(spec.name, component, spec.par)
        else:
            _subscribe(builder.set_bolt(spec.name, component, spec.par), spec)
    out_conf = dict(topo_conf)
    out_conf["topology.multilang.serializer"] = serializer
    return out_conf


def build(topology_cls: type, conf: Mapping[str, Any] | None = None,
          serializer: str = "json") -> tuple[Topology, dict[str, Any]]:
    """(the squall Topology, its topology config) of a streamparse Topology class."""
    builder = TopologyBuilder()
    out_conf = declare(builder, topology_cls, conf, serializer)
    return builder.build(), out_conf
