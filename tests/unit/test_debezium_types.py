"""Debezium's logical types: each value converted into its column's type exactly (wrapped: the schema names the
type; bare: the field declares it), or quarantined naming the field, the value and why; never rounded."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from helpers import set_dotted

from tailfill.dev.typed_changes import COLUMNS, envelope_schema, fields, row
from tailfill.errors import ConfigError
from tailfill.formats.base import split_records
from tailfill.formats.registry import pipeline_format
from tailfill.pipeline.load import load_pipeline
from tailfill.values.schema import HEADERS, RAW_SCHEMA, TIMESTAMP

CDC = Path(__file__).resolve().parents[2] / "pipelines" / "orders_cdc.yaml"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path / "home"))


def typed_pipeline(tmp_path, declare_logical: bool, **changes):
    data = yaml.safe_load(CDC.read_text())
    set_dotted(data, {"format__fields": fields(declare_logical), "target__key": ["id"], **changes})
    path = tmp_path / "typed.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_pipeline(path)


def raw(values: list[bytes]) -> pa.Table:
    n = len(values)
    return pa.Table.from_batches([pa.RecordBatch.from_arrays(
        [pa.array(["t"] * n), pa.array([0] * n, pa.int32()), pa.array(range(n), pa.int64()), pa.nulls(n, TIMESTAMP),
         pa.array([b"k"] * n, pa.binary()), pa.array([[]] * n, HEADERS), pa.array(values, pa.binary()),
         pa.nulls(n, pa.string()), pa.nulls(n, pa.string())], schema=RAW_SCHEMA)])


def decode(cfg, values: list[bytes]) -> tuple[pa.Table, pa.Table]:
    return split_records(raw(values), pipeline_format(cfg).decoder(), "run")


def wrap(op: str, after: str, wrapped: bool, schema: dict | None = None) -> bytes:
    payload = f'{{"op": "{op}", "before": null, "after": {after}, "source": {{"ts_ms": 1, "lsn": 2}}}}'
    return (f'{{"schema": {json.dumps(schema or envelope_schema())}, "payload": {payload}}}' if wrapped
            else payload).encode()


@pytest.mark.parametrize("wrapped", [True, False])
def test_every_logical_type_lands_exactly_as_the_value_it_encodes(tmp_path, wrapped):
    import random

    from tailfill.dev.typed_changes import encoded

    rng = random.Random(5)
    truth = [row(rng, key) for key in range(300)]
    truth[0] |= {c.name: None for c in COLUMNS if c.name != "id"}  # nulls stay null
    cfg = typed_pipeline(tmp_path, declare_logical=not wrapped)
    rows, bad = decode(cfg, [wrap("c", encoded(r), wrapped) for r in truth])
    assert bad.num_rows == 0, bad["error"].to_pylist()[:3]
    got = rows.select([c.name for c in COLUMNS]).to_pylist()
    assert got == truth
    kinds = {f.name: f.type for f in rows.schema}
    assert kinds["born"] == pa.date32() and kinds["alarm"] == pa.time64("us")
    assert kinds["updated"] == pa.timestamp("us") and kinds["seen"] == TIMESTAMP
    assert kinds["total"] == pa.decimal128(38, 10)
    assert max(len(r["total"].as_tuple().digits) for r in truth[1:]) >= 37  # 38 digits kept, not 17


def test_values_that_cannot_be_stored_exactly_are_quarantined_with_the_reason(tmp_path):
    cfg = typed_pipeline(tmp_path, declare_logical=True)
    cases = {
        '{"id": 1, "updated": 253402300800000000}': "'updated' = 253402300800000000 (io.debezium.time.MicroTimestamp: "
                                                     "microseconds since 1970-01-01 00:00) is outside the years 1 to "
                                                     "9999",
        '{"id": 2, "created": 18448540011100085}': "'created' = 18448540011100085 (io.debezium.time.Timestamp",
        '{"id": 3, "logged": 1001}': "'logged' = 1001 (io.debezium.time.NanoTimestamp) has nanoseconds",
        '{"id": 4, "alarm": 86400000000}': "'alarm' = 86400000000 (io.debezium.time.MicroTime: microseconds since "
                                           "midnight) is not a time of day",
        '{"id": 5, "price": "At/cHDU="}': "'price' = 123456789.01 does not fit decimal128(10, 2)",
        '{"id": 6, "ratio": {"scale": 9, "value": "AQ=="}}': "'ratio' = 1E-9 does not fit decimal128(30, 8)",
        '{"id": 7, "total": 1234567890123456789012345678901.5}': "'total' = 1234567890123456789012345678901.5 does "
                                                                 "not fit decimal128(38, 10)",
        '{"id": 8, "price": "not base64!"}': "'price' = 'not base64!' is not base64",
        '{"id": 9, "born": "2020-01-01"}': "'born' should be an integer (io.debezium.time.Date: days since "
                                           "1970-01-01), got str",
        '{"id": 10, "seen": "2020-01-01T00:00:00.123456789Z"}': "'seen' = '2020-01-01T00:00:00.123456789Z' "
                                                                 "(io.debezium.time.ZonedTimestamp) has nanoseconds",
        '{"id": 11, "born": 99999999}': "'born' = 99999999 (io.debezium.time.Date: days since 1970-01-01) is "
                                        "outside the years 1 to 9999",
    }
    rows, bad = decode(cfg, [wrap("c", after, wrapped=False) for after in cases])
    assert rows.num_rows == 0
    for (after, why), error in zip(cases.items(), bad["error"].to_pylist(), strict=True):
        assert why in error, (after, error)


def test_the_schema_s_type_wins_and_a_column_that_cannot_hold_it_is_named(tmp_path):
    cfg = typed_pipeline(tmp_path, declare_logical=False)
    schema = envelope_schema()
    after = next(f for f in schema["fields"] if f["field"] == "after")
    born = next(f for f in after["fields"] if f["field"] == "born")
    born["name"] = "io.debezium.time.MicroTimestamp"  # a column declared date, events naming a timestamp
    _, bad = decode(cfg, [wrap("c", '{"id": 1, "born": 5}', wrapped=True, schema=schema)])
    assert bad["error"].to_pylist() == ["field 'born': io.debezium.time.MicroTimestamp (microseconds since "
                                        "1970-01-01 00:00) goes into a column of type timestamp_ntz or timestamp or "
                                        "long, not date"]


def test_a_type_declared_as_its_literal_passes_unchanged(tmp_path):
    declared = [{"name": "id", "type": "long", "required": True},
                {"name": "updated", "type": "long", "logical": "io.debezium.time.MicroTimestamp"},
                {"name": "born", "type": "int"}]
    cfg = typed_pipeline(tmp_path, declare_logical=False, format__fields=declared)
    rows, bad = decode(cfg, [wrap("c", '{"id": 1, "updated": 1529507596945104, "born": 18360}', wrapped=False)])
    assert bad.num_rows == 0
    assert rows.select(["updated", "born"]).to_pylist() == [{"updated": 1529507596945104, "born": 18360}]


@pytest.mark.parametrize(("field", "message"), [
    ({"name": "born", "type": "timestamp", "logical": "io.debezium.time.Date"},
     "format.fields[1].logical: io.debezium.time.Date (days since 1970-01-01) goes into a column of type date or "
     "int or long, not timestamp"),
    ({"name": "born", "type": "date", "logical": "io.debezium.time.Dates"}, "unknown logical type"),
    ({"name": "seen", "type": "timestamp_ntz", "logical": "io.debezium.time.ZonedTimestamp"},
     "goes into a column of type timestamp or string, not timestamp_ntz"),
])
def test_a_logical_type_its_column_cannot_hold_is_refused_when_the_pipeline_loads(tmp_path, field, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        typed_pipeline(tmp_path, declare_logical=False,
                       format__fields=[{"name": "id", "type": "long", "required": True}, field])


def test_a_logical_type_outside_a_debezium_envelope_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"format.fields\[1\].logical: it reads Debezium change events"):
        typed_pipeline(tmp_path, declare_logical=True, format__envelope="none")


def test_plain_json_decimals_keep_all_38_digits(tmp_path):
    from tailfill.config import FormatConfig
    from tailfill.formats.json_fields import JsonDecoder

    fmt = FormatConfig.model_validate({"type": "json", "fields": [{"name": "v", "type": "decimal(38, 10)"},
                                                                  {"name": "d", "type": "double"}]})
    values = [b'{"v": 1234567890123456789012345678.1234567891, "d": 0.1}', b'{"v": "-0.0000000001"}',
              b'{"v": 12345678901234567890123456789.1}']
    decoded = JsonDecoder(fmt).decode(pa.array(values, pa.binary()), pa.nulls(3, pa.binary()), None)
    assert decoded.rows[0].columns.to_pylist() == [
        {"v": Decimal("1234567890123456789012345678.1234567891"), "d": 0.1}, {"v": Decimal("-1E-10"), "d": None}]
    assert decoded.errors == {2: "field 'v' = 12345678901234567890123456789.1 does not fit decimal128(38, 10)"}


@pytest.mark.parametrize("kind", ["avro", "json_schema"])
def test_registry_events_of_debezium_s_converters_land_in_the_same_types(tmp_path, registry, kind):
    """Debezium's AvroConverter names each logical type in connect.name on the Avro literal (an int for a Date),
    its JsonSchemaConverter in the property's title: the registry formats map them to the same columns as JSON,
    and their values exactly."""
    from tailfill.dev.typed_changes import avro_typed, json_schema_typed, typed_stream
    from tailfill.formats.schema_registry import RegistryClient

    topic = f"typed.{kind}"
    stream = typed_stream(80, 25, seed=9, wrapped=False)
    changes = (avro_typed if kind == "avro" else json_schema_typed)(stream, registry.url, topic)
    fmt = {"type": kind, "envelope": "debezium", "key": "raw", "schema_registry": {"url": registry.url}}
    cfg = typed_pipeline(tmp_path, declare_logical=False, format=fmt, source__topic=topic)
    made = pipeline_format(cfg, RegistryClient(cfg.format.schema_registry))
    new = made.new_table()
    kinds = {f.name: f.type for f in new.columns}
    assert (kinds["born"], kinds["opens"], kinds["updated"], kinds["seen"], kinds["total"], kinds["ratio"]) == (
        pa.date32(), pa.time64("us"), pa.timestamp("us"), TIMESTAMP, pa.decimal128(38, 10), pa.string())
    upserts = [c for c in changes if c.op in ("c", "u")]
    rows, bad = split_records(raw([c.value for c in upserts]), made.decoder(), "run", new.schema)
    assert bad.num_rows == 0, bad["error"].to_pylist()[:3]
    expected = [stream.images[c.offset][1] for c in upserts]
    # the schema's own types: a variable scale has no decimal column (its exact digits), a decimal in
    # decimal.handling.mode string is a string
    expected = [{**r, "ratio": format(r["ratio"], "f"), "balance": format(r["balance"], "f")} for r in expected]
    assert rows.select([c.name for c in COLUMNS]).to_pylist() == expected


def test_a_debezium_avro_type_referred_to_by_its_name_is_the_same_type():
    """Avro names a record once: a second VariableScaleDecimal column refers to the first's name."""
    from tailfill.formats.avro import avro_columns, connect_logicals

    vsd = {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
           "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
           "connect.name": "io.debezium.data.VariableScaleDecimal"}
    row = {"type": "record", "name": "Value", "fields": [
        {"name": "a", "type": ["null", vsd]}, {"name": "b", "type": ["null", "io.debezium.data.VariableScaleDecimal"]},
        {"name": "c", "type": {"type": "int", "connect.name": "io.debezium.time.Date"}}]}
    envelope = {"type": "record", "name": "Envelope", "fields": [
        {"name": "before", "type": ["null", row]}, {"name": "after", "type": ["null", "Value"]},
        {"name": "op", "type": "string"}]}
    assert [(f.name, f.type) for f in avro_columns(json.dumps(row))] == [
        ("a", pa.string()), ("b", pa.string()), ("c", pa.date32())]
    assert connect_logicals(json.dumps(envelope), "after") == {
        "a": ("io.debezium.data.VariableScaleDecimal", {}), "b": ("io.debezium.data.VariableScaleDecimal", {}),
        "c": ("io.debezium.time.Date", {})}
