"""``tailfill backfill --from-time/--to-time``: bounds from the broker's offsets for times (``ListOffsets`` by
timestamp), against records produced with explicit timestamps."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Producer
from helpers import stored, tables_of

from tailfill import cli
from tailfill.dev.sample import sample_event
from tailfill.lake.ledger import read_ledger
from tailfill.offsets import OffsetRange
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate
from tailfill.run.contract import new_run_id
from tailfill.run.planner import BackfillRequest, plan_backfill_lanes
from tailfill.run.spark_job import run
from tailfill.source.topics import ensure_topic

pytestmark = pytest.mark.integration

START = datetime(2026, 1, 1, tzinfo=UTC)
RECORDS, PARTITIONS = 200, 2


def produce_timed(cfg) -> None:
    """Record i to partition i % 2 stamped START + i seconds: partition p's offset k is record 2k + p."""
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    ensure_topic(bs, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(RECORDS):
        stamp = int((START + timedelta(seconds=i)).timestamp() * 1000)
        producer.produce(topic, json.dumps(sample_event("timed", i)).encode(), partition=i % PARTITIONS,
                         timestamp=stamp)
    assert producer.flush(30) == 0


def at(seconds: int) -> datetime:
    return START + timedelta(seconds=seconds)


def test_backfill_between_two_times_reads_the_records_stamped_between_them(spark, make_pipeline, capsys):
    cfg = make_pipeline(source__partitions=PARTITIONS, backfill__slices=1)
    topic = cfg.source.topic
    produce_timed(cfg)
    with open_pipeline(cfg) as pipeline:
        run_id = new_run_id("backfill")
        plan = plan_backfill_lanes(pipeline, BackfillRequest(from_time=at(51), to_time=at(150)), lambda _: run_id)
    # record 51 is partition 1's offset 25, record 52 partition 0's offset 26; 150 is partition 0's offset 75
    assert plan.start.to_dict() == {topic: {"0": 26, "1": 25}} and plan.end.to_dict() == {topic: {"0": 75, "1": 75}}
    [spec] = plan.specs
    [result] = run(spec, spark)
    assert result.offsets == 99
    want = {(p, k) for i in range(51, 150) for p, k in [(i % 2, i // 2)]}
    assert {(p, o) for _, p, o in stored(cfg)} == want
    assert read_ledger(tables_of(cfg).data).committed == [OffsetRange(topic, 0, 26, 75), OffsetRange(topic, 1, 25, 75)]

    capsys.readouterr()
    later = at(RECORDS + 3_600).isoformat()
    assert cli.main(["backfill", str(cfg.path), "--from-time", later]) == 0  # past the last record: nothing to run
    assert capsys.readouterr().out.strip().splitlines() == [
        f"backfill of {cfg.name}: nothing to do (no record of topic {topic!r} at or after "
        f"{at(RECORDS + 3_600).isoformat()} up to the cutover)"]

    with open_pipeline(cfg) as pipeline:  # up to a time alone: from the earliest offsets (its record 10 excluded)
        plan = plan_backfill_lanes(pipeline, BackfillRequest(to_time=at(10)), lambda _: run_id)
    assert (plan.start.to_dict(), plan.end.to_dict()) == ({topic: {"0": 0, "1": 0}}, {topic: {"0": 5, "1": 5}})
    proof = validate(open_pipeline(cfg), all_runs=True)
    assert proof.success and proof.offsets_checked == 99, proof.problems


def test_backfill_time_flags_are_checked_before_anything_runs(make_pipeline, capsys):
    cfg = make_pipeline(source__partitions=PARTITIONS)
    produce_timed(cfg)
    for args, said in ((["--from-time", "yesterday"], "--from-time 'yesterday' is not an ISO 8601 time (fix: e.g. "),
                       (["--to", json.dumps({cfg.source.topic: {"0": 5}}), "--to-time", "2026-01-01T00:00:00Z"],
                        "backfill: give --to or --to-time, not both")):
        assert cli.main(["backfill", str(cfg.path), *args]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"error: {said}"), line
