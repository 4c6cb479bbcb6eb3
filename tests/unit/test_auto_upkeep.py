"""When a tail keeps its own tables up: without a maintenance block, every tail.upkeep_every_seconds; never when
that is null, or when a maintenance block governs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tailfill.pipeline.load import load_pipeline
from tailfill.run.auto_upkeep import AUTO_UPKEEP, TailUpkeep, upkeep_interval


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    return load_pipeline("pipelines/demo.yaml")


def without_block(cfg, every: float | None = 1800):
    return cfg.model_copy(update={"maintenance": None,
                                  "tail": cfg.tail.model_copy(update={"upkeep_every_seconds": every})})


def test_a_maintenance_block_governs_and_null_turns_it_off(cfg):
    assert cfg.maintenance is not None and upkeep_interval(cfg) is None
    assert upkeep_interval(without_block(cfg)) == 1800
    assert upkeep_interval(without_block(cfg, None)) is None


def test_the_defaults_compact_and_expire_and_leave_orphans_alone():
    assert AUTO_UPKEEP.target_file_bytes == 128 * 1024 * 1024
    assert (AUTO_UPKEEP.expire_older_than, AUTO_UPKEEP.keep_last) == ("1d", 100)


class Pipeline:
    """A pipeline whose tables were made, and last compacted (or first committed to) at unix time 0."""

    def __init__(self, cfg):
        self.cfg = cfg

    def open_tables(self):
        snapshot = SimpleNamespace(timestamp_ms=0, summary=None)
        return SimpleNamespace(data=SimpleNamespace(snapshots=lambda: [snapshot]))


def test_no_upkeep_starts_before_it_is_due(cfg):
    now = [59.0]
    upkeep = TailUpkeep(Pipeline(without_block(cfg, 60)), print, clock=lambda: now[0])
    upkeep.after_batch()
    assert upkeep.thread is None and upkeep.last == 0.0  # the table's last compaction, read once
    off = TailUpkeep(Pipeline(without_block(cfg, None)), print, clock=lambda: now[0])
    now[0] = 10_000.0
    off.after_batch()
    assert off.thread is None
