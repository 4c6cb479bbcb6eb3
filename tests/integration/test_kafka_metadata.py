"""Kafka metadata kept on every row: headers (in order, repeated keys and null values too) on rows and
quarantined rows, and the key decoded as a string with ``format.key: string``."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from helpers import assert_exactly_once, backfill, high_watermarks, tables_of

from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate
from tailfill.source.topics import ensure_topic

pytestmark = pytest.mark.integration

PARTITIONS, RECORDS = 2, 200


def headers_of(i: int) -> list[tuple[str, bytes | None]]:
    """Record i's headers: none, one, or a repeated key and a null value."""
    return [[], [("trace", f"t-{i}".encode())], [("h", b"1"), ("h", b"\x00\xff"), ("empty", None)]][i % 3]


def produce(cfg) -> dict[tuple[int, int], int]:
    """RECORDS records, every 10th malformed, keyed ``user-<i>``; returns the record number per (partition, offset)."""
    ensure_topic(cfg.source.bootstrap_servers, cfg.source.topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": cfg.source.bootstrap_servers})
    where: dict[tuple[int, int], int] = {}

    def delivered(i: int):
        def cb(err, msg) -> None:
            assert err is None, err
            where[(msg.partition(), msg.offset())] = i
        return cb

    for i in range(RECORDS):
        value = b"{broken" if i % 10 == 0 else json.dumps(
            {"event_id": f"e{i}", "user_id": i, "kind": "view", "amount": 1.0,
             "created_at": "2026-01-01T00:00:00+00:00"}).encode()
        producer.produce(cfg.source.topic, value, key=f"user-{i}".encode(), partition=i % PARTITIONS,
                         headers=headers_of(i), on_delivery=delivered(i))
    assert producer.flush(30) == 0
    return where


def expected_headers(i: int) -> list[dict]:
    return [{"key": k, "value": v} for k, v in headers_of(i)]


def test_headers_round_trip_on_rows_and_quarantined_rows_and_the_key_is_a_string(spark, make_pipeline):
    cfg = make_pipeline(format__key="string", source__partitions=PARTITIONS)
    where = produce(cfg)
    backfill(spark, cfg)
    assert_exactly_once(cfg, high_watermarks(cfg))
    data, quarantine = tables_of(cfg)
    rows = data.scan().to_arrow().to_pylist()
    bad = quarantine.scan().to_arrow().to_pylist()
    assert len(rows) + len(bad) == RECORDS and len(bad) == RECORDS // 10
    for row in rows:
        i = where[(row["kafka_partition"], row["kafka_offset"])]
        assert row["kafka_headers"] == expected_headers(i), i
        assert row["kafka_key"] == f"user-{i}"  # decoded: format.key is string
    for row in bad:
        i = where[(row["kafka_partition"], row["kafka_offset"])]
        assert row["kafka_headers"] == expected_headers(i), i
        assert row["kafka_key"] == f"user-{i}".encode()  # the quarantine keeps the raw key
    assert validate(open_pipeline(cfg), all_runs=True).success
