"""``tailfill init``: a first pipeline YAML for a topic, from a sample of its records or its registry subject.

:func:`propose` reads what it needs (a JSON topic's first records, spread over its partitions; a
registry format's latest subject version) and returns the YAML text: commented, with the topic's
partition count, a table named after the topic, a day partition on the first timestamp column, and
the demo's batch settings, so that it backfills and validates as it is; its tail is live (``processing_time``:
``tailfill tail`` runs until stopped).
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
from tailfill.source.kafka import OwnedConsumer, consumer_config, list_partitions, watermarks
from tailfill.values.infer import InferredField, infer_fields

SAMPLE = 1000
REGISTRY_FORMATS = ("avro", "protobuf", "json_schema")
_TIME_WORDS = ("created", "time", "timestamp", "_at", "date", "ts")


@dataclass(frozen=True)
class Request:
    name: str
    topic: str
    fmt: str = "json"
    bootstrap_servers: str = EMBEDDED
    registry_url: str = EMBEDDED
    subject: str | None = None
    sample: int = SAMPLE


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
    """The YAML text of a first pipeline for ``req`` (reads the topic, and the registry for a registry format)."""
    if not re.match(PIPELINE_NAME, req.name):
        raise ConfigError(f"pipeline name {req.name!r}: use lower-case letters, digits and underscores, starting with "
                          f"a letter (fix: e.g. {table_name(req.name)})")
    source = SourceConfig(bootstrap_servers=resolve_bootstrap(req.bootstrap_servers), topic=req.topic)
    if req.fmt == "json":
        partitions, values = _sample_values(source, req.sample)
        records = _records(values, req.topic)
        fields, notes = infer_fields(records)
        if not fields:
            raise ConfigError(f"no field of {req.topic!r} could be declared from {len(records)} records: "
                              + "; ".join(notes[:5]))
        day = _day_column([f.name for f in fields if f.type == "timestamp"])
        fmt = _json_block(fields, notes, len(records))
    elif req.fmt in REGISTRY_FORMATS:
        partitions = len(list_partitions(consumer_config(source), req.topic))
        columns = _registry_columns(req)
        day = _day_column([f.name for f in columns if f.type == pa.timestamp("us", tz="UTC")])
        fmt = _registry_block(req, columns)
    else:
        raise ConfigError(f"--format {req.fmt!r}: use json, {', '.join(REGISTRY_FORMATS)}")
    return _yaml(req, partitions, fmt, day)


def _registry_columns(req: Request) -> pa.Schema:
    return subject_columns(req.fmt, req.topic, resolve_registry(req.registry_url), req.subject)


def _json_block(fields: list[InferredField], notes: list[str], sampled: int) -> str:
    lines = ["format:", "  type: json", "  max_value_bytes: 1048576",
             "  # fields not declared below are ignored (quarantine: send such records to the quarantine)",
             "  unknown_fields: ignore",
             f"  # inferred from {sampled:,} sampled records; `required: true` sends a record lacking the field "
             "to the quarantine",
             "  fields:"]
    for f in fields:
        share = f"in {f.present:,}/{sampled:,} records"
        kind = json.dumps(f.type) if any(c in f.type for c in ",:<") else f.type  # YAML flow: quote nested types
        lines.append(f"    - {{name: {f.name}, type: {kind}}}  # {share}")
    lines += [f"  # {note}" for note in notes]
    return "\n".join(lines)


def _registry_block(req: Request, columns: pa.Schema) -> str:
    url = "${TAILFILL_SCHEMA_REGISTRY_URL:-embedded}" if req.registry_url == EMBEDDED else req.registry_url
    lines = ["format:", f"  type: {req.fmt}", "  max_value_bytes: 1048576", "  schema_registry:",
             f"    url: {url}", f"    subject: {req.subject or req.topic + '-value'}",
             "  on_incompatible_schema: quarantine  # or fail: stop with one line naming the field and both types",
             "  # the columns are the subject's latest schema (new versions add columns as they come):"]
    lines += [f"  #   {f.name}: {f.type}" for f in columns]
    return "\n".join(lines)


def _yaml(req: Request, partitions: int, fmt: str, day: str | None) -> str:
    bootstrap = ("${TAILFILL_BOOTSTRAP_SERVERS:-embedded}" if req.bootstrap_servers == EMBEDDED
                 else req.bootstrap_servers)
    partition_by = (f"  partition_by: [\"day({day})\"]  # one folder per day of {day}" if day else
                    "  partition_by: []  # no timestamp column was found: add e.g. \"day(a_timestamp)\"")
    return f"""# yaml-language-server: $schema=../docs/pipeline.schema.json
# Written by `tailfill init {req.name} --topic {req.topic} --format {req.fmt}`; every setting:
# docs/reference/pipeline.md. Next: `tailfill backfill {req.name}`, `tailfill validate {req.name} --all`,
# `tailfill preview {req.name}`.
name: {req.name}
source:
  # 'embedded' = the broker started by `tailfill broker up`
  bootstrap_servers: {bootstrap}
  topic: {req.topic}
  partitions: {partitions}  # the run stops with one line if the topic's partition count changes
  isolation_level: read_committed
  on_expired_offsets: fail
{fmt}
target:
  catalog:
    uri: sqlite:///${{TAILFILL_HOME}}/catalog.db
  namespace: tailfill
  table: {table_name(req.topic)}
  warehouse: ${{TAILFILL_HOME}}/warehouse
{partition_by}
checkpoint_location: ${{TAILFILL_HOME}}/checkpoints
backfill:
  slices: 4
  max_offsets_per_batch: 2000000  # the first batch's size, and every batch's limit
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
"""
