"""Keyed pipelines (``target.mode: upsert``): every record as one change of one key — an upsert or a delete — or
of the whole table (a truncate).

:class:`ChangeFormat` wraps the pipeline's own format. Its rows are the inner format's rows plus the change
columns (:data:`~tailfill.values.schema.CHANGE_COLUMNS`: the op — ``r``/``c``/``u``: the row is the key's new
state; ``d``: the key is deleted; ``t``: every key is — and the event's source position, when there is one), so
the data table is the append-only record of every change, and the state table is folded from it.

- ``format.envelope: none``: each value is the row's new state (op ``u``); a tombstone (null value, with a
  key) deletes its key.
- ``format.envelope: debezium`` (json): each value is a Debezium change event, with or without the JSON
  converter's ``schema``/``payload`` wrapper. ``r``/``c``/``u`` apply ``after``; ``d`` deletes ``before``'s
  key; a tombstone after a delete is a delete of its key again (accounted, changes nothing); ``t`` (truncate) is
  a row without a key, which the merge applies to the whole state. A value in a Kafka Connect or Debezium
  logical type (the wrapper's schema names it, or the field declares it) is converted into its column's type
  (:mod:`tailfill.formats.connect_types`); numbers are parsed exactly.

A delete's key comes from ``before`` (Debezium) or from the Kafka key: a JSON object holding the key
columns (Debezium's key, wrapped or not), or, for one key column, the key's text. A change without a
usable key, or with an unknown ``op``, goes to the quarantine with the reason.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from tailfill.config import FieldSpec, FormatConfig
from tailfill.errors import ConfigError, RecordError
from tailfill.formats.base import Decoded, Decoder, Format, NewTable, Rows
from tailfill.formats.connect_types import Column, convert_row, schema_logicals
from tailfill.formats.debezium import ChangeEvent, read_event
from tailfill.formats.json_fields import _coerce
from tailfill.values.schema import (
    CDC_OP,
    CHANGE_COLUMNS,
    DELETE_OP,
    METADATA_FIELDS,
    POSITION_COLUMNS,
    TRUNCATE_OP,
    VALUE_FIELD,
    field_type,
)

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
        return []  # the inner format's rules, and checks.keyed_problems, check the block

    def declared_columns(self, fmt: FormatConfig) -> pa.Schema | None:  # type: ignore[override]
        return with_change_columns(self.inner.declared_columns(fmt))

    def new_table(self) -> NewTable:
        """The inner format's new table with the change columns; ConfigError if a key column is not one of its
        columns (a registry's schema is known only now)."""
        new = self.inner.new_table()
        columns = with_change_columns(new.columns)
        assert columns is not None
        if missing := [k for k in self.key if k != KAFKA_KEY and k not in columns.names]:
            raise ConfigError(f"target.key: {', '.join(map(repr, missing))} names no column of the table's schema "
                              f"(columns: {', '.join(c for c in columns.names if c not in CHANGE_COLUMNS.names)})")
        return NewTable(new.key_type, columns, new.properties)

    def decoder(self) -> ChangeDecoder:
        reads_events = self.envelope == "debezium" and self.inner.follows_writer_schema
        return ChangeDecoder(self.inner.decoder(), self.key, self.envelope, self.fmt.fields, reads_events)


class ChangeDecoder:
    """Decodes changes: the inner decoder takes each row's new state, this one the envelope, ops and deletes.

    ``reads_events``: the inner decoder reads the Debezium envelopes itself (a registry format's writers, see
    :class:`~tailfill.formats.debezium.DebeziumWriter`), its rows carrying their change columns."""

    def __init__(self, inner: Decoder, key: tuple[str, ...], envelope: str, fields: list[FieldSpec],
                 reads_events: bool = False):
        self.inner, self.key_columns, self.envelope, self.reads_events = inner, key, envelope, reads_events
        self.key = inner.key
        self.rows_schema = with_change_columns(inner.rows_schema)
        self.specs = {f.name: f for f in fields}
        self.columns = {f.name: Column(field_type(f.type), f.type, f.logical) for f in fields}
        self.value_keys = [k for k in key if k != KAFKA_KEY]
        self.events = EventReader()

    def decode(self, values: pa.Array, keys: pa.Array, table_columns: pa.Schema | None) -> Decoded:
        n = len(values)
        states: dict[int, bytes] = {}  # position -> the value the inner format decodes (the row's new state)
        deletes: dict[int, dict[str, Any]] = {}  # position -> the deleted key's columns (a truncate: none)
        ops = [DELETE_OP] * n
        where: dict[str, list] = {name: [None] * n for name in POSITION_COLUMNS}  # each change's source position
        errors: dict[int, str] = {}
        raw_keys = keys.to_pylist()
        for i, value in enumerate(values.to_pylist()):
            try:
                if value is None:  # a tombstone: delete the Kafka key's row
                    deletes[i] = self._key_of_tombstone(raw_keys[i])
                elif self.envelope == "debezium" and not self.reads_events:
                    event = self.events.read(value, self.columns)
                    ops[i] = event.op
                    for name, at in event.position.items():
                        where[name][i] = at
                    if event.op == DELETE_OP:
                        deletes[i] = self._key_columns(event.body, "'before'")
                    elif event.op == TRUNCATE_OP:
                        deletes[i] = {}
                    else:
                        states[i] = self.events.encode(event.body)
                else:
                    ops[i] = "u"
                    states[i] = value
            except RecordError as exc:
                errors[i] = str(exc)
        upserts = self._states(states, keys, table_columns, errors)
        if self.reads_events:
            upserts = _take_change_columns(upserts, ops, where)
        groups = [upserts, self._deletes(deletes, table_columns)]
        rows = []
        for group in groups:
            group = self._without_null_keys(group, raw_keys, ops, errors)
            at = group.positions.to_numpy()
            columns = group.columns.append_column(CDC_OP, pa.array([ops[i] for i in at], pa.string()))
            for name in POSITION_COLUMNS:
                columns = columns.append_column(name, pa.array([where[name][i] for i in at], pa.int64()))
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

    def _deletes(self, deletes: dict[int, dict[str, Any]], table_columns: pa.Schema | None) -> Rows:
        """Delete rows: the key's columns, every other column null. Without declared columns (a registry format)
        the key columns take the table's types, and a decoded Kafka key comes first as ``kafka_key``."""
        at = sorted(deletes)
        if self.inner.rows_schema is not None:
            schema = self._empty_columns().schema
            columns = [pa.array([deletes[i].get(f.name) for i in at], f.type) if f.name in self.value_keys
                       else pa.nulls(len(at), f.type) for f in schema]
            return Rows(pa.array(at, pa.int64()), pa.Table.from_arrays(columns, schema=schema))
        names = [*([KAFKA_KEY] if self.key == "registry" else []), *self.value_keys]
        known = table_columns if table_columns is not None else pa.schema([])
        arrays = {n: pa.array([deletes[i].get(n) for i in at],
                              known.field(n).type if known.get_field_index(n) >= 0 else None) for n in names}
        return Rows(pa.array(at, pa.int64()), pa.table(arrays))

    def _empty_columns(self) -> pa.Table:
        """No rows, the inner format's decoded columns (what a row holds between the metadata and the raw value)."""
        if self.inner.rows_schema is None:
            return pa.table({k: pa.array([], pa.string()) for k in self.value_keys})
        skip = {f.name for f in METADATA_FIELDS} | {VALUE_FIELD.name}
        return pa.schema([f for f in self.inner.rows_schema if f.name not in skip]).empty_table()

    def _without_null_keys(self, rows: Rows, raw_keys: list, ops: list[str], errors: dict[int, str]) -> Rows:
        """``rows`` less those with no key (quarantined with the reason); a truncate has none and needs none."""
        missing = np.zeros(len(rows.positions), dtype=bool)
        truncates = np.array([ops[i] == TRUNCATE_OP for i in rows.positions.to_pylist()], dtype=bool)
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
            null &= ~truncates
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
        if self.key == "registry":  # the key in the wire format, decoded with its own schema
            decoded = self.inner.key_value(raw)  # type: ignore[attr-defined]
            doc = decoded if isinstance(decoded, dict) else (
                {self.value_keys[0]: decoded} if len(self.value_keys) == 1 else {})
            return {KAFKA_KEY: decoded, **(self._key_columns(doc, "the Kafka key") if self.value_keys else {})}
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


def _take_change_columns(rows: Rows, ops: list, where: dict[str, list]) -> Rows:
    """``rows`` decoded with their change columns: each change's op and source position put at its position in
    ``ops`` and ``where``, and the columns dropped (the decoder adds them to every group alike)."""
    if rows.columns.schema.get_field_index(CDC_OP) < 0:
        return rows
    at = rows.positions.to_pylist()
    for name, out in ((CDC_OP, ops), *where.items()):
        for i, value in zip(at, rows.columns.column(name).to_pylist(), strict=True):
            out[i] = value
    return Rows(rows.positions, rows.columns.drop_columns(list(CHANGE_COLUMNS.names)))


def _unwrapped(doc: dict[str, Any]) -> Any:
    """A JSON converter's message without its ``schema``/``payload`` wrapper."""
    return doc["payload"] if set(doc) == {"schema", "payload"} else doc


class EventReader:
    """Debezium change events in JSON, with or without the converter's ``schema``/``payload`` wrapper, read with
    their numbers exact (Decimals, never floats) and their logical types converted into their columns' types: the
    wrapper's schema names each field's (each schema read once: a cache by its text), else the declared ones."""

    def __init__(self) -> None:
        self.parts = msgspec.json.Decoder(dict[str, msgspec.Raw])
        self.exact = msgspec.json.Decoder(float_hook=Decimal)
        self.encoder = msgspec.json.Encoder(decimal_format="number")
        self.schemas: dict[bytes, Any] = {}

    def read(self, value: bytes, columns: dict[str, Column]) -> ChangeEvent:
        """One event read (:func:`~tailfill.formats.debezium.read_event`), its row's values as ``columns`` take them."""
        try:
            try:
                parts = self.parts.decode(value)
            except msgspec.ValidationError:  # not an object: read_event says what it is
                parts = None
            if parts is not None and set(parts) == {"schema", "payload"}:
                schema, doc = self._schema(bytes(parts["schema"])), self.exact.decode(parts["payload"])
            else:
                schema, doc = None, self.exact.decode(value)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise RecordError(f"malformed Debezium change event: {str(exc)[:80]}") from None
        event = read_event(doc)
        image = "before" if event.op == DELETE_OP else "after"
        return event._replace(body=convert_row(event.body, schema_logicals(schema, image), columns))

    def _schema(self, text: bytes) -> Any:
        if text not in self.schemas:
            if len(self.schemas) > 64:  # a stream of ever-new schemas: keep the cache small
                self.schemas.clear()
            self.schemas[text] = self.exact.decode(text)
        return self.schemas[text]

    def encode(self, body: dict[str, Any]) -> bytes:
        """A row as JSON for the inner decoder: decimals as their exact digits, dates and times as ISO text."""
        return self.encoder.encode(body)
