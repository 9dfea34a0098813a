"""A topology file that fails says where: file and line of the user's code."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from squall.config import ConfigError
from squall.loader import TopologyFileError, load_topology
from squall.topology import TopologyError


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_an_error_in_topology_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "pasted.py", """\
        from squall import TopologyBuilder

        def add_counter(builder):
            builder.set_bolt("count", WordCount(), 4)

        def topology():
            builder = TopologyBuilder()
            add_counter(builder)
            return builder.build()
        """)
    with pytest.raises(TopologyFileError) as info:
        load_topology(path)
    message = str(info.value)
    assert "NameError: name 'WordCount' is not defined" in message
    assert f"{path}:4, in add_counter" in message
    assert 'builder.set_bolt("count", WordCount(), 4)' in message


def test_a_build_error_names_the_line_of_the_call(tmp_path: Path) -> None:
    path = write(tmp_path, "badgroup.py", """\
        from squall import TopologyBuilder
        from squall.testing.components import FixedTupleSpout, RecordingBolt

        def topology():
            builder = TopologyBuilder()
            builder.set_spout("rows", FixedTupleSpout("rows", [[1]], fields=["n"]), 1)
            builder.set_bolt("sink", RecordingBolt("sink"), 1).shuffle("nowhere")
            return builder.build()
        """)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert f"{path}:8, in topology" in str(info.value)
    assert "nowhere" in str(info.value)


def test_import_errors_name_the_line(tmp_path: Path) -> None:
    syntax = write(tmp_path, "syntax.py", "x = 1\ndef topology(:\n    pass\n")
    with pytest.raises(TopologyFileError, match=rf"SyntaxError.*\n  at {syntax}:2"):
        load_topology(syntax)
    missing = write(tmp_path, "missing.py", "import os\nimport no_such_module_here\n")
    with pytest.raises(TopologyFileError, match=rf"No module named 'no_such_module_here'\n  at {missing}:2"):
        load_topology(missing)


def test_a_bad_config_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "conf.py", """\
        from squall import TopologyBuilder
        from squall.testing.components import FixedTupleSpout

        CONFIG = {"topology.max.spout.pendng": 10}

        def topology():
            builder = TopologyBuilder()
            builder.set_spout("rows", FixedTupleSpout("rows", [[1]], fields=["n"]), 1)
            return builder.build()
        """)
    with pytest.raises(ConfigError, match=rf"{path}: CONFIG: unknown config key 'topology.max.spout.pendng': "
                                          r"did you mean 'topology.max.spout.pending'\?"):
        load_topology(path)
