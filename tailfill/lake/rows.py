"""Turn raw Kafka records into table rows, or into quarantine rows with the reason.

Every input record ends up in exactly one of the two outputs: a record that cannot be parsed
(malformed JSON, empty value, wrong type, missing required field, oversized) is never dropped.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tailfill.config import FieldSpec, FormatConfig
from tailfill.errors import RecordError
from tailfill.schema import METADATA_FIELDS, QUARANTINE_SCHEMA, table_schema

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _coerce(spec: FieldSpec, value: Any) -> Any:
    if value is None:
        if spec.required:
            raise RecordError(f"required field '{spec.name}' is null")
        return None
    t = spec.type
    if t == "string" and isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise RecordError(f"field '{spec.name}' is not valid UTF-8 (lone surrogate)") from None
        return value
    if t == "long" and isinstance(value, int) and not isinstance(value, bool):
        if not INT64_MIN <= value <= INT64_MAX:
            raise RecordError(f"field '{spec.name}' = {value} does not fit in a long")
        return value
    if t == "double" and isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise RecordError(f"field '{spec.name}' is too large for a double") from None
    if t == "boolean" and isinstance(value, bool):
        return value
    if t == "timestamp" and isinstance(value, str):
        try:
            ts = datetime.fromisoformat(value)
            return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).astimezone(UTC)
        except (ValueError, OverflowError):
            raise RecordError(f"field '{spec.name}' = {value[:60]!r} is not an ISO-8601 timestamp in range") from None
    raise RecordError(f"field '{spec.name}' should be {t}, got {type(value).__name__} {json.dumps(value)[:60]}")


def parse_value(fmt: FormatConfig, value: bytes | None) -> list[Any]:
    """The declared fields of one JSON value, in order; :class:`RecordError` if it is bad."""
    if value is None or len(value) == 0:
        raise RecordError("empty value")
    if len(value) > fmt.max_value_bytes:
        raise RecordError(f"value of {len(value)} bytes exceeds max_value_bytes {fmt.max_value_bytes}")
    try:
        doc = json.loads(value)
    except RecursionError:
        raise RecordError("malformed JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, over-long integers
        raise RecordError(f"malformed JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise RecordError(f"JSON value is a {type(doc).__name__}, expected an object")
    if fmt.unknown_fields == "quarantine":
        unknown = sorted(set(doc) - {f.name for f in fmt.fields})
        if unknown:
            raise RecordError(f"unknown fields (schema drift): {', '.join(unknown)}")
    out = []
    for spec in fmt.fields:
        if spec.required and spec.name not in doc:
            raise RecordError(f"required field '{spec.name}' is missing")
        out.append(_coerce(spec, doc.get(spec.name)))
    return out


def split_records(batch: pa.RecordBatch | pa.Table, fmt: FormatConfig, run_id: str) -> tuple[pa.Table, pa.Table]:
    """Split raw records (``kafka_*`` columns) into (rows, quarantined rows)."""
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    meta = table.select([f.name for f in METADATA_FIELDS]).cast(pa.schema(METADATA_FIELDS))
    values = table.column("kafka_value").to_pylist()
    schema = table_schema(fmt.fields)
    if fmt.type == "raw":
        oversized = [v is not None and len(v) > fmt.max_value_bytes for v in values]
        errors = [
            f"value of {len(v)} bytes exceeds max_value_bytes {fmt.max_value_bytes}" if big else None
            for v, big in zip(values, oversized, strict=True)
        ]
        parsed_cols: list[list[Any]] = []
    else:
        errors, rows = [], []
        for v in values:
            try:
                rows.append(parse_value(fmt, v))
                errors.append(None)
            except RecordError as exc:
                rows.append([None] * len(fmt.fields))
                # Error text may quote the record; keep it encodable whatever the record held.
                errors.append(str(exc).encode("utf-8", "backslashreplace").decode("utf-8"))
        parsed_cols = [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in fmt.fields]
    ok_mask = pa.array([e is None for e in errors], pa.bool_())
    value_arr = pa.array(values, pa.binary())
    parsed = [pa.array(c, f.type) for c, f in zip(parsed_cols, list(schema)[5:-1], strict=True)]
    full = pa.Table.from_arrays(
        [*meta.columns, *parsed, value_arr],
        schema=schema,
    )
    ok = full.filter(ok_mask)
    bad_meta = meta.filter(pc.invert(ok_mask))
    bad_errors = [e for e in errors if e is not None]
    bad = pa.Table.from_arrays(
        [
            *bad_meta.columns,
            value_arr.filter(pc.invert(ok_mask)),
            pa.array(bad_errors, pa.string()),
            pa.array([run_id] * len(bad_errors), pa.string()),
        ],
        schema=QUARANTINE_SCHEMA,
    )
    return ok, bad
