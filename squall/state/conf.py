"""State's configuration keys (``topology.state.``), registered with squall's config
(``squall.config.FEATURE_KEYS`` names this module). Defaults and meanings: ``conf/defaults.yaml``."""
from __future__ import annotations

from squall.config import BOOL, FLOAT, INT, SECS, STR, KeySpec, register_keys

register_keys({
    "topology.state.provider": KeySpec("enum:memory,embedded,redis", nullable=True),
    "topology.state.checkpoint.interval.ms": KeySpec(INT, bounds=(1, 86_400_000, True)),
    "topology.state.checkpoint.timeout.secs": KeySpec(FLOAT, nullable=True, bounds=SECS),
    "topology.state.redis.url": KeySpec(STR),
    "topology.state.redis.timeout.secs": KeySpec(FLOAT, bounds=SECS),
    "topology.state.snapshot": KeySpec(STR, nullable=True),
    "topology.state.carry.over": KeySpec(BOOL),
    "topology.state.namespace": KeySpec(STR, nullable=True),  # nimbus sets it at submit, never a user
}, __name__)
