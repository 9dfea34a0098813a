"""``spark-run`` that would write nothing under --output is refused before Spark starts."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from squall.cli import main

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "backfill"


TOPOLOGY = """
from squall import BasicBolt, TopologyBuilder
from squall.contrib import JsonLinesSpout


class Tally(BasicBolt):  # keeps its own results and declares no stream
    def execute(self, t):
        pass


def topology():
    b = TopologyBuilder()
    b.set_spout("lines", JsonLinesSpout(["line"], path="unused.jsonl"))
    b.set_bolt("tally", Tally()).shuffle("lines")
    return b.build()
"""


def test_a_run_without_sink_streams_is_refused(tmp_path: Path) -> None:
    # The only bolt declares no stream (as a ParquetSink archive run with --ticks), so no
    # stream is left for --output.
    topology = tmp_path / "tally.py"
    topology.write_text(TOPOLOGY)
    result = CliRunner().invoke(main, ["spark-run", str(topology), "--input",
                                       f"lines={EXAMPLE / 'words.jsonl'}", "--output", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert f"nothing would be written under {tmp_path / 'out'}" in result.output
    assert "--sink COMPONENT[:STREAM]" in result.output
    assert not (tmp_path / "out").exists()
