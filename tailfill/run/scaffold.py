"""``tailfill init``: a first pipeline YAML for a topic, from a sample of its records or its registry subject.

:func:`propose` reads what it needs (a JSON topic's first records, spread over its partitions; a
registry format's latest subject version) and returns the YAML text: commented, with the topic's
partition count, a table named after the topic, a day partition on the first timestamp column, and
the demo's batch settings, so that it backfills and validates as it is; its tail is live (``processing_time``:
``tailfill tail`` runs until stopped). Given a topic pattern, it writes one routed pipeline: a table per topic
(``target.table`` a template), each with a route of its own columns, read from that topic's sample or subject.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import TopicPartition as KTopicPartition

from tailfill.config import EMBEDDED, PIPELINE_NAME, SourceConfig
from tailfill.errors import ConfigError, SourceError
from tailfill.pipeline.subject import subject_columns
from tailfill.source.embedded import resolve_bootstrap, resolve_registry
from tailfill.source.kafka import OwnedConsumer, consumer_config, list_partitions, subscribed_partitions, watermarks
from tailfill.values.infer import InferredField, infer_fields
from tailfill.values.table_template import table_for

SAMPLE = 1000
REGISTRY_FORMATS = ("avro", "protobuf", "json_schema")
_TIME_WORDS = ("created", "time", "timestamp", "_at", "date", "ts")


@dataclass(frozen=True)
class Request:
    """What ``tailfill init`` was asked: one ``topic``, or a ``topic_pattern`` (routed by ``table``, a template;
    None: one that tells the matching topics apart)."""

    name: str
    topic: str | None
    fmt: str = "json"
    bootstrap_servers: str = EMBEDDED
    registry_url: str = EMBEDDED
    subject: str | None = None
    sample: int = SAMPLE
    topic_pattern: str | None = None
    table: str | None = None


@dataclass(frozen=True)
class Columns:
    """What init found of one table's topics: their partition count, the lines of its columns (``fields`` items for
    json, a comment per column for a registry format, at no indent) and the column to partition by day."""

    partitions: int
    lines: list[str]
    day: str | None
    sampled: int | None = None  # json: the records the fields were inferred from


def _sample_values(source: SourceConfig, count: int) -> tuple[int, list[bytes | None]]:
    """(partitions, up to ``count`` values from the start of the topic, spread over its partitions)."""
    conf = consumer_config(source)
    owned = OwnedConsumer(conf)
    try:
        parts = list_partitions(conf, source.topic, owned)
        marks = watermarks(conf, parts, consumer=owned)
        wanted = {tp.partition: min(marks.high[tp] - marks.low[tp], -(-count // len(parts))) for tp in parts}
        total = sum(wanted.values())
        if total == 0:
            raise SourceError(f"topic {source.topic!r} on {source.bootstrap_servers} has no records to sample "
                              "(fix: produce some first, or write format.fields by hand)")
        consumer = owned.get()
        consumer.assign([KTopicPartition(tp.topic, tp.partition, marks.low[tp]) for tp in parts
                         if wanted[tp.partition]])
        got: dict[int, list] = {tp.partition: [] for tp in parts}
        deadline = time.monotonic() + 60
        while sum(len(v) for v in got.values()) < total and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if m.error() is None and len(got[m.partition()]) < wanted[m.partition()]:
                    got[m.partition()].append(m.value())
        return len(parts), [v for values in got.values() for v in values]
    finally:
        owned.close()


def _records(values: list[bytes | None], topic: str) -> list[dict]:
    records = []
    for value in values:
        try:
            record = json.loads(value) if value else None
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(record, dict):
            records.append(record)
    if not records:
        raise ConfigError(f"none of the {len(values)} sampled records of {topic!r} is a JSON object (fix: --format, "
                          "or a registry format for the Confluent wire format)")
    return records


def table_name(topic: str) -> str:
    """A table name from a topic's: lower case, runs of other characters as one underscore."""
    name = re.sub(r"[^a-z0-9]+", "_", topic.lower()).strip("_")
    return name if name and not name[0].isdigit() else f"t_{name}"


def _day_column(candidates: list[str]) -> str | None:
    """The timestamp column to partition by day: the first whose name says time, else the first."""
    return next((c for c in candidates if any(w in c.lower() for w in _TIME_WORDS)), candidates[0] if candidates
                else None)


def propose(req: Request) -> str:
    """The YAML text of a first pipeline for ``req`` (reads the topics, and the registry for a registry format)."""
    if not re.match(PIPELINE_NAME, req.name):
        raise ConfigError(f"pipeline name {req.name!r}: use lower-case letters, digits and underscores, starting with "
                          f"a letter (fix: e.g. {table_name(req.name)})")
    if req.fmt != "json" and req.fmt not in REGISTRY_FORMATS:
        raise ConfigError(f"--format {req.fmt!r}: use json, {', '.join(REGISTRY_FORMATS)}")
    if (req.topic is None) == (req.topic_pattern is None):
        raise ConfigError("init: give --topic or --topic-pattern (one of them)")
    if req.topic_pattern is not None:
        return _routed(req)
    if req.table is not None:
        raise ConfigError("--table is a template for --topic-pattern; with --topic the table is named after the topic")
    columns = _columns(req, [req.topic])
    if req.fmt == "json":
        fmt = _json_block(columns)
    else:
        fmt = _registry_block(req, req.subject or f"{req.topic}-value", columns)
    subscription = f"topic: {req.topic}\n  partitions: {columns.partitions}  # the run stops with one line if the " \
                   "topic's partition count changes"
    return _yaml(req, subscription, fmt, table_name(req.topic), _partition_by(columns.day, "  "))


def _columns(req: Request, topics: list[str]) -> Columns:
    """The columns of a table of ``topics``: inferred from their sampled records (json, ``req.sample`` spread over
    them), or their value subject's latest schema (the first topic's, or ``req.subject``)."""
    bootstrap = resolve_bootstrap(req.bootstrap_servers)
    if req.fmt != "json":
        partitions = len(list_partitions(consumer_config(SourceConfig(bootstrap_servers=bootstrap, topic=topics[0])),
                                         topics[0]))
        schema = subject_columns(req.fmt, topics[0], resolve_registry(req.registry_url), req.subject)
        day = _day_column([f.name for f in schema if f.type == pa.timestamp("us", tz="UTC")])
        return Columns(partitions, [f"#   {f.name}: {f.type}" for f in schema], day)
    values: list[bytes | None] = []
    for topic in topics:
        partitions, sampled = _sample_values(SourceConfig(bootstrap_servers=bootstrap, topic=topic),
                                             -(-req.sample // len(topics)))
        values += sampled
    records = _records(values, ", ".join(topics))
    fields, notes = infer_fields(records)
    if not fields:
        raise ConfigError(f"no field of {', '.join(map(repr, topics))} could be declared from {len(records)} records: "
                          + "; ".join(notes[:5]))
    day = _day_column([f.name for f in fields if f.type == "timestamp"])
    return Columns(partitions, _field_lines(fields, len(records)) + [f"# {note}" for note in notes], day,
                   len(records))


def _field_lines(fields: list[InferredField], sampled: int) -> list[str]:
    lines = []
    for f in fields:
        kind = json.dumps(f.type) if any(c in f.type for c in ",:<") else f.type  # YAML flow: quote nested types
        lines.append(f"- {{name: {f.name}, type: {kind}}}  # in {f.present:,}/{sampled:,} records")
    return lines


def _partition_by(day: str | None, indent: str) -> str:
    return (f"{indent}partition_by: [\"day({day})\"]  # one folder per day of {day}" if day else
            f"{indent}partition_by: []  # no timestamp column was found: add e.g. \"day(a_timestamp)\"")


def _routed(req: Request) -> str:
    """A routed pipeline over the topics matching ``req.topic_pattern``: a route per table with its own columns."""
    if req.subject is not None:
        raise ConfigError("--subject names one subject: with --topic-pattern each table reads its topic's "
                          "<topic>-value")
    source = SourceConfig(bootstrap_servers=resolve_bootstrap(req.bootstrap_servers), topic_pattern=req.topic_pattern)
    parts = subscribed_partitions(consumer_config(source), source)
    topics = sorted({tp.topic for tp in parts})
    template = req.table or table_template(topics)
    tables: dict[str, list[str]] = {}
    for topic in topics:
        try:
            tables.setdefault(table_for(template, topic), []).append(topic)
        except ValueError as exc:
            raise ConfigError(f"--table {template!r}: {exc}") from None
    counts = {topic: sum(1 for tp in parts if tp.topic == topic) for topic in topics}
    routes = ["routes:  # each table's own columns (and mode: upsert with key: [...] for a keyed table)"]
    for table, mine in sorted(tables.items()):
        columns = _columns(req, mine)
        routes.append(f"  {table}:  # from {', '.join(mine)}" + (
            f"; inferred from {columns.sampled:,} sampled records" if columns.sampled is not None else ""))
        routes.append(_partition_by(columns.day, "    "))
        if req.fmt == "json":
            routes += ["    fields:", *(f"      {line}" for line in columns.lines)]
        else:
            if len(mine) > 1:
                routes.append(f"    subject: {mine[0]}-value  # its topics share one schema")
            routes += ["    # the columns are the subject's latest schema:", *(f"    {line}" for line in columns.lines)]
    same = set(counts.values())
    pattern = req.topic_pattern.replace("'", "''")
    checked = (f"{same.pop()}  # each topic's count; the run stops with one line if one differs" if len(same) == 1
               else "null  # the topics' counts differ: not checked")
    subscription = f"topic_pattern: '{pattern}'  # {len(topics)} topics now: {', '.join(topics)}\n" \
                   f"  partitions: {checked}"
    if req.fmt == "json":
        fmt = "\n".join(["format:", "  type: json", "  max_value_bytes: 1048576",
                         "  # fields not declared are ignored (quarantine: send such records to the quarantine)",
                         "  unknown_fields: ignore", "  fields: []  # each table's are under routes"])
    else:
        fmt = _registry_block(req, None, None)
    table_line = f"'{template}'  # a table per topic: {', '.join(sorted(tables))}"
    return _yaml(req, subscription, fmt, table_line, "  partition_by: []  # each table's is under routes",
                 "\n".join(routes))


def table_template(topics: list[str]) -> str:
    """A ``target.table`` template that gives each of ``topics`` a table of its own: ``{topic.N}`` for the last
    dot-separated part when every topic has N + 1 parts and those parts differ, else ``{topic}``."""
    parts = {len(t.split(".")) for t in topics}
    if len(parts) == 1 and (n := parts.pop()) > 1:
        template = f"{{topic.{n - 1}}}"
        try:
            if len({table_for(template, t) for t in topics}) == len(topics):
                return template
        except ValueError:
            pass
    return "{topic}"


def _json_block(columns: Columns) -> str:
    lines = ["format:", "  type: json", "  max_value_bytes: 1048576",
             "  # fields not declared below are ignored (quarantine: send such records to the quarantine)",
             "  unknown_fields: ignore",
             f"  # inferred from {columns.sampled:,} sampled records; `required: true` sends a record lacking the "
             "field to the quarantine",
             "  fields:"]
    return "\n".join(lines + [f"    {line}" if line.startswith("-") else f"  {line}" for line in columns.lines])


def _registry_block(req: Request, subject: str | None, columns: Columns | None) -> str:
    url = "${TAILFILL_SCHEMA_REGISTRY_URL:-embedded}" if req.registry_url == EMBEDDED else req.registry_url
    lines = ["format:", f"  type: {req.fmt}", "  max_value_bytes: 1048576", "  schema_registry:",
             f"    url: {url}", f"    subject: {subject or 'null  # a table of one topic reads <topic>-value'}",
             "  on_incompatible_schema: quarantine  # or fail: stop with one line naming the field and both types"]
    if columns is not None:
        lines += ["  # the columns are the subject's latest schema (new versions add columns as they come):",
                  *(f"  {line}" for line in columns.lines)]
    return "\n".join(lines)


def _yaml(req: Request, subscription: str, fmt: str, table: str, partition_by: str, routes: str = "") -> str:
    bootstrap = ("${TAILFILL_BOOTSTRAP_SERVERS:-embedded}" if req.bootstrap_servers == EMBEDDED
                 else req.bootstrap_servers)
    asked = f"--topic {req.topic}" if req.topic is not None else f"--topic-pattern '{req.topic_pattern}'"
    return f"""# yaml-language-server: $schema=../docs/pipeline.schema.json
# Written by `tailfill init {req.name} {asked} --format {req.fmt}`; every setting:
# docs/reference/pipeline.md. Next: `tailfill backfill {req.name}`, `tailfill validate {req.name} --all`,
# `tailfill preview {req.name}`.
name: {req.name}
source:
  # 'embedded' = the broker started by `tailfill broker up`
  bootstrap_servers: {bootstrap}
  {subscription}
  isolation_level: read_committed
  on_expired_offsets: fail
{fmt}
target:
  catalog:
    uri: sqlite:///${{TAILFILL_HOME}}/catalog.db
  namespace: tailfill
  table: {table}
  warehouse: ${{TAILFILL_HOME}}/warehouse
{partition_by}
checkpoint_location: ${{TAILFILL_HOME}}/checkpoints
backfill:
  slices: 4
  max_offsets_per_batch: 2000000  # the first batch's size, and every batch's limit
  min_batches_per_lane: 3         # ...but a lane runs at least 3 batches (>= 1,000 offsets each): progress in steps
  batch_seconds: 30               # then size batches to take about this long (measured rate)
  max_offsets_per_second: null    # a rate limit (offsets/s); null: none
  max_consecutive_failures: 2
  restart_backoff_seconds: 2
  when_tail_unknown: proceed
tail:
  trigger: processing_time        # `tailfill tail` runs until stopped, a batch every interval; available_now: once
  trigger_interval_seconds: 30
  min_offsets_per_batch: 1000
  max_offsets_per_batch: 300000
  freshness_seconds: 60           # objective: p95 produce-to-commit latency; a schedule must allow it
  on_missed_objective: fail       # a missed objective fails the incremental run (alerted); warn: a warning
  max_consecutive_failures: 3
  restart_backoff_seconds: 2
  schedule: null                  # a cron for the Airflow incremental DAG; null: none
  run_deadline_seconds: null
completeness:
  absent_offsets: verified        # each committed offset: a row, a quarantined row, or confirmed absent on the broker
expectations: []                  # e.g. - {{column: some_id, not_null: true}} (checked on each run's new rows)
""" + (f"{routes}\n" if routes else "")
