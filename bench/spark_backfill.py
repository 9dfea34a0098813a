"""Word count over the same words in local mode and on Spark (examples/backfill/wordcount.py).

    .venv/bin/python bench/spark_backfill.py [--words 1000000] [--master local[2]]

Local mode: ``LocalCluster``, the JSON-lines spout, split, count and the live ParquetSink
archive, timed from submit until every line is acked (so every count is in a Parquet
file). Spark: ``squall.spark.run`` over the same file (archive excluded), timed from
reading the input to the count stream written as Parquet; the session's start is timed
apart. Both runs' final counts are checked against each other.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "backfill" / "wordcount.py"
WORDS_PER_LINE = 10


def make_input(path: Path, words: int, seed: int = 11) -> int:
    """Write ``words`` words as JSON lines of 10 words; returns the number of lines."""
    sys.path.insert(0, str(EXAMPLE.parent))
    from make_data import VOCAB

    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(len(VOCAB))]
    lines = 0
    with open(path, "w", encoding="utf-8") as fh:
        left = words
        while left > 0:
            k = min(WORDS_PER_LINE, left)
            fh.write(json.dumps({"line": " ".join(rng.choices(VOCAB, weights, k=k))}) + "\n")
            left -= k
            lines += 1
    return lines


def final_counts(folder: Path) -> dict[str, int]:
    import pyarrow.dataset as ds

    table = ds.dataset(str(folder), format="parquet").to_table(columns=["word", "count"])
    out: dict[str, int] = {}
    for word, count in zip(table.column("word").to_pylist(), table.column("count").to_pylist()):
        if count > out.get(word, 0):
            out[word] = count
    return out


def run_local(path: Path, lines: int, archive: Path, timeout: float = 1800.0) -> float:
    from squall.loader import load_topology
    from squall.local import LocalCluster

    topology, file_conf, _ = load_topology(EXAMPLE)
    conf = {**file_conf, "wordcount.input": str(path), "wordcount.archive": str(archive)}
    with LocalCluster({"squall.log.level": "WARNING"}) as cluster:
        started = time.monotonic()
        cluster.submit("wordcount", conf, topology)
        while True:
            acked = sum(s.get("acked", 0) for s in cluster.stats("wordcount") if s["kind"] == "spout")
            if acked >= lines:
                break
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"local mode acked {acked} of {lines} lines in {timeout}s")
            time.sleep(0.02)
        elapsed = time.monotonic() - started
        cluster.kill("wordcount")
    return elapsed


def run_spark(path: Path, out: Path, master: str) -> dict[str, float]:
    from squall.loader import load_topology
    from squall.spark import read_input, run, session, write_sinks

    t0 = time.monotonic()
    spark, created = session(master, {"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    started = time.monotonic()
    try:
        topology, file_conf, _ = load_topology(EXAMPLE)
        df = read_input(spark, "lines", str(path), "jsonl", ["line"])
        result = run(topology, spark, {"lines": df}, ["count"], file_conf, exclude=["archive"], name="wordcount")
        write_sinks(result, str(out), "parquet")
        done = time.monotonic()
    finally:
        if created:
            spark.stop()
    return {"spark_start_secs": started - t0, "spark_secs": done - started, "bolts_secs": result.seconds}


def run(words: int = 1_000_000, master: str = "local[2]") -> dict:
    """Run both and return their wall times (seconds) and whether the counts agree."""
    with tempfile.TemporaryDirectory(prefix="squall-bench-") as tmp:
        tmp_path = Path(tmp)
        path = tmp_path / "words.jsonl"
        lines = make_input(path, words)
        local_secs = run_local(path, lines, tmp_path / "live")
        spark = run_spark(path, tmp_path / "backfill", master)
        equal = final_counts(tmp_path / "live") == final_counts(tmp_path / "backfill" / "count")
    return {"words": words, "lines": lines, "master": master, "cores": os.cpu_count(),
            "local_secs": round(local_secs, 2), "local_words_per_sec": round(words / local_secs),
            "spark_secs": round(spark["spark_secs"], 2), "spark_words_per_sec": round(words / spark["spark_secs"]),
            "spark_start_secs": round(spark["spark_start_secs"], 2),
            "spark_bolts_secs": round(spark["bolts_secs"], 2), "counts_equal": equal}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", type=int, default=1_000_000)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    print(json.dumps(run(args.words, args.master), indent=2))


if __name__ == "__main__":
    main()
