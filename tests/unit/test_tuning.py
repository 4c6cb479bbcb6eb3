"""Micro-batch caps derived from measured throughput, within the pipeline's bounds."""

import json

import pytest

from tailfill.config import load_pipeline
from tailfill.tuning import FLOOR, SAFETY_FACTOR, tuned_max_offsets


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    return load_pipeline("pipelines/demo.yaml")


def write_batches(home, run: str, batches: list[dict]) -> None:
    path = home / "runs" / "demo" / run / "tail.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(b) + "\n" for b in batches))


def test_without_measurements_the_configured_maximum_is_used(cfg):
    tuning = tuned_max_offsets(cfg, "tail")
    assert tuning.max_offsets_per_batch == cfg.tail.max_offsets_per_batch
    assert tuning.measured_rows_per_second is None


def test_rate_times_interval_times_safety_factor(cfg, tmp_path):
    # 300 offsets/s measured over two committed batches; a skipped (replayed) batch is ignored.
    write_batches(tmp_path, "r1", [{"offsets": 1200, "seconds": 4.0, "committed": ["x"]},
                                   {"offsets": 600, "seconds": 2.0, "committed": ["y"]},
                                   {"offsets": 9999, "seconds": 0.1, "committed": []}])
    tuning = tuned_max_offsets(cfg, "tail")
    assert tuning.measured_rows_per_second == 300
    assert tuning.max_offsets_per_batch == max(int(300 * cfg.tail.trigger_interval_seconds * SAFETY_FACTOR), FLOOR)
    assert "300 offsets/s" in tuning.reason


def test_fast_measurements_are_capped_by_the_configured_maximum(cfg, tmp_path):
    write_batches(tmp_path, "r1", [{"offsets": 10_000_000, "seconds": 1.0, "committed": ["x"]}])
    assert tuned_max_offsets(cfg, "backfill").max_offsets_per_batch == cfg.backfill.max_offsets_per_batch


def test_slow_measurements_keep_a_floor(cfg, tmp_path):
    write_batches(tmp_path, "r1", [{"offsets": 10, "seconds": 100.0, "committed": ["x"]}])
    assert tuned_max_offsets(cfg, "tail").max_offsets_per_batch == FLOOR
