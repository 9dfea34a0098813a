"""Spouts and bolts: the classes users subclass."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from squall.tuple import Fields

if TYPE_CHECKING:
    from squall.collector import OutputCollector, SpoutOutputCollector
    from squall.context import TopologyContext
    from squall.topology import TopologyTransform
    from squall.tuple import Tuple

DEFAULT_STREAM = "default"


class StreamDeclaration:
    __slots__ = ("fields", "direct")

    def __init__(self, fields: Fields, direct: bool) -> None:
        self.fields, self.direct = fields, direct


class OutputFieldsDeclarer:
    """Collects a component's output streams; passed to ``declare_output_fields``."""

    def __init__(self, component: str = "?") -> None:
        self._component = component
        self.streams: dict[str, StreamDeclaration] = {}

    def declare(self, fields: Sequence[str] | Fields, stream: str = DEFAULT_STREAM,
                direct: bool = False) -> None:
        if not isinstance(stream, str) or not stream:
            raise ValueError(f"component {self._component!r}: stream ids must be non-empty strings")
        if stream.startswith("__"):
            raise ValueError(f"component {self._component!r}: stream id {stream!r} is reserved")
        if stream in self.streams:
            raise ValueError(f"component {self._component!r} declares stream {stream!r} twice")
        if isinstance(fields, str):
            raise ValueError(f"component {self._component!r}: fields must be a list of names, "
                             f"not the string {fields!r}")
        self.streams[stream] = StreamDeclaration(
            fields if isinstance(fields, Fields) else Fields(fields), bool(direct))

    def declare_stream(self, stream: str, fields: Sequence[str] | Fields, direct: bool = False) -> None:
        self.declare(fields, stream=stream, direct=direct)


def _data_descriptor(cls: type, name: str) -> bool:
    """Does a class of ``cls``'s MRO hold ``name`` as a data descriptor (a property, a slot)?"""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name)
        if found is not None:
            return hasattr(type(found), "__set__")
    return False


class Component:
    """What spouts and bolts share: output declaration and per-component config.

    ``live_output``: True for a component whose job is a side effect on a live system (a
    KafkaBolt writing to a topic): a batch run (``squall spark-run``) leaves it out, with
    what hangs below it, and says so, instead of writing a backfill into live output.
    """

    live_output = False

    def __setstate__(self, state: Any) -> None:
        """Unpickling (each task unpickles its own copy): attributes are set one by one, as
        ``__init__`` sets them, where pickle's default fills ``__dict__`` as a dict. On
        CPython 3.11 an instance whose ``__dict__`` was made that way never keeps ``self.x``
        specialised (the dict-hint check fails on every call), so each attribute read and
        write in ``next_tuple`` or ``execute`` took the generic lookup (about 1,200 of an
        acked const -> id -> null tuple's 8,500 instructions: bench/results/issue31-localack.txt).
        The outcome is pickle's: no ``__setattr__`` override runs, and a name that a data
        descriptor of the class owns (or a key that is not a str) goes into ``__dict__``; a
        base after Component with a ``__setstate__`` of its own (a mixin) restores instead."""
        inherited = getattr(super(), "__setstate__", None)
        if inherited is not None:
            inherited(state)
            return
        slots = None
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots): a class with __slots__ too
            state, slots = state
        if state:
            for name, value in state.items():
                if type(name) is str and not _data_descriptor(type(self), name):
                    object.__setattr__(self, name, value)
                else:
                    self.__dict__[name] = value
        if slots:
            for name, value in slots.items():
                setattr(self, name, value)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare output streams; a component with no outputs declares nothing."""

    def component_config(self) -> dict[str, Any] | None:
        """Config for this component only (e.g. topology.tick.tuple.freq.secs)."""
        return None

    # -- hooks for features (windows, state): the builder asks, nothing else is special ----
    def runner(self) -> Component:
        """What the topology runs in this component's place: itself, or a component that
        wraps it (a WindowedBolt runs inside a bolt of its own). Asked once, when the
        component is declared; raises ValueError if the component cannot run."""
        return self

    def check_in_topology(self, id: str, inputs: Sequence[Any], streams: dict[str, dict[str, StreamDeclaration]],
                          config: Mapping[str, Any]) -> None:
        """Checks that need the topology around the component, made at build time with
        its subscriptions, every component's declared streams (this one's may be added to)
        and its merged config; raises ValueError naming the problem."""

    def topology_transform(self) -> TopologyTransform | None:
        """A rewrite of the whole topology that this component needs when it is built
        (a stateful component: the checkpoint spout, and its components wrapped to take
        part in checkpoints), or None."""
        return None


class Spout(Component):
    """A source of tuples. ``next_tuple`` is called in a loop; it should not block long."""

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector

    def next_tuple(self) -> None:
        """Emit what is due, if anything. A call that emits nothing is not followed by
        another before ``topology.sleep.spout.wait.strategy.time.ms``, acks meanwhile
        reaching ``ack`` at once."""
        raise NotImplementedError

    def behind(self) -> bool:
        """Asked after a ``next_tuple`` call emitted nothing: are records known to be on
        their way to this spout all the same (its client's fetch of a backlog has not landed
        yet)? True: ``next_tuple`` is asked again at the executor's next turn instead of
        after the wait strategy's time. A spout that says True must be right, or it spins a
        core: the default, False, always waits."""
        return False

    def ack(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` completed. ``ack`` and ``fail`` may emit: a spout
        that emits in answer to an outcome emits here, not at the next ``next_tuple``."""

    def fail(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` failed or timed out; replay it if you want it."""

    def undeliverable(self, msg_id: Any, reason: str) -> None:
        """A tuple of the tree of ``msg_id`` could not be delivered as it was (a value no
        serializer carries, a tuple over the frame limit), so the tree failed; a replay of
        the same values would fail the same way. ``reason`` names the component, stream,
        field and type at fault. By default the same as ``fail``: a spout that can set the
        record aside (a dead-letter stream) does that instead of replaying it."""
        self.fail(msg_id)

    def activate(self) -> None:
        """The topology became active; ``next_tuple`` will be called."""

    def deactivate(self) -> None:
        """The topology became inactive; ``next_tuple`` will not be called."""

    def close(self) -> None:
        """The spout is shutting down (not guaranteed when a process is killed)."""


class Bolt(Component):
    """Processes tuples. Anchor emits to inputs and ack (or fail) every input."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tuple: Tuple) -> None:
        raise NotImplementedError

    def ready(self) -> bool:
        """Whether the bolt takes more input now (flow control). A bolt whose own output
        cannot keep up (a client's send buffer is full) returns False: its input stays
        queued, where it raises backpressure and so holds the spouts back, and the executor
        asks again about every millisecond; tick tuples still arrive meanwhile. Called from
        the bolt's own thread, before each batch of input."""
        return True

    def cleanup(self) -> None:
        """The bolt is shutting down (not guaranteed when a process is killed)."""


class BasicBolt(Bolt):
    """A bolt whose emits are anchored to the current input, acked after ``execute``.

    ``execute`` raising (or calling ``self.collector.fail``) fails the input instead.
    """

    # The runtime reads this flag and wraps the collector; user code stays Storm-shaped.
    _auto_anchor = True
