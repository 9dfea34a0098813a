"""Word count that runs live (``squall run --local``) and as a backfill (``squall spark-run``).

lines (JSON lines {"line": ...}) -> split -> count (fields grouping on word) -> archive.
``count`` emits the running count of a word each time it sees it, so a word's final
count is the largest it emitted. ``archive`` writes the counts as rolling Parquet files
for the live run; a backfill writes the ``count`` stream itself and leaves the archive
out (``--exclude archive``).

Config keys: ``wordcount.input`` (the JSON-lines file; default words.jsonl beside this
file) and ``wordcount.archive`` (the live Parquet directory; default ./wordcount-archive).
"""
from __future__ import annotations

from pathlib import Path

from squall import BasicBolt, TopologyBuilder
from squall.contrib import JsonLinesSpout, ParquetSink

HERE = Path(__file__).resolve().parent
PUNCTUATION = ".,;:!?\"'()[]"


class SplitLine(BasicBolt):
    def execute(self, tup):
        for word in tup["line"].lower().split():
            word = word.strip(PUNCTUATION)
            if word:
                self.collector.emit([word])

    def declare_output_fields(self, declarer):
        declarer.declare(["word"])


class CountWords(BasicBolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}

    def execute(self, tup):
        word = tup["word"]
        n = self.counts.get(word, 0) + 1
        self.counts[word] = n
        self.collector.emit([word, n])

    def declare_output_fields(self, declarer):
        declarer.declare(["word", "count"])


def topology():
    b = TopologyBuilder()
    b.set_spout("lines", JsonLinesSpout(["line"], path=str(HERE / "words.jsonl"), conf_key="wordcount.input"))
    b.set_bolt("split", SplitLine(), 2).shuffle("lines")
    b.set_bolt("count", CountWords(), 3).fields("split", ["word"])
    b.set_bolt("archive", ParquetSink("wordcount-archive", ["word", "count"], conf_key="wordcount.archive",
                                      rows_per_file=50_000, roll_secs=2)).shuffle("count")
    return b.build()


CONFIG: dict = {}
