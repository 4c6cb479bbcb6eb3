"""Keyed pipelines (``target.mode: upsert``): every record as one change of one key — an upsert or a delete.

:class:`ChangeFormat` wraps the pipeline's own format. Its rows are the inner format's rows plus three
columns — :data:`CDC_OP` (``r``/``c``/``u``: the row is the key's new state; ``d``: the key is deleted),
:data:`CDC_TS_MS` and :data:`CDC_LSN` (Debezium's ``source.ts_ms`` and ``source.lsn``, when there are) —
so the data table is the append-only record of every change, and the state table is folded from it.

- ``format.envelope: none``: each value is the row's new state (op ``u``); a tombstone (null value, with a
  key) deletes its key.
- ``format.envelope: debezium`` (json): each value is a Debezium change event, with or without the JSON
  converter's ``schema``/``payload`` wrapper. ``r``/``c``/``u`` apply ``after``; ``d`` deletes ``before``'s
  key; a tombstone after a delete is a delete of its key again (accounted, changes nothing); ``t``
  (truncate) stops the run.

A delete's key comes from ``before`` (Debezium) or from the Kafka key: a JSON object holding the key
columns (Debezium's key, wrapped or not), or, for one key column, the key's text. A change without a
usable key, or with an unknown ``op``, goes to the quarantine with the reason.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from tailfill.config import FieldSpec, FormatConfig
from tailfill.errors import ChangeStreamError, RecordError
from tailfill.formats.base import Decoded, Decoder, Format, NewTable, Rows
from tailfill.formats.json_fields import _coerce
from tailfill.values.schema import CHANGE_COLUMNS, DELETE_OP, METADATA_FIELDS, VALUE_FIELD

UPSERT_OPS = ("r", "c", "u")
KAFKA_KEY = "kafka_key"


def with_change_columns(schema: pa.Schema | None) -> pa.Schema | None:
    """A data table's schema with the change columns before the raw value (or at the end, without one); None (no
    schema known) stays None."""
    if schema is None:
        return None
    fields = [f for f in schema if f.name not in CHANGE_COLUMNS.names]
    at = next((i for i, f in enumerate(fields) if f.name == VALUE_FIELD.name), len(fields))
    return pa.schema([*fields[:at], *CHANGE_COLUMNS, *fields[at:]])


class ChangeFormat(Format):
    """The pipeline's format, its records read as changes of the keys ``key`` names (see the module)."""

    name = "changes"

    def __init__(self, inner: Format, key: tuple[str, ...], envelope: str):
        super().__init__(inner.fmt, inner.topic, inner.registry)
        self.inner, self.key, self.envelope = inner, key, envelope
        self.follows_writer_schema = inner.follows_writer_schema  # type: ignore[misc]

    @classmethod
    def problems(cls, fmt: FormatConfig) -> list[str]:
        return []  # the inner format's rules, and load.keyed_problems, check the block

    def declared_columns(self, fmt: FormatConfig) -> pa.Schema | None:  # type: ignore[override]
        return with_change_columns(self.inner.declared_columns(fmt))

    def new_table(self) -> NewTable:
        new = self.inner.new_table()
        return NewTable(new.key_type, pa.schema([*new.columns, *CHANGE_COLUMNS]), new.properties)

    def decoder(self) -> ChangeDecoder:
        return ChangeDecoder(self.inner.decoder(), self.key, self.envelope, self.fmt.fields)


class ChangeDecoder:
    """Decodes changes: the inner decoder takes each row's new state, this one the envelope, ops and deletes."""

    def __init__(self, inner: Decoder, key: tuple[str, ...], envelope: str, fields: list[FieldSpec]):
        self.inner, self.key_columns, self.envelope = inner, key, envelope
        self.key = inner.key
        self.rows_schema = with_change_columns(inner.rows_schema)
        self.specs = {f.name: f for f in fields}
        self.value_keys = [k for k in key if k != KAFKA_KEY]

    def decode(self, values: pa.Array, keys: pa.Array, table_columns: pa.Schema | None) -> Decoded:
        n = len(values)
        states: dict[int, bytes] = {}  # position -> the value the inner format decodes (the row's new state)
        deletes: dict[int, dict[str, Any]] = {}  # position -> the deleted key's columns
        ops = [DELETE_OP] * n
        ts: list[int | None] = [None] * n
        lsn: list[int | None] = [None] * n
        errors: dict[int, str] = {}
        raw_keys = keys.to_pylist()
        for i, value in enumerate(values.to_pylist()):
            try:
                if value is None:  # a tombstone: delete the Kafka key's row
                    deletes[i] = self._key_of_tombstone(raw_keys[i])
                elif self.envelope == "debezium":
                    ops[i], body, ts[i], lsn[i] = _debezium(value)
                    if ops[i] == DELETE_OP:
                        deletes[i] = self._key_columns(body, "'before'")
                    else:
                        states[i] = json.dumps(body).encode()
                else:
                    ops[i] = "u"
                    states[i] = value
            except RecordError as exc:
                errors[i] = str(exc)
        groups = [self._states(states, keys, table_columns, errors), self._deletes(deletes)]
        rows = []
        for group in groups:
            group = self._without_null_keys(group, raw_keys, errors)
            at = group.positions.to_numpy()
            extra = [pa.array([ops[i] for i in at], pa.string()), pa.array([ts[i] for i in at], pa.int64()),
                     pa.array([lsn[i] for i in at], pa.int64())]
            columns = group.columns
            for name, column in zip(CHANGE_COLUMNS.names, extra, strict=True):
                columns = columns.append_column(name, column)
            rows.append(Rows(group.positions, columns))
        return Decoded(rows, errors)

    def _states(self, states: dict[int, bytes], keys: pa.Array, table_columns: pa.Schema | None,
                errors: dict[int, str]) -> Rows:
        """The rows of the new states, by the inner decoder (its errors kept at the records' positions)."""
        at = pa.array(sorted(states), pa.int64())
        decoded = self.inner.decode(pa.array([states[i] for i in at.to_pylist()], pa.binary()), keys.take(at),
                                    table_columns)
        for j, why in decoded.errors.items():
            errors[at[j].as_py()] = why
        parts = [Rows(at.take(r.positions), r.columns) for r in decoded.rows if len(r.positions)]
        if not parts:
            return Rows(pa.array([], pa.int64()), self._empty_columns())
        if len(parts) == 1:
            return parts[0]
        merged = pa.concat_tables([p.columns for p in parts], promote_options="permissive")
        positions = pa.concat_arrays([p.positions for p in parts])
        order = pa.array(np.argsort(positions.to_numpy(), kind="stable"))
        return Rows(positions.take(order), merged.take(order))

    def _deletes(self, deletes: dict[int, dict[str, Any]]) -> Rows:
        """Delete rows: the key's columns, every other column null."""
        at = sorted(deletes)
        schema = self._empty_columns().schema
        columns = [pa.array([deletes[i].get(f.name) for i in at], f.type) if f.name in self.value_keys
                   else pa.nulls(len(at), f.type) for f in schema]
        return Rows(pa.array(at, pa.int64()), pa.Table.from_arrays(columns, schema=schema))

    def _empty_columns(self) -> pa.Table:
        """No rows, the inner format's decoded columns (what a row holds between the metadata and the raw value)."""
        if self.inner.rows_schema is None:
            return pa.table({k: pa.array([], pa.string()) for k in self.value_keys})
        skip = {f.name for f in METADATA_FIELDS} | {VALUE_FIELD.name}
        return pa.schema([f for f in self.inner.rows_schema if f.name not in skip]).empty_table()

    def _without_null_keys(self, rows: Rows, raw_keys: list, errors: dict[int, str]) -> Rows:
        """``rows`` less those with no key (quarantined with the reason)."""
        missing = np.zeros(len(rows.positions), dtype=bool)
        why = ""
        for name in self.key_columns:
            if name == KAFKA_KEY:
                null = np.array([raw_keys[i] is None for i in rows.positions.to_pylist()], dtype=bool)
                why = "the change has no Kafka key (key column kafka_key)"
            elif name in rows.columns.column_names:
                null = rows.columns.column(name).is_null().to_numpy(zero_copy_only=False)
                why = f"key column '{name}' is null"
            else:
                null = np.ones(len(rows.positions), dtype=bool)
                why = f"key column '{name}' is not among the decoded columns"
            for i in rows.positions.to_numpy()[null & ~missing].tolist():
                errors[i] = why
            missing |= null
        if not missing.any():
            return rows
        keep = pa.array(~missing)
        return Rows(rows.positions.filter(keep), rows.columns.filter(keep))

    def _key_of_tombstone(self, raw: bytes | None) -> dict[str, Any]:
        if raw is None:
            raise RecordError("a tombstone (null value) without a Kafka key: no key to delete")
        if not self.value_keys:
            return {}
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            return self._key_columns(_unwrapped(doc), "the Kafka key")
        if len(self.value_keys) == 1:
            name = self.value_keys[0]
            return self._key_columns({name: doc if doc is not None else raw.decode("utf-8", "replace")},
                                     "the Kafka key")
        raise RecordError(f"the Kafka key of a tombstone is not a JSON object holding {', '.join(self.value_keys)}")

    def _key_columns(self, doc: dict[str, Any], where: str) -> dict[str, Any]:
        out = {}
        for name in self.value_keys:
            if doc.get(name) is None:
                raise RecordError(f"key column '{name}' is missing from {where}")
            spec = self.specs.get(name)
            out[name] = _coerce(spec, doc[name]) if spec is not None else doc[name]
        return out


def _unwrapped(doc: dict[str, Any]) -> Any:
    """A JSON converter's message without its ``schema``/``payload`` wrapper."""
    return doc["payload"] if set(doc) == {"schema", "payload"} else doc


def _debezium(value: bytes) -> tuple[str, dict[str, Any], int | None, int | None]:
    """(op, the row's new state or the deleted row, source.ts_ms, source.lsn) of a Debezium change event."""
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise RecordError(f"malformed Debezium change event: {str(exc)[:80]}") from None
    doc = _unwrapped(doc) if isinstance(doc, dict) else doc
    if not isinstance(doc, dict):
        raise RecordError(f"a Debezium change event is a JSON object, got {type(doc).__name__}")
    op = doc.get("op")
    source = doc.get("source") if isinstance(doc.get("source"), dict) else {}
    ts_ms, lsn = _long(source.get("ts_ms", doc.get("ts_ms"))), _long(source.get("lsn"))
    if op == "t":
        raise ChangeStreamError(f"a Debezium truncate event (op 't', source {json.dumps(source)[:120]}) cannot be "
                                "applied to a keyed table; re-create the state table from a new snapshot")
    if op in UPSERT_OPS:
        body = doc.get("after")
        if not isinstance(body, dict):
            raise RecordError(f"Debezium op '{op}' without an 'after' object")
    elif op == DELETE_OP:
        body = doc.get("before")
        if not isinstance(body, dict):
            raise RecordError("Debezium op 'd' without a 'before' object")
    else:
        raise RecordError(f"unknown Debezium op {op!r} (expected r, c, u, d or t)")
    return op, body, ts_ms, lsn


def _long(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
