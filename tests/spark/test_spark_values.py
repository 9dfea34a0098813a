"""Every value a tuple may hold crosses a Spark backfill (issue 34): values hypothesis
generates go between stages and out as sink records as the same values, types and all;
one that no rule carries is refused alone and reported against its component, as in
streaming, and the rest of its batch goes on."""
from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from squall.loader import load_module  # noqa: E402
from squall.spark import run  # noqa: E402
from support.paths import SPARK_TOPOLOGIES  # noqa: E402
from support.values import canon, sample, values  # noqa: E402

pytestmark = pytest.mark.spark

N = 200


def test_generated_values_cross_between_stages_and_a_poison_one_alone(spark):
    module = load_module(SPARK_TOPOLOGIES / "values_topology.py")
    rows = sample(values(10), N, seed=36)
    poison = N // 2
    sent = rows[:poison] + [module.Opaque()] + rows[poison:]
    ids = spark.createDataFrame([(i,) for i in range(len(sent))], "i long")
    result = run(module.topology(sent), spark, {"ids": ids.repartition(2)}, ["keep"])
    assert [s for s in result.stages if "keep" in s] == [["keep"]]  # a stage of its own: values crossed
    got = dict(result.records("keep").collect())
    assert sorted(got) == [i for i in range(len(sent)) if i != poison]
    wrong = [i for i in got if canon(got[i]) != canon(sent[i])]
    assert not wrong, f"{len(wrong)} values changed, e.g. {sent[wrong[0]]!r} -> {got[wrong[0]]!r}"
    texts = result.stats["gen"]["error_texts"]
    assert len(texts) == 1 and "field 'value'" in texts[0] and "Opaque" in texts[0], texts
