"""squall: a Storm-style distributed stream processor in Python.

This is the package's facade: what users import. squall's own modules import from the module
that defines a name, never from here, so the facade may gather names from every layer
(docs/internals.md, "Layers").
"""
from typing import TYPE_CHECKING

# First, before any of the runtime's compiled modules is imported: how they import
# (compiled, or their .py files under SQUALL_PURE=1 or when stale) is squall.compiled's.
import squall.compiled  # noqa: F401  # isort: split
from squall.collector import OutputCollector, SpoutOutputCollector
from squall.components import BasicBolt, Bolt, OutputFieldsDeclarer, Spout
from squall.context import TopologyContext, WorkerContext
from squall.errors import SquallError
from squall.grouping import CustomStreamGrouping
from squall.hooks import WorkerHook
from squall.state import KeyValueState, StatefulBolt, StatefulSpout
from squall.topology import Topology, TopologyBuilder, TopologyError
from squall.tuple import Fields, Tuple
from squall.windowing import Count, Duration, StatefulWindowedBolt, Window, WindowedBolt

if TYPE_CHECKING:  # type checkers see the class that __getattr__ below hands out
    from squall.local import LocalCluster

__version__ = "0.1.0"

__all__ = [
    "BasicBolt", "Bolt", "Count", "CustomStreamGrouping", "Duration", "Fields", "KeyValueState",
    "LocalCluster", "OutputCollector", "OutputFieldsDeclarer", "Spout", "SpoutOutputCollector", "SquallError",
    "StatefulBolt", "StatefulSpout", "StatefulWindowedBolt", "Topology", "TopologyBuilder",
    "TopologyContext", "TopologyError", "Tuple", "Window", "WindowedBolt", "WorkerContext", "WorkerHook",
]


def __getattr__(name: str) -> type:
    # Start-up: LocalCluster pulls in the runtime, ZeroMQ and structlog, which doubles the time of
    # `import squall` (measured about +190 ms, and +90 ms on `squall --help`, which imports this
    # package); import it only when asked for. Not a cycle: squall.local imports no facade.
    if name == "LocalCluster":
        from squall.local import LocalCluster

        return LocalCluster
    raise AttributeError(name)
