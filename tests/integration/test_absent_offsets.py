"""Offsets the broker does not deliver, on Apache Kafka: transactions committed and aborted, and a compacted topic.

On Kafka an offset inside a committed range can hold no record a consumer gets: a transaction's COMMIT or ABORT
marker (one offset per partition the transaction wrote, delivered under no isolation level), a record of an
aborted transaction (not delivered under ``read_committed``), an offset log compaction removed. Each batch records
which offsets of its ranges it was not delivered and the isolation level it read under; ``validate`` reads those
offsets again on the broker and names each one's reason. Every expected figure below comes from what the test
wrote, and the broker's own answer is read independently of the pipeline (:func:`delivered`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import REPO
from helpers import backfill, ingested, set_dotted, tables_of, tail, wait_until

from tailfill import cli
from tailfill.config import CompletenessConfig, PipelineConfig
from tailfill.dev.broker import EmbeddedBroker
from tailfill.dev.change_stream import change_stream, fold, produce_changes
from tailfill.dev.sample import sample_event
from tailfill.errors import SourceError
from tailfill.lake.batch_summary import BatchSummary
from tailfill.lake.ledger import batch_summaries, commit_batch, read_ledger
from tailfill.offsets import OffsetRange, TopicPartition, intersect_all, merge, subtract, total
from tailfill.pipeline.executor import close_contexts
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.proof.broker_check import ABORTED, MARKER, MARKER_OR_COMPACTED
from tailfill.proof.validate import validate
from tailfill.source.kafka import consumer_config, watermarks

pytestmark = pytest.mark.integration

TIMEOUT_S = 60.0  # generous: every wait ends as soon as what it waits for is there
PARTITIONS = 2
# What a transactional producer does, in order: commit or abort a transaction writing {partition: records}, or
# write records outside any transaction ("plain"). Batches of 12 offsets start, end and straddle markers and
# aborted records.
HISTORY = [("commit", {0: 5, 1: 3}), ("abort", {0: 4}), ("plain", {0: 2, 1: 2}), ("commit", {1: 6}),
           ("abort", {0: 2, 1: 2}), ("commit", {0: 1}), ("plain", {1: 1}), ("commit", {0: 3, 1: 3})] * 3
LIVE = [("abort", {1: 3}), ("commit", {0: 4, 1: 1}), ("plain", {0: 1}), ("abort", {0: 1, 1: 1}),
        ("commit", {0: 2})] * 2


@dataclass
class Written:
    """What the test wrote: the event ids a read_committed reader must get, those it must not, and per partition the
    transaction markers and aborted records."""

    kept: set[str] = field(default_factory=set)
    aborted: set[str] = field(default_factory=set)
    markers: Counter = field(default_factory=Counter)
    aborted_records: Counter = field(default_factory=Counter)


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})]).values():
        fut.result(timeout=TIMEOUT_S)


def write(bootstrap: str, topic: str, steps: list, written: Written) -> None:
    """Carry out ``steps`` (see :data:`HISTORY`), then wait until every transaction's markers are on the broker
    (a commit returns before the broker writes them; until then a read_committed reader stops short of them)."""
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}", "transaction.timeout.ms": 60000})
    plain = Producer({"bootstrap.servers": bootstrap})
    tx.init_transactions(TIMEOUT_S)
    for kind, counts in steps:
        producer = plain if kind == "plain" else tx
        if kind != "plain":
            tx.begin_transaction()
        for partition, n in counts.items():
            for _ in range(n):
                i = len(written.kept) + len(written.aborted)
                event = sample_event(topic, i)
                producer.produce(topic, value=json.dumps(event).encode(), key=str(i).encode(), partition=partition)
                (written.aborted if kind == "abort" else written.kept).add(event["event_id"])
            if kind == "abort":
                written.aborted_records[partition] += n
            if kind != "plain":
                written.markers[partition] += 1
        assert producer.flush(TIMEOUT_S) == 0  # an abort purges what is still queued: every record on the broker
        if kind == "commit":
            tx.commit_transaction(TIMEOUT_S)
        elif kind == "abort":
            tx.abort_transaction(TIMEOUT_S)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    conf = {"bootstrap.servers": bootstrap, "group.id": "probe"}

    def stable() -> bool:
        return (watermarks({**conf, "isolation.level": "read_committed"}, tps).high.offsets
                == watermarks({**conf, "isolation.level": "read_uncommitted"}, tps).high.offsets)

    wait_until(stable, "the transactions' markers on the broker", TIMEOUT_S)


def delivered(bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS) -> dict[int, set[int]]:
    """The offsets a consumer under ``isolation`` gets from each partition, read from offset 0 to the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "error", "isolation.level": isolation,
                         "enable.partition.eof": False})
    out: dict[int, set[int]] = {}
    try:
        for p in range(partitions):
            ktp = KTopicPartition(topic, p, 0)
            end = consumer.get_watermark_offsets(ktp, timeout=TIMEOUT_S)[1]
            consumer.assign([ktp])
            got: set[int] = set()
            deadline = time.monotonic() + TIMEOUT_S
            while consumer.position([ktp])[0].offset < end:
                assert time.monotonic() < deadline, f"{topic}[{p}]: no read reached {end} under {isolation}"
                for m in consumer.consume(num_messages=500, timeout=0.5):
                    assert m.error() is None, m.error()
                    got.add(m.offset())
            out[p] = got
    finally:
        consumer.close()
    return out


def offsets(topic: str, by_partition: dict[int, set[int]]) -> list[OffsetRange]:
    return merge(OffsetRange(topic, p, o, o + 1) for p, os in by_partition.items() for o in os)


def parse_range(text: str) -> OffsetRange:
    """``topic[p] [start, end)`` as a range."""
    head, bounds = text.split(" [", 1)
    topic, partition = head[:-1].split("[")
    start, end = bounds.split(")")[0].split(", ")
    return OffsetRange(topic, int(partition), int(start), int(end))


def by_reason(report) -> dict[str, list[OffsetRange]]:
    """The report's absent offsets by reason, as ranges (each reason's count checked against its ranges)."""
    out = {a["reason"]: [parse_range(r) for r in a["ranges"]] for a in report.absent_by_reason}
    assert [total(rs) for rs in out.values()] == [a["offsets"] for a in report.absent_by_reason]
    assert merge(parse_range(r) for r in report.absent) == merge(r for rs in out.values() for r in rs)
    return out


def named(report, because: str) -> list[OffsetRange]:
    """The ranges the report's problems name as missing ``because``."""
    lines = [p for p in report.problems if p.startswith("missing ") and because in p]
    return merge(parse_range(p.removeprefix("missing ")) for p in lines)


def in_partition(ranges: list[OffsetRange], partition: int) -> int:
    return total(r for r in ranges if r.partition == partition)


def event_ids(cfg: PipelineConfig) -> Counter:
    """How often each event id is a row (and that nothing was quarantined)."""
    data, quarantine = tables_of(cfg)
    assert quarantine.scan().to_arrow().num_rows == 0
    return Counter(data.scan(selected_fields=("event_id",)).to_arrow()["event_id"].to_pylist())


def ends(cfg: PipelineConfig) -> list[OffsetRange]:
    """Each partition of the pipeline's topic from 0 to its end."""
    tps = [TopicPartition(cfg.source.topic, p) for p in range(PARTITIONS)]
    high = watermarks(consumer_config(cfg.source), tps).high
    return [OffsetRange.of(tp, 0, high[tp]) for tp in tps]


@pytest.fixture
def transactional(spark, make_pipeline):
    """Factory: a 2-partition pipeline over a topic of :data:`HISTORY` backfilled, then :data:`LIVE` tailed."""

    def make(**changes) -> tuple[PipelineConfig, Written]:
        cfg = make_pipeline(source__partitions=PARTITIONS, backfill__slices=1, backfill__max_offsets_per_batch=12,
                            tail__min_offsets_per_batch=6, tail__max_offsets_per_batch=12, **changes)
        bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
        create_topic(bs, topic, PARTITIONS)
        written = Written()
        write(bs, topic, HISTORY, written)
        assert backfill(spark, cfg)
        write(bs, topic, LIVE, written)
        assert tail(spark, cfg)[0].batches > 1
        return cfg, written

    return make


def test_committed_records_land_once_aborted_ones_never_and_every_offset_is_accounted_for(transactional, capsys,
                                                                                          refused_port):
    cfg, written = transactional()
    assert cfg.completeness.absent_offsets == "verified"  # the default, as the demo pipeline says it
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    ids = event_ids(cfg)
    assert set(ids) == written.kept and max(ids.values()) == 1

    report = validate(open_pipeline(cfg), all_runs=True)
    assert report.success, report.problems
    reasons = by_reason(report)
    assert set(reasons) == {MARKER, ABORTED}
    for p in range(PARTITIONS):
        assert in_partition(reasons[MARKER], p) == written.markers[p]
        assert in_partition(reasons[ABORTED], p) == written.aborted_records[p]
    # The broker's own answer, read apart from the pipeline: a row where a read_committed consumer gets a record,
    # an aborted record where only a read_uncommitted one does, a marker where neither does.
    committed, uncommitted = delivered(bs, topic, "read_committed"), delivered(bs, topic, "read_uncommitted")
    rows, _ = ingested(cfg)
    assert merge(OffsetRange(topic, p, o, o + 1) for p, o in rows) == offsets(topic, committed)
    assert reasons[ABORTED] == subtract(offsets(topic, uncommitted), offsets(topic, committed))
    assert reasons[MARKER] == subtract(ends(cfg), offsets(topic, uncommitted))
    assert report.offsets_checked == total(ends(cfg)) == len(ids) + total(reasons[MARKER]) + total(reasons[ABORTED])

    assert cli.main(["validate", cfg.path, "--all"]) == 0
    out = capsys.readouterr().out
    assert f"absent: {total(reasons[MARKER]):,} offsets, transaction marker: " in out
    assert f"absent: {total(reasons[ABORTED]):,} offsets, aborted transaction: " in out

    # With absent_offsets: none, each of them fails, named.
    strict = cfg.model_copy(update={"completeness": CompletenessConfig(absent_offsets="none")})
    refused = validate(open_pipeline(strict), all_runs=True)
    assert not refused.success and refused.absent_by_reason == [] and refused.absent == []
    assert named(refused, "completeness.absent_offsets: none accepts no absent offset") == merge(
        [*reasons[MARKER], *reasons[ABORTED]])
    assert all("its batch recorded it as not delivered under read_committed" in p for p in refused.problems
               if p.startswith("missing"))

    # A broker that cannot be reached cannot confirm them: one line naming it and how many wait, not a pass.
    away = cfg.model_copy(update={"source": cfg.source.model_copy(
        update={"bootstrap_servers": f"127.0.0.1:{refused_port}"})})
    waiting = total(reasons[MARKER]) + total(reasons[ABORTED])
    with pytest.raises(SourceError, match=rf"^cannot verify {waiting:,} absent offsets on the broker at "
                                          rf"127\.0\.0\.1:{refused_port}: .*\(fix: make the broker reachable"):
        validate(open_pipeline(away), all_runs=True)


def test_an_absent_offset_that_holds_a_record_fails_named(transactional):
    """A batch that recorded as absent offsets the broker holds records at (a reader that skipped them, a summary
    written by hand): validate reads them on the broker and names them; ``allowed`` trusts the record."""
    cfg, _ = transactional()
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    write(bs, topic, [("plain", {0: 5})], Written())
    data, _ = tables_of(cfg)
    end = max(r.end for r in read_ledger(data).committed if r.partition == 0)
    skipped = OffsetRange(topic, 0, end, end + 5)
    commit_batch(data, BatchSummary(cfg.name, "skipper", 0, [skipped], records_read=0, absent=[skipped],
                                    absent_under="read_committed"), [], rewrite=lambda files, keep: [])

    report = validate(open_pipeline(cfg), all_runs=True)
    assert not report.success
    assert named(report, "but the broker delivers a record there under read_committed") == [skipped]
    assert [p.split(": ")[0] for p in report.problems] == [f"missing {skipped} (run skipper, batch 0)"]
    assert skipped not in merge(r for rs in by_reason(report).values() for r in rs)

    trusting = cfg.model_copy(update={"completeness": CompletenessConfig(absent_offsets="allowed")})
    trusted = validate(open_pipeline(trusting), all_runs=True)
    assert trusted.success and skipped in [parse_range(r) for r in trusted.absent]


def test_read_uncommitted_lands_aborted_records_as_rows(transactional):
    cfg, written = transactional(source__isolation_level="read_uncommitted")
    ids = event_ids(cfg)
    assert set(ids) == written.kept | written.aborted and max(ids.values()) == 1
    report = validate(open_pipeline(cfg), all_runs=True)
    assert report.success, report.problems
    reasons = by_reason(report)
    assert set(reasons) == {MARKER}
    assert [in_partition(reasons[MARKER], p) for p in range(PARTITIONS)] == [written.markers[p]
                                                                            for p in range(PARTITIONS)]


# A log cleaner that looks for work every 200 ms (Kafka's default: 15 s), and a topic it compacts as soon as a
# segment is closed: segments roll after 500 ms, any dirt is worth cleaning, tombstones go 100 ms after.
CLEANER = {"log.cleaner.backoff.ms": "200"}
COMPACTED = {"cleanup.policy": "compact", "segment.ms": "500", "min.cleanable.dirty.ratio": "0.01",
             "delete.retention.ms": "100"}


@pytest.fixture(scope="module")
def compacting_broker():
    with EmbeddedBroker(settings=CLEANER) as broker:
        yield broker
        close_contexts()


def keyed_pipeline(path: Path, bootstrap: str, topic: str) -> PipelineConfig:
    """The shipped Debezium orders pipeline (``target.mode: upsert``) over ``topic``, in small batches."""
    data = yaml.safe_load((REPO / "pipelines" / "orders_cdc.yaml").read_text())
    set_dotted(data, {"source__bootstrap_servers": bootstrap, "source__topic": topic,
                      "source__partitions": PARTITIONS, "backfill__slices": 1, "backfill__max_offsets_per_batch": 150})
    path.write_text(yaml.safe_dump(data))
    return load_pipeline(path)


def test_a_compacted_topic_is_proven_and_its_state_is_the_fold_of_what_survives(spark, home, tmp_path,
                                                                                 compacting_broker):
    bs, topic = compacting_broker.bootstrap_servers, f"compacted-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, PARTITIONS, COMPACTED)
    changes = change_stream(800, 40, partitions=PARTITIONS, snapshot=20)  # each key changed ~20 times
    # The last change of each partition comes after its segment's time is up: it rolls the segment, which the
    # cleaner may then compact.
    split = min(max(i for i, c in enumerate(changes) if c.partition == p) for p in range(PARTITIONS))
    produce_changes(bs, topic, changes[:split], PARTITIONS)
    time.sleep(1.0)  # > segment.ms: a lower bound, not a race (the compaction itself is waited for below)
    produce_changes(bs, topic, changes[split:], PARTITIONS)
    ends = {p: 1 + max(c.offset for c in changes if c.partition == p) for p in range(PARTITIONS)}

    def compacted() -> bool:
        got = delivered(bs, topic, "read_uncommitted")
        return all(len(got[p]) < ends[p] for p in range(PARTITIONS))

    wait_until(compacted, "the log cleaner's first compaction of each partition", 120)

    cfg = keyed_pipeline(tmp_path / "compacted.yaml", bs, topic)
    assert backfill(spark, cfg)
    report = validate(open_pipeline(cfg), all_runs=True)
    assert report.success, report.problems
    reasons = by_reason(report)
    assert set(reasons) == {MARKER_OR_COMPACTED}
    rows, bad = ingested(cfg)
    held = set(rows + bad)
    stored = merge(OffsetRange(topic, p, o, o + 1) for p, o in held)
    everything = [OffsetRange(topic, p, 0, ends[p]) for p in range(PARTITIONS)]
    assert report.offsets_checked == total(everything)
    assert reasons[MARKER_OR_COMPACTED] == subtract(everything, stored)  # every hole accounted for
    assert all(in_partition(reasons[MARKER_OR_COMPACTED], p) > 0 for p in range(PARTITIONS))
    # Accepted only where the broker has no record: none is delivered there (compaction only ever removes more).
    assert not intersect_all(reasons[MARKER_OR_COMPACTED], offsets(topic, delivered(bs, topic, "read_uncommitted")))

    survivors = [c for c in changes if (c.partition, c.offset) in held]
    state = open_pipeline(cfg).open_state_table().scan(
        selected_fields=("order_id", "kafka_partition", "kafka_offset")).to_arrow().to_pylist()
    assert {r["order_id"]: (r["kafka_partition"], r["kafka_offset"]) for r in state} == fold(survivors)
    assert fold(survivors) == fold(changes)  # compaction keeps each key's last change
    assert report.state["differing"] == 0 and report.state["keys_checked"] >= len(fold(changes))


def test_an_end_past_the_last_record_commits_nothing_unaccounted_and_validate_all_passes(spark, make_pipeline,
                                                                                        capsys):
    """Each partition ends with an aborted transaction: its end (the watermark the cutover records) is past the last
    record a read_committed consumer gets, by the aborted records and the abort marker. The backfill to that end
    commits every offset of it either as read or as absent with its reason, nothing else; validate --all asks the
    broker about each absent offset and passes."""
    cfg = make_pipeline(source__partitions=PARTITIONS, backfill__slices=1, backfill__max_offsets_per_batch=12)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    create_topic(bs, topic, PARTITIONS)
    written = Written()
    write(bs, topic, [("commit", {0: 5, 1: 3}), ("plain", {0: 2, 1: 2}), ("abort", {0: 4, 1: 6})], written)
    whole = ends(cfg)
    records = offsets(topic, delivered(bs, topic, "read_committed"))
    not_delivered = subtract(whole, records)  # markers and aborted records, the last ones at each partition's end
    assert all(max(r.end for r in records if r.tp == w.tp) < w.end for w in whole)  # the end is past the last record

    assert backfill(spark, cfg)

    data = tables_of(cfg).data
    assert merge(read_ledger(data).committed) == whole  # up to the end, past the last record
    summaries = [BatchSummary.from_properties(props) for props in batch_summaries(data)]
    absent = merge(r for s in summaries for r in s.absent or [])
    assert merge([*absent, *records]) == whole and intersect_all(absent, records) == []  # read or absent, each once
    assert absent == not_delivered and all(s.absent_under == "read_committed" for s in summaries)
    report = validate(open_pipeline(cfg), all_runs=True)
    assert report.success, report.problems
    assert merge(r for rs in by_reason(report).values() for r in rs) == not_delivered
    assert cli.main(["validate", cfg.path, "--all"]) == 0, capsys.readouterr().out
