"""The ``json`` format: JSON object values, their fields declared in ``format.fields``.

Every value becomes a row of the declared fields, or goes to quarantine with the reason (malformed
JSON, empty value, wrong type, missing required field, oversized, unknown fields when asked):
nothing is dropped.

The rules are :func:`parse_value`, one record at a time. :class:`RowParser` applies the same rules
faster: a typed msgspec decoder takes each record it can vouch for, and every record it refuses
(or might judge differently: long values, see :data:`FAST_PATH_MAX_BYTES`) goes through
:func:`parse_value`, so rows and quarantine are exactly what the per-record rules give
(``tests/unit/test_records.py`` checks the two against each other on generated records).

Where a declared type holds a decimal, JSON numbers are parsed as :class:`~decimal.Decimal`, exactly as written
(not through a float, which keeps 17 significant digits): a ``decimal(38, 10)`` value keeps all 38.
"""

from __future__ import annotations

import json
import math
import operator
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailfill.config import FieldSpec, FormatConfig
from tailfill.errors import RecordError
from tailfill.formats.base import Decoded, Format, NewTable, Rows, valid_utf8
from tailfill.formats.json_drift import Found
from tailfill.formats.json_evolve import evolved_columns, fill
from tailfill.values.column_types import coerce
from tailfill.values.schema import FIELD_TYPES, METADATA_FIELDS, TIMESTAMP, field_type, table_schema

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Values up to this size take the fast path. Valid JSON this short nests too shallowly to reach
# Python's recursion limit and holds no integer long enough to hit its digit limit, the two places
# where ``json.loads`` refuses what a faster decoder might accept.
FAST_PATH_MAX_BYTES = 1536
CHUNK = 128  # values decoded in one call; a chunk holding a bad value is decoded value by value
FAST_PATH_TYPES: dict[str, Any] = {
    "string": str,
    "long": Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)],
    "double": Annotated[float, msgspec.Meta(ge=-sys.float_info.max, le=sys.float_info.max)],  # finite only
    "boolean": bool,
    "timestamp": str,  # then converted by the same function as the per-record rules
}


def _coerce(spec: FieldSpec, value: Any) -> Any:
    if value is None:
        if spec.required:
            raise RecordError(f"required field '{spec.name}' is null")
        return None
    t = spec.type
    if t not in FIELD_TYPES:  # nested, decimal, date, ...: by the type's own rules
        return coerce(value, field_type(t), spec.name)
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
    if t == "double" and isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            raise RecordError(f"field '{spec.name}' is too large for a double") from None
        if not math.isfinite(number):  # 1e400, or the NaN / Infinity tokens json.loads accepts
            raise RecordError(f"field '{spec.name}' is out of range for a double ({str(value)[:40]})")
        return number
    if t == "boolean" and isinstance(value, bool):
        return value
    if t == "timestamp" and isinstance(value, str):
        return _timestamp(spec, value)
    raise RecordError(f"field '{spec.name}' should be {t}, got {type(value).__name__} {json.dumps(value)[:60]}")


def _timestamp(spec: FieldSpec, value: str) -> datetime:
    try:
        ts = datetime.fromisoformat(value)
        return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        raise RecordError(f"field '{spec.name}' = {value[:60]!r} is not an ISO-8601 timestamp in range") from None


def parse_value(fmt: FormatConfig, value: bytes | None) -> list[Any]:
    """The declared fields of one JSON value, in order; :class:`RecordError` if it is bad."""
    return declared_fields(fmt, load_object(fmt, value))


def load_object(fmt: FormatConfig, value: bytes | None) -> dict:
    """One JSON value as an object; :class:`RecordError` if it is empty, too large, malformed or no object."""
    if value is None or len(value) == 0:
        raise RecordError("empty value")
    if len(value) > fmt.max_value_bytes:
        raise RecordError(f"value of {len(value)} bytes exceeds max_value_bytes {fmt.max_value_bytes}")
    try:
        doc = json.loads(value, parse_float=Decimal) if exact_numbers(fmt) else json.loads(value)
    except RecursionError:
        raise RecordError("malformed JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, over-long integers
        raise RecordError(f"malformed JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise RecordError(f"JSON value is a {type(doc).__name__}, expected an object")
    return doc


def exact_numbers(fmt: FormatConfig) -> bool:
    """Whether a declared type holds a decimal: then JSON numbers are parsed as exact Decimals."""
    return any("decimal" in f.type.lower() for f in fmt.fields)


def declared_fields(fmt: FormatConfig, doc: dict) -> list[Any]:
    """The declared fields of a JSON object, in order; :class:`RecordError` if one is missing or wrong."""
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


# Timestamps the fast path converts with Arrow's vectorized cast: ISO-8601 with a 'T', seconds, at most
# six fractional digits, an optional 'Z' or ±HH:MM offset, in the years 1900-2199 (so that no offset
# moves them out of range). On these, Arrow and ``datetime.fromisoformat`` agree; every other string
# (and a canonical one Arrow refuses, like February 30) is converted by :func:`_timestamp`.
_ISO_CORE = r"(19|20|21)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?"
ISO_AWARE = rf"^{_ISO_CORE}(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$"
ISO_NAIVE = rf"^{_ISO_CORE}$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class RowParser:
    """The declared fields of many JSON values at once, by the rules of :func:`parse_value`."""

    def __init__(self, fmt: FormatConfig):
        self.fmt = fmt
        fields = []
        for i, spec in enumerate(fmt.fields):
            kind = FAST_PATH_TYPES.get(spec.type, Any)  # other types: decoded as JSON, then checked by coerce
            fields.append((f"f{i}", kind) if spec.required else (f"f{i}", kind | None, None))
        rename = {f"f{i}": s.name for i, s in enumerate(fmt.fields)}
        struct = msgspec.defstruct("Record", fields, rename=rename, kw_only=True, gc=False,
                                   forbid_unknown_fields=fmt.unknown_fields == "quarantine")
        exact = {"float_hook": Decimal} if exact_numbers(fmt) else {}  # numbers of untyped fields, digit for digit
        self.decoder = msgspec.json.Decoder(struct, **exact)
        # Takes only values with no undeclared field: where it refuses one the other takes, drift is looked for.
        self.strict = msgspec.json.Decoder(msgspec.defstruct("Strict", fields, rename=rename, kw_only=True, gc=False,
                                                             forbid_unknown_fields=True), **exact)
        self.keys = msgspec.json.Decoder(dict[str, msgspec.Raw])  # a drifted value's keys, its values left as text
        self.drifting = False  # the last chunk held undeclared fields: the next is not tried strictly first
        self.attrs = {s.name: f"f{i}" for i, s in enumerate(fmt.fields)}
        self.declared = [(s.name, field_type(s.type)) for s in fmt.fields]
        self.fields = [operator.attrgetter(f"f{i}") if spec.type in FAST_PATH_TYPES else _checked(f"f{i}", spec)
                       for i, spec in enumerate(fmt.fields)]
        self.checked = any(spec.type not in FAST_PATH_TYPES for spec in fmt.fields)  # a getter that may refuse
        self.limit = min(FAST_PATH_MAX_BYTES, fmt.max_value_bytes)

    def found(self) -> Found:
        """A :class:`Found` of this parser's declared fields, for :meth:`parse` to fill."""
        return Found(self.declared, keep_values=self.fmt.unknown_fields == "evolve")

    def parse(self, values: pa.Array, found: Found | None = None) -> tuple[list[pa.Array], list[bool], list[str]]:
        """(one column per declared field for the good values, a good-or-bad flag per value, the bad
        values' errors), all in the order of ``values`` (a binary array). ``found``: where to note what the
        values hold beyond the declared fields (values with none cost next to nothing more).

        Values are decoded in chunks, each as newline-delimited JSON in one call; a chunk the
        decoder refuses as a whole is decoded value by value, and each value it refuses (or cannot
        take: empty, too long) is judged by the per-record rules.
        """
        lengths = pc.fill_null(pc.binary_length(values), 0).to_numpy(zero_copy_only=False)
        takeable = (lengths > 0) & (lengths <= self.limit) & valid_utf8(values)
        values = values.to_pylist()
        columns: list[list] = [[] for _ in self.fmt.fields]
        sources: list[int] = []  # which value each row came from
        errors: dict[int, str] = {}
        by_the_rules = 0  # rows whose fields the per-record rules gave (their timestamps are datetimes)
        for start in range(0, len(values), CHUNK):
            chunk = range(start, min(start + CHUNK, len(values)))
            by_the_rules += self._parse_chunk(values, chunk, takeable[start:chunk.stop], columns, sources, errors,
                                              found)
        arrays, failed = [], set()
        for spec, column in zip(self.fmt.fields, columns, strict=True):
            if spec.type == "timestamp":
                array, not_timestamps = self._timestamps(spec, column, mixed=by_the_rules > 0)
                failed |= not_timestamps
                arrays.append(array)
            else:
                arrays.append(pa.array(column, field_type(spec.type)))
        if failed:  # a timestamp only Python could judge, and it said no: the rules word the error
            for k in failed:
                self._by_the_rules(values[sources[k]], sources[k], errors, None)
            keep = pa.array([k for k in range(len(sources)) if k not in failed], pa.int64())
            arrays = [a.take(keep) for a in arrays]
        good = [i not in errors for i in range(len(values))] if errors else [True] * len(values)
        return arrays, good, [errors[i] for i in sorted(errors)]

    def _parse_chunk(self, values: Sequence[bytes | None], chunk: range, takeable: np.ndarray, columns: list[list],
                     sources: list[int], errors: dict[int, str], found: Found | None) -> int:
        """Parse one chunk into ``columns``; returns how many of its rows the per-record rules gave.

        ``takeable``: per value of the chunk, whether the fast decoder may take it (non-empty, short
        enough, valid UTF-8: msgspec does not check the UTF-8 of keys it skips).
        """
        fields = self.fields
        part = values[chunk.start:chunk.stop]
        if takeable.all():
            lines = b"\n".join(part)  # type: ignore[arg-type]
            if lines.count(b"\n") == len(part) - 1:  # no value spans lines
                decoded, drifted = self._decode_lines(lines, found)
                if decoded is not None and len(decoded) == len(part):  # (blank values are skipped)
                    if not self.checked:  # plain getters cannot fail: straight into the columns
                        for column, field in zip(columns, fields, strict=True):
                            column.extend(map(field, decoded))
                        sources.extend(chunk)
                        if found is not None:
                            self._note_chunk(found, chunk, part, decoded, drifted)
                        return 0
                    try:  # every column first: a value refused by a field check leaves no column half-extended
                        parts = [list(map(field, decoded)) for field in fields]
                    except Exception:
                        parts = None
                    if parts is not None:
                        for column, values_ in zip(columns, parts, strict=True):
                            column.extend(values_)
                        sources.extend(chunk)
                        if found is not None:
                            self._note_chunk(found, chunk, part, decoded, drifted)
                        return 0
        decode, ruled = self.decoder.decode, 0
        for i, value, fast in zip(chunk, part, takeable, strict=True):
            row = None
            if fast:
                try:
                    record = decode(value)
                    row = [field(record) for field in fields]
                except Exception:  # whatever the fast path refuses, the per-record rules decide
                    row = None
                if row is not None and found is not None:
                    self._look(found, i, value, record)
            if row is None:
                row = self._by_the_rules(value, i, errors, found)
                if row is None:
                    continue
                ruled += 1
            for column, v in zip(columns, row, strict=True):
                column.append(v)
            sources.append(i)
        return ruled

    def _decode_lines(self, lines: bytes, found: Found | None) -> tuple[list | None, bool]:
        """A chunk's values decoded in one call (None if one is refused: then they go value by value), and whether
        they may hold undeclared fields. With ``found``, tried strictly first (unless the last chunk drifted): a
        chunk without undeclared fields is never looked into."""
        if found is not None and not self.drifting:
            try:
                return self.strict.decode_lines(lines), False
            except Exception:
                pass
        try:
            return self.decoder.decode_lines(lines), found is not None
        except Exception:  # some value is refused: value by value below
            return None, False

    def _note_chunk(self, found: Found, chunk: range, part: Sequence[bytes | None], decoded: list,
                    drifted: bool) -> None:
        """Note what a chunk taken whole holds beyond the declared fields."""
        if drifted:
            keys, any_extra = self.keys.decode, False
            for i, value in zip(chunk, part, strict=True):
                any_extra |= found.top(i, keys(value))
            self.drifting = any_extra
        if found.nested:
            for i, record in zip(chunk, decoded, strict=True):
                found.inside(i, lambda name, r=record: getattr(r, self.attrs[name]))

    def _look(self, found: Found, i: int, value: bytes, record: Any) -> None:
        """Note what record ``i`` (decoded as ``record``) holds beyond the declared fields."""
        try:
            self.strict.decode(value)
        except msgspec.ValidationError:  # an undeclared field
            found.top(i, self.keys.decode(value))
        found.inside(i, lambda name: getattr(record, self.attrs[name]))

    def _by_the_rules(self, value: bytes | None, i: int, errors: dict[int, str], found: Found | None) -> tuple | None:
        try:
            doc = load_object(self.fmt, value)
            if found is not None:
                found.top(i, doc)
                found.inside(i, doc.get)
            return tuple(declared_fields(self.fmt, doc))
        except RecordError as exc:
            # Error text may quote the record; keep it encodable whatever the record held.
            errors[i] = str(exc).encode("utf-8", "backslashreplace").decode("utf-8")
            return None

    @staticmethod
    def _timestamps(spec: FieldSpec, column: list, mixed: bool) -> tuple[pa.Array, set[int]]:
        """The column as timestamps, and the rows whose value is no timestamp by :func:`_timestamp`.

        Holds strings from the fast path and None, and (if ``mixed``) datetimes from the rules."""
        texts = pa.array([v if isinstance(v, str) else None for v in column] if mixed else column, pa.string())
        try:
            aware = pc.cast(pc.if_else(pc.match_substring_regex(texts, ISO_AWARE), texts, None), TIMESTAMP)
            naive = pc.cast(pc.cast(pc.if_else(pc.match_substring_regex(texts, ISO_NAIVE), texts, None),
                                    pa.timestamp("us")), TIMESTAMP)  # no offset: UTC, as the rules say
            converted = pc.coalesce(aware, naive)
        except pa.ArrowInvalid:  # a canonical-looking string that is no date (February 30): all by the rules
            converted = pa.nulls(len(column), TIMESTAMP)
        present = pa.array([v is not None for v in column], pa.bool_())
        rest = pc.indices_nonzero(pc.and_(pc.is_null(converted), present)).to_pylist()
        if not rest:
            return converted, set()
        micros = pc.cast(converted, pa.int64()).to_pylist()
        failed = set()
        for k in rest:
            value = column[k]
            try:
                ts = value if isinstance(value, datetime) else _timestamp(spec, value)
            except RecordError:
                failed.add(k)
                continue
            micros[k] = (ts - _EPOCH) // timedelta(microseconds=1)
        return pa.array(micros, pa.int64()).cast(TIMESTAMP), failed


def _checked(attr: str, spec: FieldSpec) -> Callable[[Any], Any]:
    """The fast path's getter of a field of a type :func:`coerce` checks (nested, decimal, date, ...)."""
    get, kind = operator.attrgetter(attr), field_type(spec.type)

    def field(record: Any) -> Any:
        value = get(record)
        if value is None and spec.required:
            raise RecordError(f"required field '{spec.name}' is null")
        return coerce(value, kind, spec.name)

    return field


class JsonFormat(Format):
    """JSON objects whose fields ``format.fields`` declares: the table has those columns, each value is checked."""

    name = "json"

    @classmethod
    def problems(cls, fmt: FormatConfig) -> list[str]:
        out = [] if fmt.fields else ["json format needs a declared schema under 'fields'"]
        return out + _no_registry(fmt)

    @classmethod
    def declared_columns(cls, fmt: FormatConfig) -> pa.Schema:
        return table_schema(fmt.fields, fmt.key)

    def new_table(self) -> NewTable:
        schema = table_schema(self.fmt.fields, self.fmt.key)
        return NewTable(schema.field("kafka_key").type, pa.schema(list(schema)[len(METADATA_FIELDS):-1]))

    def decoder(self) -> JsonDecoder:
        return JsonDecoder(self.fmt)

    @property
    def follows_writer_schema(self) -> bool:  # type: ignore[override]
        """``unknown_fields: evolve``: rows carry the table's evolved columns, which the table takes before a commit."""
        return self.fmt.unknown_fields == "evolve"


def _no_registry(fmt: FormatConfig) -> list[str]:
    """The rules of a format that reads no Schema Registry (json, raw)."""
    out = []
    if fmt.schema_registry is not None:
        out.append(f"{fmt.type} format takes no schema_registry (it is for avro, protobuf, json_schema)")
    if fmt.key == "registry":
        out.append(f"key: registry decodes keys with a Schema Registry: it is for avro, protobuf and json_schema, "
                   f"not {fmt.type}")
    return out


class JsonDecoder:
    """The declared fields of a batch's JSON values (:class:`RowParser`), one group of rows; with
    ``unknown_fields: evolve``, the table's evolved columns too (:mod:`tailfill.formats.json_evolve`)."""

    def __init__(self, fmt: FormatConfig):
        self.key = fmt.key
        self.evolve = fmt.unknown_fields == "evolve"
        self.rows_schema = None if self.evolve else table_schema(fmt.fields, fmt.key)  # evolve: files follow rows
        self.parser = RowParser(fmt)
        self.names = [f.name for f in fmt.fields]

    def decode(self, values: pa.Array, keys: pa.Array, table_columns: pa.Schema | None) -> Decoded:
        found = self.parser.found()
        columns, good, errors = self.parser.parse(values, found)
        ok = np.fromiter(good, dtype=bool, count=len(good))
        bad = dict(zip(np.flatnonzero(~ok).tolist(), errors, strict=True))
        rows = pa.Table.from_arrays(columns, names=self.names)
        wants: list[tuple[str, str, int]] = []
        if self.evolve:
            extra = evolved_columns(table_columns, self.names)
            evolved = fill(np.flatnonzero(ok).tolist(), found.extras, extra)
            for column, f in zip(evolved.arrays, extra, strict=True):
                rows = rows.append_column(f, column)
            if evolved.refused:
                rows = rows.filter(pa.array([i not in evolved.refused for i in np.flatnonzero(ok).tolist()]))
                bad |= evolved.refused
                ok[list(evolved.refused)] = False
            wants = evolved.wants
        positions = pa.array(np.flatnonzero(ok), pa.int64())
        unknown = {path: (records, first) for path, (records, first) in found.paths.items()}
        return Decoded([Rows(positions, rows)], dict(sorted(bad.items())), unknown=unknown, wants=wants)
