"""Debezium change events, whatever their encoding: what a change is, and how a registry writer reads them.

:func:`read_event` reads one decoded event (a dict: from JSON, or from an Avro, Protobuf or JSON Schema
record): its ``op``, the row image it applies (``after`` for ``r``/``c``/``u``, ``before`` for ``d``, none for a
truncate ``t``) and its ``source`` position (:func:`source_position`: ``ts_ms``, Postgres's ``lsn``, MySQL's
binlog position and GTID). An event that cannot be applied raises :class:`RecordError` with the reason, for the
quarantine.

:class:`DebeziumWriter` wraps a registry format's writer of envelope schemas: its rows are the envelope's row
image (the ``after`` record's fields) plus the change columns, so a keyed table from Avro, Protobuf or JSON
Schema change events has the same columns as one from JSON events.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import pyarrow as pa

from tailfill.errors import RecordError
from tailfill.formats.connect_types import Column, convert_row, kind_of
from tailfill.values.schema import (
    CDC_BINLOG,
    CDC_GTID,
    CDC_LSN,
    CDC_OP,
    CDC_TS_MS,
    CHANGE_COLUMNS,
    DELETE_OP,
    TRUNCATE_OP,
)

UPSERT_OPS = ("r", "c", "u")
ROW_IMAGE = "after"  # the envelope field whose record type gives a change's columns
_BINLOG_NUMBER = re.compile(r"\.(\d+)$")  # mysql-bin.000003: the file's sequence number
_GTID_NUMBER = re.compile(r"[:-](\d+)$")  # MySQL's uuid:N, MariaDB's domain-server-N: the transaction's number


class ChangeEvent(NamedTuple):
    """One change event read: its op, the row it applies (the deleted row for ``d``; empty for ``t``), and its
    source position by change column (:data:`~tailfill.values.schema.POSITION_COLUMNS`)."""

    op: str
    body: dict[str, Any]
    position: dict[str, int | None]


def read_event(doc: Any) -> ChangeEvent:
    """One decoded change event read (see :class:`ChangeEvent`); RecordError if it cannot be applied."""
    if not isinstance(doc, dict):
        raise RecordError(f"a Debezium change event is an object, got {type(doc).__name__}")
    op = doc.get("op")
    source = doc.get("source") if isinstance(doc.get("source"), dict) else {}
    position = source_position(source, doc.get("ts_ms"))
    if op == TRUNCATE_OP:
        return ChangeEvent(op, {}, position)
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
    return ChangeEvent(op, body, position)


def source_position(source: dict[str, Any], ts_ms: Any = None) -> dict[str, int | None]:
    """An event's position by change column: ``source.ts_ms`` (else the event's ``ts_ms``), Postgres's
    ``source.lsn``, MySQL's binlog position (:func:`binlog_version`) and GTID number (:func:`gtid_version`); None
    for what the source does not carry."""
    return {CDC_TS_MS: _long(source.get("ts_ms", ts_ms)), CDC_LSN: _long(source.get("lsn")),
            CDC_BINLOG: binlog_version(source.get("file"), source.get("pos")),
            CDC_GTID: gtid_version(source.get("gtid"))}


def binlog_version(file: Any, pos: Any) -> int | None:
    """MySQL's binlog position as one ordered long: the file's sequence number (``mysql-bin.000003``: 3) times 2**32
    plus ``pos`` (the event's offset in the file, below 2**32). None without both, or for a file name without a
    number. A key's changes in one binlog event (one ``pos``, ``source.row`` apart) are rows of one statement, which
    Debezium writes in order to the key's one partition: their offsets order them."""
    match = _BINLOG_NUMBER.search(file) if isinstance(file, str) else None
    pos = _long(pos)
    if match is None or pos is None or not 0 <= pos < 2**32 or int(match.group(1)) >= 2**31:
        return None
    return int(match.group(1)) * 2**32 + pos


def gtid_version(gtid: Any) -> int | None:
    """A GTID's transaction number (``3E11FA47-...:23``: 23; MariaDB's ``0-1-23``: 23); None without one."""
    match = _GTID_NUMBER.search(gtid) if isinstance(gtid, str) else None
    return int(match.group(1)) if match and int(match.group(1)) < 2**63 else None


def _long(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63 else None


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
    """A registry writer of Debezium envelope schemas, read as changes: each row is the event's row image with the
    change columns (a truncate's: none but those); a change that cannot apply is refused. Values of a Kafka
    Connect logical type the writer names (Avro's ``connect.name``) are converted into their columns' types."""

    def __init__(self, envelope: Any):  # a wire.Writer of the envelope schema (typed loosely: no import cycle)
        self.envelope = envelope
        self.converts: dict[tuple, tuple[dict, dict]] = {}  # variant -> (its logical types, its columns)

    def columns_of(self, variant: tuple) -> pa.Schema:
        return pa.schema([*row_image_columns(self.envelope.columns_of(variant)), *CHANGE_COLUMNS])

    def required_of(self, variant: tuple) -> tuple[str, ...]:
        return ()  # a row image's fields are optional in the envelope (after is null for a delete)

    def read(self, payload: bytes) -> tuple[tuple, dict]:
        variant, doc = self.envelope.read(payload)
        event = read_event(doc)
        logicals, columns = self._converts(variant)
        body = convert_row(event.body, logicals, columns) if logicals else event.body
        return variant, {**body, CDC_OP: event.op, **event.position}

    def _converts(self, variant: tuple) -> tuple[dict, dict]:
        """The logical types of a variant's row image (``after``'s, which ``before`` shares) and its columns."""
        if variant not in self.converts:
            named = getattr(self.envelope, "logicals", None)
            logicals = named(variant, ROW_IMAGE) if named is not None else {}
            columns = {f.name: Column(f.type, kind_of(f.type)) for f in self.columns_of(variant)}
            self.converts[variant] = (logicals, columns)
        return self.converts[variant]
