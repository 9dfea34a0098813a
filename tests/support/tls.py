"""TLS files for tests: the host names test certificates name, and an operator's swap of a pair."""
from __future__ import annotations

import shutil
from pathlib import Path

HOSTS = ["127.0.0.1", "localhost"]


def install(cert: Path, key: Path, into: tuple[Path, Path]) -> None:
    """What an operator does: copy the new pair over the files nimbus was started with."""
    shutil.copyfile(key, into[1])
    shutil.copyfile(cert, into[0])
