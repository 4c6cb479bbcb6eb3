"""Backfill + tail against a real Apache Kafka broker, Spark local[2] and a SQLite Iceberg catalog."""

from __future__ import annotations

import json

import pytest
from helpers import (
    QUERY_RUNS,
    assert_exactly_once,
    backfill,
    besides_infrastructure,
    high_watermarks,
    ingested,
    tables_of,
    tail,
)

from tailfill.dev.sample import BAD_VALUES, produce_sample, sample_event
from tailfill.lake.ledger import batch_summaries, read_cutover, read_ledger
from tailfill.offsets import OffsetRange, ranges_from_json, total
from tailfill.pipeline.handle import open_pipeline
from tailfill.run.spark_ingest import BOUNDED_ENV
from tailfill.state.store import StateStore, run_reports

pytestmark = pytest.mark.integration

HISTORY, LIVE, PARTITIONS, BAD_EVERY = 100_000, 20_000, 4, 997


def expected_bad(count: int, offset_base: dict[int, int]) -> set[tuple[int, int]]:
    """(partition, offset) of the records one produce_sample call made bad."""
    out = set()
    for i in range(count):
        if i % BAD_EVERY == BAD_EVERY - 1:
            p = i % PARTITIONS
            out.add((p, offset_base[p] + i // PARTITIONS))
    return out


def snapshot_count(cfg) -> int:
    data, _ = tables_of(cfg)
    data.refresh()
    return len(data.snapshots())


@pytest.mark.parametrize("warehouse", ["local", "s3"])
def test_backfill_then_tail_lands_every_offset_exactly_once(spark, make_pipeline, warehouse, request):
    s3 = request.getfixturevalue("seaweedfs").s3_endpoint if warehouse == "s3" else None  # a real object store
    cfg = make_pipeline(s3_endpoint=s3, backfill__max_offsets_per_batch=15_000, tail__max_offsets_per_batch=12_000)
    assert cfg.target.warehouse.startswith("s3://") == (warehouse == "s3")
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, HISTORY, PARTITIONS, bad_every=BAD_EVERY)

    [history] = backfill(spark, cfg)  # the slices of one run are adjacent: one streaming query
    assert history.label.startswith(f"{cfg.name} backfill slices 1-{cfg.backfill.slices}/")
    cutover = {tp.partition: off for tp, off in read_cutover(tables_of(cfg)[0]).offsets.items()}
    assert cutover == {p: HISTORY // PARTITIONS for p in range(PARTITIONS)}
    # 100,000 offsets under a 15,000 cap: at least 7 micro-batches.
    assert history.offsets == HISTORY and history.batches >= 7

    produce_sample(bs, topic, LIVE, PARTITIONS, bad_every=BAD_EVERY)
    [live] = tail(spark, cfg)
    assert live.offsets == LIVE and live.batches >= 2

    high = high_watermarks(cfg)
    assert high == {p: (HISTORY + LIVE) // PARTITIONS for p in range(PARTITIONS)}
    rows, bad = assert_exactly_once(cfg, high)
    assert len(rows) + len(bad) == HISTORY + LIVE

    # The quarantine holds exactly the records the producer made bad, each with a reason.
    want_bad = expected_bad(HISTORY, dict.fromkeys(range(PARTITIONS), 0))
    want_bad |= expected_bad(LIVE, cutover)
    assert set(bad) == want_bad
    quarantine = tables_of(cfg)[1].scan().to_arrow()
    errors = set(quarantine["error"].to_pylist())
    assert {"empty value"} <= errors
    assert any(e.startswith("malformed JSON") for e in errors)
    assert any("should be long" in e for e in errors)
    assert any("expected an object" in e for e in errors)
    assert set(quarantine["kafka_value"].to_pylist()) == set(BAD_VALUES)  # every kind of bad record

    # The ledger tiles each partition, and every commit's summary names its exact ranges.
    ledger = read_ledger(tables_of(cfg)[0])
    assert ledger.committed == [OffsetRange(topic, p, 0, high[p]) for p in range(PARTITIONS)]
    summaries = batch_summaries(tables_of(cfg)[0])
    assert sum(r.size for s in summaries for r in ranges_from_json(s["tailfill.ranges"])) == HISTORY + LIVE
    assert {s["tailfill.pipeline"] for s in summaries} == {cfg.name}
    data_files = [task.file.file_path for task in tables_of(cfg)[0].scan().plan_files()]
    assert data_files and all(f.startswith(cfg.target.warehouse if s3 else "file://") for f in data_files)


def test_rerun_without_new_data_commits_nothing(spark, make_pipeline):
    cfg = make_pipeline()
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 8_000, PARTITIONS)
    backfill(spark, cfg)
    tail(spark, cfg)
    before = snapshot_count(cfg)

    assert backfill(spark, cfg) == []  # nothing planned
    again = tail(spark, cfg)
    assert again[0].batches == 0 and again[0].offsets == 0
    assert snapshot_count(cfg) == before
    assert_exactly_once(cfg, high_watermarks(cfg))


def test_status_keeps_the_last_measured_freshness_after_a_tail_with_nothing_to_read(spark, make_pipeline, capsys):
    from tailfill.cli import main as cli_main

    cfg = make_pipeline()
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, PARTITIONS)
    backfill(spark, cfg)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, PARTITIONS)
    assert tail(spark, cfg)[0].offsets == 2_000  # measured
    capsys.readouterr()
    cli_main(["status", str(cfg.path)])
    [measured] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tail freshness")]
    assert tail(spark, cfg)[0].offsets == 0  # a catch-up run with nothing to read
    cli_main(["status", str(cfg.path)])
    [kept] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tail freshness")]
    assert "no batch" not in kept and ", p95 " in kept, kept
    assert kept.startswith("tail freshness (not running, last batch ") and " ago, at " in kept, kept
    assert kept.split(" ago, at ")[1] == measured.split(" ago, at ")[1]  # the same figures, measured then


@pytest.mark.parametrize("bounded", [QUERY_RUNS, "direct"])
def test_a_batch_that_fails_after_its_commit_is_never_read_or_committed_again(spark, make_pipeline, home, arm_fault,
                                                                              monkeypatch, bounded):
    """The first tail batch commits to Iceberg, then fails before Spark records it as done (as after a crash between
    the two). The restart reads from the ledger's position, past the committed batch, on either runner: a streaming
    query (``query``, whose checkpoint holds the failed batch and whose restart starts it where the ledger ends) and
    the job's own batches (``direct``)."""
    monkeypatch.setenv(BOUNDED_ENV, bounded)
    cfg = make_pipeline(tail__max_offsets_per_batch=2_000)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, 4_000, PARTITIONS)
    backfill(spark, cfg)
    before = snapshot_count(cfg)
    produce_sample(bs, topic, 6_000, PARTITIONS)

    arm_fault("after-commit", 1)
    [run] = tail(spark, cfg)

    [injected] = besides_infrastructure(run.causes)  # on a busy machine, maybe Spark's restarts too
    assert "InjectedFault" in injected
    assert snapshot_count(cfg) == before + 3  # the failed batch's commit and two more, nothing twice
    assert_exactly_once(cfg, high_watermarks(cfg))
    reports = run_reports(StateStore.of(cfg), run.run_id)  # after the restart (the failed batch reported none)
    first_commit = next(s for s in batch_summaries(tables_of(cfg).data) if s["tailfill.run-id"] == run.run_id)
    failed_batch = ranges_from_json(first_commit["tailfill.ranges"])
    assert total(failed_batch) == 2_000
    assert run.batches == 2 and run.offsets == 4_000 and run.skipped_offsets == 0
    assert [r.skipped for r in reports if r.skipped] == []
    read_after = [r for rep in reports for r in rep.committed]
    assert total(read_after) == 4_000 and not [(a, b) for a in read_after for b in failed_batch
                                               if (a.topic, a.partition) == (b.topic, b.partition)
                                               and a.start < b.end and b.start < a.end]


def test_a_transaction_still_open_is_the_tails_not_the_backfills(spark, make_pipeline):
    """Under ``read_committed`` a partition can be read only up to its last stable offset: the records of a
    transaction still open lie beyond it. The cutover is recorded there, so the backfill ends without waiting
    for the transaction, and the tail takes its records once it commits (Kafka's ListOffsets answers the last
    stable offset to a read_committed client, a fetch the high watermark: planning from the latter would wait)."""
    from confluent_kafka import Producer

    from tailfill.run.plan import ensure_cutover, source_state

    cfg = make_pipeline(backfill__slices=1)
    topic = cfg.source.topic
    produce_sample(cfg.source.bootstrap_servers, topic, 8_000, 4)
    producer = Producer({"bootstrap.servers": cfg.source.bootstrap_servers, "transactional.id": f"open-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=json.dumps(sample_event("open", i)).encode(), partition=0)
    assert producer.flush(30) == 0  # on the broker, not committed

    pipeline = open_pipeline(cfg)
    state = source_state(pipeline, pipeline.provision_tables())
    recorded = ensure_cutover(state)
    assert dict(recorded.offsets) == {tp: 2_000 for tp in state.marks.high}  # the open transaction is beyond it
    assert read_cutover(tables_of(cfg).data) == recorded

    [run] = backfill(spark, cfg)
    assert run.offsets == 8_000
    producer.commit_transaction(30)  # its 10 records at [2000, 2010) of partition 0, its marker at 2010
    tail(spark, cfg)
    rows, bad = ingested(cfg)
    assert sorted(o for p, o in (rows + bad).elements() if p == 0) == list(range(2_010))
    assert sum((rows + bad).values()) == 8_010 and max((rows + bad).values()) == 1
