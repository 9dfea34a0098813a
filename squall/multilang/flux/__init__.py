"""Flux, Storm's YAML topology format: ``load`` reads a Flux file (with includes and
substitution) and builds the squall Topology it describes."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from squall.multilang.flux.builder import FluxBuilder
from squall.multilang.flux.marked_yaml import FluxError
from squall.multilang.flux.model import TopologyDef, parse_file
from squall.multilang.flux.substitution import parse_properties, substitute
from squall.topology import Topology

MAX_FILE_BYTES = 4 << 20  # a Flux file or properties file larger than this is refused

__all__ = ["FluxError", "load", "read_definition"]


def _read(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise FluxError(str(path), None, "", f"the file is {size} bytes, more than {MAX_FILE_BYTES}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise FluxError(str(path), None, "", f"not UTF-8 text: {exc}") from None


def read_definition(path: str | os.PathLike[str], filter_file: str | os.PathLike[str] | None = None,
                    env_filter: bool = False) -> TopologyDef:
    """The checked definition in ``path``, substituted and with its includes merged."""
    path = Path(path)
    try:
        properties = None
        if filter_file is not None:
            props_path = Path(filter_file)
            properties = parse_properties(_read(props_path), str(props_path))
        environ = dict(os.environ) if env_filter else None
        return parse_file(path, lambda p: substitute(_read(p), str(p), properties, environ))
    except OSError as exc:
        raise FluxError(str(getattr(exc, "filename", None) or path), None, "",
                        f"cannot read: {exc.strerror or exc}") from None


def load(path: str | os.PathLike[str], filter_file: str | os.PathLike[str] | None = None,
         env_filter: bool = False) -> tuple[Topology, dict[str, Any], str | None]:
    """(topology, topology config, the file's ``name``) of the Flux file at ``path``. Its
    folder goes on sys.path first, so Python classes next to it import (and workers find
    them in the submitted code)."""
    folder = str(Path(path).resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    defn = read_definition(path, filter_file, env_filter)
    topology, conf = FluxBuilder(defn).build()
    return topology, conf, defn.name
