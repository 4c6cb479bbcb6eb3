"""Records in Confluent's wire format (magic byte 0, 4-byte schema id, payload) into rows, or quarantine.

Each record is decoded with the writer schema of its own id, fetched from the registry once per
process (:mod:`tailfill.formats.registry`). A record without the magic byte, with an id the registry
does not know, whose schema has no column types, that does not decode, or whose writer schema
conflicts with the table (``on_incompatible_schema: quarantine``) goes to quarantine with the
reason; nothing is dropped. A writer schema without a field the table requires stops the run here
with ``on_incompatible_schema: fail`` (the driver cannot see a missing field in the batch's files).
Rows carry the columns of their writer schema; the driver adds new ones to the table before it
commits them (:mod:`tailfill.formats.evolve`). With ``format.key: registry`` each key is decoded the
same way with its own schema id (:mod:`tailfill.formats.keys`) into ``kafka_key``; a key not in the
wire format, of an unknown id, or that does not decode sends its record to quarantine with the reason.
"""

from __future__ import annotations

import threading
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from tailfill.config import RESERVED_PREFIX, FormatConfig, PipelineConfig
from tailfill.errors import RegistryError, SchemaChangeError
from tailfill.formats.avro import AvroWriter
from tailfill.formats.evolve import canon, conflicts, missing_required
from tailfill.formats.json_schema import JsonSchemaWriter
from tailfill.formats.keys import KEYS
from tailfill.formats.protobuf import ProtobufWriter
from tailfill.formats.registry import RegistryClient
from tailfill.values.schema import METADATA_FIELDS, QUARANTINE_SCHEMA, VALUE_FIELD

MAGIC = 0
HEADER = 5  # magic byte + 4-byte big-endian schema id
KINDS = {"avro": ("AVRO", AvroWriter), "protobuf": ("PROTOBUF", ProtobufWriter),
         "json_schema": ("JSON", JsonSchemaWriter)}


class Writer(Protocol):
    """A writer schema, built once: decodes payloads and says the columns of each message variant."""

    def read(self, payload: bytes) -> tuple[tuple, dict]: ...

    def columns_of(self, variant: tuple) -> pa.Schema: ...

    def required_of(self, variant: tuple) -> tuple[str, ...]: ...


class KeyWriter(Protocol):
    """A key schema, built once: decodes key payloads and says the key type of each message variant."""

    def read(self, payload: bytes) -> tuple[tuple, object]: ...

    def type_of(self, variant: tuple) -> pa.DataType: ...


_WRITERS: dict[tuple[str, str, bool, int], Writer | KeyWriter | str] = {}  # (url, format, key?, id) -> writer/why
_LOCK = threading.Lock()
KEY_AT = [f.name for f in METADATA_FIELDS].index("kafka_key")


def build_writer(kind: str, schema_type: str, text: str, key: bool = False,
                 imports: dict[str, str] | None = None) -> Writer | KeyWriter:
    """The :class:`Writer` (``key``: :class:`KeyWriter`) of a registry schema for a pipeline of format ``kind``
    (``imports``: the texts of the schemas it references, by name); ValueError if it cannot be one."""
    want, cls = KINDS[kind]
    if schema_type != want:
        raise ValueError(f"it is a {schema_type} schema, the pipeline reads {kind}")
    if imports and want != "PROTOBUF":
        raise ValueError("it references other subjects, which Tailfill reads for Protobuf schemas only")
    args = (text, imports) if want == "PROTOBUF" else (text,)
    if key:
        return KEYS[want](*args)
    writer = cls(*args)
    columns = writer.columns_of((0,) if kind == "protobuf" else ())
    reserved = [f.name for f in columns if f.name.startswith(RESERVED_PREFIX)]
    if reserved:
        raise ValueError(f"fields {', '.join(reserved)} use the reserved prefix '{RESERVED_PREFIX}'")
    return writer


def _latest(cfg: PipelineConfig, subject: str, key: bool) -> Writer | KeyWriter:
    """The writer of ``subject``'s latest schema; ValueError if it cannot be a table's columns (or kafka_key)."""
    fmt = cfg.format
    client = RegistryClient(fmt.schema_registry)
    latest = client.latest(subject)
    try:
        return build_writer(fmt.type, latest.kind, latest.text, key, client.imports(latest))
    except (ValueError, KeyError) as exc:
        raise ValueError(f"the latest schema of {'key ' if key else ''}subject {subject!r} (id {latest.id}) cannot be "
                         f"{'kafka_key' if key else 'a table'}: {exc}") from exc


def latest_columns(cfg: PipelineConfig) -> tuple[pa.Schema, tuple[str, ...]]:
    """The columns and required top-level fields of the pipeline's subject's latest schema (what a new table
    is made with)."""
    writer = _latest(cfg, cfg.subject, key=False)
    variant = (0,) if cfg.format.type == "protobuf" else ()
    return writer.columns_of(variant), writer.required_of(variant)


def latest_key_type(cfg: PipelineConfig) -> pa.DataType:
    """The type of ``kafka_key`` from the latest schema of the pipeline's key subject (``format.key: registry``)."""
    return _latest(cfg, cfg.key_subject, key=True).type_of((0,) if cfg.format.type == "protobuf" else ())


class RegistryDecoder:
    """Splits raw records of a registry format into rows and quarantine rows (one per process and format)."""

    def __init__(self, fmt: FormatConfig):
        self.fmt = fmt
        self.client = RegistryClient(fmt.schema_registry)

    def writer(self, schema_id: int, key: bool = False) -> Writer | KeyWriter | str:
        """The writer of ``schema_id`` (``key``: as a key schema; cached per process), or why records of that id
        cannot be decoded."""
        cached = (self.client.cfg.url, self.fmt.type, key, schema_id)
        with _LOCK:
            if cached in _WRITERS:
                return _WRITERS[cached]
        found = self.client.schema(schema_id)  # RegistryError if unreachable: the batch fails, nothing commits
        if found is None:
            writer: Writer | KeyWriter | str = f"unknown schema id {schema_id} (the registry has no such schema)"
        else:
            try:
                writer = build_writer(self.fmt.type, found.kind, found.text, key, self.client.imports(found))
            except RegistryError:  # unreachable: the batch fails, nothing commits
                raise
            except Exception as exc:  # a schema we cannot map: its records are quarantined with the reason
                writer = f"writer schema id {schema_id} cannot be read: {exc}"
        with _LOCK:
            _WRITERS[cached] = writer
        return writer

    def _key(self, raw: bytes | None, writers: dict) -> tuple[int | None, tuple, object] | str:
        """(key schema id, variant, decoded key) of one record's key (None, (), None for no key), or why not."""
        if raw is None:
            return None, (), None
        if len(raw) < HEADER or raw[0] != MAGIC:
            return "key not in the Confluent wire format (no magic byte 0 and schema id)"
        key_id = int.from_bytes(raw[1:HEADER], "big")
        writer = writers.get((True, key_id))
        if writer is None:
            writer = writers[(True, key_id)] = self.writer(key_id, key=True)
        if isinstance(writer, str):
            return f"key: {writer}"
        try:
            variant, value = writer.read(raw[HEADER:])
        except Exception as exc:
            return f"key does not decode with key schema id {key_id}: {str(exc)[:200] or type(exc).__name__}"
        return key_id, variant, value

    def split(self, table: pa.Table, run_id: str, table_columns: pa.Schema | None = None) -> tuple[pa.Table, pa.Table]:
        """(rows, quarantined rows) of raw records; ``table_columns``: the target table's columns now (for
        the ``on_incompatible_schema: quarantine`` check), None to let the driver judge."""
        values = table.column("kafka_value").combine_chunks().cast(pa.binary())
        meta = table.select([f.name for f in METADATA_FIELDS]).cast(pa.schema(METADATA_FIELDS))
        payloads = values.to_pylist()
        keyed = self.fmt.key == "registry"
        keys = meta.column("kafka_key").to_pylist() if keyed else None
        groups: dict[tuple, tuple[pa.Schema, list[int], list[dict]]] = {}
        errors: dict[int, str] = {}
        refused: dict[tuple, str] = {}
        writers: dict[tuple[bool, int], Writer | KeyWriter | str] = {}  # this call's: no lock per record
        for i, value in enumerate(payloads):
            if value is None or len(value) < HEADER or value[0] != MAGIC:
                errors[i] = "not in the Confluent wire format (no magic byte 0 and schema id)"
                continue
            schema_id = int.from_bytes(value[1:HEADER], "big")
            writer = writers.get((False, schema_id))
            if writer is None:
                writer = writers[(False, schema_id)] = self.writer(schema_id)
            if isinstance(writer, str):
                errors[i] = writer
                continue
            try:
                variant, row = writer.read(value[HEADER:])
            except Exception as exc:
                errors[i] = f"does not decode with writer schema id {schema_id}: {str(exc)[:200]}"
                continue
            key: tuple = (schema_id, variant)
            if keys is not None:
                found = self._key(keys[i], writers)
                if isinstance(found, str):
                    errors[i] = found
                    continue
                key_id, key_variant, row["kafka_key"] = found
                key = (schema_id, variant, key_id, key_variant)
            if key not in groups:
                columns = writer.columns_of(variant)
                if len(key) > 2 and key[2] is not None:  # a decoded key: kafka_key is a column of this group
                    columns = columns.insert(0, pa.field("kafka_key", writers[(True, key[2])].type_of(key[3])))
                missing = missing_required(columns, table_columns) if table_columns is not None else []
                if missing and self.fmt.on_incompatible_schema == "fail":
                    raise SchemaChangeError(f"incompatible writer schema id {schema_id}: {'; '.join(missing)}")
                problems = conflicts(columns, table_columns) + missing if table_columns is not None else []
                if problems and self.fmt.on_incompatible_schema == "quarantine":
                    refused[key] = f"writer schema id {schema_id} is incompatible with the table: {'; '.join(problems)}"
                groups[key] = (columns, [], [])
            if key in refused:
                errors[i] = refused[key]
                continue
            groups[key][1].append(i)
            groups[key][2].append(row)
        parts = [self._rows(meta, values, columns, sources, rows, errors, table_columns, keyed)
                 for columns, sources, rows in groups.values()]
        parts = [p for p in parts if p is not None]
        ok = (pa.concat_tables(parts, promote_options="permissive") if parts  # no raw kafka_key beside decoded ones:
              else pa.schema([f for f in [*METADATA_FIELDS, VALUE_FIELD] if not keyed or f.name != "kafka_key"])
              .empty_table())
        bad_idx = pa.array(sorted(errors), pa.int64())
        bad = pa.Table.from_arrays(
            [*meta.take(bad_idx).columns, values.take(bad_idx),
             pa.array([errors[i] for i in sorted(errors)], pa.string()),
             pa.array([run_id] * len(errors), pa.string())], schema=QUARANTINE_SCHEMA)
        return ok, bad

    @staticmethod
    def _rows(meta: pa.Table, values: pa.Array, columns: pa.Schema, sources: list[int], rows: list[dict],
              errors: dict[int, str], table_columns: pa.Schema | None, keyed: bool) -> pa.Table | None:
        """One writer schema's rows as a table: coordinates, its columns, the raw value. Rows whose values do
        not fit their column types go to ``errors``. ``keyed``: keys were decoded (the raw key is not kept;
        a group of records without keys has no ``kafka_key`` column, which reads as null)."""
        struct = pa.struct(list(columns))
        try:
            array = pa.array(rows, struct)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            keep_s, keep_r = [], []
            for i, row in zip(sources, rows, strict=True):
                try:
                    pa.array([row], struct)
                except Exception as exc:
                    errors[i] = f"value does not fit its column types: {str(exc)[:200]}"
                    continue
                keep_s.append(i)
                keep_r.append(row)
            sources, rows = keep_s, keep_r
            array = pa.array(rows, struct)
        if not sources:
            return None
        take = pa.array(sources, pa.int64())
        cols = [_to_table_type(c, f.name, table_columns) for c, f in zip(array.flatten(), columns, strict=True)]
        fields = [pa.field(f.name, c.type) for c, f in zip(cols, columns, strict=True)]
        coordinates = meta.take(take)
        if keyed:
            coordinates = coordinates.drop_columns(["kafka_key"])
            if fields and fields[0].name == "kafka_key":
                coordinates = coordinates.add_column(KEY_AT, fields.pop(0), cols.pop(0))
        return pa.Table.from_arrays([*coordinates.columns, *cols, values.take(take)],
                                    schema=pa.schema([*coordinates.schema, *fields, VALUE_FIELD]))


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

