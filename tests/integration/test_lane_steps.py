"""A demo-sized backfill shows its progress in steps: every lane commits at least three batches, counted from the
table's ledger (its commits' summaries) by each lane's run id."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import assert_exactly_once, high_watermarks, tables_of

from tailfill.dev.sample import produce_sample
from tailfill.lake.batch_summary import SUMMARY_RUN
from tailfill.lake.ledger import batch_summaries
from tailfill.pipeline.handle import open_pipeline
from tailfill.run.planner import BackfillRequest, plan_backfill_lanes
from tailfill.run.spark_job import run

pytestmark = pytest.mark.integration

RECORDS, PARTITIONS, SLICES, LANES = 120_000, 4, 4, 2  # the demo's size, its slices, two lanes side by side


def test_each_lane_of_a_demo_sized_backfill_commits_at_least_three_batches(spark, make_pipeline):
    cfg = make_pipeline()  # the demo's batch settings: a 2,000,000-offset maximum, 30 s batches
    assert cfg.backfill.max_offsets_per_batch >= RECORDS  # the maximum alone would make each lane one batch
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, RECORDS, PARTITIONS)
    with open_pipeline(cfg) as pipeline:
        plan = plan_backfill_lanes(pipeline, BackfillRequest(slices=SLICES, lanes=LANES),
                                   lambda lane: f"steps-lane-{lane}")
    assert [spec.run_id for spec in plan.specs] == ["steps-lane-0", "steps-lane-1"]

    for spec in plan.specs:
        [result] = run(spec, spark)
        assert result.offsets == RECORDS // LANES

    commits = Counter(s[SUMMARY_RUN] for s in batch_summaries(tables_of(cfg).data))
    assert commits["steps-lane-0"] >= 3 and commits["steps-lane-1"] >= 3, commits
    assert_exactly_once(cfg, high_watermarks(cfg))
