"""``squall run --local`` prints what the topology file's local_run_report says."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from squall.cli import main

TOPOLOGY = """\
from squall import TopologyBuilder
from squall.testing.components import FixedTupleSpout, Recorder, RecordingBolt

CONFIG = {{"report.expect": 3}}

def topology():
    builder = TopologyBuilder()
    builder.set_spout("rows", FixedTupleSpout("report-rows", [[1], [2], [3]], ["n"]), 1)
    builder.set_bolt("sink", RecordingBolt("report-sink"), 1).shuffle("rows")
    return builder.build()

def local_run_report(cluster, name, conf):
    {body}
"""


def run(tmp_path: Path, body: str, *args: str) -> str:
    path = tmp_path / "reported.py"
    path.write_text(TOPOLOGY.format(body=body))
    result = CliRunner().invoke(main, ["run", str(path), "--local", "--duration", "1", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_report_line_is_printed(tmp_path: Path) -> None:
    body = 'return f"{name}: saw {len(Recorder.get(\'report-sink\'))} of {conf[\'report.expect\']}"'
    out = run(tmp_path, body, "-c", "report.expect=3")
    assert "reported: saw 3 of 3" in out.splitlines()[-1]


def test_a_failing_report_is_said_not_raised(tmp_path: Path) -> None:
    out = run(tmp_path, 'raise ValueError("cannot tell")')
    assert out.splitlines()[-1] == "local_run_report() raised ValueError: cannot tell"
