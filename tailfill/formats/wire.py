"""Registry formats: records in Confluent's wire format (magic byte 0, 4-byte schema id, payload).

Each record is decoded with the writer schema of its own id, fetched from the Schema Registry once
per decoder (:mod:`tailfill.formats.schema_registry`). A record without the magic byte, with an id the
registry does not know, whose schema has no column types, that does not decode, or whose writer
schema conflicts with the table (``on_incompatible_schema: quarantine``) goes to quarantine with the
reason; nothing is dropped. A writer schema without a field the table requires stops the run here
with ``on_incompatible_schema: fail`` (the driver cannot see a missing field in the batch's files).
Rows carry the columns of their writer schema; the driver adds new ones to the table before it
commits them. With ``format.key: registry`` each key is decoded the same way with its own schema
id into ``kafka_key``; a key not in the wire format, of an unknown id, or that does not decode sends
its record to quarantine with the reason.

Avro, Protobuf and JSON Schema are :class:`WireFormat` subclasses in their own modules: each names
its registry schema type and the classes that read its value and key schemas.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from tailfill.config import FormatConfig
from tailfill.errors import RecordError, RegistryError, SchemaChangeError
from tailfill.formats.base import Decoded, Format, NewTable, Rows
from tailfill.formats.debezium import DebeziumWriter
from tailfill.formats.evolve import canon, conflicts, missing_required, required_properties
from tailfill.formats.schema_registry import RegisteredSchema, RegistryClient
from tailfill.values.schema import RESERVED_PREFIX

MAGIC = 0
HEADER = 5  # magic byte + 4-byte big-endian schema id
NOT_WIRE = "not in the Confluent wire format (no magic byte 0 and schema id)"


class Writer(Protocol):
    """A writer schema, built once: decodes payloads and says the columns of each message variant."""

    def __init__(self, text: str, imports: dict[str, str]): ...

    def read(self, payload: bytes) -> tuple[tuple, dict]: ...

    def columns_of(self, variant: tuple) -> pa.Schema: ...

    def required_of(self, variant: tuple) -> tuple[str, ...]: ...


class KeyWriter(Protocol):
    """A key schema, built once: decodes key payloads and says the key type of each message variant."""

    def __init__(self, text: str, imports: dict[str, str]): ...

    def read(self, payload: bytes) -> tuple[tuple, object]: ...

    def type_of(self, variant: tuple) -> pa.DataType: ...


class WireFormat(Format):
    """A format whose records name their writer schema in the registry (Avro, Protobuf, JSON Schema)."""

    follows_writer_schema = True
    schema_type: ClassVar[str]  # the registry's name of the schema type: AVRO, PROTOBUF, JSON
    writer_class: ClassVar[type[Writer]]  # built from a schema's text and the texts of the schemas it references
    key_class: ClassVar[type[KeyWriter]]  # the same, for a key schema
    first_variant: ClassVar[tuple] = ()  # the message of a schema a new table takes its columns from

    @classmethod
    def problems(cls, fmt: FormatConfig) -> list[str]:
        out = []
        if fmt.schema_registry is None:
            out.append(f"{fmt.type} format needs schema_registry (url, and subject if not <topic>-value)")
        if fmt.fields:
            out.append(f"{fmt.type} format takes its columns from the registry's schema, not 'fields'")
        if fmt.key == "string":
            out.append(f"{fmt.type} format decodes keys with key: registry (their writer schema), or keeps the bytes "
                       "sent (key: raw); key: string is for json and raw")
        return out

    @classmethod
    def build(cls, found: RegisteredSchema, imports: dict[str, str], key: bool = False,
              envelope: str = "none") -> Writer | KeyWriter:
        """The writer (``key``: key writer) of a registry schema; ValueError if it cannot be one. ``envelope:
        debezium``: the schema is a Debezium envelope, its rows the changes' row images (:mod:`.debezium`)."""
        if found.kind != cls.schema_type:
            raise ValueError(f"it is a {found.kind} schema, the pipeline reads {cls.name}")
        if imports and cls.schema_type != "PROTOBUF":
            raise ValueError("it references other subjects, which Tailfill reads for Protobuf schemas only")
        if key:
            return cls.key_class(found.text, imports)
        writer: Writer = cls.writer_class(found.text, imports)
        if envelope == "debezium":
            writer = DebeziumWriter(writer)
        reserved = [f.name for f in writer.columns_of(cls.first_variant) if f.name.startswith(RESERVED_PREFIX)]
        if reserved:
            raise ValueError(f"fields {', '.join(reserved)} use the reserved prefix '{RESERVED_PREFIX}'")
        return writer

    def _latest(self, subject: str, key: bool) -> Writer | KeyWriter:
        """The writer of ``subject``'s latest schema; ValueError if it cannot be a table's columns (or kafka_key)."""
        assert self.registry is not None, "a registry format has a registry client"
        latest = self.registry.latest(subject)
        try:
            return self.build(latest, self.registry.imports(latest), key, self.fmt.envelope)
        except (ValueError, KeyError) as exc:
            raise ValueError(f"the latest schema of {'key ' if key else ''}subject {subject!r} (id {latest.id}) "
                             f"cannot be {'kafka_key' if key else 'a table'}: {exc}") from exc

    def new_table(self) -> NewTable:
        """The subject's latest schema: its columns, its required fields recorded (``tailfill.required-fields``),
        and with ``format.key: registry`` the key subject's latest type as ``kafka_key``."""
        registry = self.fmt.schema_registry
        subject = (registry.subject if registry else None) or f"{self.topic}-value"
        writer = self._latest(subject, key=False)
        columns, required = writer.columns_of(self.first_variant), writer.required_of(self.first_variant)
        key_type = pa.binary()
        if self.fmt.key == "registry":  # kafka_key: the key subject's type (a struct for a record key)
            key_subject = (registry.key_subject if registry else None) or f"{self.topic}-key"
            key_type = self._latest(key_subject, key=True).type_of(self.first_variant)
        return NewTable(key_type, columns, required_properties(required))

    def decoder(self) -> WireDecoder:
        assert self.registry is not None, "a registry format has a registry client"
        return WireDecoder(self.fmt, type(self), self.registry)


class WireDecoder:
    """Splits the values of a registry format into rows per writer schema, and quarantine; it asks the registry
    for each schema id once (and keeps the writers it built)."""

    rows_schema = None  # each writer schema's own columns

    def __init__(self, fmt: FormatConfig, kind: type[WireFormat], client: RegistryClient):
        self.fmt, self.kind, self.client = fmt, kind, client
        self.key = fmt.key
        self._writers: dict[tuple[bool, int], Writer | KeyWriter | str] = {}  # (key?, id) -> writer, or why not

    def writer(self, schema_id: int, key: bool = False) -> Writer | KeyWriter | str:
        """The writer of ``schema_id`` (``key``: as a key schema), or why records of that id cannot be decoded."""
        if (key, schema_id) in self._writers:
            return self._writers[(key, schema_id)]
        found = self.client.schema(schema_id)  # RegistryError if unreachable: the batch fails, nothing commits
        if found is None:
            writer: Writer | KeyWriter | str = f"unknown schema id {schema_id} (the registry has no such schema)"
        else:
            try:
                writer = self.kind.build(found, self.client.imports(found), key, self.fmt.envelope)
            except RegistryError:  # unreachable: the batch fails, nothing commits
                raise
            except Exception as exc:  # a schema we cannot map: its records are quarantined with the reason
                writer = f"writer schema id {schema_id} cannot be read: {exc}"
        self._writers[(key, schema_id)] = writer
        return writer

    def _key(self, raw: bytes | None) -> tuple[int | None, tuple, object] | str:
        """(key schema id, variant, decoded key) of one record's key (None, (), None for no key), or why not."""
        if raw is None:
            return None, (), None
        if len(raw) < HEADER or raw[0] != MAGIC:
            return f"key {NOT_WIRE}"
        key_id = int.from_bytes(raw[1:HEADER], "big")
        writer = self.writer(key_id, key=True)
        if isinstance(writer, str):
            return f"key: {writer}"
        try:
            variant, value = writer.read(raw[HEADER:])
        except Exception as exc:
            return f"key does not decode with key schema id {key_id}: {str(exc)[:200] or type(exc).__name__}"
        return key_id, variant, value

    def key_value(self, raw: bytes) -> object:
        """One record's key decoded with its own key schema; RecordError saying why it cannot be."""
        found = self._key(raw)
        if isinstance(found, str):
            raise RecordError(found)
        return found[2]

    def decode(self, values: pa.Array, keys: pa.Array, table_columns: pa.Schema | None) -> Decoded:
        """Rows per writer schema (and key schema), and why each other record is none; ``table_columns``: the
        target table's columns now (for ``on_incompatible_schema: quarantine``), None to let the driver judge."""
        payloads = values.to_pylist()
        keyed = self.key == "registry"
        raw_keys = keys.to_pylist() if keyed else None
        groups: dict[tuple, tuple[pa.Schema, list[int], list[dict]]] = {}
        errors: dict[int, str] = {}
        refused: dict[tuple, str] = {}
        for i, value in enumerate(payloads):
            if value is None or len(value) < HEADER or value[0] != MAGIC:
                errors[i] = NOT_WIRE
                continue
            schema_id = int.from_bytes(value[1:HEADER], "big")
            writer = self.writer(schema_id)
            if isinstance(writer, str):
                errors[i] = writer
                continue
            try:
                variant, row = writer.read(value[HEADER:])
            except Exception as exc:
                errors[i] = f"does not decode with writer schema id {schema_id}: {str(exc)[:200]}"
                continue
            group: tuple = (schema_id, variant)
            if raw_keys is not None:
                found = self._key(raw_keys[i])
                if isinstance(found, str):
                    errors[i] = found
                    continue
                key_id, key_variant, row["kafka_key"] = found
                group = (schema_id, variant, key_id, key_variant)
            if group not in groups:
                columns = writer.columns_of(variant)
                if len(group) > 2 and group[2] is not None:  # a decoded key: kafka_key is a column of this group
                    columns = columns.insert(0, pa.field("kafka_key", self.writer(group[2], key=True).type_of(
                        group[3])))
                missing = missing_required(columns, table_columns) if table_columns is not None else []
                if missing and self.fmt.on_incompatible_schema == "fail":
                    raise SchemaChangeError(f"incompatible writer schema id {schema_id}: {'; '.join(missing)}")
                problems = conflicts(columns, table_columns) + missing if table_columns is not None else []
                if problems and self.fmt.on_incompatible_schema == "quarantine":
                    refused[group] = (f"writer schema id {schema_id} is incompatible with the table: "
                                      f"{'; '.join(problems)}")
                groups[group] = (columns, [], [])
            if group in refused:
                errors[i] = refused[group]
                continue
            groups[group][1].append(i)
            groups[group][2].append(row)
        rows = [self._rows(columns, positions, dicts, errors, table_columns)
                for columns, positions, dicts in groups.values()]
        return Decoded([r for r in rows if r is not None], errors)

    @staticmethod
    def _rows(columns: pa.Schema, positions: list[int], rows: list[dict], errors: dict[int, str],
              table_columns: pa.Schema | None) -> Rows | None:
        """One writer schema's rows as columns; rows whose values do not fit their column types go to
        ``errors``. A column of the table's type that is wider (int → long ...) is cast to it."""
        struct = pa.struct(list(columns))
        try:
            array = pa.array(rows, struct)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            keep_at, keep = [], []
            for i, row in zip(positions, rows, strict=True):
                try:
                    pa.array([row], struct)
                except Exception as exc:
                    errors[i] = f"value does not fit its column types: {str(exc)[:200]}"
                    continue
                keep_at.append(i)
                keep.append(row)
            positions, rows = keep_at, keep
            array = pa.array(rows, struct)
        if not positions:
            return None
        cols = [_to_table_type(c, f.name, table_columns) for c, f in zip(array.flatten(), columns, strict=True)]
        schema = pa.schema([pa.field(f.name, c.type) for c, f in zip(cols, columns, strict=True)])
        return Rows(pa.array(positions, pa.int64()), pa.Table.from_arrays(cols, schema=schema))


def _to_table_type(column: pa.Array, name: str, table_columns: pa.Schema | None) -> pa.Array:
    """``column`` cast to the table's type of ``name`` when that is a wider one it fits (int → long ...)."""
    if table_columns is None or table_columns.get_field_index(name) < 0:
        return column
    target = canon(table_columns.field(name).type)
    if canon(column.type) == target:
        return column
    try:
        return pc.cast(column, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return column
