"""Multilang's configuration keys (shell components, their children, streamparse topologies),
registered with squall's config (``squall.config.FEATURE_KEYS`` names this module for each
of their prefixes). Defaults and meanings: ``conf/defaults.yaml``."""
from __future__ import annotations

from squall.config import COUNT, FLOAT, INT, SECS, KeySpec, register_keys

register_keys({
    "topology.multilang.serializer": KeySpec("enum:json,msgpack,org.apache.storm.multilang.JsonSerializer"),
    "topology.subprocess.timeout.secs": KeySpec(FLOAT, bounds=SECS),
    "topology.shellbolt.max.pending": KeySpec(INT, bounds=COUNT),
    "topology.multilang.max.inflight": KeySpec(INT, bounds=COUNT),
    "topology.multilang.max.message.bytes": KeySpec(INT, bounds=(1024, 2**31, True)),
    "topology.multilang.log.lines.per.sec": KeySpec(INT, bounds=(0, 10**6, True)),
    "topology.streamparse.mode": KeySpec("enum:in-process,multilang"),
}, __name__)
