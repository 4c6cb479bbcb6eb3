"""A batch's cost (fixed + per offset + per table partition touched), fit from measured batches, and the tail sized
by it: a simulated tail whose every batch pays a large fixed cost drains its backlog, so does one into a
day-partitioned table whose records span a year; one that cannot keep up says so once."""

from __future__ import annotations

import pytest

from tailfill.pipeline.load import load_pipeline
from tailfill.run.governor import Governor
from tailfill.run.tail_health import TailPace
from tailfill.run.tuning import tail_batch_offsets
from tailfill.state.records import TailHealth
from tailfill.values.batch_cost import WINDOW, BatchCost, CostWindow, PartitionSpread, fit_cost, fit_spread


def test_the_fit_recovers_the_fixed_and_the_per_offset_cost():
    true = BatchCost(24.0, 0.001)
    cost = fit_cost([(n, true.seconds(n)) for n in (1_000, 4_000, 16_000)])
    assert cost.fixed_seconds == pytest.approx(24.0) and cost.per_offset_seconds == pytest.approx(0.001)


def test_batches_of_one_size_cannot_tell_the_two_apart():
    assert fit_cost([(1_000, 25.0), (1_000, 24.0), (1_050, 26.0)]) is None
    assert fit_cost([(1_000, 25.0)]) is None
    assert fit_cost([(0, 3.0), (5_000, 0.0)]) is None  # empty or unmeasured batches are not samples


def test_neither_part_of_the_cost_is_negative():
    bigger_was_faster = fit_cost([(1_000, 10.0), (4_000, 9.0)])  # noise: size does not matter here
    assert bigger_was_faster.per_offset_seconds == 0 and bigger_was_faster.fixed_seconds == pytest.approx(9.5)
    proportional = fit_cost([(1_000, 0.5), (4_000, 4.0)])  # a line through these crosses below zero
    assert proportional.fixed_seconds == 0 and proportional.per_offset_seconds > 0


def test_the_window_keeps_the_recent_batches():
    window = CostWindow()
    for n in (1_000, 2_000):
        window.add(n, BatchCost(100.0, 0.1).seconds(n))  # an old, slow regime
    for i in range(WINDOW):
        n = 1_000 * (i + 1)
        window.add(n, BatchCost(2.0, 0.001).seconds(n))
    assert window.cost == BatchCost(pytest.approx(2.0), pytest.approx(0.001))


def test_sizes_from_the_cost():
    cost = BatchCost(24.0, 0.001)
    assert cost.offsets_within(9.0) == 0  # the fixed cost alone is more
    assert cost.offsets_within(30.0) == 6_000
    assert BatchCost(1.0, 0.0).offsets_within(9.0) is None  # no cost per offset: no limit
    assert cost.rate(6_000, 15.0) == pytest.approx(200.0)  # 6,000 in 30 s, back to back
    assert cost.rate(1_000, 30.0) == pytest.approx(1_000 / 30)  # waits for its 30 s trigger
    # 500/s: 7,500 per 15 s trigger would take 31.5 s, so back to back: n = 500 × 24 / (1 − 0.5) = 24,000
    assert cost.offsets_for_rate(500.0, 15.0) == 24_000
    assert cost.rate(24_000, 15.0) == pytest.approx(500.0)
    assert BatchCost(0.5, 0.001).offsets_for_rate(500.0, 15.0) == 7_500  # one trigger's worth fits
    assert cost.offsets_for_rate(1_000.0, 15.0) is None  # 1 ms per offset: 1,000/s is out of reach


A_YEAR = PartitionSpread(365.0)  # records whose day partitions span a year


def test_a_batch_spanning_many_table_partitions_costs_more_than_one_spanning_one():
    one_day, a_year = BatchCost(2.0, 0.0002, 0.05), BatchCost(2.0, 0.0002, 0.05, A_YEAR)
    assert one_day.seconds(2_000) == pytest.approx(2.0 + 0.4 + 0.05)
    assert a_year.spread.touched(2_000) == pytest.approx(363.5, abs=0.5)  # nearly every day of the year
    assert a_year.seconds(2_000) == pytest.approx(2.0 + 0.4 + 0.05 * 363.5, abs=0.05)
    assert a_year.seconds(100) < a_year.seconds(1_000) < a_year.seconds(2_000)
    # past a year's worth of records, each batch touches all 365: one more fixed cost
    assert a_year.seconds(200_000) - a_year.seconds(100_000) == pytest.approx(0.0002 * 100_000, abs=0.01)


def test_the_spread_over_partitions_is_read_from_the_batches():
    assert fit_spread([(1_000, 1), (5_000, 1)]).distinct == 1.0  # a live tail: today's partition only
    spread = fit_spread([(n, round(A_YEAR.touched(n))) for n in (200, 1_000, 4_000)])
    assert spread.distinct == pytest.approx(365, rel=0.02)
    assert fit_spread([(100, 100)]).distinct == float("inf")  # every record a partition of its own
    assert fit_spread([(100, 100)]).touched(5_000) == 5_000


def test_the_fit_recovers_the_cost_per_table_partition():
    true = BatchCost(2.0, 0.0002, 0.05, A_YEAR)
    cost = fit_cost([(n, true.seconds(n), round(A_YEAR.touched(n))) for n in (100, 300, 1_000, 4_000)])
    assert cost.fixed_seconds == pytest.approx(2.0, abs=0.1)
    assert cost.per_offset_seconds == pytest.approx(0.0002, rel=0.05)
    assert cost.per_partition_seconds == pytest.approx(0.05, rel=0.05)
    assert cost.spread.distinct == pytest.approx(365, rel=0.02)
    # batches that all touch the same partitions: the partitions' cost is part of the fixed cost
    same = fit_cost([(n, 20.0 + 0.0002 * n, 365) for n in (50_000, 100_000, 200_000)])
    assert same == BatchCost(pytest.approx(20.0), pytest.approx(0.0002))


def test_batches_on_a_partitioned_table_are_sized_by_the_partitions_they_touch():
    cost = BatchCost(2.0, 0.0002, 0.05, A_YEAR)
    within = cost.offsets_within(9.0)
    assert cost.seconds(within) <= 9.0 < cost.seconds(within + 1)
    assert within < BatchCost(2.0, 0.0002).offsets_within(9.0)  # without the partitions, far more would fit
    # 500/s with a 15 s trigger: 7,500 touch every day and take 22.8 s, so back to back, larger
    needed = cost.offsets_for_rate(500.0, 15.0)
    assert cost.rate(needed, 15.0) >= 500.0 > cost.rate(needed - 1, 15.0)
    assert needed == pytest.approx(500 * (2.0 + 0.05 * 365) / (1 - 500 * 0.0002), rel=0.01)
    assert cost.offsets_for_rate(5_000.0, 15.0) is None  # 0.2 ms per offset: 5,000/s is out of reach


def test_a_tail_into_a_day_partitioned_table_spanning_a_year_drains_its_backlog(cfg):
    true = BatchCost(2.0, 0.0002, 0.05, A_YEAR)  # every batch of a few thousand writes a file per day: ~20 s
    sizes, backlogs, warnings = run_tail(cfg, true, incoming=500.0, interval=15.0, floor=1_000, ceiling=300_000,
                                         seconds=900, backlog=20_000)
    assert max(true.seconds(n) for n in sizes) <= LONGEST
    steady = true.seconds(sizes[-1]) * 500  # what arrives while one batch runs
    assert max(backlogs[-5:]) < 1.2 * steady
    assert warnings == []


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    return load_pipeline("pipelines/demo.yaml")


LONGEST = 150.0  # half the default stall timeout


def run_tail(cfg, true: BatchCost, *, incoming: float, interval: float, floor: int, ceiling: int, seconds: float,
             backlog: int, learn: bool = True) -> tuple[list[int], list[int], list[str]]:
    """A processing-time tail simulated for ``seconds``: batches sized as the pacer sizes them, each taking
    ``true.seconds(n)``. Returns the batch sizes, the backlog after each batch and the warnings logged."""
    tail = cfg.tail.model_copy(update={"trigger_interval_seconds": interval})
    pace = TailPace(cfg.model_copy(update={"tail": tail}), ceiling)
    now, position, cap = 0.0, 0, floor  # as in the field: held at the minimum
    sizes, backlogs, warnings = [], [], []
    while now < seconds:
        n = min(cap, backlog + int(incoming * now) - position)
        took = true.seconds(n)
        now += took
        position += n
        health = pace.observe(now, backlog + int(incoming * now), position, n, took, freshness=None,
                              partitions=round(true.spread.touched(n)) or 1)
        if (problem := pace.new_problem()) is not None:
            warnings.append(problem)
        sizes.append(n)
        backlogs.append(health.backlog)
        if learn:
            cap = tail_batch_offsets(n, took, interval, floor, ceiling, cost=health.cost, backlog=health.backlog,
                                     incoming_per_s=health.incoming_per_s, longest_seconds=LONGEST)
        else:  # sized by the last batch's rate alone
            cap = tail_batch_offsets(n, took, interval, floor, ceiling)
        now = max(now, (now // interval + 1) * interval if took < interval else now)  # the next trigger
    return sizes, backlogs, warnings


def test_a_large_fixed_cost_makes_batches_bigger_and_the_backlog_drains(cfg):
    # 500 records/s, a 15 s trigger, 20,000 offsets behind, and every batch paying 24 s whatever its size.
    true = BatchCost(24.0, 0.0001)
    sizes, backlogs, warnings = run_tail(cfg, true, incoming=500.0, interval=15.0, floor=1_000, ceiling=300_000,
                                         seconds=600, backlog=20_000)
    steady = 500 * 24 / (1 - 500 * 0.0001)  # the batch that just keeps up: ~12,600 offsets in ~25 s
    assert max(sizes) > 10 * 1_000
    assert max(backlogs[-5:]) < 1.2 * steady  # what arrives during one batch, no more
    assert warnings == []
    # Sized by the last batch's rate alone, the same tail stays at its minimum and falls ever further behind.
    old_sizes, old_backlogs, _ = run_tail(cfg, true, incoming=500.0, interval=15.0, floor=1_000, ceiling=300_000,
                                          seconds=600, backlog=20_000, learn=False)
    assert set(old_sizes) == {1_000} and old_backlogs[-1] > 200_000


def test_a_tail_that_no_allowed_batch_keeps_up_with_says_so_once_with_the_figures_and_the_fix(cfg):
    true = BatchCost(24.0, 0.0001)
    _, backlogs, warnings = run_tail(cfg, true, incoming=500.0, interval=15.0, floor=1_000, ceiling=5_000,
                                     seconds=600, backlog=20_000)
    assert backlogs[-1] > backlogs[0]  # 5,000 per ~24.5 s batch: ~204 offsets/s against 500
    assert len(warnings) == 1
    # the fix: 600/s (20% headroom) takes batches of 600 × 24 / (1 − 0.06) = 15,320
    assert warnings[0] == (
        "the tail cannot keep up: incoming 500 offsets/s, achieved 103 offsets/s; a batch costs 24.0s fixed + 0.1ms "
        "per offset, so even its largest (tail.max_offsets_per_batch 5,000) takes 24.5s: at most 204 offsets/s; fix: "
        "raise tail.max_offsets_per_batch to at least 15,320 (or tail.trigger_interval_seconds), or make each batch "
        "cheaper (coarser table partitioning, more cores or executors)")


def test_when_each_offset_alone_costs_too_much_the_fix_is_a_cheaper_batch(cfg):
    # The field's day-partitioned table: 1,000 offsets took ~25 s, 29,296 about 150 s: ~5 ms per offset.
    true = BatchCost(20.0, 0.005)
    sizes, _, warnings = run_tail(cfg, true, incoming=500.0, interval=15.0, floor=1_000, ceiling=300_000,
                                  seconds=900, backlog=20_000)
    assert max(true.seconds(n) for n in sizes) <= LONGEST  # as large as helps, never so long it looks stuck
    assert max(sizes) == 26_000
    assert len(warnings) == 1
    assert "5ms per offset" in warnings[0]
    assert warnings[0].endswith("fix: each offset alone costs too much: make each batch cheaper (coarser table "
                                "partitioning, more cores or executors)")


def test_the_backfill_grows_its_batches_past_a_fixed_cost_above_its_budget():
    true = BatchCost(40.0, 0.0001)  # 40 s a batch whatever its size, against a 30 s budget
    g = Governor(max_offsets_per_batch=2_000_000, batch_seconds=30.0, max_offsets_per_second=None, cores=2,
                 read_tail=lambda: (None, None), when_tail_unknown="proceed", tail_interval_seconds=10.0,
                 log=lambda line: None, clock=lambda: 0.0, sleep=lambda s: None)
    n, sizes = 10_000, []
    for _ in range(7):
        budget, _ = g.after_batch(n, true.seconds(n))
        n = budget.max_offsets
        sizes.append(n)
    # one batch measured: sized by its rate alone (7,317 in 30 s); from then on by the cost, growing 4× a batch
    assert sizes[:3] == [7_317, 29_268, 117_072]
    assert sizes == sorted(sizes) and sizes[-1] == 2_000_000  # up to the largest allowed: the fixed cost paid less


def test_the_keep_up_line_names_the_cost_per_table_partition():
    health = TailHealth(alive_at=0, trigger_interval_seconds=15, freshness_objective_seconds=30,
                        max_offsets_per_batch=5_000, incoming_per_s=500, processing_per_s=100, fixed_seconds=2.0,
                        per_offset_seconds=0.0002, per_partition_seconds=0.05, partitions_spread=365)
    assert TailHealth.from_json(health.to_json()) == health
    assert health.cost == BatchCost(2.0, 0.0002, 0.05, A_YEAR)
    assert health.keep_up_problem() == (
        "the tail cannot keep up: incoming 500 offsets/s, achieved 100 offsets/s; a batch costs 2.0s fixed + 0.2ms per "
        "offset + 50ms per table partition touched (a batch of 5,000 touches 365), so even its largest "
        "(tail.max_offsets_per_batch 5,000) takes 21.2s: at most 235 offsets/s; fix: raise "
        "tail.max_offsets_per_batch to at least 13,807 (or tail.trigger_interval_seconds), or make each batch cheaper "
        "(coarser table partitioning, more cores or executors)")
