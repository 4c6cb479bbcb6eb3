"""Sample change streams for keyed pipelines: Debezium change events over a set of order ids, and their fold.

:func:`change_stream` makes a stream of changes (a share of inserts of new ids, updates of live ids,
deletes of live ids, each delete followed by a tombstone), each as the Kafka record Debezium's JSON converter
would write: key ``{"order_id": N}``, value the change event (optionally inside the converter's
``schema``/``payload`` wrapper). A key's changes all go to one partition (``order_id`` mod partitions), as
Kafka's key partitioning does; a truncate (no key) to any. Its source position is a Postgres connector's
(``lsn``) or a MySQL one's (binlog ``file``, ``pos``, ``row`` and a ``gtid``). :func:`fold` is the independent
answer the tests and the benchmark compare a state table with: the changes replayed in the source's order,
deletes removing a key, truncates every key.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from tailfill.offsets import OffsetRange, passed_over
from tailfill.values.schema import HEADERS, RAW_SCHEMA, TIMESTAMP, RangeMarker

STATUSES = ("new", "paid", "shipped", "delivered", "cancelled")
MYSQL_UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Change:
    """One Kafka record of a change stream: where it is, its key and value (None: a tombstone)."""

    partition: int
    offset: int
    key: bytes | None  # None: a truncate
    value: bytes | None
    order_id: int  # -1: a truncate
    op: str  # r (a snapshot read), c, u, d, t (a truncate), or "tombstone"


def change_stream(events: int, keys: int, partitions: int = 1, seed: int = 7, mix: tuple[float, float] = (0.2, 0.7),
                  wrapped: bool = False, snapshot: int = 0, truncate_at: tuple[int, ...] = (),
                  connector: str = "postgresql") -> list[Change]:
    """``events`` changes over at most ``keys`` ids: ``snapshot`` snapshot reads (op r) first, then inserts, updates
    and deletes in the proportions ``mix`` (inserts, updates; the rest deletes, each followed by its tombstone);
    a truncate once the stream has ``truncate_at`` records (each), after which every id is new again. The list is in
    the source's order (``connector`` ``postgresql`` or ``mysql`` gives its position)."""
    rng = random.Random(seed)
    live: list[int] = []
    where: dict[int, int] = {}  # id -> index in live
    next_id = 0
    offsets = [0] * partitions
    out: list[Change] = []
    lsn = 1000

    def emit(order_id: int, op: str, before: dict | None, after: dict | None) -> None:
        nonlocal lsn
        lsn += 1
        p = order_id % partitions if op != "t" else lsn % partitions
        ts = int((EPOCH + timedelta(seconds=lsn)).timestamp() * 1000)
        event = {"before": before, "after": after, "source": source(lsn, ts), "op": op, "ts_ms": ts}
        key = None if op == "t" else json.dumps({"order_id": order_id}).encode()
        value = {"schema": {"type": "struct", "name": "orders.Envelope"}, "payload": event} if wrapped else event
        out.append(Change(p, offsets[p], key, json.dumps(value).encode(), order_id, op))
        offsets[p] += 1
        if op == "d":
            out.append(Change(p, offsets[p], key, None, order_id, "tombstone"))
            offsets[p] += 1

    def source(lsn: int, ts: int) -> dict:
        if connector == "mysql":  # a new binlog file every 1,000 events; positions grow within one
            return {"connector": "mysql", "ts_ms": ts, "file": f"mysql-bin.{1 + lsn // 1000:06d}",
                    "pos": 4 + (lsn % 1000) * 57, "row": 0, "gtid": f"{MYSQL_UUID}:{lsn}", "table": "orders"}
        return {"connector": "postgresql", "ts_ms": ts, "lsn": lsn, "table": "orders"}

    def row(order_id: int) -> dict:
        return {"order_id": order_id, "status": rng.choice(STATUSES), "amount": round(rng.random() * 500, 2),
                "updated_at": (EPOCH + timedelta(seconds=lsn)).isoformat()}

    def add(order_id: int) -> None:
        where[order_id] = len(live)
        live.append(order_id)

    def remove(order_id: int) -> None:
        i = where.pop(order_id)
        last = live.pop()
        if last != order_id:
            live[i] = last
            where[last] = i

    for _ in range(snapshot):
        add(next_id)
        emit(next_id, "r", None, row(next_id))
        next_id += 1
    dead: list[int] = []
    pending = sorted(truncate_at, reverse=True)
    while len(out) < events + snapshot:
        if pending and len(out) >= pending[-1]:  # (a delete and its tombstone may step over the exact place)
            pending.pop()
            emit(-1, "t", None, None)
            dead += live
            live.clear()
            where.clear()
            continue
        pick = rng.random()
        if pick < mix[0] or not live:
            if next_id < keys:
                order_id, next_id = next_id, next_id + 1
            elif dead:
                order_id = dead.pop(rng.randrange(len(dead)))
            else:
                continue
            add(order_id)
            emit(order_id, "c", None, row(order_id))
        elif pick < mix[0] + mix[1]:
            order_id = live[rng.randrange(len(live))]
            emit(order_id, "u", {"order_id": order_id}, row(order_id))
        else:
            order_id = live[rng.randrange(len(live))]
            remove(order_id)
            dead.append(order_id)
            emit(order_id, "d", {"order_id": order_id, "status": None, "amount": None, "updated_at": None}, None)
    return out


def fold(changes: list[Change]) -> dict[int, tuple[int, int]]:
    """Each live order id's last change, as (partition, offset): the state the stream describes, its changes
    replayed in the order given (the source's, as :func:`change_stream` makes them)."""
    state: dict[int, tuple[int, int]] = {}
    for c in changes:
        if c.op == "t":
            state.clear()
        elif c.value is None or c.op == "d":
            state.pop(c.order_id, None)
        else:
            state[c.order_id] = (c.partition, c.offset)
    return state


def _avro_schemas(topic: str) -> tuple[dict, dict]:
    """(key schema, value schema) of an orders table's changes as Debezium's Avro converter registers them."""
    name = topic.replace("-", "_").replace(".", "_")
    key = {"type": "record", "name": "Key", "namespace": name, "fields": [{"name": "order_id", "type": "long"}]}
    row = {"type": "record", "name": "Value", "namespace": name, "fields": [
        {"name": "order_id", "type": "long"}, {"name": "status", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": ["null", "double"], "default": None},
        {"name": "updated_at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None}]}
    source = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql", "fields": [
        {"name": "connector", "type": "string"}, {"name": "ts_ms", "type": "long"},
        {"name": "lsn", "type": ["null", "long"], "default": None}, {"name": "table", "type": "string"}]}
    envelope = {"type": "record", "name": "Envelope", "namespace": name, "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", f"{name}.Value"], "default": None},
        {"name": "source", "type": source}, {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None}]}
    return key, envelope


def avro_changes(changes: list[Change], registry_url: str, topic: str) -> list[Change]:
    """``changes`` as Debezium's Avro converter writes them: key and value in the Confluent wire format, their
    schemas registered in the registry at ``registry_url`` (subjects ``<topic>-key`` and ``<topic>-value``)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url})
    key_schema, value_schema = _avro_schemas(topic)
    keys, values = AvroSerializer(client, json.dumps(key_schema)), AvroSerializer(client, json.dumps(value_schema))
    key_ctx, value_ctx = SerializationContext(topic, MessageField.KEY), SerializationContext(topic, MessageField.VALUE)

    def image(row: dict | None) -> dict | None:
        if row is None:
            return None
        at = row.get("updated_at")
        return {**row, "updated_at": datetime.fromisoformat(at) if at else None}

    out = []
    for c in changes:
        value = None
        if c.value is not None:
            event = json.loads(c.value)
            event = event.get("payload", event)
            value = values({**event, "before": image(event["before"]), "after": image(event["after"])}, value_ctx)
        key = None if c.key is None else keys(json.loads(c.key), key_ctx)
        out.append(Change(c.partition, c.offset, key, value, c.order_id, c.op))
    return out


def records(topic: str, changes: list[Change], ranges: list[OffsetRange]):
    """The records of ``ranges`` as a Kafka reader yields them (batches of :data:`RAW_SCHEMA`), then a marker per
    range: what :func:`tailfill.lake.prepare.prepare_ranges` reads."""
    by_at = {(c.partition, c.offset): c for c in changes}
    now = datetime.now(UTC)
    for r in ranges:
        got = [by_at[(r.partition, o)] for o in range(r.start, r.end) if (r.partition, o) in by_at]
        n = len(got)
        yield pa.RecordBatch.from_arrays(
            [pa.array([topic] * n), pa.array([r.partition] * n, pa.int32()),
             pa.array([c.offset for c in got], pa.int64()), pa.array([now] * n, TIMESTAMP),
             pa.array([c.key for c in got], pa.binary()), pa.array([[]] * n, HEADERS),
             pa.array([c.value for c in got], pa.binary()), pa.nulls(n, pa.string()),
             pa.nulls(n, pa.string())], schema=RAW_SCHEMA)
    for r in ranges:  # an offset without a change is one the broker would not deliver (compacted, say): absent
        held = [o for o in range(r.start, r.end) if (r.partition, o) in by_at]
        absent = tuple(r.with_bounds(s, e) for s, e in passed_over(r.start, [*held, r.end]))
        yield RangeMarker(r, len(held), absent=absent).to_batch()


def ends(changes: list[Change]) -> dict[int, int]:
    """Each partition's end offset."""
    out: dict[int, int] = {}
    for c in changes:
        out[c.partition] = max(out.get(c.partition, 0), c.offset + 1)
    return out


def produce_changes(bootstrap: str, topic: str, changes: list[Change], partitions: int) -> None:
    """Write ``changes`` to ``topic`` (created with ``partitions`` if missing), each to its partition, in order; a
    fresh topic then holds each change at its offset. Raises if any record was not acknowledged."""
    from tailfill.dev.sample import _SampleProducer

    out = _SampleProducer(bootstrap, topic, partitions, **{"linger.ms": 20, "batch.num.messages": 10000})
    for i, c in enumerate(changes):
        out.send(c.partition, c.value, c.key)
        if i % 10000 == 0:
            out.producer.poll(0)
    out.finish()
