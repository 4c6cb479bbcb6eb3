"""Keyed pipelines: the YAML's rules (one line naming field and fix), and change records decoded into rows with
their op, or quarantined with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from helpers import set_dotted

from tailfill.errors import ConfigError
from tailfill.formats.base import split_records
from tailfill.formats.registry import pipeline_format
from tailfill.formats.schema_registry import RegistryClient
from tailfill.pipeline.load import load_pipeline
from tailfill.values.schema import HEADERS, RAW_SCHEMA, TIMESTAMP

CDC = Path(__file__).resolve().parents[2] / "pipelines" / "orders_cdc.yaml"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path / "home"))


def variant(tmp_path, **changes):
    data = yaml.safe_load(CDC.read_text())
    set_dotted(data, changes, drop_none=True)
    path = tmp_path / "cdc.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_shipped_cdc_pipeline_loads_keyed():
    cfg = load_pipeline(CDC)
    assert (cfg.target.mode, cfg.target.key, cfg.format.envelope) == ("upsert", ("order_id",), "debezium")
    assert cfg.target.state_name == "orders_state"


@pytest.mark.parametrize(("changes", "message"), [
    ({"target__key": None}, "mode: upsert needs key"),
    ({"target__mode": "append"}, "key, state_table only apply to mode: upsert"),
    ({"target__key": ["order_id", "order_id"]}, "key names a column twice"),
    ({"target__key": ["customer"]}, "target.key: 'customer' names no column"),
    ({"target__key": ["cdc_op"]}, "target.key: 'cdc_op' cannot identify a row"),
    ({"target__version_by": "status"}, "target.version_by: 'status' must be a long column"),
    ({"target__version_by": "lsn"}, "target.version_by: 'lsn' names no column"),
    ({"target__state_table": "orders_changes"}, "is already the data or quarantine table"),
    ({"format__unknown_fields": "evolve"}, "format.unknown_fields: evolve is for append tables"),
    ({"target__mode": "append", "target__key": None, "target__state_table": None},
     "format.envelope: debezium needs a keyed target"),
])
def test_bad_keyed_settings_are_refused_with_one_line(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_pipeline(variant(tmp_path, **changes))
    assert str(info.value).startswith(str(tmp_path))


def test_debezium_needs_a_format_its_converters_write(tmp_path):
    path = variant(tmp_path, format__type="raw", format__fields=[])
    with pytest.raises(ConfigError, match="debezium reads change events in json, avro, protobuf, json_schema, not raw"):
        load_pipeline(path)


def raw(values: list[bytes | None], keys: list[bytes | None]) -> pa.Table:
    n = len(values)
    return pa.Table.from_batches([pa.RecordBatch.from_arrays(
        [pa.array(["t"] * n), pa.array([0] * n, pa.int32()), pa.array(range(n), pa.int64()),
         pa.nulls(n, TIMESTAMP), pa.array(keys, pa.binary()), pa.array([[]] * n, HEADERS),
         pa.array(values, pa.binary()), pa.nulls(n, pa.string()),
         pa.nulls(n, pa.string())], schema=RAW_SCHEMA)])


def event(op: str, before=None, after=None, lsn=7, wrapped=False) -> bytes:
    body = {"op": op, "before": before, "after": after, "source": {"ts_ms": 1700, "lsn": lsn}}
    return json.dumps({"schema": {"type": "struct"}, "payload": body} if wrapped else body).encode()


def decode(tmp_path, values, keys, **changes):
    cfg = load_pipeline(variant(tmp_path, **changes))
    return split_records(raw(values, keys), pipeline_format(cfg).decoder(), "run")


def test_debezium_events_become_rows_with_their_op_and_source(tmp_path):
    after = {"order_id": 1, "status": "paid", "amount": 3.5, "updated_at": "2026-01-01T00:00:00Z"}
    rows, bad = decode(tmp_path, [event("r", after=after), event("u", after=after, wrapped=True),
                                  event("d", before={"order_id": 1}, lsn=9), None],
                       [b'{"order_id": 1}'] * 4)
    assert bad.num_rows == 0
    got = rows.select(["kafka_offset", "order_id", "status", "cdc_op", "cdc_ts_ms", "cdc_lsn"]).to_pylist()
    assert got == [
        {"kafka_offset": 0, "order_id": 1, "status": "paid", "cdc_op": "r", "cdc_ts_ms": 1700, "cdc_lsn": 7},
        {"kafka_offset": 1, "order_id": 1, "status": "paid", "cdc_op": "u", "cdc_ts_ms": 1700, "cdc_lsn": 7},
        {"kafka_offset": 2, "order_id": 1, "status": None, "cdc_op": "d", "cdc_ts_ms": 1700, "cdc_lsn": 9},
        {"kafka_offset": 3, "order_id": 1, "status": None, "cdc_op": "d", "cdc_ts_ms": None, "cdc_lsn": None},
    ]


def test_bad_change_records_are_quarantined_with_the_reason(tmp_path):
    rows, bad = decode(tmp_path, [event("x", after={"order_id": 1}), event("c"), event("d"), b"{nope", None,
                                  event("c", after={"status": "new"}), event("c", after={"order_id": "one"}),
                                  None],
                       [b"1", b"1", b"1", b"1", None, b"1", b"1", b'{"payload": {"order_id": "x"}, "schema": {}}'])
    assert rows.num_rows == 0
    reasons = dict(zip(bad["kafka_offset"].to_pylist(), bad["error"].to_pylist(), strict=True))
    assert "unknown Debezium op 'x'" in reasons[0]
    assert "op 'c' without an 'after' object" in reasons[1]
    assert "op 'd' without a 'before' object" in reasons[2]
    assert "malformed Debezium change event" in reasons[3]
    assert "without a Kafka key" in reasons[4]
    assert "order_id" in reasons[5] and "order_id" in reasons[6] and "order_id" in reasons[7]
    assert bad["kafka_value"].to_pylist()[0] == event("x", after={"order_id": 1})  # kept raw, nothing lost


def test_a_truncate_is_a_change_row_without_a_key(tmp_path):
    """A truncate has no key (and no Kafka key): it is a row of its own, op t, with its source position."""
    rows, bad = decode(tmp_path, [event("t", lsn=11), event("t", lsn=12, wrapped=True)], [None, None])
    assert bad.num_rows == 0
    assert rows.select(["order_id", "cdc_op", "cdc_lsn"]).to_pylist() == [
        {"order_id": None, "cdc_op": "t", "cdc_lsn": 11}, {"order_id": None, "cdc_op": "t", "cdc_lsn": 12}]


def test_without_an_envelope_values_are_new_states_and_tombstones_delete(tmp_path):
    rows, bad = decode(tmp_path, [b'{"order_id": 5, "status": "new"}', None, None, b'{"status": "new"}'],
                       [b"5", b"5", b'{"order_id": 6}', b"7"], format__envelope="none")
    assert rows.select(["order_id", "cdc_op"]).to_pylist() == [
        {"order_id": 5, "cdc_op": "u"}, {"order_id": 5, "cdc_op": "d"}, {"order_id": 6, "cdc_op": "d"}]
    assert bad["error"].to_pylist() == ["required field 'order_id' is missing"]


def test_the_kafka_key_can_be_the_key(tmp_path):
    rows, bad = decode(tmp_path, [b'{"order_id": 5}', None, b'{"order_id": 6}'], [b"a", b"a", None],
                       format__envelope="none", target__key=["kafka_key"])
    assert rows.select(["kafka_key", "cdc_op"]).to_pylist() == [{"kafka_key": "a", "cdc_op": "u"},
                                                                {"kafka_key": "a", "cdc_op": "d"}]
    assert bad["error"].to_pylist() == ["the change has no Kafka key (key column kafka_key)"]


def test_keys_have_one_canonical_text_whatever_their_columns():
    from tailfill.lake.key_index import encode_key, encode_keys

    table = pa.table({"a": pa.array([1, -2], pa.int64()), "b": pa.array([5, 6], pa.int32()), "s": ["x", 'y"']})
    for columns in (["a"], ["a", "b"], ["a", "s"], ["s"]):
        assert encode_keys(table, columns) == [encode_key([table[c][i].as_py() for c in columns]) for i in range(2)]
    assert encode_keys(table, ["a", "b"]) == ["[1,5]", "[-2,6]"]


def test_a_reset_of_a_keyed_pipeline_removes_its_state_table_with_the_change_log():
    from tailfill.pipeline.handle import Pipeline
    from tailfill.run.reset import reset, reset_targets

    pipeline = Pipeline(load_pipeline(CDC))
    try:
        pipeline.provision_tables()
        assert pipeline.open_state_table() is not None
        targets = reset_targets(pipeline)
        assert "table tailfill.orders_state (its rows and files)" in targets.lines()  # shown before asking
        reset(pipeline, targets)
        assert pipeline.open_state_table() is None and pipeline.open_tables() is None
    finally:
        pipeline.close()


def avro_cdc(tmp_path, registry, topic: str = "shop.orders", **changes):
    """The orders_cdc pipeline reading Debezium's Avro converter: values and keys in the wire format."""
    fmt = {"type": "avro", "envelope": "debezium", "key": "registry", "schema_registry": {"url": registry.url}}
    cfg = load_pipeline(variant(tmp_path, format=fmt, source__topic=topic, **changes))
    return pipeline_format(cfg, RegistryClient(cfg.format.schema_registry))


def avro_events(registry, topic: str, events: list[tuple[int, dict | None]]) -> tuple[list, list]:
    """(values, keys) of ``events`` (order id, Debezium event or None for a tombstone) in Avro's wire format."""
    from tailfill.dev.change_stream import Change, avro_changes

    plain = [Change(0, i, json.dumps({"order_id": k}).encode(), None if e is None else json.dumps(e).encode(), k,
                    "u") for i, (k, e) in enumerate(events)]
    encoded = avro_changes(plain, registry.url, topic)
    return [c.value for c in encoded], [c.key for c in encoded]


def test_debezium_avro_events_become_the_same_rows_as_json_ones(tmp_path, registry):
    def after(i: int) -> dict:
        return {"order_id": i, "status": "paid", "amount": 3.5, "updated_at": "2026-01-01T00:00:00+00:00"}

    fmt = avro_cdc(tmp_path, registry)
    values, keys = avro_events(registry, "shop.orders", [
        (1, {"op": "r", "before": None, "after": after(1), "source": SOURCE, "ts_ms": 1}),
        (1, {"op": "u", "before": None, "after": after(1), "source": SOURCE, "ts_ms": 1}),
        (1, {"op": "d", "before": {"order_id": 1}, "after": None, "source": {**SOURCE, "lsn": 9}, "ts_ms": 1}),
        (1, None)])
    new = fmt.new_table()
    assert new.columns.names == ["order_id", "status", "amount", "updated_at", "cdc_op", "cdc_ts_ms", "cdc_lsn",
                                 "cdc_binlog", "cdc_gtid"]
    rows, bad = split_records(raw(values, keys), fmt.decoder(), "run", new.schema)
    assert bad.num_rows == 0
    got = rows.select(["kafka_offset", "kafka_key", "order_id", "status", "cdc_op", "cdc_ts_ms", "cdc_lsn"])
    assert got.to_pylist() == [
        {"kafka_offset": 0, "kafka_key": {"order_id": 1}, "order_id": 1, "status": "paid", "cdc_op": "r",
         "cdc_ts_ms": 1700, "cdc_lsn": 7},
        {"kafka_offset": 1, "kafka_key": {"order_id": 1}, "order_id": 1, "status": "paid", "cdc_op": "u",
         "cdc_ts_ms": 1700, "cdc_lsn": 7},
        {"kafka_offset": 2, "kafka_key": {"order_id": 1}, "order_id": 1, "status": None, "cdc_op": "d",
         "cdc_ts_ms": 1700, "cdc_lsn": 9},
        {"kafka_offset": 3, "kafka_key": {"order_id": 1}, "order_id": 1, "status": None, "cdc_op": "d",
         "cdc_ts_ms": None, "cdc_lsn": None},  # the tombstone: its key decoded with the key schema
    ]


SOURCE = {"connector": "postgresql", "ts_ms": 1700, "lsn": 7, "table": "orders"}


def test_bad_debezium_avro_changes_are_quarantined_and_a_truncate_is_a_row(tmp_path, registry):
    fmt = avro_cdc(tmp_path, registry)
    values, keys = avro_events(registry, "shop.orders", [
        (1, {"op": "x", "before": None, "after": {"order_id": 1}, "source": SOURCE, "ts_ms": 1}),
        (2, {"op": "c", "before": None, "after": None, "source": SOURCE, "ts_ms": 1}),
        (3, None)])
    keys[2] = b"not in the wire format"
    rows, bad = split_records(raw(values, keys), fmt.decoder(), "run", fmt.new_table().schema)
    assert rows.num_rows == 0
    reasons = dict(zip(bad["kafka_offset"].to_pylist(), bad["error"].to_pylist(), strict=True))
    assert reasons[0].startswith("does not decode with writer schema id ") and "unknown Debezium op 'x'" in reasons[0]
    assert reasons[1].endswith("Debezium op 'c' without an 'after' object")
    assert reasons[2].startswith("key not in the Confluent wire format")

    values, keys = avro_events(registry, "shop.orders", [
        (1, {"op": "t", "before": None, "after": None, "source": SOURCE, "ts_ms": 1})])
    rows, bad = split_records(raw(values, keys), fmt.decoder(), "run", fmt.new_table().schema)
    assert bad.num_rows == 0
    assert rows.select(["order_id", "cdc_op", "cdc_lsn"]).to_pylist() == [{"order_id": None, "cdc_op": "t",
                                                                           "cdc_lsn": 7}]


def test_a_key_column_the_envelope_lacks_is_named_when_the_table_is_made(tmp_path, registry):
    avro_events(registry, "shop.orders", [(1, {"op": "c", "before": None, "after": {"order_id": 1},
                                               "source": SOURCE, "ts_ms": 1})])
    fmt = avro_cdc(tmp_path, registry, target__key=["customer_id"])
    with pytest.raises(ConfigError, match=r"target.key: 'customer_id' names no column of the table's schema "
                                          r"\(columns: order_id, status, amount, updated_at\)"):
        fmt.new_table()


def protobuf_envelope() -> type:
    """Debezium's envelope of an orders row as a Protobuf message class (built from a descriptor), its row and
    source messages nested in it as Connect's Protobuf converter writes them."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.Default()
    try:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.orders.Envelope"))
    except KeyError:
        pass
    f = descriptor_pb2.FileDescriptorProto(name="shop/orders/envelope.proto", package="shop.orders", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    envelope = f.message_type.add(name="Envelope")
    value = envelope.nested_type.add(name="Value")
    value.field.add(name="order_id", number=1, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    value.field.add(name="status", number=2, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    source = envelope.nested_type.add(name="Source")
    source.field.add(name="ts_ms", number=1, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    source.field.add(name="lsn", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    for n, (name, kind) in enumerate([("before", "Value"), ("after", "Value"), ("source", "Source")], start=1):
        envelope.field.add(name=name, number=n, type=T.TYPE_MESSAGE, label=T.LABEL_OPTIONAL,
                           type_name=f".shop.orders.Envelope.{kind}")
    envelope.field.add(name="op", number=4, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    return message_factory.GetMessageClass(pool.Add(f).message_types_by_name["Envelope"])


JSON_SCHEMA_ENVELOPE = {
    "type": "object", "definitions": {"Value": {"type": "object", "properties": {
        "order_id": {"type": "integer"}, "status": {"type": ["null", "string"]}}}},
    "properties": {"before": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Value"}]},
                   "after": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Value"}]},
                   "source": {"type": "object", "properties": {"ts_ms": {"type": "integer"},
                                                               "lsn": {"type": "integer"}}},
                   "op": {"type": "string"}}}


@pytest.mark.parametrize("kind", ["protobuf", "json_schema"])
def test_debezium_protobuf_and_json_schema_events_become_rows_with_their_op(tmp_path, registry, kind):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client, ctx = SchemaRegistryClient({"url": registry.url}), SerializationContext("shop.orders", MessageField.VALUE)
    events = [("r", None, {"order_id": 1, "status": "new"}), ("u", None, {"order_id": 1, "status": "paid"}),
              ("d", {"order_id": 1, "status": "paid"}, None)]
    if kind == "protobuf":
        cls = protobuf_envelope()
        ser = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
        values = [ser(cls(op=op, source={"ts_ms": 1700, "lsn": 7 + i},
                          **{k: v for k, v in (("before", before), ("after", after)) if v is not None}), ctx)
                  for i, (op, before, after) in enumerate(events)]
    else:
        ser = JSONSerializer(json.dumps(JSON_SCHEMA_ENVELOPE), client)
        values = [ser({"op": op, "before": before, "after": after, "source": {"ts_ms": 1700, "lsn": 7 + i}}, ctx)
                  for i, (op, before, after) in enumerate(events)]
    fmt = {"type": kind, "envelope": "debezium", "key": "raw", "schema_registry": {"url": registry.url}}
    cfg = load_pipeline(variant(tmp_path, format=fmt, source__topic="shop.orders"))
    made = pipeline_format(cfg, RegistryClient(cfg.format.schema_registry))
    new = made.new_table()
    assert new.columns.names == ["order_id", "status", "cdc_op", "cdc_ts_ms", "cdc_lsn", "cdc_binlog", "cdc_gtid"]
    rows, bad = split_records(raw(values, [b"1"] * 3), made.decoder(), "run", new.schema)
    assert bad.num_rows == 0, bad["error"].to_pylist()
    assert rows.select(["kafka_offset", "order_id", "status", "cdc_op", "cdc_lsn"]).to_pylist() == [
        {"kafka_offset": 0, "order_id": 1, "status": "new", "cdc_op": "r", "cdc_lsn": 7},
        {"kafka_offset": 1, "order_id": 1, "status": "paid", "cdc_op": "u", "cdc_lsn": 8},
        {"kafka_offset": 2, "order_id": 1, "status": "paid", "cdc_op": "d", "cdc_lsn": 9}]
