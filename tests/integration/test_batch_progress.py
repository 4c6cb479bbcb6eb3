"""Progress within a batch: a single-batch backfill's progress line moves while its task reads, before the commit,
and never counts what it read as committed (over Spark Connect: its own module)."""

from __future__ import annotations

import pytest
from helpers import (
    assert_exactly_once,
    finished,
    high_watermarks,
    in_background,
    one_batch_backfill,
    read_before_commit,
)

from tailfill.run.spark_job import run

pytestmark = pytest.mark.integration

RECORDS = 60_000  # one partition, one batch, one task: more than one read of the consumer (20,000 at most)


def test_a_single_batch_backfill_shows_what_its_task_read_before_the_commit(spark, make_pipeline, paused_batches):
    cfg, spec = one_batch_backfill(make_pipeline, RECORDS)

    def start(on_line):
        thread, out = in_background(run, spec, spark, on_line)
        return thread.is_alive, lambda: finished(thread, out)

    read_before_commit(cfg, RECORDS, paused_batches, start)
    assert_exactly_once(cfg, high_watermarks(cfg))
