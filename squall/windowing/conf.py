"""Windowing's configuration keys (``topology.window.``), registered with squall's config
(``squall.config.FEATURE_KEYS`` names this module). Defaults and meanings: ``conf/defaults.yaml``."""
from __future__ import annotations

from squall.config import COUNT, INT, KeySpec, register_keys

register_keys({
    "topology.window.max.tuples": KeySpec(INT, bounds=COUNT),
}, __name__)
