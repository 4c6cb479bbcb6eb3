"""Column types as written in a pipeline's ``format.fields``, and JSON values checked against them.

Scalars: ``string``, ``long``, ``int``, ``double``, ``float``, ``boolean``, ``timestamp`` (UTC,
microseconds: Iceberg's timestamptz), ``timestamp_ntz`` (microseconds without a zone: Iceberg's timestamp),
``date``, ``time`` (microseconds), ``binary``, ``decimal(p, s)``; nested: ``struct<name: type, ...>``,
``list<type>``, ``map<string, type>``. Each maps to one Arrow type (and so one Iceberg type).

Decimals are exact: a value (a JSON number parsed as :class:`~decimal.Decimal`, or a string) is taken only if it
has at most the column's scale and precision, up to 38 digits.
"""

from __future__ import annotations

import base64
import math
import re
from datetime import UTC, date, datetime, time
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from tailfill.errors import RecordError

TIMESTAMP = pa.timestamp("us", tz="UTC")  # as tailfill.values.schema.TIMESTAMP (that module imports this one)
SCALARS: dict[str, pa.DataType] = {
    "string": pa.string(), "long": pa.int64(), "int": pa.int32(), "double": pa.float64(), "float": pa.float32(),
    "boolean": pa.bool_(), "timestamp": TIMESTAMP, "timestamp_ntz": pa.timestamp("us"), "date": pa.date32(),
    "time": pa.time64("us"), "binary": pa.binary(),
}
EXACT = Context(prec=80)  # room for any decimal(38, s) value and its quantizing, never rounding
_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")
INT_RANGES = {pa.int64(): (-(2**63), 2**63 - 1), pa.int32(): (-(2**31), 2**31 - 1)}


def parse_type(text: str) -> pa.DataType:
    """The Arrow type of a field type written as text; ValueError says what is wrong."""
    tokens = _tokens(text)
    kind, rest = _parse(tokens, text)
    if rest:
        raise ValueError(f"type {text!r}: unexpected {' '.join(rest)!r} at the end")
    return kind


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"type {text!r}: cannot read {text[pos:]!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _expect(tokens: list[str], want: str, text: str) -> list[str]:
    if not tokens or tokens[0] != want:
        raise ValueError(f"type {text!r}: expected {want!r}" + (f" before {tokens[0]!r}" if tokens else " at the end"))
    return tokens[1:]


def _parse(tokens: list[str], text: str) -> tuple[pa.DataType, list[str]]:
    if not tokens:
        raise ValueError(f"type {text!r}: a type is missing")
    head, rest = tokens[0].lower(), tokens[1:]
    if head in SCALARS:
        return SCALARS[head], rest
    if head == "decimal":
        rest = _expect(rest, "(", text)
        precision, rest = int(rest[0]), _expect(rest[1:], ",", text)
        scale, rest = int(rest[0]), _expect(rest[1:], ")", text)
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise ValueError(f"type {text!r}: decimal needs 1 <= precision <= 38 and 0 <= scale <= precision")
        return pa.decimal128(precision, scale), rest
    if head == "list":
        item, rest = _parse(_expect(rest, "<", text), text)
        return pa.list_(item), _expect(rest, ">", text)
    if head == "map":
        key, rest = _parse(_expect(rest, "<", text), text)
        if key != pa.string():
            raise ValueError(f"type {text!r}: map keys must be string (JSON object keys are)")
        value, rest = _parse(_expect(rest, ",", text), text)
        return pa.map_(key, value), _expect(rest, ">", text)
    if head == "struct":
        rest = _expect(rest, "<", text)
        fields = []
        while True:
            if not rest or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rest[0]):
                raise ValueError(f"type {text!r}: expected a field name in struct<...>")
            name, rest = rest[0], _expect(rest[1:], ":", text)
            kind, rest = _parse(rest, text)
            fields.append(pa.field(name, kind))
            if rest and rest[0] == ",":
                rest = rest[1:]
                continue
            return pa.struct(fields), _expect(rest, ">", text)
    raise ValueError(f"type {text!r}: unknown type {tokens[0]!r} (scalars: {', '.join(SCALARS)}, decimal(p, s); "
                     "nested: struct<name: type, ...>, list<type>, map<string, type>)")


def coerce(value: Any, kind: pa.DataType, name: str) -> Any:
    """A JSON value as a Python value of Arrow type ``kind`` (None stays None); RecordError if it is not one."""
    if value is None:
        return None
    try:
        return _coerce(value, kind, name)
    except RecordError:
        raise
    except (ValueError, TypeError, ArithmeticError, InvalidOperation):
        raise RecordError(f"field '{name}' should be {kind}, got {type(value).__name__} {str(value)[:60]}") from None


def _coerce(value: Any, kind: pa.DataType, name: str) -> Any:
    wrong = RecordError(f"field '{name}' should be {kind}, got {type(value).__name__} {str(value)[:60]}")
    if value is None:
        return None
    if pa.types.is_struct(kind):
        if not isinstance(value, dict):
            raise wrong
        return {f.name: _coerce(value.get(f.name), f.type, f"{name}.{f.name}") for f in kind}
    if pa.types.is_map(kind):
        if not isinstance(value, dict):
            raise wrong
        return [(k, _coerce(v, kind.item_type, f"{name}.{k}")) for k, v in value.items()]
    if pa.types.is_list(kind):
        if not isinstance(value, list):
            raise wrong
        return [_coerce(v, kind.value_type, f"{name}[]") for v in value]
    if kind == pa.string():
        if not isinstance(value, str):
            raise wrong
        return value
    if pa.types.is_integer(kind):
        low, high = INT_RANGES[kind]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise wrong
        return value
    if pa.types.is_floating(kind):
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal) or not math.isfinite(float(value)):
            raise wrong
        return float(value)
    if kind == pa.bool_():
        if not isinstance(value, bool):
            raise wrong
        return value
    if pa.types.is_decimal(kind):
        if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
            raise wrong
        return exact_decimal(value if isinstance(value, Decimal) else Decimal(str(value)), kind, name)
    if pa.types.is_date(kind):
        if isinstance(value, date) and not isinstance(value, datetime):  # converted from a logical type already
            return value
        if not isinstance(value, str):
            raise wrong
        return date.fromisoformat(value)
    if pa.types.is_timestamp(kind):
        if not isinstance(value, str | datetime):
            raise wrong
        ts = value if isinstance(value, datetime) else datetime.fromisoformat(value)
        if kind.tz is None:  # a local date-time: an offset would have to be dropped or applied, so neither is
            if ts.tzinfo is not None:
                raise RecordError(f"field '{name}' = {str(value)[:40]!r} has a UTC offset; the column is a timestamp "
                                  "without a zone (timestamp_ntz)")
            return ts
        return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).astimezone(UTC)
    if pa.types.is_time(kind):
        if not isinstance(value, str | time):
            raise wrong
        parsed = value if isinstance(value, time) else time.fromisoformat(value)
        if parsed.tzinfo is not None:
            raise RecordError(f"field '{name}' = {str(value)[:40]!r} has a UTC offset; the column is a time of day")
        return parsed
    if pa.types.is_binary(kind):
        if not isinstance(value, str):
            raise wrong
        return base64.b64decode(value, validate=True)
    raise wrong


def exact_decimal(number: Decimal, kind: pa.Decimal128Type, name: str) -> Decimal:
    """``number`` at ``kind``'s scale, exactly; RecordError if that would round it or it has too many digits."""
    if not number.is_finite():
        raise RecordError(f"field '{name}' = {number} does not fit {kind}")
    quantized = number.quantize(Decimal(1).scaleb(-kind.scale), context=EXACT)
    if quantized != number or len(quantized.as_tuple().digits) > kind.precision:
        raise RecordError(f"field '{name}' = {str(number)[:60]} does not fit {kind}")
    return quantized


def is_nested_or_rich(kind: pa.DataType) -> bool:
    """Whether ``kind`` is one the JSON fast path leaves to :func:`coerce` (nested, decimal, date, ...)."""
    return kind not in (pa.string(), pa.int64(), pa.float64(), pa.bool_(), TIMESTAMP)
