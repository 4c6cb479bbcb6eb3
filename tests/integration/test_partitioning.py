"""A partitioned table (``target.partition_by``): created with the spec, one partition value per file, at most
one file per partition a batch touched, partition pruning for readers, compaction within partitions, spec
evolution, and the proof unchanged."""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq
import pytest
from helpers import (
    assert_exactly_once,
    assert_one_partition_value_per_file,
    backfill,
    high_watermarks,
    provision,
    tables_of,
    tail,
)
from pyiceberg.expressions import EqualTo

from tailfill.dev.batches import commit_sample_batch
from tailfill.dev.sample import produce_sample, year_event
from tailfill.errors import LakeError
from tailfill.lake.data_files import spec_terms
from tailfill.lake.files import written_by
from tailfill.offsets import OffsetRange
from tailfill.pipeline.handle import open_pipeline
from tailfill.plumbing.warehouse import filesystem, fs_path
from tailfill.proof.validate import validate
from tailfill.upkeep.compact import compact

pytestmark = pytest.mark.integration

SPEC = ["day(created_at)", "bucket(16, user_id)", "hour(kafka_timestamp)", "identity(kind)", "truncate(4, event_id)"]
PARTITIONS = 4


def test_a_partitioned_table_backfilled_and_tailed_exactly_once(spark, make_pipeline):
    cfg = make_pipeline(target__partition_by=SPEC)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, 3_000, PARTITIONS, bad_every=101)
    backfill(spark, cfg, slices=2)
    produce_sample(bs, topic, 1_000, PARTITIONS, bad_every=101)
    tail(spark, cfg)

    data, _ = tables_of(cfg)
    assert spec_terms(data.spec(), data.schema()) == SPEC
    assert assert_one_partition_value_per_file(cfg, data) > PARTITIONS  # 16 buckets: more files than partitions
    assert_exactly_once(cfg, high_watermarks(cfg))
    assert validate(open_pipeline(cfg), all_runs=True).success


def test_a_batch_writes_one_file_per_table_partition_it_touches(spark, make_pipeline):
    cfg = make_pipeline(target__partition_by=["day(created_at)"], backfill__slices=1, backfill__min_batches_per_lane=1)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 4_000, PARTITIONS, event=year_event)
    [result] = backfill(spark, cfg)  # one batch, read by two tasks (local[2]) from four Kafka partitions

    data, _ = tables_of(cfg)
    [batch] = [s for s in data.snapshots() if s.summary.additional_properties.get("tailfill.run-id") == result.run_id]
    added = [t.file for t in data.scan(snapshot_id=batch.snapshot_id).plan_files()
             if written_by(t.file.file_path) == result.run_id]
    per_day = Counter(f.partition[0] for f in added)
    assert len(per_day) == 365  # every day of the year
    assert set(per_day.values()) == {1}, per_day.most_common(3)  # not one per day and task, or Kafka partition
    assert int(batch.summary.additional_properties["added-data-files"]) == len(added)
    assert sum(f.record_count for f in added) == 4_000
    assert_one_partition_value_per_file(cfg, data)
    assert validate(open_pipeline(cfg), all_runs=True).success


@pytest.fixture
def partitioned(make_pipeline):
    """A table partitioned by kind and bucket, 12 micro-batches of 4 x 40 sample offsets committed."""
    cfg = make_pipeline(target__partition_by=["identity(kind)", "bucket(4, user_id)"],
                        maintenance__target_file_bytes=1 << 20)
    for b in range(12):
        commit_sample_batch(open_pipeline(cfg), "run-p", b, [OffsetRange(cfg.source.topic, p, b * 40, (b + 1) * 40)
                                              for p in range(PARTITIONS)], bad_every=53)
    return cfg


def test_a_partition_filter_plans_only_its_partitions_files(partitioned):
    data, _ = tables_of(partitioned)
    every = list(data.scan().plan_files())
    clicks = list(data.scan(row_filter=EqualTo("kind", "click")).plan_files())
    assert 0 < len(clicks) < len(every)
    kind = data.spec().fields[0]
    assert kind.name == "kind" and {t.file.partition[0] for t in clicks} == {"click"}
    fs = filesystem(partitioned.target)
    for task in clicks:  # what the planned files hold: clicks only, and every click is in them
        assert set(pq.read_table(fs_path(task.file.file_path), filesystem=fs)["kind"].to_pylist()) == {"click"}
    assert data.scan(row_filter=EqualTo("kind", "click")).to_arrow().num_rows == sum(
        t.file.record_count for t in clicks)


def test_compaction_keeps_one_partition_value_per_file(partitioned):
    data, _ = tables_of(partitioned)
    before = assert_one_partition_value_per_file(partitioned, data)
    result = compact(data, filesystem(partitioned.target), partitioned.maintenance.target_file_bytes)
    assert result.files_removed == before
    after = assert_one_partition_value_per_file(partitioned, data)
    assert after < before and after <= 4 * 4 * PARTITIONS  # kinds x buckets x Kafka partitions
    assert validate(open_pipeline(partitioned), all_runs=True).success


def test_changing_partition_by_evolves_the_spec_for_new_data(partitioned, make_pipeline):
    cfg = partitioned.model_copy(update={"target": partitioned.target.model_copy(
        update={"partition_by": ("identity(kind)", "day(created_at)")})})
    commit_sample_batch(open_pipeline(cfg), "run-q", 12,
                        [OffsetRange(cfg.source.topic, p, 480, 520) for p in range(PARTITIONS)])
    data, _ = tables_of(cfg)
    assert spec_terms(data.spec(), data.schema()) == ["identity(kind)", "day(created_at)"]
    specs = {t.file.spec_id for t in data.scan().plan_files()}
    assert len(specs) == 2  # the old files keep the spec they were written with
    assert validate(open_pipeline(cfg), all_runs=True).success

    reordered = cfg.model_copy(update={"target": cfg.target.model_copy(
        update={"partition_by": ("day(created_at)", "identity(kind)")})})
    with pytest.raises(LakeError, match=r"cannot change the partition spec .* not reordering"):
        provision(reordered)  # the planner evolves the table to the YAML before a run
