"""Code bundles for tests that submit one: a small topology file under a unique module name."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from squall.daemons.nimbus.code_store import build_bundle
from squall.loader import load_topology
from support.paths import TOPOLOGIES

# Submitted, never run here: any topology file will do.
TOPOLOGY_FILE = (TOPOLOGIES / "numbers_topo.py").read_text(encoding="utf-8")


def make_bundle(folder: Path, name: str, extra_conf: dict[str, Any] | None = None) -> bytes:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"topo_{uuid.uuid4().hex[:10]}.py"  # unique: loaded into this process
    path.write_text(TOPOLOGY_FILE, encoding="utf-8")
    topology, conf, _ = load_topology(path)
    return build_bundle(path, topology, {**conf, **(extra_conf or {}), "topology.name": name})
