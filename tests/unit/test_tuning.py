"""Micro-batch caps derived from measured throughput, within the pipeline's bounds."""

import pytest

from tailfill.offsets import OffsetRange
from tailfill.pipeline.load import load_pipeline
from tailfill.run.tuning import lane_batch_cap, tuned_max_offsets
from tailfill.state.records import BatchReport
from tailfill.state.store import StateStore, report_file


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    return load_pipeline("pipelines/demo.yaml")


def write_batches(cfg, run: str, batches: list[tuple[int, float, bool]], at: float = 0.0) -> None:
    """Batch reports of ``(offsets, seconds, committed?)``; an uncommitted one is a skipped replay."""
    for i, (offsets, seconds, committed) in enumerate(batches):
        done = [OffsetRange("events", 0, 0, offsets)]
        report_file(StateStore.of(cfg), run, "tail").append(BatchReport(
            batch_id=i, at=at, seconds=seconds, offsets=offsets, records=offsets, rows=offsets, quarantined=0,
            committed=done if committed else [], skipped=[] if committed else done))


def test_without_measurements_the_configured_maximum_is_used(cfg):
    tuning = tuned_max_offsets(cfg, StateStore.of(cfg), "tail")
    assert tuning.max_offsets_per_batch == cfg.tail.max_offsets_per_batch
    assert tuning.measured_rows_per_second is None


def test_rate_times_interval_times_safety_factor(cfg):
    # 300 offsets/s measured over two committed batches; a skipped (replayed) batch is ignored.
    write_batches(cfg, "r1", [(1200, 4.0, True), (600, 2.0, True), (9999, 0.1, False)])
    tuning = tuned_max_offsets(cfg, StateStore.of(cfg), "tail")
    assert tuning.measured_rows_per_second == 300
    # 300 offsets/s × the demo's 30 s trigger × 0.5 headroom: each batch takes half its interval.
    assert cfg.tail.trigger_interval_seconds == 30
    assert tuning.max_offsets_per_batch == 4_500
    assert "300 offsets/s" in tuning.reason


def test_fast_measurements_are_capped_by_the_configured_maximum(cfg):
    write_batches(cfg, "r1", [(10_000_000, 1.0, True)])
    tuning = tuned_max_offsets(cfg, StateStore.of(cfg), "tail")
    # Measured (not the no-measurement default): 10M offsets/s × interval × 0.5, bounded by the maximum.
    assert tuning.measured_rows_per_second == 10_000_000
    assert tuning.max_offsets_per_batch == cfg.tail.max_offsets_per_batch
    assert f"{int(10_000_000 * cfg.tail.trigger_interval_seconds * 0.5):,}" in tuning.reason


def test_slow_measurements_keep_a_floor_of_a_thousand(cfg):
    write_batches(cfg, "r1", [(10, 100.0, True)])
    tuning = tuned_max_offsets(cfg, StateStore.of(cfg), "tail")
    assert tuning.measured_rows_per_second == 0.1  # 0.1 offsets/s × 30 s × 0.5 = 1, raised to the floor
    assert tuning.max_offsets_per_batch == cfg.tail.min_offsets_per_batch == 1_000
def test_a_backfill_keeps_its_own_cap_whatever_the_tail_measured(cfg):
    # Slow tail batches would tune the tail's cap down; the backfill sizes its batches itself.
    write_batches(cfg, "r1", [(10, 100.0, True)])
    tuning = tuned_max_offsets(cfg, StateStore.of(cfg), "backfill")
    assert tuning.max_offsets_per_batch == cfg.backfill.max_offsets_per_batch
    assert "backfill" in tuning.reason


@pytest.mark.parametrize(("lane", "ceiling", "steps", "cap", "batches"), [
    (30_000, 2_000_000, 3, 10_000, 3),  # a demo lane (120,000 offsets over 4 lanes): three steps, not one
    (1_000_000, 2_000_000, 3, 333_334, 3),  # a million: three batches where the first batch used to take it all
    (10_000_000, 2_000_000, 3, 2_000_000, 5),  # a big lane keeps the configured maximum: nothing slower
    (1_500, 2_000_000, 3, 1_000, 2),  # never under the floor: no tiny batches
    (100, 12, 3, 12, 9),  # a maximum below the floor stays the limit
    (30_000, 2_000_000, 1, 30_000, 1),  # min_batches_per_lane 1: one batch, as under the configured maximum alone
])
def test_a_lane_s_batches_are_a_share_of_its_range_within_the_floor_and_the_maximum(lane, ceiling, steps, cap,
                                                                                     batches):
    assert lane_batch_cap(lane, ceiling, steps) == cap
    assert -(-lane // cap) == batches  # the batches a lane of that many offsets runs at that cap


def test_the_backfill_s_reason_names_the_share_of_a_lane(cfg):
    assert cfg.backfill.min_batches_per_lane == 3  # the default: a lane shows at least three steps
    assert "at most 1/3 of a lane's range" in tuned_max_offsets(cfg, StateStore.of(cfg), "backfill").reason
