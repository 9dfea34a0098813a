"""A Flux topology definition, read and checked: what FluxParser builds from the YAML, with
the file and line of every part so the builder's errors can name them. Plain code.

Includes are merged as Flux does it (one level: an included file's own includes are
ignored, with a warning); ``override`` decides whether the included file's name, config
keys, components, spouts and bolts replace the including file's.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from squall.grouping import GROUPINGS
from squall.multilang.flux import marked_yaml
from squall.multilang.flux.marked_yaml import FluxError, line_of

log = structlog.get_logger("squall.multilang.flux")

TOP_KEYS = {"name", "config", "components", "spouts", "bolts", "streams", "includes", "topologySource"}
OBJECT_KEYS = {"id", "className", "constructorArgs", "properties", "configMethods"}
COMPONENT_KEYS = OBJECT_KEYS | {"parallelism", "numTasks", "config",
                                "onHeapMemoryLoad", "offHeapMemoryLoad", "cpuLoad"}
RESOURCE_KEYS = ("onHeapMemoryLoad", "offHeapMemoryLoad", "cpuLoad")  # Storm's resource-aware scheduler
STREAM_KEYS = {"name", "from", "to", "grouping"}
GROUPING_KEYS = {"type", "streamId", "args", "customClass"}
INCLUDE_KEYS = {"resource", "file", "override"}
SOURCE_KEYS = OBJECT_KEYS - {"id"} | {"methodName"}


@dataclass
class Where:
    file: str
    line: int | None
    key: str

    def error(self, message: str) -> FluxError:
        return FluxError(self.file, self.line, self.key, message)


@dataclass
class Ref:
    id: str
    where: Where


@dataclass
class RefList:
    ids: list[str]
    where: Where


@dataclass
class ObjectDef:
    """A class to instantiate: ``components`` entries, spouts, bolts, custom groupings."""

    id: str | None
    class_name: str
    args: list[Any]
    properties: list[tuple[str, Any, Where]]
    config_methods: list[tuple[str, list[Any], Where]]
    where: Where


@dataclass
class NamedObjectDef(ObjectDef):
    """An object others name by its id: a ``components`` entry, a spout or a bolt."""

    id: str


@dataclass
class ComponentDef(NamedObjectDef):
    parallelism: int = 1
    num_tasks: int | None = None
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class StreamDef:
    source: str
    target: str
    grouping: str
    stream: str
    args: list[str] | None
    custom: ObjectDef | None
    where: Where


@dataclass
class TopologyDef:
    file: str
    name: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    config_where: dict[str, Where] = field(default_factory=dict)
    components: list[NamedObjectDef] = field(default_factory=list)
    spouts: list[ComponentDef] = field(default_factory=list)
    bolts: list[ComponentDef] = field(default_factory=list)
    streams: list[StreamDef] = field(default_factory=list)
    source: ObjectDef | None = None
    method: str = "getTopology"
    includes: list[tuple[str, bool, Where]] = field(default_factory=list)


# -- reading --------------------------------------------------------------------------------
def _mapping(value: Any, where: Where, allowed: set[str]) -> Mapping[Any, Any]:
    if not isinstance(value, dict):
        raise where.error(f"expected a mapping, got {type(value).__name__}")
    for key in value:
        if key not in allowed:
            w = Where(where.file, line_of(value, key), f"{where.key}.{key}" if where.key else str(key))
            raise w.error(f"unknown key (allowed: {', '.join(sorted(allowed))})")
    return value


def _at(container: Any, key: Any, where: Where) -> Where:
    sub = f"{where.key}[{key}]" if isinstance(key, int) else (f"{where.key}.{key}" if where.key else str(key))
    return Where(where.file, line_of(container, key), sub)


def _list(value: Any, where: Where) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.error(f"expected a list, got {type(value).__name__}")
    return value


def _string(value: Any, where: Where) -> str:
    if not isinstance(value, str) or not value:
        raise where.error(f"expected a non-empty string, got {value!r:.80}")
    return value


def _count(value: Any, where: Where) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise where.error(f"expected an integer >= 1, got {value!r:.80}")
    return value


def _arg(value: Any, where: Where) -> Any:
    """A constructor or method argument: ``{ref: id}``, ``{reflist: [...]}`` or a value."""
    if isinstance(value, dict) and set(value) == {"ref"}:
        return Ref(_string(value["ref"], _at(value, "ref", where)), where)
    if isinstance(value, dict) and set(value) == {"reflist"}:
        ids = _list(value["reflist"], _at(value, "reflist", where))
        return RefList([_string(i, _at(ids, n, where)) for n, i in enumerate(ids)], where)
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _object(value: Any, where: Where, allowed: set[str], needs_id: bool) -> dict[str, Any]:
    m = _mapping(value, where, allowed)
    if "className" not in m:
        raise where.error("className is missing")
    out: dict[str, Any] = {"where": Where(where.file, line_of(m, "className") or getattr(m, "line", None),
                                          where.key)}
    out["id"] = _string(m.get("id"), _at(m, "id", where)) if needs_id else None
    if needs_id:
        out["where"].key = f"{where.key} ({out['id']})"
    out["class_name"] = _string(m["className"], _at(m, "className", where))
    args = _list(m.get("constructorArgs"), _at(m, "constructorArgs", where))
    out["args"] = [_arg(a, _at(args, i, _at(m, "constructorArgs", where))) for i, a in enumerate(args)]
    props = []
    plist = _list(m.get("properties"), _at(m, "properties", where))
    for i, p in enumerate(plist):
        pw = _at(plist, i, _at(m, "properties", where))
        pm = _mapping(p, pw, {"name", "value", "ref", "reflist"})
        name = _string(pm.get("name"), _at(pm, "name", pw))
        if "ref" in pm or "reflist" in pm:
            value = _arg({k: pm[k] for k in ("ref", "reflist") if k in pm}, pw)
        else:
            value = _plain(pm.get("value"))
        props.append((name, value, pw))
    out["properties"] = props
    methods = []
    mlist = _list(m.get("configMethods"), _at(m, "configMethods", where))
    for i, cm in enumerate(mlist):
        cw = _at(mlist, i, _at(m, "configMethods", where))
        cmm = _mapping(cm, cw, {"name", "args"})
        name = _string(cmm.get("name"), _at(cmm, "name", cw))
        margs = _list(cmm.get("args"), _at(cmm, "args", cw))
        methods.append((name, [_arg(a, _at(margs, j, cw)) for j, a in enumerate(margs)], cw))
    out["config_methods"] = methods
    return out


def _component(value: Any, where: Where) -> ComponentDef:
    m = _mapping(value, where, COMPONENT_KEYS)
    parts = _object(m, where, COMPONENT_KEYS, True)
    for key in RESOURCE_KEYS:
        if key in m:
            log.warning("Flux resource-aware scheduling settings are ignored", file=where.file,
                        line=line_of(m, key), key=key)
    parallelism = _count(m.get("parallelism", 1), _at(m, "parallelism", where))
    num_tasks = _count(m["numTasks"], _at(m, "numTasks", where)) if m.get("numTasks") is not None else None
    config = m.get("config") or {}
    if not isinstance(config, dict):
        raise _at(m, "config", where).error("expected a mapping")
    return ComponentDef(parts["id"], parts["class_name"], parts["args"], parts["properties"],
                        parts["config_methods"], parts["where"], parallelism, num_tasks, _plain(config))


def _stream(value: Any, where: Where) -> StreamDef:
    m = _mapping(value, where, STREAM_KEYS)
    source = _string(m.get("from"), _at(m, "from", where))
    target = _string(m.get("to"), _at(m, "to", where))
    gw = _at(m, "grouping", where)
    g = _mapping(m.get("grouping"), gw, GROUPING_KEYS)
    kind = _string(g.get("type"), _at(g, "type", gw)).upper()
    spec = GROUPINGS.find(kind.lower())
    if spec is None:
        raise _at(g, "type", gw).error(f"unknown grouping type {g.get('type')!r} "
                                        f"(one of {', '.join(sorted(n.upper() for n in GROUPINGS.names()))})")
    stream = _string(g["streamId"], _at(g, "streamId", gw)) if g.get("streamId") is not None else "default"
    args = None
    if spec.fields:
        raw = g.get("args")
        if not isinstance(raw, list) or not raw or not all(isinstance(a, str) for a in raw):
            raise _at(g, "args", gw).error(f"a {kind} grouping needs args: a list of field names")
        args = list(raw)
    custom = None
    if spec.custom:
        cw = _at(g, "customClass", gw)
        if "customClass" not in g:
            raise cw.error(f"a {kind} grouping needs customClass")
        p = _object(g["customClass"], cw, OBJECT_KEYS - {"id"}, False)
        custom = ObjectDef(None, p["class_name"], p["args"], p["properties"], p["config_methods"], p["where"])
    w = Where(where.file, getattr(m, "line", None) or where.line, f"{where.key} ({source} -> {target})")
    return StreamDef(source, target, kind, stream, args, custom, w)


def parse_text(text: str, file: str) -> TopologyDef:
    """One file, includes not followed."""
    data = marked_yaml.load(text, file)
    if data is None:
        raise FluxError(file, None, "", "the file is empty")
    top = Where(file, 1, "")
    m = _mapping(data, top, TOP_KEYS)
    out = TopologyDef(file)
    if m.get("name") is not None:
        out.name = _string(m["name"], _at(m, "name", top))
    config = m.get("config") or {}
    if not isinstance(config, dict):
        raise _at(m, "config", top).error("expected a mapping of config keys to values")
    for key, value in config.items():
        if not isinstance(key, str):
            raise _at(config, key, _at(m, "config", top)).error("config keys must be strings")
        out.config[key] = _plain(value)
        out.config_where[key] = _at(config, key, _at(m, "config", top))
    comps = _list(m.get("components"), _at(m, "components", top))
    for i, c in enumerate(comps):
        p = _object(c, _at(comps, i, _at(m, "components", top)), OBJECT_KEYS, True)
        out.components.append(NamedObjectDef(p["id"], p["class_name"], p["args"], p["properties"],
                                        p["config_methods"], p["where"]))
    for section, target in (("spouts", out.spouts), ("bolts", out.bolts)):
        items = _list(m.get(section), _at(m, section, top))
        for i, c in enumerate(items):
            target.append(_component(c, _at(items, i, _at(m, section, top))))
    streams = _list(m.get("streams"), _at(m, "streams", top))
    for i, s in enumerate(streams):
        out.streams.append(_stream(s, _at(streams, i, _at(m, "streams", top))))
    if m.get("topologySource") is not None:
        sw = _at(m, "topologySource", top)
        p = _object(m["topologySource"], sw, SOURCE_KEYS, False)
        out.source = ObjectDef(None, p["class_name"], p["args"], p["properties"], p["config_methods"], p["where"])
        src = m["topologySource"]
        if src.get("methodName") is not None:
            out.method = _string(src["methodName"], _at(src, "methodName", sw))
    out_includes = _list(m.get("includes"), _at(m, "includes", top))
    for i, inc in enumerate(out_includes):
        iw = _at(out_includes, i, _at(m, "includes", top))
        im = _mapping(inc, iw, INCLUDE_KEYS)
        if im.get("resource"):
            raise _at(im, "resource", iw).error("classpath resources cannot be included here; "
                                                "give a file path (resource: false)")
        path = _string(im.get("file"), _at(im, "file", iw))
        override = im.get("override", False)
        if not isinstance(override, bool):
            raise _at(im, "override", iw).error("expected true or false")
        out.includes.append((path, override, iw))
    return out


def _merge_by_id(mine: list, theirs: list, override: bool) -> list:
    out = list(mine)
    index = {d.id: n for n, d in enumerate(out)}
    for d in theirs:
        if d.id in index:
            if override:
                out[index[d.id]] = d
            else:
                log.warning("Flux include does not replace an existing definition (override: false)", id=d.id)
        else:
            index[d.id] = len(out)
            out.append(d)
    return out


def parse_file(path: str | Path, read: Callable[[Path], str]) -> TopologyDef:
    """A Flux file with its includes merged. ``read`` returns a file's text after
    substitution (so included files are substituted too)."""
    path = Path(path)
    main = parse_text(read(path), str(path))
    for inc_path, override, where in main.includes:
        target = (path.parent / inc_path) if not Path(inc_path).is_absolute() else Path(inc_path)
        try:
            inc = parse_text(read(target), str(target))
        except OSError as exc:
            raise where.error(f"cannot read the included file {target}: {exc.strerror or exc}") from None
        if inc.includes:
            log.warning("Flux includes are not recursive: the included file's own includes are ignored",
                        file=str(target))
        if inc.name is not None and (override or main.name is None):
            main.name = inc.name
        for key, value in inc.config.items():
            if override or key not in main.config:
                main.config[key] = value
                main.config_where[key] = inc.config_where[key]
        main.components = _merge_by_id(main.components, inc.components, override)
        main.spouts = _merge_by_id(main.spouts, inc.spouts, override)
        main.bolts = _merge_by_id(main.bolts, inc.bolts, override)
        main.streams = main.streams + inc.streams
        if inc.source is not None and (override or main.source is None):
            main.source, main.method = inc.source, inc.method
    return main
