"""Registry formats without a broker: the development registry spoken to by confluent-kafka's own client
and serializers, wire-format records decoded into rows or quarantined, types and compatibility rules."""

from __future__ import annotations

import datetime
import decimal
import json
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pydantic import ValidationError

from tailfill.config import FieldSpec, FormatConfig
from tailfill.dev.avro_compat import backward_problems
from tailfill.dev.format_samples import avro_schema, order_class, sample_order
from tailfill.errors import RegistryError, SchemaChangeError
from tailfill.formats.base import Decoder, split_records
from tailfill.formats.evolve import conflicts
from tailfill.formats.json_fields import parse_value
from tailfill.formats.registry import format_of
from tailfill.formats.schema_registry import RegistryClient
from tailfill.lake.schema_change import evolve, schema_line
from tailfill.pipeline.handle import open_pipeline
from tailfill.values.column_types import parse_type
from tailfill.values.schema import HEADERS, TIMESTAMP

CTX = SerializationContext("orders", MessageField.VALUE)


def raw(values: list[bytes | None], keys: list[bytes | None] | None = None) -> pa.Table:
    n = len(values)
    return pa.table({"kafka_topic": ["orders"] * n, "kafka_partition": pa.array([0] * n, pa.int32()),
                     "kafka_offset": pa.array(range(100, 100 + n), pa.int64()),
                     "kafka_timestamp": pa.array([None] * n, TIMESTAMP),
                     "kafka_key": pa.array(keys or [None] * n, pa.binary()),
                     "kafka_headers": pa.array([None] * n, HEADERS), "kafka_value": pa.array(values, pa.binary())})


def fmt(kind: str, url: str, **more) -> FormatConfig:
    return FormatConfig(type=kind, schema_registry={"url": url, "subject": "orders-value", "attempts": 2}, **more)


def wire(fmt_: FormatConfig) -> Decoder:
    """The decoder an executor builds for a registry format (its own registry client)."""
    return format_of(fmt_, "orders", RegistryClient(fmt_.schema_registry)).decoder()


def test_avro_records_decode_with_nested_and_logical_types(registry):
    ser = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(avro_schema()))
    ok, bad = split_records(raw([ser(sample_order(7), CTX)]), wire(fmt("avro", registry.url)), "run-1")
    assert bad.num_rows == 0
    row = ok.drop(["kafka_value"]).to_pylist()[0]
    assert row["order_id"] == "ord-000000007" and row["kafka_offset"] == 100
    assert row["device"] == {"os": "android", "version": 17}
    assert row["tags"] == ["tag-0", "tag-1"] and dict(row["scores"]) == {"quality": 0.5}
    assert row["status"] == "PAID" and row["amount"] == decimal.Decimal("7.07")
    assert row["created_at"].tzinfo is not None and row["day"] == datetime.date(2026, 1, 1)
    assert ok.schema.field("device").type == pa.struct([("os", pa.string()), ("version", pa.int64())])
    assert ok.schema.field("amount").type == pa.decimal128(12, 2)


def test_records_not_in_wire_format_unknown_ids_and_garbage_are_quarantined_with_offsets(registry):
    ser = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(avro_schema()))
    good = ser(sample_order(1), CTX)
    values = [good, b'{"plain": "json"}', None, b"\x00\x00\x00\x03\xe7payload", good[:5] + b"\xff\xff", good]
    ok, bad = split_records(raw(values), wire(fmt("avro", registry.url)), "run-2")
    assert ok.column("kafka_offset").to_pylist() == [100, 105]
    errors = dict(zip(bad.column("kafka_offset").to_pylist(), bad.column("error").to_pylist(), strict=True))
    assert sorted(errors) == [101, 102, 103, 104]
    assert "Confluent wire format" in errors[101] and "Confluent wire format" in errors[102]
    assert errors[103].startswith("unknown schema id 999")
    assert errors[104].startswith("does not decode with writer schema id 1")
    assert set(bad.column("run_id").to_pylist()) == {"run-2"}


def test_protobuf_and_json_schema_records_decode_with_their_writer_schema(registry):
    client = SchemaRegistryClient({"url": registry.url})
    order = order_class()
    proto = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    msg = order(order_id="o1", quantity=2, tags=["a"])
    msg.device.os, msg.device.version = "android", 14
    msg.scores["q"] = 1.5
    msg.created_at.seconds = 1_700_000_000
    ok, bad = split_records(raw([proto(msg, CTX)]), wire(fmt("protobuf", registry.url)), "r")
    assert bad.num_rows == 0
    row = ok.to_pylist()[0]
    assert (row["order_id"], row["quantity"], row["device"], row["tags"]) == ("o1", 2, {"os": "android", "version": 14},
                                                                              ["a"])
    assert row["created_at"] == datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC)

    schema = {"type": "object", "properties": {
        "id": {"type": "string"}, "n": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
        "device": {"type": "object", "properties": {"os": {"type": "string"}}}}}
    jser = JSONSerializer(json.dumps(schema), client)
    jctx = SerializationContext("events", MessageField.VALUE)
    value = jser({"id": "e1", "n": 3, "at": "2026-01-01T00:00:00Z", "device": {"os": "x"}}, jctx)
    wrong = value[:5] + b'{"id": 5}'
    json_fmt = FormatConfig(type="json_schema", schema_registry={"url": registry.url, "subject": "events-value"})
    ok, bad = split_records(raw([value, wrong]), wire(json_fmt), "r")
    assert ok.select(["id", "n", "device"]).to_pylist() == [{"id": "e1", "n": 3, "device": {"os": "x"}}]
    assert bad.column("error").to_pylist() == ["does not decode with writer schema id 2: field 'id' should be string, "
                                               "got int 5"]


def test_the_registry_refuses_an_avro_version_that_breaks_backward_compatibility(registry):
    client = SchemaRegistryClient({"url": registry.url})
    base = avro_schema()
    client.register_schema("orders-value", Schema(json.dumps(base), "AVRO"))
    required = dict(base, fields=[*base["fields"], {"name": "country", "type": "string"}])
    with pytest.raises(SchemaRegistryError, match="country: new field without a default"):
        client.register_schema("orders-value", Schema(json.dumps(required), "AVRO"))
    optional = dict(base, fields=[*base["fields"], {"name": "country", "type": ["null", "string"], "default": None}])
    assert client.register_schema("orders-value", Schema(json.dumps(optional), "AVRO")) == 2
    assert client.get_latest_version("orders-value").version == 2
    client.set_compatibility("orders-value", "NONE")
    retyped = dict(base, fields=[{"name": "order_id", "type": "long"}, *base["fields"][1:]])
    assert client.register_schema("orders-value", Schema(json.dumps(retyped), "AVRO")) == 3


def test_avro_resolution_rules():
    rec = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}
    longer = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
    assert backward_problems(reader=longer, writer=rec) == []  # int → long promotes
    assert backward_problems(reader=rec, writer=longer) == ["n: type long cannot be read as int"]


def test_an_unreachable_registry_fails_with_one_line_naming_its_url(refused_port):
    cfg = fmt("avro", f"http://127.0.0.1:{refused_port}").schema_registry
    with pytest.raises(RegistryError) as err:
        RegistryClient(cfg).schema(1)
    assert "\n" not in str(err.value) and f"{cfg.url}" in str(err.value) and "after 2 tries" in str(err.value)


def test_a_writer_schema_that_retypes_a_column_is_quarantined_when_so_configured(registry):
    client = SchemaRegistryClient({"url": registry.url})
    client.set_compatibility(level="NONE")
    retyped = dict(avro_schema(), fields=[{"name": "order_id", "type": "long"}])
    ser = AvroSerializer(client, json.dumps(retyped), conf={"auto.register.schemas": True})
    table = pa.schema([("order_id", pa.large_string()), ("quantity", pa.int64())])
    ok, bad = split_records(raw([ser({"order_id": 5}, CTX)]), wire(fmt("avro", registry.url)), "r", table)
    assert ok.num_rows == 0
    assert bad.column("error").to_pylist() == [
        "writer schema id 1 is incompatible with the table: field 'order_id': the table has string, "
        "the writer schema has int64"]
    assert conflicts(pa.schema([("quantity", pa.int32())]), table) == []  # int → long: a promotion


def test_evolution_adds_optional_columns_keeps_ids_and_refuses_retyping(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    from tailfill.formats.evolve import required_properties

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=str(tmp_path))
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", properties=required_properties(("n", "a")),
                                 schema=pa.schema([("a", pa.string()), ("n", pa.int32()),
                                                          ("s", pa.struct([("x", pa.int64())])),
                                                          ("l", pa.list_(pa.int32())), ("p", pa.decimal128(10, 2))]))
    ids = {f.name: f.field_id for f in table.schema().fields}
    assert evolve(table, pa.schema([("n", pa.int32()), ("l", pa.list_(pa.int32()))])) is False  # nothing new
    wider = pa.schema([("a", pa.string()), ("n", pa.int64()), ("s", pa.struct([("x", pa.int64()), ("y", pa.string())])),
                       ("l", pa.list_(pa.int64())), ("p", pa.decimal128(12, 2)), ("country", pa.string())])
    assert schema_line(table) == "table schema: version 0, 5 columns; requires a, n; unchanged since the table was made"
    assert evolve(table, wider) is True
    assert evolve(table, wider) is False  # nothing left to change
    assert "added country; widened n int32 → int64, s" in schema_line(table)
    assert "l list<item: int32> → list<item: int64>, p decimal128(10, 2) → decimal128(12, 2)" in schema_line(table)
    after = table.schema()
    assert {f.name: f.field_id for f in after.fields if f.name in ids} == ids
    assert str(after.find_field("n").field_type) == "long" and not after.find_field("country").required
    assert str(after.find_field("l").field_type) == "list<long>"
    assert str(after.find_field("p").field_type) == "decimal(12, 2)"
    assert after.find_field("s.y") is not None
    with pytest.raises(SchemaChangeError, match="field 'n': the table has int64, the writer schema has string"):
        evolve(table, pa.schema([("n", pa.string())]))


@pytest.mark.parametrize(("text", "kind"), [
    ("struct<os: string, version: long>", pa.struct([("os", pa.string()), ("version", pa.int64())])),
    ("list<string>", pa.list_(pa.string())),
    ("map<string, double>", pa.map_(pa.string(), pa.float64())),
    ("decimal(12, 2)", pa.decimal128(12, 2)),
    ("date", pa.date32()),
    ("list<struct<a: int, b: list<date>>>", pa.list_(pa.struct([("a", pa.int32()), ("b", pa.list_(pa.date32()))]))),
])
def test_field_types_parse(text, kind):
    assert parse_type(text) == kind


@pytest.mark.parametrize("text", ["struct<os string>", "list<strin>", "map<long, string>", "decimal(40, 2)", "list<"])
def test_bad_field_types_are_config_errors(text):
    with pytest.raises(ValidationError, match="type"):
        FieldSpec(name="x", type=text)


def test_json_fields_with_nested_types_parse_or_quarantine():
    json_fmt = FormatConfig(type="json", fields=[
        {"name": "id", "type": "string", "required": True}, {"name": "device", "type": "struct<os: string, v: long>"},
        {"name": "tags", "type": "list<string>"}, {"name": "scores", "type": "map<string, double>"},
        {"name": "price", "type": "decimal(12, 2)"}, {"name": "day", "type": "date"}])
    good = b'{"id": "a", "device": {"os": "ios", "v": 3}, "tags": ["x"], "scores": {"q": 1}, "price": "12.50", ' \
           b'"day": "2026-01-02"}'
    bad = b'{"id": "b", "tags": "not-a-list"}'
    rounded = b'{"id": "c", "price": 1.234}'
    ok, quarantined = split_records(raw([good, bad, rounded]), format_of(json_fmt, "events").decoder(), "r")
    assert ok.select(["id", "device", "tags", "price", "day"]).to_pylist() == [
        {"id": "a", "device": {"os": "ios", "v": 3}, "tags": ["x"], "price": decimal.Decimal("12.50"),
         "day": datetime.date(2026, 1, 2)}]
    assert dict(ok.column("scores")[0].as_py()) == {"q": 1.0}
    assert quarantined.column("kafka_offset").to_pylist() == [101, 102]
    assert "field 'tags' should be list<item: string>" in quarantined.column("error")[0].as_py()
    assert parse_value(json_fmt, good)[0] == "a"


def test_avro_types_map_to_iceberg_ready_arrow_types(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    from tailfill.formats.avro import AvroWriter

    schema = {"type": "record", "name": "R", "fields": [
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "lt", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 2}},
        {"name": "fd", "type": {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 10,
                                "scale": 3}},
        {"name": "f", "type": "float"}, {"name": "opt", "type": ["null", "long"], "default": None}]}
    writer = AvroWriter(json.dumps(schema))
    assert [str(f.type) for f in writer.columns] == ["time64[us]", "timestamp[us]", "string", "binary",
                                                     "decimal128(10, 3)", "float", "int64"]
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=str(tmp_path))
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=writer.columns)  # every mapped type is one Iceberg takes
    assert [str(f.field_type) for f in table.schema().fields] == ["time", "timestamp", "string", "binary",
                                                                  "decimal(10, 3)", "float", "long"]
    with pytest.raises(ValueError, match="several non-null types"):
        AvroWriter(json.dumps({"type": "record", "name": "R", "fields": [{"name": "x", "type": ["int", "string"]}]}))


def test_a_json_field_retyped_in_format_fields_is_one_line_naming_both_types(tmp_path, monkeypatch):
    import yaml

    from tailfill.pipeline.load import load_pipeline

    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    spec = yaml.safe_load((Path(__file__).resolve().parents[2] / "pipelines" / "demo.yaml").read_text())
    spec["source"]["bootstrap_servers"] = "127.0.0.1:9"
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(spec))
    open_pipeline(load_pipeline(path)).provision_tables()
    spec["format"]["fields"][1]["type"] = "string"  # user_id: long → string
    spec["format"]["fields"].append({"name": "country", "type": "string"})
    spec["expectations"] = []
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SchemaChangeError) as err:  # the planner evolves the table to the YAML before a run
        open_pipeline(load_pipeline(path)).provision_tables()
    assert str(err.value) == ("incompatible schema change in demo_events: field 'user_id': the table has int64, "
                              "format.fields has string")


@pytest.mark.parametrize(("fmt_", "message"), [
    ({"type": "avro"}, "avro format needs schema_registry"),
    ({"type": "protobuf", "schema_registry": {"url": "embedded"}, "fields": [{"name": "a", "type": "string"}]},
     "takes its columns from the registry's schema, not 'fields'"),
    ({"type": "json", "fields": [{"name": "a", "type": "string"}], "schema_registry": {"url": "embedded"}},
     "json format takes no schema_registry"),
])
def test_each_format_checks_its_own_settings(fmt_, message):
    from tailfill.formats.registry import format_class

    [problem] = format_class(fmt_["type"]).problems(FormatConfig(**fmt_))
    assert message in problem


@pytest.mark.parametrize(("fmt_", "message"), [
    ({"type": "avro", "schema_registry": {"url": "http://user:pw@registry:8081"}}, "must be http"),
    ({"type": "avro", "schema_registry": {"url": "embedded", "username_env": "U"}}, "both username_env and"),
    ({"type": "avro", "schema_registry": {"url": "embedded"}, "on_incompatible_schema": "ignore"}, "'quarantine'"),
])
def test_registry_settings_are_checked_by_the_model(fmt_, message):
    with pytest.raises(ValidationError, match=message):
        FormatConfig(**fmt_)


def test_each_writer_says_which_top_level_fields_it_requires():
    import base64

    from google.protobuf import descriptor_pb2

    from tailfill.formats.avro import AvroWriter
    from tailfill.formats.json_schema import JsonSchemaWriter
    from tailfill.formats.protobuf import ProtobufWriter

    assert AvroWriter(json.dumps(avro_schema(with_country=True))).required == (
        "order_id", "quantity", "tags", "scores", "status", "amount", "day", "created_at")  # not device, country
    schema = {"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
              "required": ["id", "gone"]}
    assert JsonSchemaWriter(json.dumps(schema)).required == ("id",)
    proto = descriptor_pb2.FileDescriptorProto(name="p.proto", syntax="proto2")
    msg = proto.message_type.add(name="M")
    for number, (name, label) in enumerate([("id", "LABEL_REQUIRED"), ("note", "LABEL_OPTIONAL")], 1):
        msg.field.add(name=name, number=number, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                      label=getattr(descriptor_pb2.FieldDescriptorProto, label))
    two = ProtobufWriter(base64.b64encode(proto.SerializeToString()).decode())
    assert two.required_of((0,)) == ("id",)
    proto.syntax, msg.field[0].label = "proto3", descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    proto.name = "p3.proto"
    assert ProtobufWriter(base64.b64encode(proto.SerializeToString()).decode()).required_of((0,)) == ()


def test_a_field_the_table_requires_is_missing_from_a_writer_schema():
    from tailfill.formats.evolve import missing_required

    table = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("n", pa.int64(), nullable=False),
                       pa.field("note", pa.string())])
    assert missing_required(pa.schema([("id", pa.string()), ("n", pa.int32())]), table) == []
    assert missing_required(pa.schema([("n", pa.int64())]), table) == [
        "field 'id': the table requires it (string), the writer schema does not have it"]
    assert missing_required(pa.schema([("id", pa.string()), ("n", pa.int64())]), table) == []  # note: optional


@pytest.mark.parametrize("policy", ["quarantine", "fail"])
def test_records_of_a_writer_schema_without_a_required_field_are_quarantined_or_stop(registry, policy):
    client = SchemaRegistryClient({"url": registry.url})
    client.set_compatibility(level="NONE")
    base = avro_schema()
    dropped = dict(base, fields=[f for f in base["fields"] if f["name"] != "quantity"])
    v1, v2 = (AvroSerializer(client, json.dumps(s)) for s in (base, dropped))
    order = sample_order(3)
    values = [v1(order, CTX), v2({k: v for k, v in order.items() if k != "quantity"}, CTX)]
    table = pa.schema([pa.field("order_id", pa.string(), nullable=False), pa.field("quantity", pa.int32(),
                                                                                   nullable=False)])
    decoder = wire(fmt("avro", registry.url, on_incompatible_schema=policy))
    if policy == "fail":
        with pytest.raises(SchemaChangeError) as err:
            split_records(raw(values), decoder, "r", table)
        assert str(err.value) == ("incompatible writer schema id 2: field 'quantity': the table requires it (int32), "
                                  "the writer schema does not have it")
        return
    ok, bad = split_records(raw(values), decoder, "r", table)
    assert ok.column("kafka_offset").to_pylist() == [100] and bad.column("kafka_offset").to_pylist() == [101]
    assert bad.column("error").to_pylist() == [
        "writer schema id 2 is incompatible with the table: field 'quantity': the table requires it (int32), "
        "the writer schema does not have it"]


def _proto(fields: list[tuple[str, int, str, str]], syntax: str = "proto3") -> str:
    """A registered Protobuf schema (base64 FileDescriptorProto) of ``message Order`` with ``fields``:
    (name, number, type such as TYPE_INT32, label such as LABEL_OPTIONAL)."""
    import base64

    from google.protobuf import descriptor_pb2

    P = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax=syntax)
    msg = proto.message_type.add(name="Order")
    for name, number, kind, label in fields:
        msg.field.add(name=name, number=number, type=getattr(P, kind), label=getattr(P, label))
    return base64.b64encode(proto.SerializeToString()).decode()


def test_protobuf_compatibility_rules():
    from tailfill.dev.protobuf_compat import backward_problems, parse_file

    def problems(new: list, old: list, syntax: str = "proto3") -> list[str]:
        return backward_problems(parse_file(_proto(new, syntax)), parse_file(_proto(old, syntax)))

    base = [("id", 1, "TYPE_STRING", "LABEL_OPTIONAL"), ("n", 2, "TYPE_INT32", "LABEL_OPTIONAL")]
    assert problems([base[0], ("n", 2, "TYPE_INT64", "LABEL_OPTIONAL"), ("x", 3, "TYPE_BOOL", "LABEL_OPTIONAL")],
                    base) == []  # int32 → int64 is wire-compatible, a new optional field is fine
    assert problems([base[0]], base) == []  # proto3: removing a field is fine
    assert problems([base[0], ("n", 2, "TYPE_STRING", "LABEL_OPTIONAL")], base) == [
        "shop.Order.n (field 2): type int32 became string"]
    assert problems([base[0], ("n", 2, "TYPE_INT32", "LABEL_REPEATED")], base) == [
        "shop.Order.n (field 2): changes between repeated and single"]
    required = [("id", 1, "TYPE_STRING", "LABEL_REQUIRED"), base[1]]
    assert problems([base[1]], required, "proto2") == ["shop.Order.id (field 1): a required field is removed"]
    assert problems(required, [base[1]], "proto2") == ["shop.Order.id (field 1): a required field is added"]
    with pytest.raises(ValueError, match="not a serialized FileDescriptorProto"):
        parse_file("syntax = 'proto3'; message Order {}")


def test_json_schema_compatibility_rules():
    from tailfill.dev.json_schema_compat import backward_problems

    def obj(props: dict, required: list[str] = ()) -> dict:
        return {"type": "object", "properties": props, "required": list(required)}

    old = obj({"id": {"type": "string"}, "n": {"type": "integer"}, "d": obj({"os": {"type": "string"}})}, ["id"])
    widened = obj({"id": {"type": "string"}, "n": {"type": ["number", "null"]}, "d": obj({"os": {"type": "string"}}),
                   "c": {"type": "string", "default": "nl"}}, ["id", "c"])
    assert backward_problems(reader=widened, writer=old) == []  # integer → number; required with a default
    assert backward_problems(reader=old, writer=widened) == ["n: type null|number became integer"]
    retyped = obj({"id": {"type": "string"}, "d": obj({"os": {"type": "integer"}}), "z": {"type": "string"}},
                  ["id", "z"])
    assert backward_problems(reader=retyped, writer=old) == ["z: newly required without a default",
                                                             "d.os: type string became integer"]
    refs = {"$defs": {"D": obj({"os": {"type": "integer"}})}, **obj({"d": {"$ref": "#/$defs/D"}})}
    assert backward_problems(reader=refs, writer=old) == ["d.os: type string became integer"]


def test_the_registry_checks_protobuf_and_json_schema_versions_too(registry):
    client = SchemaRegistryClient({"url": registry.url})
    v1 = _proto([("id", 1, "TYPE_STRING", "LABEL_OPTIONAL"), ("n", 2, "TYPE_INT32", "LABEL_OPTIONAL")])
    retyped = _proto([("id", 1, "TYPE_STRING", "LABEL_OPTIONAL"), ("n", 2, "TYPE_STRING", "LABEL_OPTIONAL")])
    widened = _proto([("id", 1, "TYPE_STRING", "LABEL_OPTIONAL"), ("n", 2, "TYPE_INT64", "LABEL_OPTIONAL")])
    assert client.register_schema("p-value", Schema(v1, "PROTOBUF")) == 1
    assert client.test_compatibility("p-value", Schema(retyped, "PROTOBUF")) is False
    with pytest.raises(SchemaRegistryError) as err:
        client.register_schema("p-value", Schema(retyped, "PROTOBUF"))
    assert err.value.http_status_code == 409 and "shop.Order.n (field 2): type int32 became string" in str(err.value)
    assert client.test_compatibility("p-value", Schema(widened, "PROTOBUF")) is True
    assert client.register_schema("p-value", Schema(widened, "PROTOBUF")) == 2

    j1 = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    j2 = {"type": "object", "properties": {"id": {"type": "string"}, "c": {"type": "string"}}, "required": ["id", "c"]}
    assert client.register_schema("j-value", Schema(json.dumps(j1), "JSON")) == 3
    assert client.test_compatibility("j-value", Schema(json.dumps(j2), "JSON")) is False
    with pytest.raises(SchemaRegistryError, match="c: newly required without a default") as err:
        client.register_schema("j-value", Schema(json.dumps(j2), "JSON"))
    assert err.value.http_status_code == 409
    client.set_compatibility("j-value", "NONE")
    assert client.register_schema("j-value", Schema(json.dumps(j2), "JSON")) == 4


def test_keys_decode_with_their_own_schema_or_send_their_record_to_quarantine(registry):
    client = SchemaRegistryClient({"url": registry.url})
    key_ctx = SerializationContext("orders", MessageField.KEY)
    record = {"type": "record", "name": "OrderKey", "fields": [{"name": "customer", "type": "string"},
                                                                {"name": "region", "type": "int"}]}
    by_record = AvroSerializer(client, json.dumps(record))
    value = AvroSerializer(client, json.dumps(avro_schema()))(sample_order(1), CTX)
    keys = [by_record({"customer": "c1", "region": 3}, key_ctx), None, b"plain-key", b"\x00\x00\x00\x03\xe7k",
            by_record({"customer": "c2", "region": 4}, key_ctx)[:-1]]
    decoder = wire(fmt("avro", registry.url, key="registry"))
    table = pa.schema([pa.field("kafka_key", pa.struct([("customer", pa.string()), ("region", pa.int64())]))])
    ok, bad = split_records(raw([value] * len(keys), keys), decoder, "r", table)
    assert ok.column("kafka_key").to_pylist() == [{"customer": "c1", "region": 3}, None]
    assert ok.schema.field("kafka_key").type == table.field("kafka_key").type  # int → the table's long
    assert ok.column("order_id").to_pylist() == ["ord-000000001"] * 2
    errors = dict(zip(bad.column("kafka_offset").to_pylist(), bad.column("error").to_pylist(), strict=True))
    assert errors[102] == "key not in the Confluent wire format (no magic byte 0 and schema id)"
    assert errors[103] == "key: unknown schema id 999 (the registry has no such schema)"
    assert errors[104] == "key does not decode with key schema id 2: EOFError"
    assert bad.column("kafka_key").to_pylist()[0] == b"plain-key"  # the quarantine keeps the raw key
    none_ok, _ = split_records(raw([value], [b"plain-key"]), decoder, "r", table)  # only bad keys: no rows
    assert pa.concat_tables([none_ok, ok], promote_options="permissive").num_rows == 2  # joins decoded keys

    client.set_compatibility("orders-key", "NONE")
    as_text = AvroSerializer(client, json.dumps("string"))("k1", key_ctx)
    ok, bad = split_records(raw([value], [as_text]), decoder, "r")
    assert bad.num_rows == 0 and ok.column("kafka_key").to_pylist() == ["k1"]
    assert ok.column_names.index("kafka_key") == 4  # where the table has it


def test_protobuf_and_json_schema_keys_decode_too(registry):
    client = SchemaRegistryClient({"url": registry.url})
    key_ctx = SerializationContext("orders", MessageField.KEY)
    order = order_class()
    proto = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    msg = order(order_id="o1", quantity=2)
    ok, bad = split_records(raw([proto(msg, CTX)], [proto(order(order_id="k1", quantity=5), key_ctx)]),
                            wire(fmt("protobuf", registry.url, key="registry")), "r")
    assert bad.num_rows == 0
    key = ok.column("kafka_key").to_pylist()[0]
    assert (key["order_id"], key["quantity"]) == ("k1", 5)

    jvalue = JSONSerializer(json.dumps({"type": "object", "properties": {"id": {"type": "string"}}}), client)
    jkey = JSONSerializer(json.dumps({"type": "string"}), client)
    json_fmt = FormatConfig(type="json_schema", key="registry",
                            schema_registry={"url": registry.url, "subject": "events-value"})
    ctx, key_ctx = (SerializationContext("events", field) for field in (MessageField.VALUE, MessageField.KEY))
    ok, bad = split_records(raw([jvalue({"id": "e1"}, ctx)], [jkey("customer-9", key_ctx)]), wire(json_fmt), "r")
    assert bad.num_rows == 0 and ok.select(["kafka_key", "id"]).to_pylist() == [{"kafka_key": "customer-9",
                                                                                  "id": "e1"}]


def test_protobuf_schemas_referencing_other_subjects_decode(registry):
    from tailfill.dev.format_samples import referencing_order_class

    client = SchemaRegistryClient({"url": registry.url})
    order = referencing_order_class()
    ser = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    msg = order(order_id="o9")
    msg.customer.id, msg.customer.tier = "cust-1", 2
    value = ser(msg, CTX)
    assert client.get_subjects() == ["orders-value", "tailfill/sample/customer.proto"]
    refs = client.get_latest_version("orders-value").schema.references
    assert [(r.name, r.subject, r.version) for r in refs] == [("tailfill/sample/customer.proto",
                                                               "tailfill/sample/customer.proto", 1)]
    ok, bad = split_records(raw([value]), wire(fmt("protobuf", registry.url)), "r")
    assert bad.num_rows == 0
    assert ok.select(["order_id", "customer"]).to_pylist() == [{"order_id": "o9",
                                                                "customer": {"id": "cust-1", "tier": 2}}]

    from confluent_kafka.schema_registry import SchemaReference

    from tailfill.formats.schema_registry import Reference, RegisteredSchema

    gone = RegisteredSchema(9, "PROTOBUF", "", references=(Reference("x.proto", "nowhere", 1),))
    with pytest.raises(ValueError, match=r"its reference 'x.proto' \(subject 'nowhere' version 1\) is not in the"):
        RegistryClient(fmt("protobuf", registry.url).schema_registry).imports(gone)
    with pytest.raises(SchemaRegistryError, match=r"reference 'x.proto' names subject 'nowhere' version 1, which"):
        client.register_schema("other-value", Schema(client.get_latest_version("orders-value").schema.schema_str,
                                                     "PROTOBUF", [SchemaReference("x.proto", "nowhere", 1)]))


def test_preflight_checks_the_key_subject_with_registry_keys(registry, tmp_path):
    import yaml

    from tailfill.errors import PreflightError
    from tailfill.pipeline.load import load_pipeline
    from tailfill.run.preflight import check_registry

    spec = yaml.safe_load((Path(__file__).resolve().parents[2] / "pipelines" / "orders_avro.yaml").read_text())
    spec["format"].update(key="registry", schema_registry={"url": registry.url})
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump(spec))
    cfg = load_pipeline(path)
    client = SchemaRegistryClient({"url": registry.url})
    client.register_schema(cfg.subject, Schema(json.dumps(avro_schema()), "AVRO"))
    with pytest.raises(PreflightError, match=f"has no subject '{cfg.key_subject}'"):
        check_registry(open_pipeline(cfg))
    client.register_schema(cfg.key_subject, Schema(json.dumps("string"), "AVRO"))
    assert check_registry(open_pipeline(cfg)) == (
        f"schema registry {registry.url} reachable, subject '{cfg.subject}' at version 1 (id 1), key subject "
        f"'{cfg.key_subject}' at version 1 (id 2)")
