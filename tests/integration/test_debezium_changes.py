"""Debezium change streams as its connectors write them, into keyed tables on the real catalog and warehouse: every
logical type (wrapped and bare JSON, and Avro through the registry), a truncate mid-stream, a MySQL stream across two
partitions ordered by its binlog position, and Kafka record timestamps no column can hold (on the real broker,
through Spark).

Each state table, read with pyiceberg and with DuckDB, must equal an independent fold: the values the test made
(Python's own dates, times and decimals) or the changes it produced replayed in the source's order, not anything
Tailfill computed.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import backfill, offline_duckdb
from test_keyed import (
    assert_state_is_the_fold,
    batches,
    commit,
    ingest,
    state_by_duckdb,
    state_by_pyiceberg,
)

from tailfill.dev.change_stream import Change, change_stream, ends, fold
from tailfill.dev.typed_changes import COLUMNS, avro_typed, fields, json_schema_typed, typed_stream
from tailfill.errors import ChangeStreamError
from tailfill.lake.keyed import state_counts
from tailfill.pipeline.handle import Pipeline
from tailfill.proof.validate import validate
from tailfill.run.status import keyed_status

pytestmark = pytest.mark.integration

NAMES = [c.name for c in COLUMNS]


def typed_state(pipeline: Pipeline) -> tuple[dict[int, dict], dict[int, dict]]:
    """The state table's rows by id, read by pyiceberg and by DuckDB (zoned timestamps in UTC)."""
    state = pipeline.open_state_table()
    by_pyiceberg = {r["id"]: r for r in state.scan(selected_fields=tuple(NAMES)).to_arrow().to_pylist()}
    rows = offline_duckdb().execute(f"SELECT {', '.join(NAMES)} FROM iceberg_scan(?)",
                                    [state.metadata_location]).fetchall()
    by_duckdb = {}
    for values in rows:
        row = {n: v.astimezone(UTC) if isinstance(v, datetime) and v.tzinfo else v
               for n, v in zip(NAMES, values, strict=True)}
        by_duckdb[row["id"]] = row
    assert len(by_duckdb) == len(rows), "a key has two rows in the state"
    return by_pyiceberg, by_duckdb


@pytest.mark.parametrize("wrapped", [True, False], ids=["schema-payload", "bare-declared"])
def test_every_logical_type_lands_in_the_state_as_the_values_the_events_encode(cdc, wrapped):
    """Dates, times and timestamps in every unit, zoned timestamps, decimals up to 38 digits (base64 with their
    scale, exact numbers, strings), variable-scale decimals, JSON, UUIDs and enums: the state holds each key's last
    values exactly, the wrapped events' types named by their schema, the bare ones' by the declared fields."""
    pipeline = cdc(format__fields=fields(declare_logical=not wrapped), target__key=["id"])
    stream = typed_stream(1500, 200, seed=11, wrapped=wrapped)
    ingest(pipeline, stream.changes, batches(stream.changes, pipeline.cfg.source.topic, 300), "run-typed")

    assert pipeline.open_tables().quarantine.scan().to_arrow().num_rows == 0
    by_pyiceberg, by_duckdb = typed_state(pipeline)
    assert by_pyiceberg == stream.state
    assert by_duckdb == stream.state
    assert max(len(r["total"].as_tuple().digits) for r in stream.state.values()) >= 37  # no float in the way
    proof = validate(pipeline, all_runs=True)
    assert proof.success, proof.problems


@pytest.mark.parametrize("kind", ["avro", "json_schema"])
def test_debezium_registry_logical_types_land_as_the_json_ones(cdc, registry, kind):
    """The same rows written by Debezium's AvroConverter (connect.name on the Avro literal) or JsonSchemaConverter
    (the property's title) through the registry."""
    topic = f"typed-{kind.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    stream = typed_stream(800, 120, seed=12, wrapped=False)
    changes = (avro_typed if kind == "avro" else json_schema_typed)(stream, registry.url, topic)
    fmt = {"type": kind, "envelope": "debezium", "key": "raw", "schema_registry": {"url": registry.url}}
    pipeline = cdc(format=fmt, source__topic=topic, target__key=["id"])
    ingest(pipeline, changes, batches(changes, topic, 200), "run-typed-avro")

    expected = {k: {**r, "ratio": format(r["ratio"], "f"), "balance": format(r["balance"], "f")}  # no fixed scale
                for k, r in stream.state.items()}  # (and a string-mode decimal is a string in the schema)
    by_pyiceberg, by_duckdb = typed_state(pipeline)
    assert by_pyiceberg == expected
    assert by_duckdb == expected
    proof = validate(pipeline, all_runs=True)
    assert proof.success, proof.problems


def test_a_truncate_mid_stream_empties_the_state_as_of_its_place(cdc):
    """Two truncates in one partition, the tail (with the second) committed before the backfill (with the first):
    the state holds only what came after the second, the first counts as superseded, the change log keeps both."""
    pipeline = cdc()
    topic = pipeline.cfg.source.topic
    changes = change_stream(3000, 300, partitions=1, wrapped=True, snapshot=100, truncate_at=(1100, 2000))
    cutover = {0: 1700}
    ingest(pipeline, changes, batches(changes, topic, 250, start=cutover), "tail-1")
    ingest(pipeline, changes, batches(changes, topic, 250, end=cutover), "backfill-1")

    proof = assert_state_is_the_fold(pipeline, changes)
    assert len(fold(changes)) < len(fold([c for c in changes if c.op != "t"]))  # the truncates removed rows
    counts = state_counts(pipeline.open_state_table())
    assert (counts.truncated, counts.changes) == (1, len(changes))  # the older truncate: superseded by the newer
    log = pipeline.open_tables().data.scan(selected_fields=("cdc_op", "kafka_offset", "order_id")).to_arrow()
    truncates = [r for r in log.to_pylist() if r["cdc_op"] == "t"]
    assert sorted(r["kafka_offset"] for r in truncates) == [c.offset for c in changes if c.op == "t"]
    assert all(r["order_id"] is None for r in truncates)
    status = keyed_status(pipeline.open_tables().data, pipeline.open_state_table(), ("order_id",))
    assert " + 1 truncated + " in status[1]
    assert proof.state["counts"]["truncated"] == 1


def test_on_truncate_stop_names_the_truncate_and_apply_gets_past_it(cdc):
    pipeline = cdc(target__on_truncate="stop")
    topic = pipeline.cfg.source.topic
    changes = change_stream(1200, 150, partitions=1, snapshot=50, truncate_at=(700,))
    at = next(c.offset for c in changes if c.op == "t")
    plan = batches(changes, topic, 200)
    with pytest.raises(ChangeStreamError, match=rf"a truncate \(op t\) at {topic}/0@{at}: target.on_truncate is stop"):
        ingest(pipeline, changes, plan, "run-stop")

    resumed = cdc(target__on_truncate="apply", source__topic=topic)  # the documented way past: apply it
    committer = resumed.committer(resumed.open_tables())
    for b, ranges in enumerate(plan):
        commit(resumed, changes, ranges, "run-apply", b, committer)
    assert_state_is_the_fold(resumed, changes)


def spread(changes: list[Change], partitions: int) -> tuple[list[Change], dict]:
    """The changes dealt round-robin over ``partitions`` (a key's changes in several: only the source's position
    orders them now), and where each went."""
    out, moved_to, next_offset = [], {}, [0] * partitions
    for i, c in enumerate(changes):
        p = i % partitions
        out.append(Change(p, next_offset[p], c.key, c.value, c.order_id, c.op))
        moved_to[(c.partition, c.offset)] = (p, next_offset[p])
        next_offset[p] += 1
    return out, moved_to


def test_a_mysql_stream_across_two_partitions_ordered_by_its_binlog_position(cdc):
    """MySQL's events carry no LSN: version_by cdc_binlog (source.file's number and source.pos) orders a key's
    changes and a truncate across two partitions; the files roll over mid-stream."""
    changes = change_stream(2400, 250, partitions=1, snapshot=60, truncate_at=(1500,), connector="mysql")
    moved, moved_to = spread(changes, 2)
    expected = {k: moved_to[at] for k, at in fold(changes).items()}  # replayed in the binlog's order

    unordered = cdc()
    with pytest.raises(ChangeStreamError, match=r"cdc_binlog \(MySQL: source.file and source.pos\)"):
        ingest(unordered, moved, batches(moved, unordered.cfg.source.topic, 97), "run-offsets")

    pipeline = cdc(target__version_by="cdc_binlog", target__table="mysql_changes", target__state_table="mysql_state")
    ingest(pipeline, moved, batches(moved, pipeline.cfg.source.topic, 97), "run-binlog")
    assert state_by_pyiceberg(pipeline) == expected
    assert state_by_duckdb(pipeline) == expected
    proof = validate(pipeline, all_runs=True)
    assert proof.success, proof.problems
    log = pipeline.open_tables().data.scan(selected_fields=("cdc_lsn", "cdc_binlog", "cdc_gtid")).to_arrow()
    assert log["cdc_lsn"].null_count == log.num_rows  # MySQL has none
    assert log["cdc_binlog"].null_count == sum(1 for c in changes if c.op == "tombstone")
    assert {v >> 32 for v in log["cdc_binlog"].to_pylist() if v is not None} == {2, 3, 4}  # three binlog files


BAD_TIMES = {"microseconds as milliseconds": 1_795_937_390_533_384, "wraps to now": 18_448_540_011_100_085}


def produce_with_times(bootstrap: str, topic: str, changes: list[Change], times: dict[tuple[int, int], int]) -> None:
    """``changes`` to a new ``topic`` that accepts any record timestamp (Kafka 4 refuses those more than an hour
    ahead by default), ``times`` giving some records theirs (partition, offset → ms)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"message.timestamp.after.max.ms": str(2**63 - 1)}
    for future in admin.create_topics([NewTopic(topic, max(ends(changes)) + 1, 1, config=config)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    failed: list[str] = []
    for c in changes:
        extra = {"timestamp": times[(c.partition, c.offset)]} if (c.partition, c.offset) in times else {}
        producer.produce(topic, value=c.value, key=c.key, partition=c.partition,
                         on_delivery=lambda err, _m: err is not None and failed.append(str(err)), **extra)
    assert producer.flush(60) == 0 and not failed, failed


def test_record_timestamps_no_column_holds_are_quarantined_with_their_offsets(cdc, broker, spark):
    """Two updates whose Kafka timestamps are past the year 9999 (one in microseconds, one wrapping around to today
    when multiplied): each is quarantined naming its offset and value, nothing stored as another time, every other
    batch commits, and the state is the fold of the changes less those two."""
    pipeline = cdc(source__bootstrap_servers=broker.bootstrap_servers, source__partitions=2)
    topic = pipeline.cfg.source.topic
    changes = change_stream(1500, 200, partitions=2, wrapped=True, snapshot=60)
    updates = [c for c in changes if c.op == "u"]
    bad = {(c.partition, c.offset): ms for c, ms in zip((updates[10], updates[-10]), BAD_TIMES.values(),
                                                        strict=True)}
    produce_with_times(broker.bootstrap_servers, topic, changes, bad)

    assert sum(r.offsets for r in backfill(spark, pipeline.cfg)) == len(changes)

    kept = [c for c in changes if (c.partition, c.offset) not in bad]
    assert_state_is_the_fold(pipeline, kept)
    quarantine = pipeline.open_tables().quarantine.scan().to_arrow().to_pylist()
    assert {(q["kafka_partition"], q["kafka_offset"]): q["kafka_timestamp"] for q in quarantine} == dict.fromkeys(bad)
    for q in quarantine:
        ms = bad[(q["kafka_partition"], q["kafka_offset"])]
        assert q["error"].startswith(f"kafka_timestamp {ms} ms is after 9999-12-31")
        assert json.loads(q["kafka_value"])["payload"]["op"] == "u"  # the record kept whole
    stamps = pipeline.open_tables().data.scan(selected_fields=("kafka_timestamp",)).to_arrow()["kafka_timestamp"]
    assert stamps.null_count == 0 and max(stamps.to_pylist()) < datetime.now(UTC)  # none wrapped into a time
