"""Kafka record timestamps no column can hold: never multiplied into another time (a value sent in microseconds
wrapped around to today), but a null kafka_timestamp and the record quarantined with its offset and the reason."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa

from tailfill.config import FormatConfig
from tailfill.formats.base import split_records
from tailfill.formats.json_fields import JsonDecoder
from tailfill.source.kafka import LAST_MS, record_times
from tailfill.values.schema import HEADERS, RAW_SCHEMA

NOW_MS = 1_795_937_390_533  # what 18448540011100085 * 1000 wrapped to in int64 microseconds: a day in 2026


def test_timestamps_in_range_become_microseconds_and_others_a_reason():
    millis = pa.array([0, NOW_MS, LAST_MS, -1, 18448540011100085, LAST_MS + 1, -5, 1_700_000_000_000_000], pa.int64())
    stamps, errors = record_times(millis)
    assert stamps.to_pylist()[:4] == [datetime(1970, 1, 1, tzinfo=UTC), datetime(2026, 11, 29, 7, 29, 50, 533000,
                                                                                  tzinfo=UTC),
                                      datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), None]
    assert stamps.to_pylist()[4:] == [None] * 4  # never a substitute: no wrapped-around "now"
    assert errors.to_pylist()[:4] == [None] * 4
    assert errors[4].as_py() == ("kafka_timestamp 18448540011100085 ms is after 9999-12-31 (a timestamp in "
                                 "microseconds or nanoseconds sent as milliseconds?): no timestamp column holds it")
    assert "-5 ms is before 1970" in errors[6].as_py() and "1700000000000000 ms is after" in errors[7].as_py()


def test_a_flagged_record_is_quarantined_with_its_offset_whatever_its_value():
    stamps, errors = record_times(pa.array([NOW_MS, 18448540011100085, -1], pa.int64()))
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["t"] * 3), pa.array([2] * 3, pa.int32()), pa.array([40, 41, 42], pa.int64()), stamps,
         pa.nulls(3, pa.binary()), pa.array([[]] * 3, HEADERS), pa.array([b'{"a": 1}'] * 3, pa.binary()),
         pa.nulls(3, pa.string()), errors], schema=RAW_SCHEMA)
    fmt = FormatConfig.model_validate({"type": "json", "fields": [{"name": "a", "type": "long"}]})
    rows, bad = split_records(batch, JsonDecoder(fmt), "run")
    assert rows.select(["kafka_offset", "a"]).to_pylist() == [{"kafka_offset": 40, "a": 1},
                                                              {"kafka_offset": 42, "a": 1}]
    assert bad.select(["kafka_partition", "kafka_offset", "kafka_timestamp"]).to_pylist() == [
        {"kafka_partition": 2, "kafka_offset": 41, "kafka_timestamp": None}]
    assert bad["error"][0].as_py().startswith("kafka_timestamp 18448540011100085 ms is after 9999-12-31")
    assert bad["kafka_value"][0].as_py() == b'{"a": 1}'  # kept raw
