"""Build a squall Topology from a Flux definition: instantiate the components (Python classes
by import path, Storm's Flux wrappers by their Java names), call their properties and config
methods, wire the streams. Every error names the Flux file, line and key."""
from __future__ import annotations

import importlib
import re
from typing import Any

import structlog

from squall import config as _config
from squall.components import Bolt, OutputFieldsDeclarer, Spout
from squall.grouping import CustomStreamGrouping
from squall.multilang.flux.marked_yaml import FluxError
from squall.multilang.flux.model import ComponentDef, ObjectDef, Ref, RefList, StreamDef, TopologyDef, Where
from squall.multilang.flux.wrappers import JAVA_ROOTS, STORM_CLASSES
from squall.multilang.shell_component import TICK_KEY
from squall.multilang.storm_conf import split_storm_conf
from squall.topology import BoltDeclarer, SpoutDeclarer, Topology, TopologyBuilder, TopologyError

log = structlog.get_logger("squall.multilang.flux")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(name: str) -> str:
    """``setDefaultStream`` -> ``set_default_stream``; ``changeChildCWD`` -> ``change_child_cwd``."""
    return _CAMEL.sub("_", name).lower()


def _java_hint() -> str:
    return ("squall runs Python classes (named by import path, e.g. mypackage.bolts.Split) and "
            "Storm's Flux shell wrappers (" + ", ".join(n.rsplit(".", 1)[1] for n in STORM_CLASSES) + ")")


def load_python_class(name: str, where: Where) -> Any:
    """The Python class at ``module.Class`` (or ``module:Class``)."""
    if "$" in name:
        raise where.error(f"{name} is a Java class; {_java_hint()}")
    module, sep, attr = name.partition(":")
    if not sep:
        module, _, attr = name.rpartition(".")
    if not module or not attr:
        raise where.error(f"{name!r} is not a class path (module.Class)")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        if name.split(".", 1)[0] in JAVA_ROOTS:
            raise where.error(f"{name} is a Java class; {_java_hint()}") from None
        raise where.error(f"cannot import module {module!r} for class {name}: {exc}") from None
    except Exception as exc:
        raise where.error(f"importing {module!r} failed: {type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise where.error(f"module {module!r} has no {attr!r}")
    if not callable(obj):
        raise where.error(f"{name} is not a class")
    return obj


class FluxBuilder:
    def __init__(self, defn: TopologyDef) -> None:
        self.defn = defn
        self.refs: dict[str, Any] = {}

    # -- objects --------------------------------------------------------------------------
    def _value(self, value: Any) -> Any:
        if isinstance(value, Ref):
            if value.id not in self.refs:
                raise value.where.error(f"reference to {value.id!r}, which no component above declares")
            return self.refs[value.id]
        if isinstance(value, RefList):
            return [self._value(Ref(i, value.where)) for i in value.ids]
        return value

    def make(self, d: ObjectDef) -> Any:
        factory = STORM_CLASSES.get(d.class_name) or load_python_class(d.class_name, d.where)
        args = [self._value(a) for a in d.args]
        try:
            obj = factory(*args)
        except Exception as exc:
            raise d.where.error(f"{d.class_name}({', '.join(repr(a)[:40] for a in args)}) failed: "
                                f"{type(exc).__name__}: {exc}") from None
        for name, value, where in d.properties:
            self._property(obj, name, self._value(value), where)
        for name, margs, where in d.config_methods:
            method = getattr(obj, name, None) or getattr(obj, snake_case(name), None)
            if not callable(method):
                raise where.error(f"{d.class_name} has no method {name!r}")
            try:
                method(*[self._value(a) for a in margs])
            except Exception as exc:
                raise where.error(f"{name}(...) failed: {type(exc).__name__}: {exc}") from None
        return obj

    @staticmethod
    def _property(obj: Any, name: str, value: Any, where: Where) -> None:
        setter = None
        for candidate in (f"set{name[:1].upper()}{name[1:]}", f"set_{snake_case(name)}"):
            setter = getattr(obj, candidate, None)
            if callable(setter):
                break
            setter = None
        try:
            if setter is not None:
                setter(value)
            elif hasattr(obj, name) or hasattr(obj, snake_case(name)):
                setattr(obj, name if hasattr(obj, name) else snake_case(name), value)
            else:
                raise where.error(f"{type(obj).__name__} has no property {name!r} (no setter, no attribute)")
        except FluxError:
            raise
        except Exception as exc:
            raise where.error(f"setting {name!r} failed: {type(exc).__name__}: {exc}") from None

    # -- config ---------------------------------------------------------------------------
    def _checked_config(self, conf: dict[str, Any], where_of: Any) -> dict[str, Any]:
        kept, dropped = split_storm_conf(conf)
        if dropped:
            log.warning("Storm-only config keys ignored", file=self.defn.file, keys=dropped)
        for key, value in kept.items():
            try:
                _config.validate_key(key, value)
            except _config.ConfigError as exc:
                raise where_of(key).error(str(exc)) from None
        return kept

    # -- topology -------------------------------------------------------------------------
    def build(self) -> tuple[Topology, dict[str, Any]]:
        d = self.defn
        for c in d.components:
            if c.id in self.refs:
                raise c.where.error(f"component id {c.id!r} is declared twice")
            self.refs[c.id] = self.make(c)
        conf = self._checked_config(d.config, lambda k: d.config_where[k])
        if d.source is not None:
            return self._from_source(conf), conf
        if not d.spouts:
            raise FluxError(d.file, None, "spouts", "a topology needs at least one spout (or a topologySource)")
        builder = TopologyBuilder()
        declarers: dict[str, Any] = {}
        declared: dict[str, dict[str, Any]] = {}
        for defs, base in ((d.spouts, Spout), (d.bolts, Bolt)):
            for c in defs:
                if c.id in declared:
                    raise c.where.error(f"component id {c.id!r} is declared twice")
                declarers[c.id], declared[c.id] = self._component(builder, c, base)
        for s in d.streams:
            self._stream(s, declarers, declared)
        try:
            return builder.build(), conf
        except TopologyError as exc:
            raise FluxError(d.file, None, "", str(exc)) from None

    def _component(self, builder: TopologyBuilder, c: ComponentDef, base: type) -> tuple[Any, dict[str, Any]]:
        obj = self.make(c)
        kind = "spout" if base is Spout else "bolt"
        comp_conf = self._checked_config(
            c.config, lambda k: Where(c.where.file, c.where.line, f"{c.where.key}.config.{k}"))
        shell = hasattr(obj, "add_component_config")
        if shell:  # its own config (a shell bolt's tick period is its child's)
            for key, value in comp_conf.items():
                obj.add_component_config(key, value)
            topology_tick = self.defn.config.get(TICK_KEY)
            if topology_tick is not None and getattr(obj, "tick_secs", 0) is None:
                obj.add_component_config(TICK_KEY, topology_tick)  # Storm sends every bolt the ticks
        declarer: SpoutDeclarer | BoltDeclarer
        try:
            if base is Spout:
                declarer = builder.set_spout(c.id, obj, c.parallelism, c.num_tasks)
            else:
                declarer = builder.set_bolt(c.id, obj, c.parallelism, c.num_tasks)
            if not shell and comp_conf:
                declarer.add_configurations(comp_conf)
        except TopologyError as exc:
            raise c.where.error(f"not a usable {kind}: {exc}") from None
        streams = OutputFieldsDeclarer(c.id)
        try:
            obj.declare_output_fields(streams)
        except (ValueError, TypeError) as exc:
            raise c.where.error(f"declare_output_fields failed: {exc}") from None
        return declarer, streams.streams

    def _stream(self, s: StreamDef, declarers: dict[str, Any], declared: dict[str, dict[str, Any]]) -> None:
        if s.source not in declared:
            raise s.where.error(f"'from' names {s.source!r}, which is no spout or bolt of this topology")
        if s.target not in declared:
            raise s.where.error(f"'to' names {s.target!r}, which is no bolt of this topology")
        target = declarers[s.target]
        if not hasattr(target, "shuffle"):
            raise s.where.error(f"'to' names {s.target!r}, which is a spout; streams go to bolts")
        streams = declared[s.source]
        if s.stream not in streams:
            raise s.where.error(f"{s.source!r} declares no stream {s.stream!r} (it declares {sorted(streams)})")
        if s.args:
            missing = [f for f in s.args if f not in streams[s.stream].fields]
            if missing:
                raise s.where.error(f"{s.grouping} grouping on {missing}, which {s.source}/{s.stream} does not "
                                    f"declare (fields: {list(streams[s.stream].fields)})")
        try:
            if s.custom is not None:  # a grouping registered ``custom``: an object of the user's class
                grouping = self.make(s.custom)
                if not isinstance(grouping, CustomStreamGrouping):
                    raise s.custom.where.error(f"{s.custom.class_name} is not a squall CustomStreamGrouping")
                target.custom(s.source, grouping, stream=s.stream)
            else:  # Flux names a registered grouping in capitals
                target.grouping(s.source, s.grouping.lower(), fields=s.args, stream=s.stream)
        except TopologyError as exc:
            raise s.where.error(str(exc)) from None

    def _from_source(self, conf: dict[str, Any]) -> Topology:
        d = self.defn
        assert d.source is not None
        if d.spouts or d.bolts or d.streams:
            raise d.source.where.error("a topologySource topology declares no spouts, bolts or streams")
        obj = self.make(d.source)
        method = getattr(obj, d.method, None) or getattr(obj, snake_case(d.method), None)
        if not callable(method):
            raise d.source.where.error(f"{d.source.class_name} has no method {d.method!r}")
        try:
            result = method(dict(conf))
            if isinstance(result, TopologyBuilder):
                result = result.build()
        except TopologyError as exc:
            raise d.source.where.error(str(exc)) from None
        except Exception as exc:
            raise d.source.where.error(f"{d.method}(config) failed: {type(exc).__name__}: {exc}") from None
        if not isinstance(result, Topology):
            raise d.source.where.error(f"{d.method}(config) returned {type(result).__name__}, not a squall Topology")
        return result
