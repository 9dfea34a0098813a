"""A type checker follows values through a pipeline: mypy (as the lint runs it, sharing its
cache) reads a small pipeline, reveals the types steps give, and catches a function handed
the wrong type of value and a keyed step on plain values."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.paths import REPO

PIPELINE = '''
from typing import NamedTuple
from squall.streams import Count, StreamBuilder, TumblingWindows
from squall.testing.components import FixedTupleSpout


class Reading(NamedTuple):
    sensor: str
    celsius: float


b = StreamBuilder()
readings = b.new_stream(FixedTupleSpout("r", [], ["sensor", "celsius"]),
                        value=lambda t: Reading(t[0], t[1]))
reveal_type(readings)
by_sensor = readings.key_by(lambda r: r.sensor)
reveal_type(by_sensor)
hottest = by_sensor.map_values(lambda r: r.celsius).window(TumblingWindows.of(Count(10))).reduce_by_key(max)
reveal_type(hottest)
counts = by_sensor.count_by_key()
reveal_type(counts)
joined = hottest.join(counts)
reveal_type(joined)
state = counts.update_state_by_key(0.0, lambda acc, n: acc + n)
reveal_type(readings.map(lambda r: r.sensor).state_query(state))
readings.map(lambda r: r.celsius).filter(lambda c: c.startswith("x"))
readings.count_by_key()
'''


def test_mypy_follows_values_through_a_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "typed_pipeline.py"
    path.write_text(PIPELINE, encoding="utf-8")
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "lint.py"), "mypy", str(path)],
                            capture_output=True, text=True, timeout=300)
    lines = [line.split(": ", 1)[1] for line in result.stderr.splitlines() if "typed_pipeline.py" in line]
    assert result.returncode == 1, result.stdout + result.stderr
    reading = "tuple[str, float, fallback=typed_pipeline.Reading]"
    revealed = [line.removeprefix('note: Revealed type is "').removesuffix('"') for line in lines
                if line.startswith("note: Revealed type")]
    assert revealed == [
        f"squall.streams.stream.Stream[{reading}]",
        f"squall.streams.stream.PairStream[str, {reading}]",
        "squall.streams.stream.PairStream[str, float]",
        "squall.streams.stream.PairStream[str, int]",
        "squall.streams.stream.PairStream[str, tuple[float, int]]",
        "squall.streams.stream.PairStream[str, float]",
    ], lines
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 2, errors
    assert '"float" has no attribute "startswith"' in errors[0]
    assert '"Stream[Reading]" has no attribute "count_by_key"' in errors[1]
