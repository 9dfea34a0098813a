"""Backfill on Spark: the same topologies in local mode and on Spark give the same results.

One SparkSession (local[2], UI off, bound to 127.0.0.1) serves the whole test session.
"""
from __future__ import annotations

import json
import time
import uuid
import zlib
from collections import Counter
from pathlib import Path

import msgpack
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from click.testing import CliRunner  # noqa: E402

from squall.cli import main as squall_main  # noqa: E402
from squall.grouping import fields_task_index  # noqa: E402
from squall.loader import load_module, load_topology  # noqa: E402
from squall.local import LocalCluster  # noqa: E402
from squall.spark import BackfillError, make_plan, run  # noqa: E402
from squall.testing.components import recorded  # noqa: E402
from support.paths import REPO, SPARK_TOPOLOGIES

pytestmark = pytest.mark.spark

EXAMPLES = REPO / "examples" / "backfill"
HERE = SPARK_TOPOLOGIES
PUNCTUATION = ".,;:!?\"'()[]"


def spark_run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(squall_main, ["spark-run", *args, "--master", "local[2]"])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def run_local(topology, conf: dict, spout_rows: int, name: str, timeout: float = 120.0) -> list[dict]:
    """Run until the spouts' tuples are all acked; returns the final executor stats."""
    with LocalCluster({"squall.log.level": "WARNING"}) as cluster:
        cluster.submit(name, conf, topology)
        deadline = time.monotonic() + timeout
        while True:
            stats = cluster.stats(name)
            acked = sum(s.get("acked", 0) for s in stats if s["kind"] == "spout")
            if acked >= spout_rows:
                break
            assert time.monotonic() < deadline, f"only {acked} of {spout_rows} tuples acked: {stats}"
            time.sleep(0.05)
        errors = cluster.errors(name)
        cluster.kill(name)
    assert not errors, errors
    return stats


def finals(rows, key: str, order: str, value: str) -> dict:
    """Per ``key``, ``value`` of the row with the largest ``order`` (the last one emitted)."""
    best: dict = {}
    for r in rows:
        k = r[key]
        if k not in best or r[order] > best[k][0]:
            best[k] = (r[order], r[value])
    return {k: v for k, (_, v) in best.items()}


def lines_of(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def assert_clean_parquet_dir(folder: Path) -> list[Path]:
    names = sorted(folder.iterdir())
    assert names, f"{folder} is empty"
    leftovers = [p.name for p in names if not p.name.endswith(".parquet") or p.name.startswith(".")]
    assert not leftovers, f"temporary or stray files left: {leftovers}"
    return names


# -- the two comparisons ------------------------------------------------------------
def test_wordcount_local_and_spark_run_agree(spark, tmp_path, monkeypatch):
    words = EXAMPLES / "words.jsonl"
    truth: Counter = Counter()
    for line in words.read_text().splitlines():
        truth.update(w.strip(PUNCTUATION) for w in json.loads(line)["line"].lower().split()
                     if w.strip(PUNCTUATION))

    topology, file_conf, _ = load_topology(EXAMPLES / "wordcount.py")
    live = tmp_path / "live"
    run_local(topology, {**file_conf, "wordcount.input": str(words), "wordcount.archive": str(live)},
              lines_of(words), "wordcount")
    assert_clean_parquet_dir(live)
    local_counts = finals([r.asDict() for r in spark.read.parquet(str(live)).collect()], "word", "count", "count")

    # The README's command, from the repository root.
    monkeypatch.chdir(REPO)
    out = tmp_path / "backfill"
    code, output = spark_run("examples/backfill/wordcount.py", "--input", "lines=examples/backfill/words.jsonl",
                             "--sink", "count", "--exclude", "archive", "--output", str(out))
    assert code == 0, output
    assert f"wrote count: {sum(truth.values())} rows" in output
    spark_counts = finals([r.asDict() for r in spark.read.parquet(str(out / "count")).collect()],
                          "word", "count", "count")
    assert local_counts == spark_counts == dict(truth)


def test_join_local_and_spark_run_agree(spark, tmp_path, monkeypatch):
    orders, users = EXAMPLES / "orders.jsonl", EXAMPLES / "users.jsonl"
    country = {u["user"]: u["country"] for u in map(json.loads, users.read_text().splitlines())}
    truth: dict = {}
    for o in map(json.loads, orders.read_text().splitlines()):
        t = truth.setdefault(country[o["user"]], [0, 0])
        t[0] += o["amount"]
        t[1] += 1
    truth = {c: tuple(v) for c, v in truth.items()}

    topology, file_conf, _ = load_topology(EXAMPLES / "orders.py")
    live = tmp_path / "live"
    run_local(topology, {**file_conf, "orders.archive": str(live)}, lines_of(orders) + lines_of(users), "orders")
    assert_clean_parquet_dir(live)
    rows = [r.asDict() for r in spark.read.parquet(str(live)).collect()]
    local = {c: (v, n) for c, (v, n) in finals([{**r, "both": (r["revenue"], r["orders"])} for r in rows],
                                               "country", "orders", "both").items()}

    monkeypatch.chdir(REPO)
    out = tmp_path / "backfill"
    code, output = spark_run("examples/backfill/orders.py", "--input", "orders=examples/backfill/orders.jsonl",
                             "--input", "users=examples/backfill/users.jsonl", "--sink", "totals",
                             "--exclude", "archive", "--output", str(out), "--output-format", "jsonl")
    assert code == 0, output
    rows = [json.loads(line) for p in sorted((out / "totals").glob("part-*")) for line in p.read_text().splitlines()]
    backfill = {c: (v, n) for c, (v, n) in finals([{**r, "both": (r["revenue"], r["orders"])} for r in rows],
                                                  "country", "orders", "both").items()}
    assert local == backfill == truth


# -- the live ParquetSink -------------------------------------------------------------------
def test_parquet_sink_files_read_back_in_spark_equal_what_was_emitted(spark, tmp_path):
    import random

    rng = random.Random(3)
    src = tmp_path / "rows.jsonl"
    with open(src, "w") as fh:
        for i in range(300):
            fh.write(json.dumps({"id": i, "name": f"n{rng.randint(0, 50)}",
                                 "score": None if i % 17 == 0 else round(rng.uniform(-5, 5), 3),
                                 "flag": i % 3 == 0, "tags": [f"t{j}" for j in range(i % 4)]}) + "\n")
    module = load_module(HERE / "batch_topologies.py")
    archive, record = tmp_path / "archive", tmp_path / "record"
    run_local(module.sink_roundtrip(), {"sinktest.input": str(src), "sinktest.archive": str(archive),
                                        "sinktest.record": str(record)}, 300, "sinktest")
    files = assert_clean_parquet_dir(archive)
    assert len(files) >= 300 // 40  # rolled by row count (and by time for the tails)
    written = sorted(tuple(tuple(v) if isinstance(v, list) else v for v in r)
                     for r in spark.read.parquet(str(archive)).select(*module.ROW_FIELDS).collect())
    emitted = sorted(tuple(tuple(v) if isinstance(v, list) else v for v in values)
                     for _, _, _, values in recorded(record))
    assert len(emitted) == 300
    assert written == emitted
    schema = {f.name: f.dataType.simpleString() for f in spark.read.parquet(str(archive)).schema.fields}
    assert schema == {"id": "bigint", "name": "string", "score": "double", "flag": "boolean",
                      "tags": "array<string>"}


class _AckLog:
    """Stands where the runtime's collector stands: records what the sink acks and fails."""

    def __init__(self):
        self.acked, self.failed, self.errors = [], [], []

    def ack(self, tup):
        self.acked.append(tup)

    def fail(self, tup):
        self.failed.append(tup)

    def report_error(self, error):
        self.errors.append(str(error))


def _sink_task(tmp_path, **kwargs):
    from squall import TopologyBuilder
    from squall.context import TopologyContext
    from squall.model import component_tasks, task_ids
    from squall.tuple import Source, Tuple

    module = load_module(HERE / "batch_topologies.py")
    b = TopologyBuilder()
    b.set_spout("rows", module.JsonLinesSpout(["k", "v"], path="x"))
    from squall.contrib import ParquetSink

    sink = ParquetSink(tmp_path / "out", ["v", "k"], roll_secs=None, **kwargs)
    b.set_bolt("sink", sink).shuffle("rows")
    topo = b.build()
    t2c = task_ids(topo)
    ctx = TopologyContext("t", topo, t2c, component_tasks(t2c), 2, frozenset(t2c), None, {})
    log = _AckLog()
    sink.prepare({}, ctx, log)
    source = Source("rows", 1, "default", topo.stream_fields("rows", "default"))
    return sink, log, lambda values: Tuple(values, source)


def test_parquet_sink_acks_only_after_the_file_is_renamed(tmp_path):
    import pyarrow.parquet as pq

    sink, log, make = _sink_task(tmp_path, rows_per_file=3)
    out = tmp_path / "out"
    first = [make(["a", 1]), make(["b", 2])]
    for t in first:
        sink.execute(t)
    assert log.acked == [] and list(out.iterdir()) == []  # buffered: not durable, not acked
    third = make(["c", 3])
    sink.execute(third)
    files = list(out.iterdir())
    assert len(files) == 1 and files[0].suffix == ".parquet"
    assert log.acked == first + [third]
    assert pq.read_table(files[0]).to_pylist() == [{"v": 1, "k": "a"}, {"v": 2, "k": "b"}, {"v": 3, "k": "c"}]
    # A value that does not fit the column type learned from the first file fails its
    # tuples (the spout replays them) and leaves no file behind.
    bad = [make(["d", "not a number"]), make(["e", 5]), make(["f", 6])]
    for t in bad:
        sink.execute(t)
    assert log.failed == bad and "field 'v'" in log.errors[0]
    assert len(list(out.iterdir())) == 1
    sink.execute(make(["g", 7]))
    sink.cleanup()  # flushes what is buffered
    assert len(list(out.iterdir())) == 2 and log.acked[-1].values == ["g", 7]


def test_parquet_sink_never_turns_ints_into_floats(tmp_path):
    sink, log, make = _sink_task(tmp_path, rows_per_file=2)
    first = [make(["a", 1]), make(["b", 2])]
    for t in first:
        sink.execute(t)
    bad = [make(["c", 2.5]), make(["d", 3])]  # pyarrow alone would write 2.5 and 3.0 as doubles
    for t in bad:
        sink.execute(t)
    assert log.acked == first and log.failed == bad
    assert "field 'v': values of type int (bigint) and float (double)" in log.errors[0]


# -- batch semantics on Spark -----------------------------------------------------------------
@pytest.fixture(scope="module")
def grouped(spark, tmp_path_factory):
    """The groupings topology run once on Spark over 60 keys (some starting with x)."""
    module = load_module(HERE / "batch_topologies.py")
    marks = tmp_path_factory.mktemp("marks")
    keys = [{"key": f"{'x' if i % 10 == 0 else 'k'}{i}{'z' * (i % 3)}", "n": i} for i in range(60)]
    df = spark.createDataFrame([(k["n"], k["key"], "extra") for k in keys], ["n", "key", "ignored"])
    sinks = ["byfield", "everyone", "lowest", "router", "direct", "custom", "partial", "spread", "life",
             "ticker", "flaky"]
    result = run(module.groupings(), spark, {"keys": df.repartition(3)}, sinks, ticks=True,
                 conf={"batchtest.marks": str(marks)})
    rows = {s: [r.asDict() for r in result[s].collect()] for s in sinks}
    return module, keys, result, rows, marks


def test_groupings_pick_the_tasks_streaming_picks(grouped):
    module, keys, result, rows, marks = grouped
    names = [k["key"] for k in keys]
    assert sorted(r["key"] for r in rows["byfield"]) == sorted(names)
    for r in rows["byfield"]:  # the one rule fields grouping follows, on every engine
        assert r["index"] == fields_task_index([r["key"]], 3)
    assert Counter(r["index"] for r in rows["everyone"]) == {0: 60, 1: 60}
    assert {r["index"] for r in rows["lowest"]} == {0} and len(rows["lowest"]) == 60
    assert {r["index"] for r in rows["spread"]} == {0, 1, 2} and len(rows["spread"]) == 60
    n_of = {k["key"]: k["n"] for k in keys}
    assert all(r["index"] == n_of[r["key"]] % 2 for r in rows["custom"])
    for r in rows["partial"]:
        raw = msgpack.packb([r["key"]], use_bin_type=True)
        assert r["index"] in {zlib.crc32(raw) % 3, zlib.crc32(raw, 0x9E3779B9) % 3}
    assert len(rows["partial"]) == 60
    chosen = {r["key"]: r["chosen"] for r in rows["router"]}
    assert all(r["sent"] == [r["chosen"]] for r in rows["router"])  # emit_direct returns the target
    assert {r["key"]: r["task"] for r in rows["direct"]} == chosen


def test_every_task_is_one_instance_prepared_once_and_cleaned_up(grouped):
    module, keys, result, rows, marks = grouped
    life = rows["life"]
    assert len(life) == 4 and len({r["task"] for r in life}) == 4
    assert all(r["prepares"] == 1 for r in life)
    assert sum(r["executed"] for r in life) == 60
    assert result.stats["life"]["tasks"] == 4 and result.stats["life"]["acked"] == 60
    # Reading a sink again reads the run's records; it never runs the bolt again.
    assert sorted(r.task for r in result["life"].collect()) == sorted(r["task"] for r in life)
    done = sorted(marks.iterdir())
    assert len(done) == 4 and all(p.read_text() == "cleaned up\n" for p in done)


def test_ticks_are_simulated_once_per_task_after_its_input(grouped):
    module, keys, result, rows, marks = grouped
    ticker = rows["ticker"]
    assert len(ticker) == 2 and sum(r["count"] for r in ticker) == 60
    assert {r["rate"] for r in ticker} == {5.0}


def test_a_failing_execute_fails_its_tuple_and_the_task_goes_on(grouped):
    module, keys, result, rows, marks = grouped
    bad = [k["key"] for k in keys if k["key"].startswith("x")]
    assert sorted(r["key"] for r in rows["flaky"]) == sorted(k["key"] for k in keys if k["key"] not in bad)
    stats = result.stats["flaky"]
    assert stats["failed"] == len(bad) and stats["acked"] == 60 - len(bad)
    assert "ValueError: refusing x" in stats["error_texts"][0]
    assert result.failed == len(bad)


def test_topology_code_is_shipped_to_the_python_workers(spark, tmp_path):
    def write_module(name):
        (tmp_path / f"{name}.py").write_text(
            "from squall import BasicBolt, TopologyBuilder\n"
            "from squall.contrib import JsonLinesSpout\n"
            f"from {name}_helper import shout\n"
            "class Shout(BasicBolt):\n"
            "    def execute(self, t):\n"
            "        self.collector.emit([shout(t['word'])])\n"
            "    def declare_output_fields(self, d):\n"
            "        d.declare(['loud'])\n"
            "def topology():\n"
            "    b = TopologyBuilder()\n"
            "    b.set_spout('words', JsonLinesSpout(['word'], path='x'))\n"
            "    b.set_bolt('shout', Shout(), 2).shuffle('words')\n"
            "    return b.build()\n")
        (tmp_path / f"{name}_helper.py").write_text("def shout(w):\n    return w.upper() + '!'\n")
        return load_topology(tmp_path / f"{name}.py")[0]

    df = spark.createDataFrame([("a",), ("b",), ("c",)], ["word"])
    shipped = write_module(f"shipped_{uuid.uuid4().hex[:8]}")
    result = run(shipped, spark, {"words": df}, ["shout"])
    assert sorted(r.loud for r in result["shout"].collect()) == ["A!", "B!", "C!"]

    unshipped = write_module(f"unshipped_{uuid.uuid4().hex[:8]}")
    with pytest.raises(BackfillError, match=r"bolt 'shout' failed on Spark: ModuleNotFoundError: "
                                            r"No module named 'unshipped_\w+'.*cannot import"):
        run(unshipped, spark, {"words": df}, ["shout"], ship_code=False)


# -- what batch cannot do: clear errors -----------------------------------------------------
def test_a_cycle_is_refused():
    module = load_module(HERE / "batch_topologies.py")
    with pytest.raises(BackfillError, match=r"cycle \((a -> b -> c -> a|b -> c -> a -> b|c -> a -> b -> c)\)"):
        make_plan(module.cycle(), ["keys"], ["c"])


def test_spark_run_refuses_before_starting_spark(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    out = str(tmp_path / "out")
    code, output = spark_run("examples/backfill/wordcount.py", "--sink", "count", "--exclude", "archive",
                             "--output", out)
    assert code == 1 and "spout 'lines' has no input" in output and "--input lines=PATH" in output
    code, output = spark_run("examples/backfill/wordcount.py", "--input", "lines=examples/backfill/words.jsonl",
                             "--output", out)
    assert code == 1 and "'archive' (topology.tick.tuple.freq.secs=1.0) depends on tick tuples" in output
    assert "--ticks" in output
    code, output = spark_run("examples/backfill/wordcount.py", "--input", "lines=x.jsonl", "--exclude", "archive",
                             "--sink", "count:other", "--output", out)
    assert code == 1 and "declares no stream 'other'" in output
    code, output = spark_run("examples/backfill/wordcount.py", "--input", "split=x.jsonl", "--output", out)
    assert code == 1 and "'split' is a bolt; inputs replace spouts" in output


def test_a_missing_field_is_none_as_live_and_a_missing_parquet_column_is_named(spark, tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.chdir(REPO)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no line field here"}\n{"line": "one"}\n')
    code, output = spark_run("examples/backfill/wordcount.py", "--input", f"lines={bad}", "--exclude", "archive",
                             "--output", str(tmp_path / "out"), "--no-progress")
    # As JsonLinesSpout would, the backfill hands split a None line: split fails that tuple.
    assert code == 1 and "1 tuples failed" in output
    assert "AttributeError: 'NoneType' object has no attribute 'lower'" in output
    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": ["a"]}), table)
    code, output = spark_run("examples/backfill/wordcount.py", "--input", f"lines={table}", "--input-format",
                             "parquet", "--exclude", "archive", "--output", str(tmp_path / "out2"))
    assert code == 1
    assert "input 'lines' has no column 'line'" in output and "the file's columns: ['text']" in output


def test_malformed_input_lines_are_skipped_and_counted_and_text_input_works(spark, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    src = tmp_path / "some.jsonl"
    src.write_bytes(b'{"line": "one two"}\r\n{"line": broken\n\n{"line": "two"}\r[1]\n\xff\n')
    code, output = spark_run("examples/backfill/wordcount.py", "--input", f"lines={src}", "--exclude", "archive",
                             "--output", str(tmp_path / "out"), "--output-format", "jsonl")
    assert code == 0, output
    assert "lines: input rows 2" in output and "input lines: skipped 3 malformed lines" in output
    assert "some.jsonl (line at byte 21): skipped: not JSON" in output
    rows = [json.loads(x) for p in (tmp_path / "out" / "count").glob("part-*") for x in p.read_text().splitlines()]
    assert finals(rows, "word", "count", "count") == {"one": 1, "two": 2}
    # Plain text: each line is the value of the spout's only field; a URI is opened by
    # pyarrow's file systems (here the local one).
    text = tmp_path / "some.txt"
    text.write_text("one two\ntwo\n")
    code, output = spark_run("examples/backfill/wordcount.py", "--input", f"lines=file://{text}", "--input-format",
                             "text",
                             "--exclude", "archive", "--output", str(tmp_path / "out2"))
    assert code == 0, output
    rows = [r.asDict() for r in spark.read.parquet(str(tmp_path / "out2" / "count")).collect()]
    assert finals(rows, "word", "count", "count") == {"one": 1, "two": 2}


def test_ticks_run_the_live_parquet_sink_inside_spark(spark, tmp_path, monkeypatch):
    """With --ticks the live archive bolt runs in Spark tasks too, and writes what the
    backfill's own sink writes: live and batch output in one format."""
    monkeypatch.chdir(REPO)
    archive, out = tmp_path / "archive", tmp_path / "out"
    code, output = spark_run("examples/backfill/wordcount.py", "--input", "lines=examples/backfill/words.jsonl",
                             "--ticks", "--sink", "count", "--output", str(out),
                             "-c", f"wordcount.archive={archive}")
    assert code == 0, output
    assert_clean_parquet_dir(archive)
    in_archive = sorted(tuple(r) for r in spark.read.parquet(str(archive)).select("word", "count").collect())
    in_sink = sorted(tuple(r) for r in spark.read.parquet(str(out / "count")).collect())
    assert in_archive == in_sink and len(in_sink) > 1000


def test_csv_input_and_failed_tuples_exit_nonzero(spark, tmp_path):
    keys = tmp_path / "keys.csv"
    keys.write_text("key,n\nk1,1\nx2,2\nk3,3\n")
    code, output = spark_run(str(HERE / "batch_topologies.py"), "--input", f"keys={keys}", "--input-format", "csv",
                             "--ticks", "--sink", "flaky", "--exclude", "custom", "--output", str(tmp_path / "o"))
    # csv columns are strings, on which the custom grouping's n % 2 would raise: excluding
    # the bolt keeps its grouping from running at all.
    assert code == 1 and "1 tuples failed" in output, output
    assert "wrote flaky: 2 rows" in output


# -- sinks keep types; inputs give live values; progress ------------------------------------
@pytest.fixture(scope="module")
def typed_run(spark):
    module = load_module(HERE / "batch_topologies.py")
    df = spark.createDataFrame([(i, f"k{i}") for i in range(12000)], ["n", "key"]).repartition(2)
    reports: list = []
    result = run(module.typed(), spark, {"keys": df}, ["typed", "mixed", "slow"], progress=reports.append,
                 progress_interval=0.2)
    return module, result, reports


def test_sinks_keep_every_value_and_a_field_of_two_types_is_refused_by_name(typed_run, spark, tmp_path):
    import datetime as dt

    from squall.spark import write_sinks

    module, result, _ = typed_run
    want = sorted((module.typed_values(n) for n in range(12000)), key=lambda r: r[0])
    assert sorted(result.records("typed").collect(), key=lambda r: r[0]) == want
    written = write_sinks(result, str(tmp_path / "pq"), sinks=["typed"])
    back = sorted((list(r) for r in spark.read.parquet(written["typed"]).collect()), key=lambda r: r[0])
    # Read back through Spark: binary as bytes, an aware timestamp as the instant in the
    # session time zone (UTC here); every other value as emitted.
    expect = [[*r[:4], r[4], *r[5:8], r[8].astimezone(dt.timezone.utc).replace(tzinfo=None), *r[9:]] for r in want]
    assert [[bytes(v) if isinstance(v, bytearray) else v for v in r] for r in back] == expect
    schema = {f.name: f.dataType.simpleString() for f in spark.read.parquet(written["typed"]).schema.fields}
    assert schema == {"i": "bigint", "f": "double", "s": "string", "b": "boolean", "raw": "binary",
                      "arr": "array<bigint>", "map": "map<string,bigint>", "naive": "timestamp_ntz",
                      "aware": "timestamp", "dec": "decimal(38,2)", "day": "date", "nothing": "string"}
    with pytest.raises(BackfillError, match=r"sink 'mixed' cannot be written as typed columns: field 'v': "
                                            r"values of type (int \(bigint\) and float \(double\)|"
                                            r"float \(double\) and int \(bigint\)).*JSON lines"):
        result["mixed"]
    # JSON lines keep both types exactly; bytes are not JSON, and the error names the field.
    written = write_sinks(result, str(tmp_path / "js"), "jsonl", sinks=["mixed"])
    rows = [json.loads(x) for p in Path(written["mixed"]).glob("part-*") for x in p.read_text().splitlines()]
    assert sorted((r["key"], r["v"]) for r in rows) == sorted((f"k{n}", n if n % 2 else n + 0.5) for n in range(12000))
    assert {type(r["v"]) for r in rows} == {int, float}
    with pytest.raises(BackfillError, match=r"sink 'typed' field 'raw': a builtins.bytes value is not JSON"):
        write_sinks(result, str(tmp_path / "js2"), "jsonl", sinks=["typed"])


def test_progress_is_reported_while_the_backfill_runs(typed_run):
    _, result, reports = typed_run
    live = [p for p in reports if not p.finished and p.stages_done == 0 and p.executed > 0]
    assert live, reports  # tuples counted while the (only) stage was still running
    assert all(a.executed <= b.executed for a, b in zip(reports, reports[1:]))
    last = reports[-1]
    assert last.finished and last.rows == 12000 and last.executed == 3 * 12000
    assert last.components_done == last.components == 4 and last.stages_done == last.stages == 1


def test_parquet_input_gives_the_values_the_live_parquet_spout_gives(spark, tmp_path):
    import datetime as dt
    import decimal
    import pickle

    import pyarrow as pa
    import pyarrow.parquet as pq

    from squall.spark import FileInput

    n = 9
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "f": [i / 3 if i % 4 else None for i in range(n)],
        "s": ["", "é", "李", None, "a", "b", "c", "d", "e"],
        "b": [bytes([i]) for i in range(n)],
        "tags": [[f"t{j}" for j in range(i % 3)] for i in range(n)],
        "st": [{"a": i, "b": str(i)} if i % 2 else None for i in range(n)],
        "m": pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int64())),
        "ts": pa.array([dt.datetime(2021, 5, 1, i, tzinfo=dt.timezone.utc) for i in range(n)],
                       pa.timestamp("us", tz="UTC")),
        "naive": pa.array([dt.datetime(2021, 5, 1, 0, i) for i in range(n)], pa.timestamp("us")),
        "d": pa.array([decimal.Decimal(i) / 4 for i in range(n)], pa.decimal128(10, 2)),
        "day": pa.array([dt.date(2021, 1, 1 + i) for i in range(n)], pa.date32()),
        "unused": list(range(n)),
    })
    path = tmp_path / "rows.parquet"
    pq.write_table(table, path, row_group_size=4)
    module = load_module(HERE / "batch_topologies.py")
    pickles = tmp_path / "pickles"
    run_local(module.parquet_echo(), {"batchtest.parquet": str(path), "batchtest.pickles": str(pickles)}, n,
              "parquet-live")
    live = []
    for f in pickles.iterdir():
        with open(f, "rb") as fh:
            while True:
                try:
                    live.append(pickle.load(fh))
                except EOFError:
                    break
    result = run(module.parquet_echo(), spark, {"rows": FileInput(str(path), "parquet")}, ["echo"],
                 exclude=["pickles"])
    backfill = result.records("echo").collect()
    assert sorted(backfill, key=lambda r: r[0]) == sorted(live, key=lambda r: r[0])
    assert len(live) == n and live[0][6] == {"k": live[0][0]} and isinstance(live[0][3], bytes)
