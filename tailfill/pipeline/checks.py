"""What a pipeline's format finds wrong with it, beyond its model's own checks: its ``format`` block by the format's
rules, a keyed target's key and envelope, and the columns that expectations and ``target.partition_by`` name.

Used when a pipeline is loaded (:mod:`tailfill.pipeline.load`) and when a routed pipeline's table is made
(:mod:`tailfill.pipeline.routes`); each problem is one ``field: problem`` line.
"""

from __future__ import annotations

import pyarrow as pa

from tailfill.config import FormatConfig, PipelineConfig
from tailfill.errors import ConfigError
from tailfill.formats.changes import with_change_columns
from tailfill.formats.connect_types import declared_problem
from tailfill.formats.registry import format_class
from tailfill.values.partition_terms import parse_term
from tailfill.values.paths import type_at
from tailfill.values.schema import CHANGE_COLUMNS, field_type, table_schema


def format_problems(cfg: PipelineConfig) -> list[str]:
    """What the pipeline's format finds wrong with it (``field: problem`` lines): its ``format`` block by the
    format's own rules, then the columns that expectations and ``target.partition_by`` name."""
    try:
        kind = format_class(cfg.format.type)
    except ConfigError as exc:
        return [f"format.type: {str(exc).removeprefix('format.type ')}"]
    problems = [f"format: {p}" for p in kind.problems(cfg.format)]
    if problems:
        return problems
    declared = kind.declared_columns(cfg.format)
    if cfg.target.keyed:
        declared = with_change_columns(declared)
        problems = keyed_problems(cfg, declared)
    elif cfg.format.envelope != "none":
        problems = [f"format.envelope: {cfg.format.envelope} needs a keyed target (target.mode: upsert)"]
    problems += logical_problems(cfg.format)
    return problems or _column_problems(cfg, declared)


DEBEZIUM_FORMATS = ("json", "avro", "protobuf", "json_schema")  # what Debezium's converters write


def keyed_problems(cfg: PipelineConfig, declared: pa.Schema | None) -> list[str]:
    """What is wrong with a keyed pipeline's key, version and envelope (``field: problem`` lines)."""
    out = []
    target = cfg.target
    if cfg.format.envelope == "debezium" and cfg.format.type not in DEBEZIUM_FORMATS:
        out.append(f"format.envelope: debezium reads change events in {', '.join(DEBEZIUM_FORMATS)}, not "
                   f"{cfg.format.type}")
    if cfg.format.unknown_fields == "evolve":
        out.append("format.unknown_fields: evolve is for append tables; a keyed table takes the fields it declares "
                   "(declare the new ones, or use ignore)")
    if declared is None:  # a registry's schema: the key columns are checked when the table is made
        if cfg.format.envelope != "debezium" and any(k != "kafka_key" for k in target.key):
            out.append(f"target.key: with format.type {cfg.format.type} the key must be [kafka_key] (tombstones "
                       "carry only the Kafka key)")
        return out
    names = set(declared.names)
    for column in target.key:
        if column not in names:
            out.append(f"target.key: {column!r} names no column (columns: {', '.join(declared.names)})")
        elif column in CHANGE_COLUMNS.names or column in ("kafka_value", "kafka_headers", "kafka_offset"):
            out.append(f"target.key: {column!r} cannot identify a row")
    if target.version_by is not None:
        if target.version_by not in names:
            out.append(f"target.version_by: {target.version_by!r} names no column "
                       f"(columns: {', '.join(declared.names)})")
        elif not pa.types.is_integer(declared.field(target.version_by).type):
            out.append(f"target.version_by: {target.version_by!r} must be a long column, it holds "
                       f"{declared.field(target.version_by).type}")
    if target.state_name in (target.table, target.quarantine_name):
        out.append(f"target.state_table: {target.state_name!r} is already the data or quarantine table")
    return out


def logical_problems(fmt: FormatConfig) -> list[str]:
    """Fields whose declared logical type is unknown, or does not go into their declared type."""
    out = []
    for i, spec in enumerate(fmt.fields):
        if spec.logical is None:
            continue
        if fmt.envelope != "debezium":
            out.append(f"format.fields[{i}].logical: it reads Debezium change events (format.envelope: debezium)")
        elif problem := declared_problem(spec.logical, spec.type, field_type(spec.type)):
            out.append(f"format.fields[{i}].logical: {problem}")
    return out


def _column_problems(cfg: PipelineConfig, declared: pa.Schema | None) -> list[str]:
    """Expectations and partition terms that name no column, or one of the wrong type. ``declared`` None: the
    columns come from a registry's schema, known (and checked) when the table is made."""
    out = []
    if declared is not None:
        for e in cfg.expectations:
            try:
                kind = type_at(declared, e.column)
            except ValueError as exc:
                out.append(f"expectations: on '{e.column}': {exc} (columns: {', '.join(declared.names)})")
                continue
            numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind)
            if (e.min is not None or e.max is not None) and not numeric:
                out.append(f"expectations: on '{e.column}': min/max need a number column, it holds {kind}")
    registry_key = cfg.format.key == "registry"
    known = declared if declared is not None else table_schema([], "raw" if registry_key else cfg.format.key)
    for entry in cfg.target.partition_by:
        term = parse_term(entry)
        if term.column == "kafka_key" and registry_key:
            continue  # the key's type comes from its registry schema: checked when the table is made
        try:
            kind = type_at(known, term.column)
        except ValueError as exc:
            if declared is not None:
                out.append(f"target.partition_by: {entry!r}: {exc} (columns: {', '.join(known.names)})")
            continue
        if why := term.check_type(kind):
            out.append(f"target.partition_by: {entry!r}: {why}")
    return out
