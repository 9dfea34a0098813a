"""Live and backfill agree on messy data: local mode with two workers (tuples serialized
between them), a process cluster, and ``spark-run`` give identical final results.

Hypothesis writes JSON-lines inputs with values of every JSON type (unicode, empty
strings, nulls, nested and too-deep values), unknown keys, duplicate keys, malformed
lines (broken JSON, arrays, NaN, huge numbers, lone surrogates, invalid UTF-8, over-long
lines, random bytes), blank lines and all three line ends; tests/spark/messy_topology.py
runs them through two spouts, shuffle, local-or-shuffle, fields, all, global and direct
groupings, a reject stream, a join and keyed aggregations, under several task layouts.
"""
from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")

from click.testing import CliRunner  # noqa: E402

from squall.cli import main as squall_main  # noqa: E402
from squall.contrib import JsonLineRules  # noqa: E402
from squall.contrib.lines import LineReader  # noqa: E402
from squall.loader import load_module  # noqa: E402
from squall.local import LocalCluster  # noqa: E402
from squall.testing.components import recorded  # noqa: E402
from support.paths import SPARK_TOPOLOGIES
from support.spark_jvm import SMALL_JOB_JVM

pytestmark = pytest.mark.spark

TOPOLOGY = SPARK_TOPOLOGIES / "messy_topology.py"
messy = load_module(TOPOLOGY)

# -- messy JSON lines -----------------------------------------------------------------------
scalars = (st.none() | st.booleans() | st.integers(-(2 ** 53), 2 ** 53)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)


def nested(depth: int) -> object:
    v: object = "bottom"
    for i in range(depth):
        v = [v] if i % 2 else {"d": v}
    return v


deep = st.integers(1, 70).map(nested)  # the object is level 1: more than 63 more is too deep
names = st.sampled_from(["ana", "bo", "Ana", "çé", "李", "", "🙂"])
users = names | names | values
cents = st.integers(-10 ** 6, 10 ** 6) | st.integers(-10 ** 6, 10 ** 6) | values
MALFORMED = [b"{broken", b"[1, 2]", b'"just a string"', b"42", b"null", b'{"cents": NaN}', b'{"cents": 1e999}',
             b'{"cents": 123456789012345678901234}', b'{"user": "\\ud800"}', b'\xff\xfe{"user": "ana"}',
             b'{"user": "ana"} trailing', b'{"user": "ana", "item": "' + b"x" * 500 + b'"}',
             b'{"user": "ana", "user": "bo", "cents": 5}', b"{}", b'{"user": "ana", "cents": -0}']


@st.composite
def event_line(draw) -> bytes:
    obj = draw(st.fixed_dictionaries({}, optional={
        "user": users, "item": values, "cents": cents, "tags": st.lists(names, max_size=3) | values,
        "meta": values | deep, "extra": values}))
    return json.dumps(obj, ensure_ascii=draw(st.booleans())).encode()


@st.composite
def user_line(draw) -> bytes:
    obj = draw(st.fixed_dictionaries({}, optional={
        "user": users, "country": st.sampled_from(["PT", "BR", "中国", ""]) | values}))
    return json.dumps(obj, ensure_ascii=draw(st.booleans())).encode()


def lines_of(good, n: int):
    line = (good | good | good | st.sampled_from(MALFORMED) | st.binary(max_size=8)
            | st.sampled_from([b"", b"  \t"]))
    return st.tuples(st.lists(st.tuples(line, st.sampled_from([b"\n", b"\r\n", b"\r"])), max_size=n),
                     st.booleans())


def write(path: Path, drawn) -> Path:
    pairs, last_end = drawn
    data = b"".join(line + end for line, end in pairs)
    if pairs and not last_end:
        data = data[: -len(pairs[-1][1])]
    path.write_bytes(data)
    return path


def parsed(path: Path, fields: list[str]) -> tuple[int, int]:
    """(good, malformed) lines of a file, by the shared rules: only how long to wait."""
    rules = JsonLineRules(fields, max_line_bytes=messy.MAX_LINE_BYTES)
    good = bad = 0
    with open(path, "rb") as fh:
        for raw in LineReader(fh, max_bytes=rules.max_line_bytes):
            try:
                if not isinstance(raw, bytes):
                    raise ValueError("too long")
                if rules.parse(raw) is not None:
                    good += 1
            except ValueError:
                bad += 1
    return good, bad


# -- results ------------------------------------------------------------------------------
def final(rows_by_sink: dict[str, list[list]]) -> dict[str, object]:
    """Order-independent results: all rows as a multiset, or per key the last count."""
    out: dict[str, object] = {}
    for sink, how in messy.SINKS.items():
        rows = rows_by_sink.get(sink, [])
        if how == "all":
            out[sink] = Counter(json.dumps(r) for r in rows)
        else:
            best: dict = {}
            for r in rows:
                if r[0] not in best or r[1] > best[r[0]][1]:
                    best[r[0]] = r
            out[sink] = {k: json.dumps(r) for k, r in best.items()}
    return out


def text_lines(path: Path) -> list[str]:
    """The lines of a JSON lines file: split at "\n" only. (str.splitlines would also split
    inside JSON strings, at the U+0085 and U+2028 that JSON keeps unescaped.)"""
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line]


def recorded_by_component(out: Path) -> dict[str, list[list]]:
    rows: dict[str, list[list]] = {}
    for _, comp, _, values_ in recorded(out):
        rows.setdefault(comp, []).append(values_)
    return rows


def run_local(shape: int, events: Path, users_: Path, out: Path, expect: dict) -> tuple[dict, dict]:
    conf = {**messy.CONFIG, "topology.workers": 2, "messy.events": str(events), "messy.users": str(users_),
            "messy.out": str(out)}
    with LocalCluster({"squall.log.level": "ERROR"}) as cluster:
        cluster.submit("messy", conf, messy.build(messy.SHAPES[shape]))
        deadline = time.monotonic() + 60
        while True:
            stats = cluster.stats("messy")
            seen = {c: (sum(s.get("acked", 0) for s in stats if s["component"] == c),
                        sum(s.get("errors", 0) for s in stats if s["component"] == c)) for c in expect}
            if seen == expect or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        cluster.kill("messy")
    return final(recorded_by_component(out)), {c: bad for c, (_, bad) in seen.items()}


def run_spark(shape: int, events: Path, users_: Path, out: Path) -> tuple[dict, dict]:
    args = ["spark-run", str(TOPOLOGY), "--input", f"events={events}", "--input", f"users={users_}",
            "--exclude", "record", "--output", str(out), "--output-format", "jsonl", "--master", "local[2]",
            "--no-progress", "-c", "squall.log.level=WARNING"]
    for sink in messy.SINKS:
        args += ["--sink", sink]
    res = CliRunner().invoke(squall_main, args, env={"SQUALL_MESSY_SHAPE": str(shape)})
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    assert res.exit_code == 0, res.output
    topo = messy.build(messy.SHAPES[shape])
    rows: dict[str, list[list]] = {}
    for sink in messy.SINKS:
        fields = list(topo.stream_fields(sink, "default"))
        for f in sorted((out / sink).glob("part-*")):
            for line in text_lines(f):
                obj = json.loads(line)
                assert list(obj) == fields  # declared order, every field present
                rows.setdefault(sink, []).append([obj[k] for k in fields])
    bad = {c: 0 for c in ("events", "users")}
    for m in re.finditer(r"input (\w+): skipped (\d+) malformed lines", res.output):
        bad[m.group(1)] = int(m.group(2))
    return final(rows), bad


SETTINGS = dict(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                derandomize=False)


@settings(max_examples=6, **SETTINGS)
@given(events=lines_of(event_line(), 30), users_=lines_of(user_line(), 8), shape=st.integers(0, 2))
def test_local_two_workers_and_spark_run_agree_on_messy_data(spark, tmp_path_factory, events, users_, shape):
    d = tmp_path_factory.mktemp("messy")
    ev, us = write(d / "events.jsonl", events), write(d / "users.jsonl", users_)
    (eg, eb), (ug, ub) = parsed(ev, messy.EVENT_FIELDS), parsed(us, messy.USER_FIELDS)
    local, local_bad = run_local(shape, ev, us, d / "live", {"events": (eg, eb), "users": (ug, ub)})
    backfill, spark_bad = run_spark(shape, ev, us, d / "backfill")
    assert local_bad == spark_bad == {"events": eb, "users": ub}
    assert backfill == local
    assert sum(local["echo"].values()) == eg  # every good event line went through


# -- a process cluster: nimbus, supervisors and worker processes -----------------------------
@pytest.fixture(scope="module")
def process_cluster(zk_server, tmp_path_factory):
    from squall.testing.cluster import ProcessCluster

    cluster = ProcessCluster(zk_server.port, f"/messy-{time.time_ns()}", tmp_path_factory.mktemp("cluster"),
                             supervisors=2, slots=1)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def run_cluster(cluster, shape: int, events: Path, users_: Path, out: Path, expect: dict) -> dict:
    import os

    name = f"messy{time.time_ns() % 10 ** 9}"
    saved = os.environ.get("SQUALL_MESSY_SHAPE")
    os.environ["SQUALL_MESSY_SHAPE"] = str(shape)  # read by topology() in the submitting process
    try:
        res = cluster.cli("submit", str(TOPOLOGY), "--name", name, "-c", "topology.workers=2",
                          "-c", f"messy.events={events}", "-c", f"messy.users={users_}", "-c", f"messy.out={out}")
    finally:
        if saved is None:
            os.environ.pop("SQUALL_MESSY_SHAPE", None)
        else:
            os.environ["SQUALL_MESSY_SHAPE"] = saved
    assert res.returncode == 0, res.stdout + res.stderr

    def acked() -> dict:
        st = cluster.cli("status", name, "--json")
        comps = {c["id"]: c for c in json.loads(st.stdout)["components"]} if st.returncode == 0 else {}
        return {c: comps.get(c, {}).get("acked", -1) for c in expect}

    cluster.wait_for(lambda: acked() == expect, 90, f"every good line acked ({expect})", interval=0.3)
    assert cluster.cli("kill", name, "--wait", "0").returncode == 0
    cluster.wait_for(lambda: cluster.worker_pids() == {}, 60, "workers gone")
    return final(recorded_by_component(out))


@pytest.mark.cluster
@settings(max_examples=2, **SETTINGS)
@given(events=lines_of(event_line(), 20), users_=lines_of(user_line(), 6), shape=st.integers(0, 2))
def test_a_process_cluster_and_spark_run_agree_on_messy_data(spark, process_cluster, tmp_path_factory, events,
                                                            users_, shape):
    d = tmp_path_factory.mktemp("messy-cluster")
    ev, us = write(d / "events.jsonl", events), write(d / "users.jsonl", users_)
    (eg, _), (ug, _) = parsed(ev, messy.EVENT_FIELDS), parsed(us, messy.USER_FIELDS)
    live = run_cluster(process_cluster, shape, ev, us, d / "live", {"events": eg, "users": ug})
    backfill, _ = run_spark(shape, ev, us, d / "backfill")
    assert backfill == live


# -- a Spark standalone cluster: code reaches executors only by shipping --------------------
EVENTS = [
    b'{"user": "ana", "item": "pen", "cents": 120, "tags": ["a"], "meta": {"x": [1, 2.5, null]}}',
    b'{"user": "ana", "item": {"sku": 7}, "cents": "12", "meta": []}',
    b'{"user": "bo", "item": 3, "cents": 1.5}',
    b'{"user": "\\u674e", "item": "\xe6\x9d\x8e", "cents": -7, "tags": null}',
    b'{"user": "bo", "cents": 99, "user": "ana"}',
    b'{"user": "", "cents": 5}',
    b'{"user": true, "cents": 5}',
    b'{"user": "bo", "item": [[[["deep"]]]], "cents": 0, "meta": ' + json.dumps(nested(40)).encode() + b"}",
    b'{"user": "bo", "meta": ' + json.dumps(nested(70)).encode() + b"}",
    b"{broken", b"[1]", b'{"cents": NaN}', b"\xff", b"", b" ",
]
USERS = [b'{"user": "ana", "country": "PT"}', b'{"user": "bo", "country": 3}', b'{"user": "ana", "country": "BR"}',
         b'{"user": "\\u674e", "country": "\xe4\xb8\xad\xe5\x9b\xbd"}', b'{"user": {"a": 1}, "country": null}',
         b"nope"]


@pytest.fixture(scope="module")
def spark_standalone(tmp_path_factory):
    from squall.testing.spark_cluster import SparkStandalone

    with SparkStandalone(tmp_path_factory.mktemp("spark-standalone"), cores=2, memory="2g") as cluster:
        yield cluster


def test_spark_run_on_a_standalone_cluster_ships_the_code_and_agrees_with_local_mode(spark_standalone, tmp_path):
    import os
    import subprocess
    import sys

    ev = tmp_path / "events.jsonl"
    ev.write_bytes(b"\r\n".join(EVENTS[:5]) + b"\n" + b"\r".join(EVENTS[5:]) + b"\n")
    us = tmp_path / "users.jsonl"
    us.write_bytes(b"\n".join(USERS))
    (eg, eb), (ug, ub) = parsed(ev, messy.EVENT_FIELDS), parsed(us, messy.USER_FIELDS)
    local, local_bad = run_local(0, ev, us, tmp_path / "live", {"events": (eg, eb), "users": (ug, ub)})

    # The driver runs in a directory of its own: the topology (tests/spark/messy_topology.py,
    # not installed) reaches the executors only in the zip spark-run ships.
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    out = tmp_path / "backfill"
    args = [sys.executable, "-m", "squall.cli", "spark-run", str(TOPOLOGY), "--input", f"events={ev}",
            "--input", f"users={us}", "--exclude", "record", "--output", str(out), "--output-format", "jsonl",
            "--master", spark_standalone.url, "--spark-conf", "spark.ui.enabled=false",
            "--spark-conf", "spark.executor.memory=1g", "--spark-conf", "spark.cores.max=2",
            "--spark-conf", f"spark.executor.extraJavaOptions={SMALL_JOB_JVM}",
            "--log-format", "json"]
    for sink in messy.SINKS:
        args += ["--sink", sink]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SQUALL_MESSY_SHAPE": "0", "PYTHONPATH": ""}
    res = subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    shipped = [z.name for z in (spark_standalone.base / "work").rglob("squall-code-*.zip")]
    assert shipped, "no code zip in the executors' work directory"
    progress = [json.loads(x) for x in res.stderr.splitlines() if '"backfill progress"' in x]
    assert progress and progress[-1]["finished"] and progress[-1]["rows"] == eg + ug
    topo = messy.build(messy.SHAPES[0])
    rows: dict[str, list[list]] = {}
    for sink in messy.SINKS:
        fields = list(topo.stream_fields(sink, "default"))
        for f in sorted((out / sink).glob("part-*")):
            rows.setdefault(sink, []).extend([json.loads(x)[k] for k in fields]
                                             for x in f.read_text(encoding="utf-8").splitlines())
    assert final(rows) == local
    assert local_bad == {"events": eb, "users": ub} == {"events": 5, "users": 1}
    assert f"input events: skipped {eb} malformed lines" in res.stdout
    assert local["join"] and local["per_country"]  # the data joined and aggregated something
