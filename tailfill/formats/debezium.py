"""Debezium change events, whatever their encoding: what a change is, and how a registry writer reads them.

:func:`read_event` reads one decoded event (a dict: from JSON, or from an Avro, Protobuf or JSON Schema
record): its ``op``, the row image it applies (``after`` for ``r``/``c``/``u``, ``before`` for ``d``) and the
``source`` position (``ts_ms``, ``lsn``). A truncate (``op`` ``t``) stops the run (:class:`ChangeStreamError`);
an event that cannot be applied raises :class:`RecordError` with the reason, for the quarantine.

:class:`DebeziumWriter` wraps a registry format's writer of envelope schemas: its rows are the envelope's row
image (the ``after`` record's fields) plus the change columns, so a keyed table from Avro, Protobuf or JSON
Schema change events has the same columns as one from JSON events.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from tailfill.errors import ChangeStreamError, RecordError
from tailfill.values.schema import CDC_LSN, CDC_OP, CDC_TS_MS, CHANGE_COLUMNS, DELETE_OP

UPSERT_OPS = ("r", "c", "u")
ROW_IMAGE = "after"  # the envelope field whose record type gives a change's columns


def read_event(doc: Any) -> tuple[str, dict[str, Any], int | None, int | None]:
    """(op, the row's new state or the deleted row, source.ts_ms, source.lsn) of one decoded change event."""
    if not isinstance(doc, dict):
        raise RecordError(f"a Debezium change event is an object, got {type(doc).__name__}")
    op = doc.get("op")
    source = doc.get("source") if isinstance(doc.get("source"), dict) else {}
    ts_ms, lsn = _long(source.get("ts_ms", doc.get("ts_ms"))), _long(source.get("lsn"))
    if op == "t":
        shown = json.dumps(source, default=str)[:120]
        raise ChangeStreamError(f"a Debezium truncate event (op 't', source {shown}) cannot be applied to a keyed "
                                "table; re-create the state table from a new snapshot")
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


def row_image_columns(envelope: pa.Schema) -> pa.Schema:
    """The columns of a change's row: the fields of the envelope's ``after`` record; ValueError naming what the
    envelope lacks when it is not a Debezium envelope."""
    if envelope.get_field_index(ROW_IMAGE) < 0 or envelope.get_field_index("op") < 0:
        raise ValueError(f"it is not a Debezium change event envelope (fields: {', '.join(envelope.names)}; "
                         "expected before, after, source, op)")
    image = envelope.field(ROW_IMAGE).type
    if not pa.types.is_struct(image):
        raise ValueError(f"the envelope's '{ROW_IMAGE}' is {image}, not a record")
    fields = list(image)
    if clash := [f.name for f in fields if f.name in CHANGE_COLUMNS.names]:
        raise ValueError(f"the row's fields {', '.join(clash)} are change columns Tailfill adds")
    return pa.schema(fields)


class DebeziumWriter:
    """A registry writer of Debezium envelope schemas, read as changes: each row is the event's row image with
    ``cdc_op``, ``cdc_ts_ms`` and ``cdc_lsn``; a truncate stops the run, a change that cannot apply is refused."""

    def __init__(self, envelope: Any):  # a wire.Writer of the envelope schema (typed loosely: no import cycle)
        self.envelope = envelope

    def columns_of(self, variant: tuple) -> pa.Schema:
        return pa.schema([*row_image_columns(self.envelope.columns_of(variant)), *CHANGE_COLUMNS])

    def required_of(self, variant: tuple) -> tuple[str, ...]:
        return ()  # a row image's fields are optional in the envelope (after is null for a delete)

    def read(self, payload: bytes) -> tuple[tuple, dict]:
        variant, doc = self.envelope.read(payload)
        op, body, ts_ms, lsn = read_event(doc)
        return variant, {**body, CDC_OP: op, CDC_TS_MS: ts_ms, CDC_LSN: lsn}
