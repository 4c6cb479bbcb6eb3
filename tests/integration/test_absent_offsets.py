"""Offsets the broker never returns: transaction markers in a backfilled topic.

This test relies on the broker writing transaction control markers, as Apache Kafka does: when a
transactional producer commits, the broker appends a COMMIT marker to each partition the
transaction wrote. The marker takes one offset and is never delivered to consumers (under
either isolation level), so the ingested table has a one-offset hole after every transaction
even though nothing was lost. The embedded tansu broker behaves the same way (checked below
before anything else is asserted).

With the default ``completeness.absent_offsets: none`` validation must fail naming each marker
offset as missing; with ``absent_offsets: allowed`` (and the batch having read exactly what it
stored) it must pass and list them as absent.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import backfill, high_watermarks, ingested

from tailfill.dev.sample import sample_event
from tailfill.offsets import OffsetRange
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate

pytestmark = pytest.mark.integration

TRANSACTIONS = 4
PER_TRANSACTION = 25
TIMEOUT_S = 15.0


def produce_transactions(bootstrap: str, topic: str) -> list[int]:
    """Create a 1-partition ``topic`` and write TRANSACTIONS committed transactions of
    PER_TRANSACTION JSON events to partition 0; return the offsets that hold the COMMIT markers."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        fut.result(timeout=TIMEOUT_S)

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}",
                         "transaction.timeout.ms": 60000, "message.timeout.ms": 20000})
    run = uuid.uuid4().hex[:8]
    producer.init_transactions(TIMEOUT_S)
    for t in range(TRANSACTIONS):
        producer.begin_transaction()
        for i in range(PER_TRANSACTION):
            n = t * PER_TRANSACTION + i
            producer.produce(topic, value=json.dumps(sample_event(run, n)).encode(), key=str(n).encode(),
                             partition=0)
        producer.commit_transaction(TIMEOUT_S)
    assert producer.flush(TIMEOUT_S) == 0
    # Each transaction: PER_TRANSACTION records, then its marker.
    return [(t + 1) * (PER_TRANSACTION + 1) - 1 for t in range(TRANSACTIONS)]


def delivered_offsets(bootstrap: str, topic: str, end: int) -> list[int]:
    """The offsets a read_committed consumer gets from partition 0, read from offset 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "error",
                         "isolation.level": "read_committed"})
    try:
        consumer.assign([KTopicPartition(topic, 0, 0)])
        got: list[int] = []
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            for m in consumer.consume(num_messages=500, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(m.offset())
            if consumer.position([KTopicPartition(topic, 0)])[0].offset >= end:
                break
        return got
    finally:
        consumer.close()


@pytest.fixture
def marker_topic(spark, make_pipeline):
    """Factory: a backfilled 1-partition pipeline over a topic with transaction markers.

    Returns ``(cfg, markers)`` with the marker offsets as ``OffsetRange`` s of one offset each.
    """

    def make(**changes):
        # Small batches so that ranges start, end and straddle markers (and the partition ends on one).
        cfg = make_pipeline(source__partitions=1, backfill__slices=1, backfill__max_offsets_per_batch=40,
                            **changes)
        bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
        markers = produce_transactions(bs, topic)
        end = TRANSACTIONS * (PER_TRANSACTION + 1)

        # Preconditions: the broker wrote the markers, and never delivers them.
        assert high_watermarks(cfg) == {0: end}, "broker did not write one COMMIT marker per transaction"
        delivered = delivered_offsets(bs, topic, end)
        assert sorted(set(range(end)) - set(delivered)) == markers, delivered
        assert len(delivered) == TRANSACTIONS * PER_TRANSACTION

        backfill(spark, cfg)
        rows, bad = ingested(cfg)
        assert not bad
        assert sorted(p_o[1] for p_o in rows) == delivered  # every record once, the markers nowhere
        return cfg, [OffsetRange(topic, 0, o, o + 1) for o in markers]

    return make


def test_markers_are_missing_by_default(spark, marker_topic):
    cfg, markers = marker_topic()
    assert cfg.completeness.absent_offsets == "none"
    report = validate(open_pipeline(cfg), all_runs=True)
    assert not report.success
    missing = sorted(p.split(" (run")[0] for p in report.problems if p.startswith("missing"))
    assert missing == sorted(f"missing {m}" for m in markers), report.problems
    assert report.absent == []
    # Nothing else is wrong: the ledger tiles [0, end) and no offset is duplicated.
    others = [p for p in report.problems if not p.startswith(("missing", "expectation suite"))]
    assert others == [], others
    assert report.offsets_checked == TRANSACTIONS * (PER_TRANSACTION + 1)


def test_markers_are_absent_when_allowed(spark, marker_topic):
    cfg, markers = marker_topic(completeness__absent_offsets="allowed")
    report = validate(open_pipeline(cfg), all_runs=True)
    assert report.success, report.problems
    assert report.problems == []
    assert sorted(report.absent) == sorted(str(m) for m in markers)
    # Batches of 40: [0, 40), [40, 80), [80, 104) -- the last one ends on a marker.
    assert [(r["start"], r["end"], r["absent_offsets"]) for r in report.ranges] == [
        (0, 40, 1), (40, 80, 2), (80, 104, 1)]
    assert report.offsets_checked == TRANSACTIONS * (PER_TRANSACTION + 1)
    assert sum(p["rows"] + p["quarantined"] for p in report.partitions) == TRANSACTIONS * PER_TRANSACTION
