"""Every exception class squall defines is a SquallError and keeps its standard base, so
``except SquallError`` catches any error squall raises on purpose and ``except ValueError``
still works."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import squall
from squall.config import ConfigError, validate
from squall.errors import SquallError
from squall.topology import TopologyBuilder, TopologyError

REPO = Path(__file__).resolve().parents[2]
STANDARD = {"Exception", "ValueError", "RuntimeError", "OSError", "ClickException"}


CLASS = re.compile(r"^class (\w+)\(([^)]*)\):", re.M)


def exception_classes() -> dict[str, list[str]]:
    """file:class -> base names, for every public class squall defines directly on a
    standard exception (subclasses of squall's own inherit the root)."""
    found = {}
    for folder in ("squall", "daemons", "messaging"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.is_relative_to(REPO / "squall" / "daemons") or path.is_relative_to(REPO / "squall" / "messaging"):
                continue  # links to the top-level folders: read there
            for name, bases in CLASS.findall(path.read_text(encoding="utf-8")):
                names = [b.strip().rpartition(".")[2] for b in bases.split(",")]
                if not name.startswith("_") and (set(names) & STANDARD or "SquallError" in names):
                    found[f"{path.relative_to(REPO)}:{name}"] = names
    return found


def test_every_exception_class_is_a_squall_error_with_its_standard_base():
    classes = exception_classes()
    assert len(classes) > 40  # the walk found them
    missing = [where for where, bases in classes.items()
               if "SquallError" not in bases and where != "squall/errors.py:SquallError"]
    assert not missing, f"not under SquallError: {missing}"


def test_one_except_catches_any_squall_error_and_the_standard_one_still_works():
    assert squall.SquallError is SquallError
    with pytest.raises(SquallError):
        validate({"topology.workers": "two"})
    with pytest.raises(ValueError):
        validate({"topology.workers": "two"})
    with pytest.raises(SquallError) as caught:
        TopologyBuilder().set_spout("bad name!", None)
    assert isinstance(caught.value, (TopologyError, ValueError))
    assert issubclass(ConfigError, ValueError) and issubclass(TopologyError, ValueError)
