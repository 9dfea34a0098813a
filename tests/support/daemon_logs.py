"""Reading a daemon's JSON log (``--log-format json``) in tests."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def log_events(path: Path, event: str) -> list[dict[str, Any]]:
    """The entries of the JSON log at ``path`` whose event is ``event``, oldest first."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == event:
            out.append(entry)
    return out
