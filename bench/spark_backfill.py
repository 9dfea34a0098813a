"""Word count over the same words: local mode, squall on Spark, and the same job by hand.

    .venv/bin/python bench/spark_backfill.py [--words 1000000 ...] [--master local[2]] [--skip-local]

- local mode: ``LocalCluster`` running examples/backfill/wordcount.py (the JSON-lines
  spout, split, count, the live ParquetSink archive), timed from submit until every line
  is acked (so every count is in a Parquet file);
- squall on Spark: ``squall.spark.run`` over the same file (archive excluded), timed from
  the run's start to the count stream written as Parquet;
- by hand: a PySpark RDD job doing the same work (lines parsed as JSON, split into the
  same words, partitioned by word into as many partitions as the count bolt has tasks, a
  running count emitting every (word, n), written as Parquet with a declared schema).

Both Spark jobs run in one session, started (and warmed up on a small file) before either
is timed. All three runs' final counts are checked against each other. The JSON report
carries the machine's CPU count and load average.
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
PUNCTUATION = ".,;:!?\"'()[]"


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


def run_local(path: Path, lines: int, archive: Path, timeout: float = 3600.0) -> float:
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


def run_squall(spark, path: Path, out: Path) -> dict[str, float]:
    from squall.loader import load_topology
    from squall.spark import FileInput, run, write_sinks

    started = time.monotonic()
    topology, file_conf, _ = load_topology(EXAMPLE)
    result = run(topology, spark, {"lines": FileInput(str(path))}, ["count"], file_conf, exclude=["archive"],
                 name="wordcount")
    ran = time.monotonic()
    write_sinks(result, str(out), "parquet")
    done = time.monotonic()
    return {"secs": done - started, "bolts_secs": ran - started, "stages": result.stages}


def _split(line: str):
    for word in json.loads(line)["line"].lower().split():
        word = word.strip(PUNCTUATION)
        if word:
            yield (word, None)


def _running_count(pairs):
    counts: dict[str, int] = {}
    for word, _ in pairs:
        n = counts.get(word, 0) + 1
        counts[word] = n
        yield (word, n)


def run_by_hand(spark, path: Path, out: Path, partitions: int) -> float:
    """The baseline: the same work written directly on PySpark's RDD API."""
    started = time.monotonic()
    counts = (spark.sparkContext.textFile(str(path)).flatMap(_split)
              .partitionBy(partitions).mapPartitions(_running_count))
    spark.createDataFrame(counts, "word string, count long").write.parquet(str(out))
    return time.monotonic() - started


def count_tasks() -> int:
    from squall.loader import load_topology

    topology, _, _ = load_topology(EXAMPLE)
    return topology.components["count"].num_tasks


def run(sizes: list[int], master: str = "local[2]", skip_local: bool = False) -> dict:
    from squall import logs
    from squall.spark import session

    logs.configure(level="WARNING")  # stdout carries the report only

    report: dict = {"master": master, "cores": os.cpu_count(), "load_before": os.getloadavg(), "runs": []}
    with tempfile.TemporaryDirectory(prefix="squall-bench-") as tmp:
        tmp_path = Path(tmp)
        t0 = time.monotonic()
        spark, created = session(master, {"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        report["spark_start_secs"] = round(time.monotonic() - t0, 2)
        try:
            warm = tmp_path / "warm.jsonl"
            make_input(warm, 100_000, seed=1)
            run_squall(spark, warm, tmp_path / "warm-squall")
            run_by_hand(spark, warm, tmp_path / "warm-hand", count_tasks())
            for words in sizes:
                path = tmp_path / f"words-{words}.jsonl"
                lines = make_input(path, words)
                row: dict = {"words": words, "lines": lines, "bytes": path.stat().st_size}
                finals = []
                if not skip_local:
                    row["local_secs"] = round(run_local(path, lines, tmp_path / f"live-{words}"), 2)
                    finals.append(final_counts(tmp_path / f"live-{words}"))
                sq = run_squall(spark, path, tmp_path / f"squall-{words}")
                row["squall_spark_secs"] = round(sq["secs"], 2)
                row["squall_stages"] = sq["stages"]
                finals.append(final_counts(tmp_path / f"squall-{words}" / "count"))
                row["by_hand_secs"] = round(run_by_hand(spark, path, tmp_path / f"hand-{words}", count_tasks()), 2)
                finals.append(final_counts(tmp_path / f"hand-{words}"))
                row["squall_vs_by_hand"] = round(row["squall_spark_secs"] / row["by_hand_secs"], 2)
                if "local_secs" in row:
                    row["squall_vs_local"] = round(row["squall_spark_secs"] / row["local_secs"], 2)
                row["counts_equal"] = all(f == finals[0] for f in finals)
                row["load_after"] = os.getloadavg()
                report["runs"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            if created:
                spark.stop()
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--skip-local", action="store_true", help="only the two Spark jobs")
    args = ap.parse_args()
    print(json.dumps(run(args.words, args.master, args.skip_local), indent=2))


if __name__ == "__main__":
    main()
