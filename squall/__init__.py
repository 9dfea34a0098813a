"""squall: a Storm-style distributed stream processor in Python.

This is the package's facade: what users import. squall's own modules import from the module
that defines a name, never from here, so the facade may gather names from every layer
(docs/internals.md, "Layers").
"""
import importlib
from typing import TYPE_CHECKING

# First, before any of the runtime's compiled modules is imported: how they import
# (compiled, or their .py files under SQUALL_PURE=1 or when stale) is squall.compiled's.
import squall.compiled  # noqa: F401  # isort: split

if TYPE_CHECKING:  # type checkers see the classes that __getattr__ below hands out
    from squall.collector import OutputCollector, SpoutOutputCollector
    from squall.components import BasicBolt, Bolt, OutputFieldsDeclarer, Spout
    from squall.context import TopologyContext, WorkerContext
    from squall.errors import SquallError
    from squall.grouping import CustomStreamGrouping
    from squall.hooks import WorkerHook
    from squall.local import LocalCluster
    from squall.state import KeyValueState, StatefulBolt, StatefulSpout
    from squall.topology import Topology, TopologyBuilder, TopologyError
    from squall.tuple import Fields, Tuple
    from squall.windowing import Count, Duration, StatefulWindowedBolt, Window, WindowedBolt

__version__ = "0.1.0"

# name -> the module that defines it. Imported on first use: every process that imports a
# squall module imports this package first (`squall --version`, `squall --help`, a worker),
# and the names below pull in windows, state and the model (about 0.5 s); LocalCluster the
# runtime, ZeroMQ and structlog besides.
_WHERE = {
    "OutputCollector": "squall.collector", "SpoutOutputCollector": "squall.collector",
    "BasicBolt": "squall.components", "Bolt": "squall.components", "OutputFieldsDeclarer": "squall.components",
    "Spout": "squall.components", "TopologyContext": "squall.context", "WorkerContext": "squall.context",
    "CustomStreamGrouping": "squall.grouping", "WorkerHook": "squall.hooks", "LocalCluster": "squall.local",
    "KeyValueState": "squall.state", "StatefulBolt": "squall.state", "StatefulSpout": "squall.state",
    "Topology": "squall.topology", "TopologyBuilder": "squall.topology", "TopologyError": "squall.topology",
    "Fields": "squall.tuple", "Tuple": "squall.tuple", "Count": "squall.windowing",
    "Duration": "squall.windowing", "StatefulWindowedBolt": "squall.windowing", "Window": "squall.windowing",
    "WindowedBolt": "squall.windowing", "SquallError": "squall.errors",
}

__all__ = [
    "BasicBolt", "Bolt", "Count", "CustomStreamGrouping", "Duration", "Fields", "KeyValueState",
    "LocalCluster", "OutputCollector", "OutputFieldsDeclarer", "Spout", "SpoutOutputCollector", "SquallError",
    "StatefulBolt", "StatefulSpout", "StatefulWindowedBolt", "Topology", "TopologyBuilder",
    "TopologyContext", "TopologyError", "Tuple", "Window", "WindowedBolt", "WorkerContext", "WorkerHook",
]


def __getattr__(name: str) -> type:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'squall' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later reads do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
