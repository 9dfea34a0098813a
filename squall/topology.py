"""TopologyBuilder and the immutable, serializable Topology it builds.

Features that change how components run (windows, checkpointed state) hook in through
the components they provide, never through this module importing them:
``Component.runner`` gives what runs in a component's place, and
``Component.topology_transform`` rewrites the built topology (adding system components,
naming a run-time wrapper in a ``ComponentSpec``).
"""
from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

from squall import config as _config
from squall import grouping as g
from squall.components import Bolt, Component, OutputFieldsDeclarer, Spout, StreamDeclaration
from squall.errors import SquallError
from squall.grouping import CustomStreamGrouping, Grouping
from squall.hooks import WorkerHook
from squall.tuple import Fields

FORMAT_VERSION = 1
SPOUT, BOLT = "spout", "bolt"
MAX_TASKS = 1_000_000  # task ids must fit the 20 bits of a root id (squall.runtime.acker), ackers included


class TopologyError(SquallError, ValueError):
    """A topology that cannot run, with the reason."""


class Subscription:
    __slots__ = ("component", "stream", "grouping")

    def __init__(self, component: str, stream: str, grouping: Grouping) -> None:
        self.component, self.stream, self.grouping = component, stream, grouping

    def __getstate__(self) -> tuple[str, str, Grouping]:
        return (self.component, self.stream, self.grouping)

    def __setstate__(self, state: tuple[str, str, Grouping]) -> None:
        self.component, self.stream, self.grouping = state

    def __repr__(self) -> str:
        return f"{self.component}/{self.stream} {self.grouping!r}"


class Wrapping(Protocol):
    """Wraps a component for a running topology (``ComponentSpec.wrapper``, pickled)."""

    def wrap(self, component: Component) -> Component: ...


class ComponentSpec:
    """One declared spout or bolt. The user object is kept pickled: every task unpickles
    its own copy, and later changes to the builder's object do not leak in. ``wrapper``,
    if set, is a pickled ``Wrapping`` that a feature's topology transform named: what a
    running topology's tasks run around the component (``runnable``)."""

    __slots__ = ("id", "kind", "blob", "parallelism", "num_tasks", "config", "inputs", "streams", "wrapper")

    def __init__(self, id: str, kind: str, blob: bytes, parallelism: int, num_tasks: int,
                 config: Mapping[str, Any], inputs: Sequence[Subscription],
                 streams: Mapping[str, StreamDeclaration], wrapper: bytes | None = None) -> None:
        self.id, self.kind, self.blob = id, kind, blob
        self.parallelism, self.num_tasks = parallelism, num_tasks
        self.config = MappingProxyType(dict(config))
        self.inputs = tuple(inputs)
        self.streams = MappingProxyType(dict(streams))
        self.wrapper = wrapper

    def instantiate(self) -> Component:
        """A fresh instance of the component as declared (batch runs and submit-time
        checks use it)."""
        return pickle.loads(self.blob)

    def runnable(self) -> Component:
        """A fresh instance for one task of a running topology: the component, inside the
        wrapper its topology names for it, if any."""
        obj = pickle.loads(self.blob)
        if self.wrapper is None:
            return obj
        wrapping: Wrapping = pickle.loads(self.wrapper)
        return wrapping.wrap(obj)

    def replace(self, **changes: Any) -> ComponentSpec:
        """A copy with some fields changed (``inputs=``, ``streams=``, ``wrapper=``...)."""
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return ComponentSpec(**fields)

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.id, self.kind, self.blob, self.parallelism, self.num_tasks,
                dict(self.config), self.inputs, dict(self.streams), self.wrapper)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        if len(state) == 8:  # pickled before wrappers existed (a topology submitted by 0.1.0)
            state = (*state, None)
        (self.id, self.kind, self.blob, self.parallelism, self.num_tasks,
         config, self.inputs, streams, self.wrapper) = state
        self.config = MappingProxyType(config)
        self.streams = MappingProxyType(streams)


class TopologyTransform(Protocol):
    """A feature's rewrite of a topology being built (``Component.topology_transform``):
    takes the specs and the ids of the components that asked for it, returns the new
    specs; raises TopologyError for a topology it cannot serve."""

    def __call__(self, specs: dict[str, ComponentSpec], requested_by: list[str], /) -> dict[str, ComponentSpec]: ...


class Topology:
    """A validated topology: components by id, in id order, and its worker hooks (each
    pickled, as declared). Immutable; ``to_bytes`` and ``from_bytes`` carry it to nimbus
    and workers (the user's classes must be importable there, i.e. be in the submitted
    code)."""

    def __init__(self, components: Mapping[str, ComponentSpec], worker_hooks: Sequence[bytes] = ()) -> None:
        self._components = MappingProxyType(dict(sorted(components.items())))
        self.worker_hooks: tuple[bytes, ...] = tuple(worker_hooks)

    @property
    def components(self) -> Mapping[str, ComponentSpec]:
        return self._components

    def spouts(self) -> list[ComponentSpec]:
        return [c for c in self._components.values() if c.kind == SPOUT]

    def bolts(self) -> list[ComponentSpec]:
        return [c for c in self._components.values() if c.kind == BOLT]

    def stream_fields(self, component: str, stream: str) -> Fields:
        return self._components[component].streams[stream].fields

    def subscribers(self, component: str, stream: str) -> list[tuple[str, Grouping]]:
        """(bolt id, grouping) of every subscription to ``component``'s ``stream``."""
        return [(c.id, s.grouping) for c in self._components.values() for s in c.inputs
                if s.component == component and s.stream == stream]

    def replace_components(self, components: Mapping[str, ComponentSpec]) -> Topology:
        """The same topology (its worker hooks) with other components."""
        return Topology(components, self.worker_hooks)

    def to_bytes(self) -> bytes:
        specs = list(self._components.values())
        # Hooks as a third element only when there are any: a topology without them reads
        # the same as one written before hooks existed.
        body = (FORMAT_VERSION, specs, list(self.worker_hooks)) if self.worker_hooks else (FORMAT_VERSION, specs)
        return pickle.dumps(body, protocol=5)

    @classmethod
    def from_bytes(cls, data: bytes) -> "Topology":
        try:
            version, specs, *rest = pickle.loads(data)
        except (pickle.UnpicklingError, ValueError, TypeError, EOFError) as exc:
            raise TopologyError(f"not a serialized topology: {exc}") from None
        if version != FORMAT_VERSION:
            raise TopologyError(f"topology format {version} is not {FORMAT_VERSION}")
        return cls({s.id: s for s in specs}, rest[0] if rest else ())

    def __repr__(self) -> str:
        return f"Topology({', '.join(self._components)})"


class _Declarer:
    def __init__(self, builder: "TopologyBuilder", id: str) -> None:
        self._builder, self._id = builder, id

    def set_num_tasks(self, n: int) -> "_Declarer":
        self._builder._check_count(self._id, "num_tasks", n)
        self._builder._entries[self._id]["num_tasks"] = n
        return self

    def add_configuration(self, key: str, value: Any) -> "_Declarer":
        try:
            _config.validate_key(key, value)
        except _config.ConfigError as exc:
            raise TopologyError(f"component {self._id!r}: {exc}") from None
        self._builder._entries[self._id]["config"][key] = value
        return self

    def add_configurations(self, conf: Mapping[str, Any]) -> "_Declarer":
        for k, v in conf.items():
            self.add_configuration(k, v)
        return self


class SpoutDeclarer(_Declarer):
    """Returned by ``set_spout``: per-spout settings."""


class BoltDeclarer(_Declarer):
    """Returned by ``set_bolt``: subscriptions (groupings) and per-bolt settings."""

    def _sub(self, component: str, stream: str, grouping: Grouping) -> "BoltDeclarer":
        if not isinstance(component, str):
            raise TopologyError(f"bolt {self._id!r}: component id must be a string, got {component!r}")
        self._builder._entries[self._id]["inputs"].append(Subscription(component, stream, grouping))
        return self

    def grouping(self, component: str, kind: str, fields: Sequence[str] | None = None,
                 stream: str = "default") -> "BoltDeclarer":
        """Subscribe with the grouping registered as ``kind`` (``squall.grouping.GROUPINGS``);
        ``fields`` for one declared with field names. The named methods below are this for
        Storm's groupings; a custom grouping object goes through ``custom``."""
        spec = g.GROUPINGS.find(kind) if isinstance(kind, str) else None
        if spec is None:
            raise TopologyError(f"bolt {self._id!r}: unknown grouping {kind!r} "
                                f"(known: {', '.join(sorted(g.GROUPINGS.names()))})")
        if spec.custom:
            raise TopologyError(f"bolt {self._id!r}: a custom grouping is declared with custom(component, grouping)")
        if isinstance(fields, str):
            fields = [fields]
        if spec.fields != (fields is not None):
            raise TopologyError(f"bolt {self._id!r}: a {kind} grouping "
                                f"{'names fields' if spec.fields else 'takes no fields'}")
        return self._sub(component, stream, Grouping(kind, fields))

    def shuffle(self, component: str, stream: str = "default") -> "BoltDeclarer":
        return self._sub(component, stream, Grouping(g.SHUFFLE))

    def fields(self, component: str, fields: Sequence[str], stream: str = "default") -> "BoltDeclarer":
        if isinstance(fields, str):
            fields = [fields]
        return self._sub(component, stream, Grouping(g.FIELDS, fields))

    def all(self, component: str, stream: str = "default") -> "BoltDeclarer":
        return self._sub(component, stream, Grouping(g.ALL))

    def global_(self, component: str, stream: str = "default") -> "BoltDeclarer":
        return self._sub(component, stream, Grouping(g.GLOBAL))

    def none(self, component: str, stream: str = "default") -> "BoltDeclarer":
        return self._sub(component, stream, Grouping(g.NONE))

    def direct(self, component: str, stream: str = "default") -> "BoltDeclarer":
        return self._sub(component, stream, Grouping(g.DIRECT))

    def local_or_shuffle(self, component: str, stream: str = "default") -> "BoltDeclarer":
        return self._sub(component, stream, Grouping(g.LOCAL_OR_SHUFFLE))

    def partial_key(self, component: str, fields: Sequence[str], stream: str = "default") -> "BoltDeclarer":
        if isinstance(fields, str):
            fields = [fields]
        return self._sub(component, stream, Grouping(g.PARTIAL_KEY, fields))

    def custom(self, component: str, grouping: CustomStreamGrouping, stream: str = "default") -> "BoltDeclarer":
        if not isinstance(grouping, CustomStreamGrouping):
            raise TopologyError(f"bolt {self._id!r}: custom grouping must subclass CustomStreamGrouping")
        return self._sub(component, stream, Grouping(g.CUSTOM, custom=grouping))


class TopologyBuilder:
    """Declare spouts and bolts, wire them with groupings, then ``build()``."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Any]] = {}
        self._hooks: list[bytes] = []

    def add_worker_hook(self, hook: WorkerHook) -> None:
        """Run ``hook`` once in every worker of the topology, at start and at shutdown
        (Storm's ``addWorkerHook``; see squall.hooks). It is pickled now, so later
        changes to the object do not reach the workers."""
        if not isinstance(hook, WorkerHook):
            raise TopologyError(f"a worker hook must be a WorkerHook instance, got {type(hook).__name__}")
        try:
            self._hooks.append(pickle.dumps(hook, protocol=5))
        except Exception as exc:
            raise TopologyError(f"worker hook {type(hook).__name__} cannot be serialized: {exc}") from None

    def _check_count(self, id: str, what: str, n: Any) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise TopologyError(f"component {id!r}: {what} must be an integer >= 1, got {n!r}")

    def _add(self, id: str, obj: Any, kind: str, parallelism: int, num_tasks: int | None) -> None:
        if isinstance(obj, Component):
            try:
                obj = obj.runner()  # e.g. a windowed bolt's runner
            except ValueError as exc:
                raise TopologyError(f"component {id!r}: {exc}") from None
        if not isinstance(id, str) or not id:
            raise TopologyError(f"component id must be a non-empty string, got {id!r}")
        if id.startswith("__"):
            raise TopologyError(f"component id {id!r} is reserved for system components "
                                "(ids starting with '__', such as __acker and __system)")
        if id in self._entries:
            raise TopologyError(f"duplicate component id {id!r}")
        base = Spout if kind == SPOUT else Bolt
        if not isinstance(obj, base):
            raise TopologyError(f"component {id!r} must be a {base.__name__} instance, got {type(obj).__name__}")
        self._check_count(id, "parallelism", parallelism)
        if num_tasks is not None:
            self._check_count(id, "num_tasks", num_tasks)
        self._entries[id] = {"obj": obj, "kind": kind, "parallelism": parallelism,
                             "num_tasks": num_tasks, "config": {}, "inputs": []}

    def set_spout(self, id: str, spout: Spout, parallelism: int = 1, num_tasks: int | None = None) -> SpoutDeclarer:
        self._add(id, spout, SPOUT, parallelism, num_tasks)
        return SpoutDeclarer(self, id)

    def set_bolt(self, id: str, bolt: Component, parallelism: int = 1, num_tasks: int | None = None) -> BoltDeclarer:
        """A bolt, or a windowed bolt (squall.windowing), which runs inside a bolt of its own."""
        self._add(id, bolt, BOLT, parallelism, num_tasks)
        return BoltDeclarer(self, id)

    def build(self) -> Topology:
        """Validate and freeze; raises TopologyError naming the first problem found."""
        if not any(e["kind"] == SPOUT for e in self._entries.values()):
            raise TopologyError("a topology needs at least one spout")
        tasks = sum(e["num_tasks"] or e["parallelism"] for e in self._entries.values())
        if tasks > MAX_TASKS:
            raise TopologyError(f"the topology has {tasks} tasks; at most {MAX_TASKS} are supported "
                                f"(root ids name their spout task in 20 bits, see squall.runtime.acker)")
        streams: dict[str, dict[str, StreamDeclaration]] = {}
        for id, e in self._entries.items():
            declarer = OutputFieldsDeclarer(id)
            try:
                e["obj"].declare_output_fields(declarer)
                conf = e["obj"].component_config() or {}
                _config.validate(conf)
            except (ValueError, KeyError) as exc:
                raise TopologyError(f"component {id!r}: {exc}") from None
            streams[id] = declarer.streams
            e["merged_config"] = {**conf, **e["config"]}
        for id, e in self._entries.items():
            # A component that must see its inputs' streams (a windowed bolt's timestamp
            # field and late-tuple stream) checks them here and may declare streams.
            try:
                e["obj"].check_in_topology(id, e["inputs"], streams, e["merged_config"])
            except ValueError as exc:
                raise TopologyError(f"component {id!r}: {exc}") from None
        for id, e in self._entries.items():
            for sub in e["inputs"]:
                self._check_subscription(id, sub, streams)
        specs = {}
        for id, e in self._entries.items():
            try:
                blob = pickle.dumps(e["obj"], protocol=5)
                for sub in e["inputs"]:
                    if sub.grouping.custom is not None:
                        pickle.dumps(sub.grouping.custom, protocol=5)
            except Exception as exc:
                raise TopologyError(f"component {id!r} cannot be serialized: {exc}") from None
            n_tasks = e["num_tasks"] or e["parallelism"]
            specs[id] = ComponentSpec(id, e["kind"], blob, min(e["parallelism"], n_tasks), n_tasks,
                                      e["merged_config"], e["inputs"], streams[id])
        # Features' rewrites (checkpoints), each once, for the components that asked for it.
        transforms: dict[TopologyTransform, list[str]] = {}
        for id, e in self._entries.items():
            transform = e["obj"].topology_transform()
            if transform is not None:
                transforms.setdefault(transform, []).append(id)
        for transform, ids in transforms.items():
            specs = transform(specs, ids)
        return Topology(specs, self._hooks)

    def _check_subscription(self, id: str, sub: Subscription, streams: dict) -> None:
        if sub.component not in self._entries:
            raise TopologyError(f"bolt {id!r} subscribes to unknown component {sub.component!r}")
        declared = streams[sub.component]
        if sub.stream not in declared:
            raise TopologyError(f"bolt {id!r} subscribes to stream {sub.stream!r} that component "
                                f"{sub.component!r} does not declare (it declares {sorted(declared)})")
        decl = declared[sub.stream]
        kind = sub.grouping.kind
        spec = g.GROUPINGS.find(kind)
        if spec is None:
            raise TopologyError(f"bolt {id!r}: unknown grouping {kind!r} on {sub.component}/{sub.stream}")
        if spec.fields:
            if not sub.grouping.fields:
                raise TopologyError(f"bolt {id!r}: {kind} grouping on {sub.component}/{sub.stream} names no fields")
            for f in sub.grouping.fields:
                if f not in decl.fields:
                    raise TopologyError(
                        f"bolt {id!r}: {kind} grouping on field {f!r}, which stream "
                        f"{sub.component}/{sub.stream} does not declare (fields: {list(decl.fields)})")
        if spec.direct and not decl.direct:
            raise TopologyError(f"bolt {id!r}: direct grouping on {sub.component}/{sub.stream}, "
                                "which is not declared direct")
        if not spec.direct and decl.direct:
            raise TopologyError(f"bolt {id!r}: stream {sub.component}/{sub.stream} is direct and "
                                f"needs a direct grouping, not {kind}")
