"""Offsets removed by retention before ingest: fail by default, or record the gap and go on.

The broker is Apache Kafka; the head of a partition is removed as retention removes it, through
``DeleteRecords`` (what ``kafka-delete-records.sh`` and a ``retention.ms`` expiry both do to the log start
offset), so the removed offsets really are gone from the broker when the backfill reads them.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import backfill, high_watermarks, ingested, tables_of

from tailfill.cli import main
from tailfill.dev.sample import sample_event
from tailfill.errors import IngestError
from tailfill.lake.ledger import read_ledger
from tailfill.offsets import OffsetRange, TopicPartition, merge
from tailfill.source.kafka import consumer_config, watermarks

pytestmark = pytest.mark.integration

RECORDS, LOW = 20, 10


def delete_head(bootstrap: str, topic: str, low: int) -> None:
    """Remove offsets [0, ``low``) of ``topic``'s partition 0 from the broker (``DeleteRecords``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_records([KTopicPartition(topic, 0, low)]).values():
        assert fut.result(timeout=30).low_watermark == low  # the partition's new log start offset


@pytest.fixture
def produced_pipeline(broker, make_pipeline):
    """A 1-partition topic holding offsets [0, RECORDS)."""

    def make(**changes):
        cfg = make_pipeline(source__partitions=1, **changes)
        topic = cfg.source.topic
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})  # kept until the futures resolve
        for fut in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            fut.result(timeout=10)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
        for i in range(RECORDS):
            producer.produce(topic, value=json.dumps(sample_event("ret", i)).encode(), partition=0)
        assert producer.flush(10) == 0
        return cfg

    return make


@pytest.fixture
def trim(broker):
    """Trim [0, LOW) off a topic made by ``produced_pipeline``, as retention would; the broker then says so."""

    def cut(cfg) -> None:
        delete_head(broker.bootstrap_servers, cfg.source.topic, LOW)
        conf = consumer_config(cfg.source)
        marks = watermarks(conf, [TopicPartition(cfg.source.topic, 0)])
        assert (list(marks.low.offsets.values()), list(marks.high.offsets.values())) == ([LOW], [RECORDS])

    return cut


@pytest.fixture
def trimmed_pipeline(produced_pipeline, trim):
    """A 1-partition topic holding offsets [0, RECORDS) of which [0, LOW) were trimmed away."""

    def make(**changes):
        cfg = produced_pipeline(**changes)
        trim(cfg)
        return cfg

    return make


def backfill_from_zero(spark, cfg):
    topic = cfg.source.topic
    return backfill(spark, cfg, start={topic: {"0": 0}}, end={topic: {"0": RECORDS}}, slices=1)


def test_backfill_below_earliest_fails_naming_the_lost_range(spark, trimmed_pipeline):
    cfg = trimmed_pipeline()
    topic = cfg.source.topic
    assert high_watermarks(cfg) == {0: RECORDS}

    with pytest.raises(IngestError) as err:
        backfill_from_zero(spark, cfg)
    message = str(err.value)
    for part in ("ExpiredOffsetsError", f"{topic}[0]", "[0, 10)", "earliest available is 10"):
        assert part in message, f"{part!r} not in {message!r}"
    table = tables_of(cfg)[0]
    table.refresh()
    assert read_ledger(table).committed == []


def test_record_gap_skips_and_records_the_lost_range(spark, trimmed_pipeline):
    cfg = trimmed_pipeline(source__on_expired_offsets="record_gap")
    topic = cfg.source.topic

    [result] = backfill_from_zero(spark, cfg)
    assert result.rows + result.quarantined == RECORDS - LOW

    table = tables_of(cfg)[0]
    table.refresh()
    ledger = read_ledger(table)
    assert ledger.lost == [OffsetRange(topic, 0, 0, LOW)]
    assert merge(ledger.committed + ledger.lost) == [OffsetRange(topic, 0, 0, RECORDS)]  # no hole left
    rows, bad = ingested(cfg)
    assert sorted((rows + bad).elements()) == [(0, o) for o in range(LOW, RECORDS)]  # each offset once
    assert not bad


def test_replay_of_offsets_trimmed_since_their_backfill_is_refused_before_writing(spark, produced_pipeline, trim,
                                                                                capsys):
    cfg = produced_pipeline()
    backfill_from_zero(spark, cfg)
    trim(cfg)
    data = tables_of(cfg).data
    data.refresh()
    snapshots = len(data.snapshots())
    capsys.readouterr()  # the backfill's progress lines

    assert main(["replay", str(cfg.path)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: cannot replay topic {cfg.source.topic} partition 0: offset 0 is no longer on ")
    assert f"(earliest available is {LOW}: retention removed [0, {LOW}))" in line and "nothing was written" in line
    data.refresh()
    assert len(data.snapshots()) == snapshots  # nothing committed

    assert main(["replay", str(cfg.path), "--from", json.dumps({cfg.source.topic: {"0": LOW}})]) == 0
    assert f"replayed {RECORDS - LOW} offsets" in capsys.readouterr().out
    rows, bad = ingested(cfg)
    assert sorted((rows + bad).elements()) == [(0, o) for o in range(RECORDS)]  # each offset once, as before
