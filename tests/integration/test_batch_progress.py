"""Progress within a batch: a single-batch backfill's progress line moves while its task reads, before the commit,
and never counts what it read as committed."""

from __future__ import annotations

import re

import pytest
from helpers import assert_exactly_once, committed, finished, high_watermarks, in_background, wait_until

from tailfill.dev.sample import produce_sample
from tailfill.pipeline.handle import open_pipeline
from tailfill.run.planner import backfill_spec
from tailfill.run.spark_job import run

pytestmark = pytest.mark.integration

RECORDS = 60_000  # one partition, one batch, one task: more than one read of the consumer (20,000 at most)
READING = re.compile(r"\] 0/60,000 offsets \(0%\) committed, ([\d,]+) read in batch 0;")


def test_a_single_batch_backfill_shows_what_its_task_read_before_the_commit(spark, make_pipeline, paused_batches):
    cfg = make_pipeline(source__partitions=1, backfill__slices=1, backfill__max_offsets_per_batch=1_000_000)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, RECORDS, 1)
    with open_pipeline(cfg) as pipeline:
        spec = backfill_spec(pipeline, None, None, 1)
    lines: list[str] = []
    paused_batches.arm()  # the task holds after its first records are read and written, until released
    thread, out = in_background(run, spec, spark, lines.append)
    try:
        wait_until(lambda: any(READING.search(line) for line in lines) or not thread.is_alive(),
                   "a progress line saying what the batch in flight read", timeout=300)
        assert committed(cfg) == 0  # said while the batch was still in flight
    finally:
        paused_batches.release()
    [result] = finished(thread, out)
    assert (result.batches, result.offsets) == (1, RECORDS)
    reading = [int(m.group(1).replace(",", "")) for line in lines if (m := READING.search(line))]
    assert reading and all(0 < n < RECORDS for n in reading), "\n".join(lines)
    assert not [line for line in lines if "read in batch" in line and "0/60,000 offsets (0%)" not in line], \
        "\n".join(lines)  # once committed, nothing of the batch is said as read again
    assert_exactly_once(cfg, high_watermarks(cfg))
