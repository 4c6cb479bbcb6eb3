import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from tailfill.config import FieldSpec, FormatConfig
from tailfill.lake.rows import split_records
from tailfill.schema import QUARANTINE_SCHEMA, table_schema

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
FMT = FormatConfig(
    type="json",
    max_value_bytes=200,
    fields=[
        FieldSpec(name="id", type="long", required=True),
        FieldSpec(name="amount", type="double"),
        FieldSpec(name="ok", type="boolean"),
        FieldSpec(name="kind", type="string"),
        FieldSpec(name="at", type="timestamp"),
    ],
)


def batch(values, start_offset=100):
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(["events"] * n, pa.string()),
            pa.array([i % 3 for i in range(n)], pa.int32()),
            pa.array(range(start_offset, start_offset + n), pa.int64()),
            pa.array([T0] * n, pa.timestamp("us", tz="UTC")),
            pa.array([b"k%d" % i for i in range(n)], pa.binary()),
            pa.array(values, pa.binary()),
        ],
        names=["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "kafka_value"],
    )


def js(**doc):
    return json.dumps(doc).encode()


GOOD = [
    js(id=1, amount=2.5, ok=True, kind="a", at="2024-05-01T14:30:00+02:00"),
    js(id=2, amount=3, at="2024-05-01T12:00:00"),  # int -> double, naive timestamp taken as UTC
    js(id=-(2**63), ok=False, extra="ignored by default"),
]
BAD = {
    b"{not json": "malformed JSON",
    b"": "empty value",
    None: "empty value",
    js(id="7"): "field 'id' should be long, got str",
    js(id=1, amount="x"): "field 'amount' should be double",
    js(id=1, ok="yes"): "field 'ok' should be boolean",
    js(id=1, at="yesterday"): "is not an ISO-8601 timestamp",
    js(id=2**63): "does not fit in a long",
    js(id=True): "should be long, got bool",
    js(amount=1.0): "required field 'id' is missing",
    js(id=None): "required field 'id' is null",
    b"[1, 2]": "JSON value is a list, expected an object",
    js(id=1, kind="x" * 300): "exceeds max_value_bytes 200",
}


def test_good_records_become_typed_rows():
    rows, bad = split_records(batch(GOOD), FMT, run_id="r1")
    assert bad.num_rows == 0
    assert rows.schema == table_schema(FMT.fields)
    assert rows.column("id").to_pylist() == [1, 2, -(2**63)]
    assert rows.column("amount").to_pylist() == [2.5, 3.0, None]
    assert rows.column("ok").to_pylist() == [True, None, False]
    assert rows.column("kind").to_pylist() == ["a", None, None]
    assert rows.column("at").to_pylist() == [datetime(2024, 5, 1, 12, 30, tzinfo=UTC), T0, None]
    assert rows.column("kafka_value").to_pylist() == GOOD
    assert rows.column("kafka_key").to_pylist() == [b"k0", b"k1", b"k2"]


def test_bad_records_are_quarantined_with_reason():
    values = list(BAD)
    rows, bad = split_records(batch(values), FMT, run_id="r1")
    assert rows.num_rows == 0
    assert bad.schema == QUARANTINE_SCHEMA
    assert bad.column("kafka_offset").to_pylist() == list(range(100, 100 + len(values)))
    assert bad.column("kafka_value").to_pylist() == values
    assert set(bad.column("run_id").to_pylist()) == {"r1"}
    for value, error in zip(values, bad.column("error").to_pylist(), strict=True):
        assert BAD[value] in error, (value, error)


def test_mixed_batch_partitions_offsets_exactly():
    values = [v for pair in zip(GOOD * 5, list(BAD)[:15], strict=False) for v in pair]
    rows, bad = split_records(batch(values, start_offset=0), FMT, run_id="r2")
    ok_offsets = rows.column("kafka_offset").to_pylist()
    bad_offsets = bad.column("kafka_offset").to_pylist()
    assert rows.num_rows + bad.num_rows == len(values)
    assert not set(ok_offsets) & set(bad_offsets)
    assert sorted(ok_offsets + bad_offsets) == list(range(len(values)))
    assert ok_offsets == list(range(0, len(values), 2))


def test_unknown_fields_quarantined_when_asked():
    fmt = FMT.model_copy(update={"unknown_fields": "quarantine"})
    rows, bad = split_records(batch([js(id=1), js(id=2, colour="red", size=3)]), fmt, run_id="r")
    assert rows.column("id").to_pylist() == [1]
    assert bad.column("kafka_offset").to_pylist() == [101]
    assert bad.column("error").to_pylist() == ["unknown fields (schema drift): colour, size"]


def test_empty_batch():
    rows, bad = split_records(batch([]), FMT, run_id="r")
    assert (rows.num_rows, bad.num_rows) == (0, 0)
    assert rows.schema == table_schema(FMT.fields)


def test_raw_format_keeps_values_and_quarantines_only_oversized():
    fmt = FormatConfig(type="raw", max_value_bytes=4)
    rows, bad = split_records(batch([b"abcd", b"", None, b"abcde"]), fmt, run_id="r")
    assert rows.column("kafka_value").to_pylist() == [b"abcd", b"", None]
    assert bad.column("kafka_offset").to_pylist() == [103]
    assert bad.column("error").to_pylist() == ["value of 5 bytes exceeds max_value_bytes 4"]


# Each of these is one bad record; today it raises out of split_records and fails the whole batch
# instead of landing in quarantine (module docstring: "a record ... is never dropped").
POISON = {
    "deeply nested JSON": b"[" * 100_000,
    "int longer than 4300 digits": b'{"id": 1' + b"0" * 5000 + b"}",
    "huge int for a double": b'{"id": 1, "amount": 1' + b"0" * 400 + b"}",
    "timestamp overflows on UTC conversion": js(id=1, at="9999-12-31T23:59:59-01:00"),
    "lone surrogate in a string": b'{"id": 1, "kind": "\\ud800"}',
}


@pytest.mark.parametrize("value", POISON.values(), ids=POISON.keys())
def test_poison_record_is_quarantined_not_raised(value):
    fmt = FMT.model_copy(update={"max_value_bytes": 1_000_000})
    rows, bad = split_records(batch([js(id=1), value]), fmt, run_id="r")
    assert rows.num_rows == 1 and bad.column("kafka_offset").to_pylist() == [101]
