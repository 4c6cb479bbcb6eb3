"""Kafka Connect's and Debezium's logical types: what each encoded value means, as the value its column takes.

Debezium writes a column's value in a *literal* type (an int, a long, a string, bytes) and names its meaning in
the field's schema (``io.debezium.time.MicroTimestamp``: microseconds since the epoch, no zone). The JSON
converter's ``schema``/``payload`` wrapper carries those names (:func:`schema_logicals`); without it a field
declares its name (``format.fields[].logical``). :func:`to_column` turns one value into what its declared column
holds, exactly or not at all: a timestamp out of Iceberg's range (years 1 to 9999), a nanosecond that a
microsecond column cannot hold, a decimal with more digits than its column: each is a :class:`RecordError` naming
the field, the value and why, for the quarantine.

The result is a Python value of the column's type (a ``date``, ``time``, ``datetime``, ``Decimal``): the JSON path
encodes it back for the JSON decoder's rules (ISO text, exact number text), a registry format's rows take it as it
is. Declared as its literal type (``long`` for a ``MicroTimestamp``), a value passes unchanged.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from tailfill.errors import RecordError
from tailfill.values.column_types import TIMESTAMP, exact_decimal

EPOCH = datetime(1970, 1, 1)
MICROS_PER_DAY = 86_400_000_000
FIRST_US = (datetime(1, 1, 1) - EPOCH) // timedelta(microseconds=1)  # 0001-01-01T00:00:00
LAST_US = (datetime(9999, 12, 31, 23, 59, 59, 999999) - EPOCH) // timedelta(microseconds=1)
_FRACTION = re.compile(r"\.(\d+)")


@dataclass(frozen=True)
class Logical:
    """One logical type: its name, the declared types that take its encoded value as it is, the column kinds it
    converts into (:func:`kind_of`; none: a text kept as it is), what its value means, and its conversion."""

    name: str
    literal: tuple[str, ...]
    targets: tuple[str, ...]
    meaning: str
    convert: Callable[[Any, Logical, pa.DataType, dict, str], Any]


def _days(value: Any, logical: Logical, column: pa.DataType, params: dict, name: str) -> date:
    days = _integer(value, logical, name)
    try:
        return date(1970, 1, 1) + timedelta(days=days)
    except OverflowError:
        raise RecordError(f"field '{name}' = {days} ({logical.name}: {logical.meaning}) is outside the years "
                          "1 to 9999 a date column holds") from None


def _time(value: Any, logical: Logical, column: pa.DataType, params: dict, name: str) -> time:
    micros = _micros(value, logical, name)
    if not 0 <= micros < MICROS_PER_DAY:
        raise RecordError(f"field '{name}' = {value} ({logical.name}: {logical.meaning}) is not a time of day "
                          "from 00:00 to 23:59:59.999999 (a time column holds no other)")
    return (datetime.min + timedelta(microseconds=micros)).time()


def _timestamp(value: Any, logical: Logical, column: pa.DataType, params: dict, name: str) -> datetime:
    micros = _micros(value, logical, name)
    if not FIRST_US <= micros <= LAST_US:
        raise RecordError(f"field '{name}' = {value} ({logical.name}: {logical.meaning}) is outside the years "
                          "1 to 9999 a timestamp column holds (a value in another unit?)")
    local = EPOCH + timedelta(microseconds=micros)
    return local if column.tz is None else local.replace(tzinfo=UTC)


def _zoned(value: Any, logical: Logical, column: pa.DataType, params: dict, name: str) -> datetime:
    if not isinstance(value, str):
        raise RecordError(f"field '{name}' should be an ISO-8601 text ({logical.name}), got {type(value).__name__}")
    fraction = _FRACTION.search(value)
    if fraction and fraction.group(1)[6:].strip("0"):
        raise RecordError(f"field '{name}' = {value[:60]!r} ({logical.name}) has nanoseconds; a timestamp column "
                          "holds microseconds")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise RecordError(f"field '{name}' = {value[:60]!r} is not an ISO-8601 timestamp ({logical.name})") from None
    if parsed.tzinfo is None:
        raise RecordError(f"field '{name}' = {value[:60]!r} ({logical.name}) has no zone")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise RecordError(f"field '{name}' = {value[:60]!r} is outside the years 1 to 9999 in UTC") from None


def _decimal(value: Any, logical: Logical, column: pa.DataType, params: dict, name: str) -> Any:
    if isinstance(value, str):  # the converter's default: the unscaled value's two's-complement bytes, base64
        scale = params.get("scale", getattr(column, "scale", None))
        if scale is None:
            raise RecordError(f"field '{name}' ({logical.name}) has no scale: declare the column decimal(p, s)")
        number = Decimal(_unscaled(value, name)).scaleb(-int(scale))
    elif isinstance(value, int | Decimal) and not isinstance(value, bool):  # decimal.format: NUMERIC
        number = Decimal(value)
    else:
        raise RecordError(f"field '{name}' should be base64 bytes or a number ({logical.name}), got "
                          f"{type(value).__name__}")
    return _exactly(number, column, name)


def _variable_decimal(value: Any, logical: Logical, column: pa.DataType, params: dict, name: str) -> Any:
    if not isinstance(value, dict) or not isinstance(value.get("scale"), int) or not isinstance(value.get("value"),
                                                                                                 str | bytes):
        raise RecordError(f"field '{name}' should be {{\"scale\": int, \"value\": base64}} ({logical.name})")
    return _exactly(Decimal(_unscaled(value["value"], name)).scaleb(-value["scale"]), column, name)


def _exactly(number: Decimal, column: pa.DataType, name: str) -> Any:
    """A decimal column's value (at its scale, never rounded), or a string column's exact digits."""
    if pa.types.is_decimal(column):
        return exact_decimal(number, column, name)
    return format(number, "f")


def _text(value: Any, logical: Logical, column: pa.DataType, params: dict, name: str) -> Any:
    return value


def _unscaled(text: str | bytes, name: str) -> int:
    """The unscaled value of a decimal's two's-complement bytes: raw (a registry format), or base64 (JSON)."""
    try:
        raw = text if isinstance(text, bytes) else base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise RecordError(f"field '{name}' = {text[:40]!r} is not base64 (a decimal's unscaled bytes)") from None
    return int.from_bytes(raw, "big", signed=True)


def _integer(value: Any, logical: Logical, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(f"field '{name}' should be an integer ({logical.name}: {logical.meaning}), got "
                          f"{type(value).__name__} {str(value)[:40]}")
    return value


def _micros(value: Any, logical: Logical, name: str) -> int:
    """The microseconds an integer of ``logical``'s unit stands for; nanoseconds only when whole microseconds."""
    number = _integer(value, logical, name)
    unit = UNITS[logical.name]
    if unit < 1:
        if number % 1000:
            raise RecordError(f"field '{name}' = {number} ({logical.name}) has nanoseconds; Iceberg's times and "
                              "timestamps hold microseconds")
        return number // 1000
    return number * unit


UNITS = {  # the microseconds of one unit of each integer-encoded time (nanoseconds: 1/1000)
    "io.debezium.time.Time": 1000, "org.apache.kafka.connect.data.Time": 1000, "io.debezium.time.MicroTime": 1,
    "io.debezium.time.NanoTime": 0.001, "io.debezium.time.Timestamp": 1000,
    "org.apache.kafka.connect.data.Timestamp": 1000, "io.debezium.time.MicroTimestamp": 1,
    "io.debezium.time.NanoTimestamp": 0.001,
}
_UNIT_NAMES = {1000: "milliseconds", 1: "microseconds", 0.001: "nanoseconds"}


def _clock(name: str) -> Logical:
    """The logical type of an integer time of day (``...Time``) or point in time (``...Timestamp``)."""
    unit = _UNIT_NAMES[UNITS[name]]
    if name.endswith("Timestamp"):
        return Logical(name, ("long",), ("timestamp_ntz", "timestamp"), f"{unit} since 1970-01-01 00:00", _timestamp)
    literal = ("int", "long") if UNITS[name] == 1000 else ("long",)  # milliseconds of a day fit an int32
    return Logical(name, literal, ("time",), f"{unit} since midnight", _time)


LOGICAL_TYPES: dict[str, Logical] = {logical.name: logical for logical in [
    Logical("io.debezium.time.Date", ("int", "long"), ("date",), "days since 1970-01-01", _days),
    Logical("org.apache.kafka.connect.data.Date", ("int", "long"), ("date",), "days since 1970-01-01", _days),
    *(_clock(name) for name in UNITS),
    Logical("io.debezium.time.ZonedTimestamp", ("string",), ("timestamp",), "ISO-8601 text with its zone", _zoned),
    Logical("org.apache.kafka.connect.data.Decimal", ("binary",), ("decimal", "string"),
            "the unscaled value's bytes, base64, with the schema's scale", _decimal),
    Logical("io.debezium.data.VariableScaleDecimal", (), ("decimal", "string"),
            "a struct of scale and the unscaled value's bytes", _variable_decimal),
    *(Logical(name, ("string",), (), "text", _text) for name in (
        "io.debezium.data.Json", "io.debezium.data.Uuid", "io.debezium.data.Enum", "io.debezium.data.EnumSet",
        "io.debezium.data.Xml", "io.debezium.time.ZonedTime")),
]}


_LOCAL = pa.timestamp("us")
DECIMAL = "org.apache.kafka.connect.data.Decimal"
CONNECT_TYPES = {  # a registry schema's Connect name -> the column type its values take (Avro's connect.name,
    # JSON Schema's title); a Decimal's comes from its parameters (registry_type)
    "org.apache.kafka.connect.data.Date": pa.date32(), "org.apache.kafka.connect.data.Time": pa.time64("us"),
    "org.apache.kafka.connect.data.Timestamp": TIMESTAMP,
    "io.debezium.time.Date": pa.date32(), "io.debezium.time.Time": pa.time64("us"),
    "io.debezium.time.MicroTime": pa.time64("us"), "io.debezium.time.NanoTime": pa.time64("us"),
    "io.debezium.time.Timestamp": _LOCAL, "io.debezium.time.MicroTimestamp": _LOCAL,
    "io.debezium.time.NanoTimestamp": _LOCAL, "io.debezium.time.ZonedTimestamp": TIMESTAMP,
    "io.debezium.data.VariableScaleDecimal": pa.string(),  # no fixed scale: its exact digits
}


def registry_type(name: Any, params: Any) -> pa.DataType | None:
    """The column type of a registry schema's field named ``name`` by Kafka Connect (with its ``params``: a
    Decimal's scale and precision, 38 when not given), or None for a name without one."""
    if name == DECIMAL and isinstance(params, dict):
        return pa.decimal128(int(params.get("connect.decimal.precision", 38)), int(params.get("scale", 0)))
    return CONNECT_TYPES.get(name) if isinstance(name, str) else None


def kind_of(column: pa.DataType) -> str:
    """A column type's kind as :attr:`Logical.targets` names it (``other`` for none of them)."""
    if pa.types.is_timestamp(column):
        return "timestamp" if column.tz is not None else "timestamp_ntz"
    for kind, test in (("date", pa.types.is_date), ("time", pa.types.is_time), ("decimal", pa.types.is_decimal),
                       ("string", pa.types.is_string)):
        if test(column):
            return kind
    return "other"


def declared_problem(logical_name: str, type_text: str, column: pa.DataType) -> str | None:
    """Why a field declared ``type_text`` cannot hold values of ``logical_name`` (None: it can)."""
    logical = LOGICAL_TYPES.get(logical_name)
    if logical is None:
        return f"unknown logical type {logical_name!r} (known: {', '.join(LOGICAL_TYPES)})"
    if type_text.strip().lower() in logical.literal or kind_of(column) in logical.targets or (
            not logical.targets and kind_of(column) == "string"):
        return None
    wants = [*logical.targets, *logical.literal] or ["string"]
    return f"{logical_name} ({logical.meaning}) goes into a column of type {' or '.join(dict.fromkeys(wants))}, " \
           f"not {type_text}"


def to_column(value: Any, logical_name: str, params: dict, column: pa.DataType, type_text: str, name: str) -> Any:
    """``value``, encoded as ``logical_name`` says (with the schema's ``params``), as field ``name``'s column
    (``column``, declared ``type_text``) takes it; RecordError naming the field, the value and why not."""
    if value is None:
        return None
    logical = LOGICAL_TYPES.get(logical_name)
    if logical is None or type_text.strip().lower() in logical.literal or not logical.targets or isinstance(
            value, date | time):  # (a datetime is a date) decoded by the writer's own logical type already
        return value  # not a type Tailfill converts, or declared as the literal type: the value as it is
    if kind_of(column) not in logical.targets:
        raise RecordError(f"field '{name}': {declared_problem(logical_name, type_text, column)}")
    return logical.convert(value, logical, column, params, name)


def schema_logicals(schema: Any, image: str) -> dict[str, tuple[str, dict]]:
    """The logical types the JSON converter's envelope ``schema`` names for the fields of its ``image`` struct
    (``after`` or ``before``): field → (name, parameters). Fields without one, or a schema of another shape: none."""
    if not isinstance(schema, dict):
        return {}
    struct = next((f for f in schema.get("fields") or () if isinstance(f, dict) and f.get("field") == image), None)
    out = {}
    for field in (struct or {}).get("fields") or ():
        if isinstance(field, dict) and isinstance(field.get("name"), str) and isinstance(field.get("field"), str):
            params = field.get("parameters") if isinstance(field.get("parameters"), dict) else {}
            out[field["field"]] = (field["name"], params)
    return out


@dataclass(frozen=True)
class Column:
    """A declared column: its Arrow type, its type as written, and the logical type its values are declared in."""

    type: pa.DataType
    text: str
    logical: str | None = None


def convert_row(row: dict, logicals: dict[str, tuple[str, dict]], columns: dict[str, Column]) -> dict:
    """``row`` with the value of each declared column that has a logical type (the schema's, else the declared one)
    as the column takes it (:func:`to_column`); RecordError for the first value that does not convert."""
    out = dict(row)
    for name, column in columns.items():
        logical, params = logicals.get(name) or (column.logical, {})
        if logical is not None and out.get(name) is not None:
            out[name] = to_column(out[name], logical, params, column.type, column.text, name)
    return out
