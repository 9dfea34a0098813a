"""The load plan of the latency benchmark: its schedule, backlog and results, on a made-up clock."""
import math
import random

import pytest

import loadgen
from loadgen import LatencyHistogram, LoadPlan


def test_quantiles_are_within_one_percent_of_the_exact_ones():
    rng = random.Random(7)
    # 10 us to 3 s: every bucket width, and a tail past the last phase of a stalled plan.
    values = sorted([rng.lognormvariate(-7, 1.5) for _ in range(20000)] + [rng.uniform(1.0, 3.0) for _ in range(200)])
    hist = LatencyHistogram()
    hist.add_all(values[:5000])
    hist.add_all(values[5000:])  # a phase may fold its raw times more than once
    for q in (0.5, 0.9, 0.99, 0.999):
        exact = values[math.ceil(q * len(values)) - 1]
        assert exact <= hist.quantile(q) <= exact * 1.0101
    assert hist.quantile(1.0) == values[-1] == hist.max
    assert math.isnan(LatencyHistogram().quantile(0.5))


def run_plan(plan, until, step, ack_delay, stall=None):
    """Drive the plan: every ``step`` s take what is due, ack each ``ack_delay`` s after it is
    taken; nothing is taken during ``stall`` (start, end)."""
    now, in_flight = 0.0, []
    while now < until:
        if not (stall and stall[0] <= now < stall[1]):
            while (msg := plan.due(now)) is not None:
                in_flight.append((now + ack_delay, msg))
                if msg[0] == 0:
                    break  # the max phase emits whenever asked: one per turn
        while in_flight and in_flight[0][0] <= now:
            plan.acked(in_flight.pop(0)[1], now)
        if plan.finished(now):
            return now
        now = round(now + step, 9)
    return now


def test_max_then_a_fraction_of_it_on_schedule():
    plan = LoadPlan([0.5], warmup=1.0, duration=2.0, drain=5.0)
    done = run_plan(plan, until=20.0, step=0.001, ack_delay=0.002)
    result = plan.result()
    assert result["max_rate"] == pytest.approx(1000, rel=0.01)  # one per 1 ms turn
    half = result["phases"][1]
    assert half["offered_per_sec"] == pytest.approx(500, rel=0.01)
    assert half["scheduled"] == pytest.approx(1000, abs=2)  # 2 s at 500/s
    assert half["completed"] == half["scheduled"] and half["missing"] == 0
    assert 2.0 <= half["p50_ms"] <= 3.1 and half["p99_ms"] <= 3.1  # ack delay plus the turn
    assert 6.0 <= done < 6.1  # ends as soon as the last window's tuples are acked


def test_a_stall_shows_as_latency_from_the_scheduled_time():
    plan = LoadPlan([0.5], warmup=1.0, duration=2.0, drain=5.0)
    # Nothing is emitted from 4.0 s to 4.5 s, in the measured window of the 50% phase
    # (3 s + 1 s warm-up): the tuples due then go out late, and their latency says so.
    run_plan(plan, until=20.0, step=0.001, ack_delay=0.002, stall=(4.0, 4.5))
    half = plan.result()["phases"][1]
    assert half["scheduled"] == pytest.approx(1000, abs=2)  # the backlog is caught up, not dropped
    assert half["max_ms"] == pytest.approx(502, abs=2)
    assert half["p999_ms"] == pytest.approx(501, abs=7)  # the 999th of 1,000: next to the longest wait
    assert half["p90_ms"] > 100  # a quarter of the window waited behind the stall
    # The wait was the spout's (emitted late), not the topology's (acked 2 ms after emit).
    assert half["lag_p99_ms"] == pytest.approx(half["p99_ms"] - 2, abs=6)
    assert half["flight_p99_ms"] == pytest.approx(2, abs=0.05)
    # The typical tuple's split too: emitted on its 1 ms turn, acked 2 ms later.
    assert half["lag_p50_ms"] <= 1.01 and half["flight_p50_ms"] == pytest.approx(2, abs=0.05)


def test_a_phase_past_its_raw_limit_reports_the_same_latencies(monkeypatch):
    # At RAW_LIMIT measured tuples a phase folds the raw times it keeps into its histograms
    # and says so; the figures are the same as from one fold at the end.
    def stalled_plan_result():
        plan = LoadPlan([0.5], warmup=1.0, duration=2.0, drain=5.0, meter=None)  # no real CPU clock
        run_plan(plan, until=20.0, step=0.001, ack_delay=0.002, stall=(4.0, 4.5))
        return plan.result()

    raw = stalled_plan_result()
    assert "raw_folds" not in raw["phases"][1]
    monkeypatch.setattr(loadgen, "RAW_LIMIT", 100)
    folded = stalled_plan_result()
    assert folded["phases"][1].pop("raw_folds") == 9  # 1,000 measured tuples, 100 at a time
    folded["phases"][0].pop("raw_folds")
    assert folded == raw
    assert raw["phases"][1]["max_ms"] == pytest.approx(502, abs=2)  # the stall is in both


def test_unacked_tuples_are_reported_missing_after_the_drain():
    plan = LoadPlan([0.25], warmup=0.5, duration=1.0, drain=2.0)
    now = 0.0
    while not plan.finished(now):
        msg = plan.due(now)
        if msg is not None and msg[0] == 0:
            plan.acked(msg, now + 0.001)  # only the max phase is ever acked
        now = round(now + 0.001, 9)
    quarter = plan.result()["phases"][1]
    assert quarter["completed"] == 0 and quarter["missing"] == quarter["scheduled"] > 0
    assert now == pytest.approx(plan.end + 2.0, abs=0.002)


def test_no_ack_in_the_max_window_is_an_error_not_a_hang():
    plan = LoadPlan([0.5], warmup=0.1, duration=0.2, drain=1.0)
    now = 0.0
    while not plan.finished(now):
        plan.due(now)
        now += 0.01
        assert now < 5
    assert plan.result()["error"] == "no tuple was acked in the max-rate window"


@pytest.mark.parametrize("fractions", [[], [0.0], [1.5]])
def test_fractions_are_checked(fractions):
    with pytest.raises(ValueError, match="load fractions"):
        LoadPlan(fractions, 1.0, 1.0, 1.0)


class StolenCpu:
    """A thread meter on run_plan's made-up clock: the thread runs ``cpu_per_turn`` seconds
    a 1 ms turn, and from ``shared_from`` on it waits half its time for a CPU as well."""

    def __init__(self, cpu_per_turn: float, shared_from: float) -> None:
        self.now, self.cpu_per_turn, self.shared_from = 0.0, cpu_per_turn, shared_from

    def __call__(self) -> tuple[float, float]:
        turns = self.now / 0.001
        waited = max(0.0, self.now - self.shared_from) / 2
        return turns * self.cpu_per_turn, waited


def test_each_phase_says_what_its_thread_cost_a_tuple_and_how_much_cpu_it_got():
    meter = StolenCpu(cpu_per_turn=0.0004, shared_from=3.0)
    plan = LoadPlan([0.5], warmup=1.0, duration=2.0, drain=5.0, meter=meter)
    now = 0.0
    while not plan.finished(now):  # run_plan's loop, with the meter on the same clock
        meter.now = now
        msg = plan.due(now)
        if msg is not None:
            plan.acked(msg, now)
        now = round(now + 0.001, 9)
    top, half = plan.result()["phases"]
    # 0.4 ms of CPU a 1 ms turn: 40% of a CPU; the max phase emits a tuple a turn, the 50%
    # phase one every other turn, so its tuples cost twice as much CPU each.
    assert top["thread_cpu_share"] == pytest.approx(0.4, rel=0.01)
    assert top["thread_cpu_us_per_tuple"] == pytest.approx(400, rel=0.01)
    assert half["thread_cpu_us_per_tuple"] == pytest.approx(800, rel=0.01)
    # From 3 s (when the 50% phase began) the thread waited half the time for a CPU.
    assert top["thread_runq_share"] == pytest.approx(0.0, abs=0.001)
    assert half["thread_runq_share"] == pytest.approx(0.5, rel=0.01)


def test_without_a_meter_no_thread_figures():
    plan = LoadPlan([0.5], warmup=0.1, duration=0.2, drain=1.0, meter=None)
    run_plan(plan, until=5.0, step=0.001, ack_delay=0.002)
    assert all("thread_cpu_share" not in p for p in plan.result()["phases"])
