"""Freshness sketches, the tail's keep-up verdict, and the backfill's governor (pure logic)."""

import numpy as np
import pyarrow as pa
import pytest

from tailfill.pipeline.load import load_pipeline
from tailfill.run.governor import Governor
from tailfill.run.tail_health import TailHealth, TailPace, describe, read_tail
from tailfill.run.tuning import tail_batch_offsets
from tailfill.state.store import StateStore
from tailfill.values.freshness import Freshness, LatencySample, TimestampSketch, freshness
from tailfill.values.schema import TIMESTAMP


def stamps(seconds: list[float]) -> pa.Array:
    return pa.array([int(s * 1e6) for s in seconds], pa.int64()).cast(TIMESTAMP)


def test_freshness_of_a_batch_matches_exact_quantiles():
    rng = np.random.default_rng(7)
    produced = 1_000_000 + rng.uniform(0, 60, 50_000)  # produced over a minute
    halves = [stamps(list(produced[:20_000])), stamps(list(produced[20_000:]))]
    sketches = [TimestampSketch.of([h]) for h in halves]  # two tasks
    committed_at = 1_000_070.0
    f = freshness([LatencySample.at(committed_at, sketches)])
    latency = committed_at - produced
    assert f.records == 50_000
    assert f.max == pytest.approx(latency.max(), abs=1e-3)
    assert f.p50 == pytest.approx(np.quantile(latency, 0.5), abs=0.6)
    assert f.p95 == pytest.approx(np.quantile(latency, 0.95), abs=0.6)


def test_a_run_s_latencies_merged_batch_by_batch_stay_small_and_keep_their_quantiles():
    rng = np.random.default_rng(3)
    merged, everything = LatencySample((), ()), []
    for batch in range(300):  # a long-running tail: one merge per batch
        produced = 1_000.0 * batch + rng.uniform(0, 30, 2_000)
        sketch = TimestampSketch.of([stamps(list(produced))])
        sample = LatencySample.at(1_000.0 * batch + 40.0, [sketch])
        merged = LatencySample.merged([merged, sample])
        everything.append(sample)
    assert len(merged.seconds) <= 201
    exact, approx = freshness(everything), freshness([merged])
    assert approx.records == exact.records == 600_000
    assert approx.max == pytest.approx(exact.max)
    assert approx.p50 == pytest.approx(exact.p50, abs=0.5)
    assert approx.p95 == pytest.approx(exact.p95, abs=0.5)


def test_records_without_a_broker_timestamp_are_left_out():
    arr = pa.array([None, None], TIMESTAMP)
    assert TimestampSketch.of([arr]) is None
    assert freshness([LatencySample.at(10.0, [])]) is None
    sketch = TimestampSketch.of([pa.array([None, 5_000_000], TIMESTAMP)])
    assert sketch.count == 1 and TimestampSketch.from_json(sketch.to_json()) == sketch


def health(**kw) -> TailHealth:
    base = dict(alive_at=1000.0, trigger_interval_seconds=10.0, freshness_objective_seconds=20.0,
                max_offsets_per_batch=8_000)
    return TailHealth(**{**base, **kw})


def test_a_cap_below_the_incoming_rate_is_named_with_its_fix():
    h = health(incoming_per_s=1_000.0, processing_per_s=5_000.0)
    line = h.keep_up_problem()
    assert line == ("the tail cannot keep up: incoming 1,000 offsets/s, the most the tail can take is 800 offsets/s "
                    "(tail.max_offsets_per_batch 8,000 per 10s trigger); fix: raise tail.max_offsets_per_batch "
                    "to at least 12,000")


def test_a_slow_tail_is_named_by_its_measured_rate():
    line = health(max_offsets_per_batch=100_000, incoming_per_s=1_000.0, processing_per_s=600.0).keep_up_problem()
    assert "the most the tail can take is 600 offsets/s (its measured processing rate 600 offsets/s)" in line
    assert "more cores" in line


def test_a_tail_that_keeps_up_says_nothing():
    assert health(incoming_per_s=700.0, processing_per_s=5_000.0).keep_up_problem() is None
    assert health().keep_up_problem() is None  # nothing measured yet


def test_health_round_trips_and_describes_itself(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    cfg = load_pipeline("pipelines/demo.yaml")
    h = health(freshness=Freshness(3.0, 25.0, 31.0, 100), incoming_per_s=1_000.0, processing_per_s=5_000.0)
    assert TailHealth.from_json(h.to_json()) == h
    lines = describe(cfg, h, now=1001.0)
    assert lines[0] == ("tail freshness (running, last batch): p50 3.0s, p95 25.0s, max 31.0s; BEHIND the objective "
                        "p95 ≤ 20s: tail freshness p95 25s > objective 20s")
    assert lines[1].startswith("WARNING: the tail cannot keep up")
    assert "not running" in describe(cfg, h, now=5000.0)[0]


def test_pace_measures_incoming_and_processing_rates(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    cfg = load_pipeline("pipelines/demo.yaml")
    pace = TailPace(cfg, 8_000)
    pace.observe(100.0, high_total=10_000, position_total=8_000, offsets=8_000, seconds=2.0, freshness=None)
    h = pace.observe(110.0, high_total=20_000, position_total=16_000, offsets=8_000, seconds=4.0, freshness=None)
    assert h.incoming_per_s == 1_000  # 10,000 more offsets in 10 s
    assert h.processing_per_s == 3_000  # smoothed: 4,000/s then 2,000/s
    assert h.backlog == 4_000


def test_tail_batches_fit_their_interval_within_the_bounds():
    # 2,000 offsets took 1 s: at 2,000/s, 60% of a 10 s trigger is 12,000, but at most 4× the last batch.
    assert tail_batch_offsets(2_000, 1.0, 10.0, floor=1_000, ceiling=100_000) == 8_000
    assert tail_batch_offsets(50_000, 5.0, 10.0, floor=1_000, ceiling=100_000) == 60_000
    assert tail_batch_offsets(50_000, 5.0, 10.0, floor=1_000, ceiling=20_000) == 20_000  # the upper bound
    assert tail_batch_offsets(100, 10.0, 10.0, floor=1_000, ceiling=20_000) == 1_000  # the lower bound


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def seen(health: TailHealth | None) -> tuple[TailHealth | None, str | None]:
    """What ``read_tail`` returns: a stopped tail's record (alive_at 0) stands for "no tail running"."""
    return health or health_stopped(), None


def health_stopped() -> TailHealth:
    return health(alive_at=0.0)


def governor(clock: FakeClock, tail: list, rate: int | None = None, logs: list | None = None,
             when_tail_unknown: str = "proceed") -> Governor:
    return Governor(max_offsets_per_batch=2_000_000, batch_seconds=30.0, max_offsets_per_second=rate, cores=2,
                    read_tail=lambda: seen(tail[0]), when_tail_unknown=when_tail_unknown, tail_interval_seconds=10.0,
                    log=(logs if logs is not None else []).append, clock=clock, sleep=clock.sleep)


def test_without_a_tail_the_backfill_runs_at_full_speed():
    clock = FakeClock()
    g = governor(clock, [None])
    assert g.first_budget().tasks is None and g.first_budget().max_offsets == 2_000_000
    budget, waited = g.after_batch(500_000, 5.0)
    assert waited == 0 and budget.tasks is None and budget.max_offsets == 2_000_000  # 100k/s × 30 s, capped


def test_beside_a_live_tail_the_backfill_takes_half_the_cores_and_short_batches():
    clock = FakeClock()
    g = governor(clock, [health(alive_at=clock.now)])
    assert g.first_budget().tasks == 1
    budget, _ = g.after_batch(100_000, 2.0)  # 50k/s; half the tail's 10 s interval
    assert budget.tasks == 1 and budget.max_offsets == 250_000
    assert "beside the live tail" in g.state


def test_the_backfill_pauses_while_the_tail_misses_its_objective_and_resumes():
    clock, logs = FakeClock(), []
    late = health(alive_at=clock.now, freshness=Freshness(10.0, 35.0, 40.0, 1000))
    tail = [late]
    g = governor(clock, tail, logs=logs)
    beats = iter(range(100))

    def read():  # the tail catches up after 5 polls, then keeps beating
        i = next(beats)
        fresh = late.freshness if i < 5 else Freshness(2.0, 8.0, 9.0, 1000)
        return TailHealth(**{**late.__dict__, "alive_at": clock.now, "freshness": fresh})

    g.read_tail = lambda: seen(read())
    _, waited = g.after_batch(100_000, 2.0)
    assert waited == pytest.approx(5.0)  # five polls a second apart found it late
    assert logs[0].startswith("yielding to the tail: tail freshness p95 35s > objective 20s")
    assert logs[-1].startswith("tail healthy again: backfill resumes after 5s")


def test_a_dead_tail_is_not_waited_for():
    clock = FakeClock()
    g = governor(clock, [health(alive_at=clock.now - 3600, freshness=Freshness(10.0, 99.0, 99.0, 10))])
    budget, waited = g.after_batch(100_000, 2.0)
    assert waited == 0 and budget.tasks is None


def test_the_rate_limit_holds_over_the_query():
    clock = FakeClock()
    g = governor(clock, [None], rate=10_000)
    assert g.first_budget().max_offsets == 300_000  # 30 s at 10,000/s
    clock.now += 2.0  # a batch of 100,000 took 2 s: it must have taken 10 s
    budget, waited = g.after_batch(100_000, 2.0)
    assert waited == pytest.approx(8.0)
    assert clock.now - 1000.0 == pytest.approx(10.0)
    # The batch ran at 50,000/s (100,000 in 2 s): 4x the last batch would allow 400,000; the limit allows 30 s of it.
    assert budget.max_offsets == 300_000


def test_a_query_being_stopped_does_not_wait_out_the_rate_limit():
    clock = FakeClock()
    g = governor(clock, [None], rate=1_000)

    def sleep(s: float) -> None:  # the query is stopped 3 s into a wait of 100 s
        clock.sleep(s)
        if clock.now - 1000.0 >= 3.0:
            g.stopping.set()

    g.sleep = sleep
    _, waited = g.after_batch(100_000, 0.0)
    assert waited == pytest.approx(3.0)


def test_a_tail_late_for_other_reasons_does_not_stop_the_backfill_for_ever():
    clock, logs = FakeClock(), []
    tail = [health(alive_at=clock.now, freshness=Freshness(50.0, 90.0, 99.0, 10))]
    g = governor(clock, tail, logs=logs)
    g.read_tail = lambda: seen(TailHealth(**{**tail[0].__dict__, "alive_at": clock.now}))  # alive, always late
    _, waited = g.after_batch(100_000, 2.0)
    assert waited == pytest.approx(100.0)  # ten of the tail's 10 s intervals
    assert "the backfill is not what holds it back" in logs[-1]


@pytest.mark.parametrize("why", ["no tail state at s3://b/_tailfill/demo/tail/health.json",
                                 "cannot read the tail's state at /w/_tailfill/demo/tail/health.json: OSError: gone"])
def test_a_governor_that_cannot_see_the_tail_says_so_and_yields_when_told(why):
    clock, logs = FakeClock(), []
    g = Governor(max_offsets_per_batch=2_000_000, batch_seconds=30.0, max_offsets_per_second=None, cores=2,
                 read_tail=lambda: (None, why), when_tail_unknown="yield", tail_interval_seconds=10.0,
                 log=logs.append, clock=clock, sleep=clock.sleep)
    assert g.first_budget().tasks == 1  # half the cores, as beside a live tail
    budget, waited = g.after_batch(100_000, 2.0)
    assert waited == 0 and budget.tasks == 1 and budget.max_offsets == 250_000  # ~5 s batches: half the interval
    assert g.state.startswith("tail state unknown, yielding")
    assert logs == [f"tail state unknown: {why}; yielding as if beside a live tail (backfill.when_tail_unknown: yield)"]


def test_a_governor_told_to_proceed_runs_at_full_speed_and_still_says_it_is_blind():
    clock, logs = FakeClock(), []
    g = governor(clock, [None], logs=logs)
    g.read_tail = lambda: (None, "no tail state at /w/_tailfill/demo/tail/health.json")
    budget, _ = g.after_batch(500_000, 5.0)
    assert budget.tasks is None and budget.max_offsets == 2_000_000
    assert g.state == "tail state unknown, proceeding: full speed"
    assert logs[0].startswith("tail state unknown: no tail state at") and "proceeding at full speed" in logs[0]
    g.read_tail = lambda: seen(None)  # the tail published its state (stopped): known again
    g.after_batch(500_000, 5.0)
    assert g.state == "full speed" and logs[-1] == "tail state readable again"


def test_status_says_the_tail_is_unknown_and_what_a_backfill_does(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    cfg = load_pipeline("pipelines/demo.yaml")
    health, why = read_tail(StateStore.of(cfg))  # nothing published under the demo's state root yet
    assert health is None and f"{tmp_path}/warehouse/_tailfill/demo/tail/health.json" in why
    lines = describe(cfg, health, unknown=why)
    assert lines[1].startswith("tail state unknown: no tail state at")
    assert lines[1].endswith("a backfill proceeds at full speed (backfill.when_tail_unknown: proceed)")
