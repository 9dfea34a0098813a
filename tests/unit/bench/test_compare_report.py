"""compare.py's tables: ratios within each round, their range, latency and failures."""
from compare import CLUSTER, KAFKA, LATENCY, LOCAL, MULTILANG
from compare_report import render

ALL = [*LOCAL, *MULTILANG, *KAFKA, *CLUSTER, *LATENCY]
GOAL_ROWS = ["complete latency p50, local, 1-75% of max (ms)", "complete latency p99, local, 1-75% of max (ms)",
             "complete latency p50, 3-worker cluster, 1-50% of max (ms)",
             "complete latency p99, 3-worker cluster, 1-50% of max (ms)", "cluster acked / unacked",
             "local acked / unacked (const -> id -> null)", "storm.py ShellBolt / pystorm ShellBolt",
             "Kafka -> split -> count -> Kafka / Bytewax", "maximum throughput / baseline's"]

RATES = {"wordcount-acked": (600e3, 700e3), "wordcount-unacked": (1e6, 1.1e6), "bytewax": (1e6, 1e6),
         "plain-loop": (4e6, 4e6), "const-id-null": (1e6, 0.8e6), "const-id-null-acked": (0.4e6, 0.4e6)}


def report(extra_runs=()):
    runs = [{"figure": key, "round": r + 1, "load_before": [1.5, 1, 1], "load_after": [1.7, 1, 1],
             "result": {"words_per_sec" if key in ("bytewax", "plain-loop") else "tuples_per_sec": v}}
            for key, values in RATES.items() for r, v in enumerate(values)]
    return {"rounds": 2, "runs": runs + list(extra_runs), "load_start": [1, 1, 1], "load_end": [2, 2, 2],
            "nproc": 2}


def row(text, name):
    return next(line for line in text.splitlines() if line.strip().startswith(name))


def test_ratios_are_taken_within_each_round_and_ranged():
    text, tables = render(report(), [*LOCAL, *CLUSTER, *LATENCY])
    assert row(text, "local word count, acked / Bytewax").split()[-4:] == ["0.70", "0.60-0.70", ">=", "1.2"]
    assert row(text, "acked / unacked, local const -> id -> null").split()[-5:-3] == ["0.40", "0.50"]
    assert row(text, "local const -> id -> null, M tuples/s").split()[-3] == "0.80-1.00"
    ratios = {r["name"]: r for r in tables["ratios"]}
    assert ratios["plain Python loop / Bytewax"]["per_round"] == [4.0, 4.0]
    assert "cluster acked / unacked" not in ratios  # no cluster figures were run
    assert "600,000 (1.5>1.7)" in row(text, "squall word count, acked (words/s)")


def test_latency_rows_and_failed_figures_are_shown():
    phases = [{"phase": "max", "offered_per_sec": None, "acked_per_sec": 1e5, "scheduled": 1, "completed": 1,
               "failed": 0, "missing": 0, "p50_ms": 1.0, "p90_ms": 2.0, "p99_ms": 3.0, "max_ms": 4.0},
              {"phase": "50%", "offered_per_sec": 5e4, "acked_per_sec": 5e4, "scheduled": 9, "completed": 8,
               "failed": 0, "missing": 1, "p50_ms": 0.5, "p90_ms": 1.5, "p99_ms": 7.25, "p999_ms": 8.5, "max_ms": 9.0,
               "lag_p50_ms": 0.25, "flight_p50_ms": 0.3, "lag_p99_ms": 5.0, "flight_p99_ms": 2.5}]
    extra = [{"figure": "latency-local", "round": None, "load_before": [1, 1, 1], "load_after": [1, 1, 1],
              "result": {"max_rate": 1e5, "phases": phases,
                         "machine": {"oversleep_p99_ms": 4.5, "oversleep_max_ms": 30.0}}},
             {"figure": "cluster", "round": 1, "load_before": [1, 1, 1], "load_after": [1, 1, 1],
              "error": "exit 1: ZooKeeperError: no java"}]
    text, tables = render(report(extra), [*LOCAL, *CLUSTER, *LATENCY])
    assert row(text, "p99 complete latency at 50% of max, local (ms)").split()[-3:] == ["7.25", "<=", "10"]
    assert row(text, "worst p99 at 1-75% of max, local (ms)").split()[-3:] == ["7.25", "<=", "10"]
    assert row(text, "worst p50 at 1-75% of max, local (ms)").split()[-3:] == ["0.50", "<=", "2"]
    assert row(text, "local        50%").split()[2:] == ["50,000", "50,000", "0.50", "1.50", "7.25", "8.50",
                                                           "9.00", "0.25", "0.30", "5.00", "2.50", "1"]
    assert "machine: a 1 ms sleep woke p99 4.50 ms late, max 30.00 ms" in text
    assert "cluster const -> id -> null, unacked round 1: exit 1: ZooKeeperError: no java" in text
    assert "failed (1.0>1.0)" in row(text, "cluster const -> id -> null, unacked (tuples/s)")


def test_per_cpu_ratios_divide_each_rate_by_the_cpu_its_processes_used():
    rep = report()
    for run in rep["runs"]:
        if run["round"] == 1 and run["figure"] in ("wordcount-acked", "bytewax"):
            run["result"]["process_cpu"] = 0.5 if run["figure"] == "wordcount-acked" else 1.0
    text, tables = render(rep, [*LOCAL, *CLUSTER, *LATENCY])
    per_cpu = {r["name"]: r["per_round"] for r in tables["ratios"] if r["of"] == "per_cpu"}
    assert per_cpu["local word count, acked / Bytewax"][0] == 1.2  # 1.2 M/CPU-s against 1 M/CPU-s
    assert "600,000 (1.5>1.7 cpu 0.50)" in row(text, "squall word count, acked (words/s)")


def _run(key, r, result=None, error=None):
    run = {"figure": key, "round": r, "load_before": [1, 1, 1], "load_after": [1, 1, 1]}
    run.update({"error": error} if error else {"result": result})
    return run


def goals(tables):
    return {g["name"]: g for g in tables["goals"]}


def test_the_goal_table_has_every_row_of_issue_31_even_with_figures_missing():
    text, tables = render(report(), ALL)  # no latency, multilang, Kafka or cluster figures, no baseline
    names = [g["name"] for g in tables["goals"]]
    assert [n for n in GOAL_ROWS if not any(x.startswith(n) for x in names)] == []
    by = goals(tables)
    assert by["local acked / unacked (const -> id -> null)"]["verdict"] == "NOT met"  # 0.40 and 0.50 < 0.7
    assert by["local acked / unacked (const -> id -> null)"]["shown"] == "0.40-0.50"
    assert by["Kafka -> split -> count -> Kafka / Bytewax"]["verdict"].startswith("missing")
    assert by["maximum throughput / baseline's, every scenario"]["verdict"] == "missing (no --baseline report given)"
    assert "storm.py ShellBolt / pystorm ShellBolt" in row(text, "storm.py ShellBolt / pystorm ShellBolt")


def test_the_multilang_and_kafka_rows_read_their_figures_and_judge_them():
    extra = [_run("multilang-split", 1, {"tuples_per_sec": 9e3, "storm_style_over_pystorm": 0.85}),
             _run("multilang-split", 2, {"tuples_per_sec": 8e3, "storm_style_over_pystorm": 0.75}),
             _run("kafka-pipeline", 1, {"records_per_sec": 260e3}),
             _run("bytewax-kafka", 1, {"records_per_sec": 200e3}),
             _run("kafka-pipeline", 2, error="exit 1: no broker"), _run("bytewax-kafka", 2, {"records_per_sec": 2e5})]
    text, tables = render(report(extra), ALL)
    by = goals(tables)
    assert by["storm.py ShellBolt / pystorm ShellBolt"]["shown"] == "0.75-0.85"
    assert by["storm.py ShellBolt / pystorm ShellBolt"]["verdict"] == "met"  # median 0.80
    kafka = by["Kafka -> split -> count -> Kafka / Bytewax"]
    assert kafka["shown"] == "1.30" and kafka["verdict"] == "met"  # round 2's squall side failed: one round
    assert row(text, "Kafka -> split -> count -> Kafka / Bytewax").split()[-4:] == ["1.30", ">=", "1.3", "met"]
    assert "squall Kafka -> split -> count -> Kafka round 2: exit 1: no broker" in text


def test_maximum_throughput_rows_compare_with_the_baseline_report():
    base = report()
    for run in base["runs"]:
        run["result"] = {k: v * (2 if run["figure"] == "const-id-null" else 1) for k, v in run["result"].items()}
    rep = report()
    rep["baseline"] = base
    text, tables = render(rep, ALL)
    by = goals(tables)
    assert by["maximum throughput / baseline's, const-id-null"]["verdict"] == "NOT met"  # half the baseline
    assert by["maximum throughput / baseline's, const-id-null"]["shown"] == "0.50"
    assert by["maximum throughput / baseline's, wordcount-acked"]["verdict"] == "met"
    assert not any("bytewax" in name for name in by)  # a peer's rate is not squall's throughput
    rep["baseline"] = "cannot read x.json: no such file"
    assert goals(render(rep, ALL)[1])["maximum throughput / baseline's, every scenario"]["verdict"] == \
        "missing (cannot read x.json: no such file)"
