"""Micro-batch caps derived from measured throughput, within the pipeline's bounds."""

import pytest

from tailfill.offsets import OffsetRange
from tailfill.pipeline.load import load_pipeline
from tailfill.run.tuning import tuned_max_offsets
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
