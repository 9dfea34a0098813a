"""JSON-lines sinks are part files named ``*.jsonl`` (Spark's text writer says ``.txt``)."""
from __future__ import annotations

import json
from pathlib import Path

from squall.loader import load_topology
from squall.spark import FileInput, run, write_sinks

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "backfill"


def test_jsonl_part_files_are_named_jsonl(spark, tmp_path: Path) -> None:
    source = tmp_path / "lines.jsonl"
    source.write_text('{"line": "one two two"}\n{"line": "three"}\n')
    topology, conf, _ = load_topology(EXAMPLE / "wordcount.py")
    result = run(topology, spark, {"lines": FileInput(str(source))}, sinks=["count"], conf=conf,
                 exclude=["archive"])
    written = write_sinks(result, str(tmp_path / "out"), "jsonl")
    folder = Path(written["count"])
    parts = sorted(p.name for p in folder.iterdir() if p.name.startswith("part-"))
    assert parts and all(name.endswith(".jsonl") for name in parts), parts
    rows = [json.loads(line) for name in parts for line in (folder / name).read_text().splitlines()]
    finals: dict[str, int] = {}
    for row in rows:
        finals[row["word"]] = max(finals.get(row["word"], 0), row["count"])
    assert finals == {"one": 1, "two": 2, "three": 1}
