"""Avro, Protobuf and JSON Schema records from a Schema Registry, on the real broker and Spark: backfill and
tail exactly once with nested fields, a writer schema that adds a field mid-stream, an incompatible one,
a registry that is down, and records not in the wire format.

The producers use confluent-kafka's own serializers and ``SchemaRegistryClient`` against the development
registry, so the topic holds the real wire format.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from helpers import assert_exactly_once, assert_one_partition_value_per_file, backfill, high_watermarks, tables_of, tail

from tailfill.dev.format_samples import avro_schema, produce_format_sample, sample_order
from tailfill.dev.registry import DevRegistry
from tailfill.dev.sample import _SampleProducer
from tailfill.errors import IngestError, PreflightError, RegistryError
from tailfill.lake.ledger import read_ledger
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate
from tailfill.run.preflight import preflight

pytestmark = pytest.mark.integration

PARTITIONS, HISTORY, LIVE, NOT_WIRE_EVERY = 4, 2_000, 600, 97


def registry_pipeline(make_pipeline, kind: str, url: str, **changes):
    fmt = {"type": kind, "schema_registry": {"url": url, "attempts": 2, "timeout_seconds": 2},
           "on_incompatible_schema": changes.pop("on_incompatible", "quarantine"), "key": changes.pop("key", "raw")}
    return make_pipeline(format=fmt, expectations=[], backfill__max_offsets_per_batch=1_000,
                         backfill__restart_backoff_seconds=0, tail__restart_backoff_seconds=0, **changes)


def produce(cfg, url: str, kind: str, count: int, first: int, **kw) -> dict[str, int]:
    return produce_format_sample(cfg.source.bootstrap_servers, cfg.source.topic, url, kind, count, PARTITIONS,
                                 first=first, **kw)


@pytest.mark.parametrize("kind", ["avro", "protobuf", "json_schema"])
def test_each_format_is_backfilled_and_tailed_exactly_once_with_nested_fields(spark, make_pipeline, registry, kind):
    cfg = registry_pipeline(make_pipeline, kind, registry.url)
    history = produce(cfg, registry.url, kind, HISTORY, 0, not_wire_every=NOT_WIRE_EVERY)
    backfill(spark, cfg)
    live = produce(cfg, registry.url, kind, LIVE, HISTORY, not_wire_every=NOT_WIRE_EVERY)
    tail(spark, cfg)

    rows, bad = assert_exactly_once(cfg, high_watermarks(cfg))
    assert (len(rows), len(bad)) == (history["good"] + live["good"], history["bad"] + live["bad"])
    data, quarantine = tables_of(cfg)
    table = data.scan().to_arrow()
    assert {"order_id", "device", "tags", "scores", "status", "created_at"} <= set(table.column_names)
    first = next(r for r in table.drop(["kafka_value"]).to_pylist() if r["order_id"] == "ord-000000007")
    assert first["device"] == {"os": "android", "version": 17} and first["tags"] == ["tag-0", "tag-1"]
    assert dict(first["scores"]) == {"quality": 0.5} and first["status"] == "PAID"
    assert str(data.schema().find_field("device.version").field_type) == "long"
    errors = set(quarantine.scan().to_arrow()["error"].to_pylist())
    assert errors == {"not in the Confluent wire format (no magic byte 0 and schema id)"}
    assert validate(open_pipeline(cfg), all_runs=True).success


def test_a_writer_schema_adding_a_field_mid_stream_becomes_a_new_column(spark, make_pipeline, registry):
    cfg = registry_pipeline(make_pipeline, "avro", registry.url)
    produce(cfg, registry.url, "avro", HISTORY, 0)
    backfill(spark, cfg)
    data = tables_of(cfg).data
    ids = {f.name: f.field_id for f in data.schema().fields}
    assert "country" not in ids

    produce(cfg, registry.url, "avro", 300, HISTORY)  # v1 still, then v2 with country
    produce(cfg, registry.url, "avro", 300, HISTORY + 300, with_country=True)
    tail(spark, cfg)

    data.refresh()
    after = {f.name: f.field_id for f in data.schema().fields}
    assert {k: after[k] for k in ids} == ids and "country" in after  # ids stable, one new column
    assert not data.schema().find_field("country").required
    rows = data.scan(selected_fields=("order_id", "country")).to_arrow().to_pylist()
    by_id = {r["order_id"]: r["country"] for r in rows}
    assert len(by_id) == HISTORY + 600
    assert all(by_id[f"ord-{i:09d}"] is None for i in range(HISTORY + 300))
    assert all(by_id[f"ord-{i:09d}"] == f"c{i % 5}" for i in range(HISTORY + 300, HISTORY + 600))
    assert_exactly_once(cfg, high_watermarks(cfg))
    assert validate(open_pipeline(cfg), all_runs=True).success


def test_a_partitioned_avro_table_keeps_one_partition_per_file_across_a_new_writer_schema(spark, make_pipeline,
                                                                                          registry):
    """Partitioned by registry columns: files follow each writer schema and still hold one partition value."""
    spec = ["day(created_at)", "identity(status)"]
    cfg = registry_pipeline(make_pipeline, "avro", registry.url, target__partition_by=spec)
    produce(cfg, registry.url, "avro", HISTORY, 0)
    backfill(spark, cfg)
    produce(cfg, registry.url, "avro", 300, HISTORY, with_country=True)
    tail(spark, cfg)

    data = tables_of(cfg).data
    assert [str(f.transform) for f in data.spec().fields] == ["day", "identity"]
    assert assert_one_partition_value_per_file(cfg, data) > 1
    countries = data.scan(selected_fields=("order_id", "country")).to_arrow().column("country").to_pylist()
    assert countries.count(None) == HISTORY and len(countries) == HISTORY + 300
    assert_exactly_once(cfg, high_watermarks(cfg))
    assert validate(open_pipeline(cfg), all_runs=True).success


def _produce_v2(cfg, url: str, count: int, change: str) -> None:
    """``count`` records of a schema version (registered with compatibility NONE) that turns ``quantity`` (a
    required int) into a string (``retyped``) or lacks it (``dropped``)."""
    client = SchemaRegistryClient({"url": url})
    client.set_compatibility(cfg.subject, "NONE")
    schema = avro_schema()
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "quantity"]
    if change == "retyped":
        schema["fields"].append({"name": "quantity", "type": "string"})
    ser = AvroSerializer(client, json.dumps(schema))
    ctx = SerializationContext(cfg.source.topic, MessageField.VALUE)
    out = _SampleProducer(cfg.source.bootstrap_servers, cfg.source.topic, PARTITIONS)
    for i in range(count):
        order = {k: v for k, v in sample_order(i).items() if k != "quantity"}
        out.send(i, ser({**order, "order_id": f"re-{i}", **({"quantity": "many"} if change == "retyped" else {})},
                        ctx))
    out.finish()


INCOMPATIBLE = {"retyped": "field 'quantity': the table has int32, the writer schema has string",
                "dropped": "field 'quantity': the table requires it (int32), the writer schema does not have it"}


@pytest.mark.parametrize("policy", ["quarantine", "fail"])
@pytest.mark.parametrize("change", ["retyped", "dropped"])
def test_an_incompatible_writer_schema_is_quarantined_or_stops_the_run(spark, make_pipeline, registry, policy,
                                                                       change):
    """A column retyped beyond a promotion, or a required field gone (the table records its required fields)."""
    cfg = registry_pipeline(make_pipeline, "avro", registry.url, on_incompatible=policy,
                            tail__max_consecutive_failures=0)
    produce(cfg, registry.url, "avro", 400, 0)
    backfill(spark, cfg)
    committed_before = read_ledger(tables_of(cfg).data).committed
    _produce_v2(cfg, registry.url, 40, change)
    if policy == "quarantine":
        tail(spark, cfg)
        quarantine = tables_of(cfg).quarantine.scan().to_arrow()
        assert set(quarantine["error"].to_pylist()) == {
            f"writer schema id 2 is incompatible with the table: {INCOMPATIBLE[change]}"}
        assert quarantine.num_rows == 40
        assert_exactly_once(cfg, high_watermarks(cfg))
        assert validate(open_pipeline(cfg), all_runs=True).success
    else:
        with pytest.raises(IngestError) as err:
            tail(spark, cfg)
        line = str(err.value).splitlines()[-1]
        assert "SchemaChangeError" in line and INCOMPATIBLE[change] in line
        assert read_ledger(tables_of(cfg).data).committed == committed_before  # nothing committed


def test_a_registry_down_at_start_or_mid_run_fails_naming_its_url_and_commits_nothing(spark, make_pipeline,
                                                                                      refused_port):
    down = f"http://127.0.0.1:{refused_port}"
    cfg = registry_pipeline(make_pipeline, "avro", down)
    out = _SampleProducer(cfg.source.bootstrap_servers, cfg.source.topic, PARTITIONS)
    for i in range(8):
        out.send(i, b"\x00\x00\x00\x00\x01")
    out.finish()
    with pytest.raises(PreflightError, match=f"schema registry: cannot reach the Schema Registry at {down} after"):
        preflight(open_pipeline(cfg), "backfill")
    with pytest.raises(RegistryError, match=f"cannot reach the Schema Registry at {down} after 2 tries"):
        backfill(spark, cfg)

    with DevRegistry() as reg:
        cfg = registry_pipeline(make_pipeline, "avro", reg.url, tail__max_consecutive_failures=0)
        produce(cfg, reg.url, "avro", 400, 0)
        backfill(spark, cfg)
        assert f"schema registry {reg.url} reachable, subject '{cfg.subject}' at version 1 (id 1)" in preflight(
            open_pipeline(cfg), "tail")
        before = read_ledger(tables_of(cfg).data).committed
        encode = AvroSerializer(SchemaRegistryClient({"url": reg.url}), json.dumps(avro_schema(with_country=True)))
        ctx = SerializationContext(cfg.source.topic, MessageField.VALUE)
        values = [encode({"order_id": "x", **_v2(i)}, ctx) for i in range(40)]  # registers v2 while up
    out = _SampleProducer(cfg.source.bootstrap_servers, cfg.source.topic, PARTITIONS)
    for i, value in enumerate(values):
        out.send(i, value)
    out.finish()
    with pytest.raises(IngestError) as err:
        tail(spark, cfg)
    assert f"cannot reach the Schema Registry at {reg.url} after 2 tries" in str(err.value)
    assert read_ledger(tables_of(cfg).data).committed == before


def _v2(i: int) -> dict:
    order = sample_order(i, country="nl")
    order.pop("order_id")
    return order


KEY_SCHEMA = {"type": "record", "name": "OrderKey", "fields": [{"name": "customer", "type": "string"},
                                                                {"name": "region", "type": "int"}]}


def _produce_keyed(cfg, url: str, first: int, count: int) -> dict[str, int]:
    """Orders with Avro record keys (subject ``<topic>-key``); every 7th without a key, every 50th with a key
    not in the wire format. Returns ``{"good", "bad"}``."""
    client = SchemaRegistryClient({"url": url})
    values, keys = AvroSerializer(client, json.dumps(avro_schema())), AvroSerializer(client, json.dumps(KEY_SCHEMA))
    value_ctx = SerializationContext(cfg.source.topic, MessageField.VALUE)
    key_ctx = SerializationContext(cfg.source.topic, MessageField.KEY)
    out = _SampleProducer(cfg.source.bootstrap_servers, cfg.source.topic, PARTITIONS)
    bad = 0
    for i in range(first, first + count):
        if i % 50 == 0:
            key, bad = b"plain-key", bad + 1
        else:
            key = None if i % 7 == 0 else keys({"customer": f"c{i % 13}", "region": i % 4}, key_ctx)
        out.send(i, values(sample_order(i), value_ctx), key)
    out.finish()
    return {"good": count - bad, "bad": bad}


def test_registry_keys_are_decoded_into_kafka_key_or_quarantined(spark, make_pipeline, registry):
    cfg = registry_pipeline(make_pipeline, "avro", registry.url, key="registry")
    history = _produce_keyed(cfg, registry.url, 0, 600)
    backfill(spark, cfg)
    live = _produce_keyed(cfg, registry.url, 600, 200)
    tail(spark, cfg)

    rows, bad = assert_exactly_once(cfg, high_watermarks(cfg))
    assert (len(rows), len(bad)) == (history["good"] + live["good"], history["bad"] + live["bad"])
    data, quarantine = tables_of(cfg)
    key_type = data.schema().find_field("kafka_key").field_type
    assert [(f.name, str(f.field_type)) for f in key_type.fields] == [("customer", "string"), ("region", "int")]
    keys = {r["order_id"]: r["kafka_key"] for r in data.scan(selected_fields=("order_id", "kafka_key")).to_arrow()
            .to_pylist()}
    assert keys["ord-000000001"] == {"customer": "c1", "region": 1} and keys["ord-000000007"] is None
    assert keys["ord-000000799"] == {"customer": f"c{799 % 13}", "region": 799 % 4}
    errors = quarantine.scan().to_arrow()
    assert set(errors["error"].to_pylist()) == {"key not in the Confluent wire format (no magic byte 0 and schema id)"}
    assert set(errors["kafka_key"].to_pylist()) == {b"plain-key"}  # the quarantine keeps the raw key
    assert validate(open_pipeline(cfg), all_runs=True).success


def test_a_protobuf_schema_referencing_another_subject_is_backfilled(spark, make_pipeline, registry):
    """The order's customer message lives in another file, registered as its own subject and referenced."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    from tailfill.dev.format_samples import referencing_order_class

    cfg = registry_pipeline(make_pipeline, "protobuf", registry.url)
    order = referencing_order_class()
    ser = ProtobufSerializer(order, SchemaRegistryClient({"url": registry.url}), {"use.deprecated.format": False})
    ctx = SerializationContext(cfg.source.topic, MessageField.VALUE)
    out = _SampleProducer(cfg.source.bootstrap_servers, cfg.source.topic, PARTITIONS)
    for i in range(300):
        msg = order(order_id=f"o{i}")
        msg.customer.id, msg.customer.tier = f"cust-{i % 9}", i % 3
        out.send(i, ser(msg, ctx))
    out.finish()
    backfill(spark, cfg)

    rows, bad = assert_exactly_once(cfg, high_watermarks(cfg))
    assert (len(rows), len(bad)) == (300, 0)
    data = tables_of(cfg).data
    customers = {r["order_id"]: r["customer"] for r in data.scan(selected_fields=("order_id", "customer")).to_arrow()
                 .to_pylist()}
    assert customers["o10"] == {"id": "cust-1", "tier": 1}
    assert validate(open_pipeline(cfg), all_runs=True).success
