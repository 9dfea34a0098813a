"""Checkpointed state: stateful spouts and bolts, the checkpoint protocol, the stores."""
from squall.state.components import Stateful, StatefulBolt, StatefulSpout
from squall.state.kv import KeyValueState

__all__ = ["KeyValueState", "Stateful", "StatefulBolt", "StatefulSpout"]
