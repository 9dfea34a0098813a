"""``spark-run`` that would write nothing under --output is refused before Spark starts."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from squall.cli import main

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "backfill"


def test_a_run_without_sink_streams_is_refused(tmp_path: Path) -> None:
    # Run with the archive (a ParquetSink that writes its own files, on ticks) and no
    # --sink: no stream is left for --output.
    result = CliRunner().invoke(main, ["spark-run", str(EXAMPLE / "wordcount.py"), "--input",
                                       f"lines={EXAMPLE / 'words.jsonl'}", "--ticks",
                                       "--output", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert f"nothing would be written under {tmp_path / 'out'}" in result.output
    assert "--sink COMPONENT[:STREAM]" in result.output
    assert not (tmp_path / "out").exists()
