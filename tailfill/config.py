"""Pipeline definitions: one YAML file per pipeline, validated into one typed model.

Nothing about checkpointing or triggering is implicit: every setting the Spark job uses has a
field here, and is validated when the file is loaded (:mod:`tailfill.pipeline.load`, which also
resolves ``${VAR}`` references and reports a bad value as ``file: field: problem (fix: ...)``).
Secrets are never written inline: the ``security`` block names environment variables (or an
Airflow connection) that hold them.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tailfill.values.partition_terms import parse_term
from tailfill.values.schema import RESERVED_PREFIX, field_type
from tailfill.values.table_template import TABLE_NAME, is_template, table_for, template_problems

PIPELINE_NAME = r"^[a-z][a-z0-9_]*$"  # a pipeline's name: its DAGs' and run state's names are made from it
RETRY_CEILING_SECONDS = 240  # restarts without a commit stop after this (a dead broker: the run fails within 5 min)
EMBEDDED = "embedded"  # bootstrap_servers of the local broker started by `tailfill broker up`
# librdkafka settings that carry secrets: passwords, client secrets, JAAS configs, inline PEM keys.
SECRET_HINTS = ("password", "secret", "jaas", "ssl.key.pem", "ssl.keystore.key")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Where the login of ``security.airflow_conn_id`` travels when the pipeline names no variables.
AIRFLOW_USERNAME_ENV = "TAILFILL_KAFKA_USERNAME"
AIRFLOW_PASSWORD_ENV = "TAILFILL_KAFKA_PASSWORD"


class SecurityConfig(_Model):
    """How to authenticate to the broker; secrets come from the environment or Airflow."""

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="How the consumer talks to the brokers (librdkafka's security.protocol).")
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        default=None, description="The SASL mechanism; required with a SASL_* protocol.")
    username_env: str | None = Field(
        default=None, description="The environment variable that holds the SASL login.")
    password_env: str | None = Field(
        default=None, description="The environment variable that holds the SASL password (never the password).")
    airflow_conn_id: str | None = Field(
        default=None, description="An Airflow connection whose login and password Airflow's tasks hand to the job, "
                                  "in the variables named by username_env and password_env (else "
                                  "TAILFILL_KAFKA_USERNAME and TAILFILL_KAFKA_PASSWORD).")

    @model_validator(mode="after")
    def _sasl_needs_credentials(self) -> SecurityConfig:
        if not self.protocol.startswith("SASL"):
            return self
        if self.sasl_mechanism is None:
            raise ValueError(f"{self.protocol} needs sasl_mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
        if self.airflow_conn_id is None and not (self.username_env and self.password_env):
            raise ValueError(
                "SASL needs username_env and password_env (or airflow_conn_id); "
                "secrets are read from those environment variables"
            )
        return self

    @property
    def credential_env(self) -> tuple[str, str] | None:
        """The environment variables holding login and password, or None without SASL.

        With ``airflow_conn_id``, the Airflow side puts the connection's login there (the
        pipeline's own ``*_env`` names if it gives them, else ``TAILFILL_KAFKA_USERNAME/PASSWORD``).
        """
        if not self.protocol.startswith("SASL"):
            return None
        return (self.username_env or AIRFLOW_USERNAME_ENV, self.password_env or AIRFLOW_PASSWORD_ENV)


class SourceConfig(_Model):
    bootstrap_servers: str = Field(description="The brokers as host:port,host:port; 'embedded' is the local "
                                               "development broker of `tailfill broker up`.")
    topic: str | None = Field(default=None, description="The Kafka topic whose history and live tail land in the "
                                                       "table (or `topics`, or `topic_pattern`).")
    topics: list[str] | None = Field(default=None, description="Several topics whose records all land in the one "
                                                               "table; offsets are kept per topic-partition.")
    topic_pattern: str | None = Field(
        default=None, description="A regular expression over whole topic names: every topic that matches, now or "
                                  "later (the broker's internal `__` topics excepted), lands in the table. A topic "
                                  "that starts matching after the cutover is read by the next tail from its "
                                  "earliest offset.")
    partitions: int | None = Field(default=None, ge=1, description="The partition count each topic must have: "
                                   "planning and preflight stop naming both counts when it differs (null: not "
                                   "checked).")
    isolation_level: Literal["read_committed", "read_uncommitted"] = Field(
        default="read_committed", description="librdkafka's isolation.level. read_committed: records of aborted "
                                              "transactions are not delivered (recorded as absent offsets, as "
                                              "transaction markers are), and a partition is read up to its last "
                                              "stable offset (an open transaction's records wait for its outcome). "
                                              "read_uncommitted: every record written is delivered and lands as a "
                                              "row, those of aborted transactions and of transactions still open "
                                              "included; only markers (and compacted offsets) are absent.")
    on_expired_offsets: Literal["fail", "record_gap"] = Field(
        default="fail", description="Offsets that retention removed before they were read: 'fail' stops the run "
                                    "naming the lost range; 'record_gap' records them as lost and goes on.")
    security: SecurityConfig = Field(default=SecurityConfig(), description="How to authenticate to the brokers.")
    consumer: dict[str, str | int | bool] = Field(
        default_factory=dict, description="Further librdkafka consumer settings; a key that looks like a secret "
                                          "(password, secret, JAAS, a PEM key) is refused.")

    @model_validator(mode="after")
    def _one_subscription(self) -> SourceConfig:
        given = [name for name in ("topic", "topics", "topic_pattern") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of topic, topics and topic_pattern"
                             + (f" (got {' and '.join(given)})" if given else ""))
        if self.topics is not None:
            if not self.topics or any(not t for t in self.topics):
                raise ValueError("topics must name at least one topic, and no empty name")
            if len(set(self.topics)) != len(self.topics):
                raise ValueError(f"topics names a topic twice: {self.topics}")
        if self.topic_pattern is not None:
            try:
                re.compile(self.topic_pattern)
            except re.error as exc:
                raise ValueError(f"topic_pattern {self.topic_pattern!r} is not a regular expression: {exc}") from None
        return self

    @property
    def several(self) -> bool:
        """True when the pipeline reads a list or a pattern of topics, not one named topic."""
        return self.topic is None

    @property
    def subscription(self) -> str:
        """The topics as a person reads them: the topic, the list joined by commas, or ``/pattern/``."""
        if self.topic is not None:
            return self.topic
        return ", ".join(self.topics) if self.topics is not None else f"/{self.topic_pattern}/"

    @property
    def described(self) -> str:
        """The topics in a sentence: ``topic 'orders'``, ``topics 'a', 'b'`` or ``the topics matching 'shop\\..*'``."""
        if self.topic is not None:
            return f"topic {self.topic!r}"
        if self.topics is not None:
            return "topics " + ", ".join(map(repr, self.topics))
        return f"the topics matching {self.topic_pattern!r}"

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one of this source's (by name, or by the whole-name pattern)."""
        if self.topic_pattern is not None:
            return not topic.startswith("__") and re.fullmatch(self.topic_pattern, topic) is not None
        return topic == self.topic if self.topic is not None else topic in (self.topics or ())

    @field_validator("consumer")
    @classmethod
    def _no_inline_secrets(cls, props: dict[str, Any]) -> dict[str, Any]:
        for key in props:
            if any(h in key.lower() for h in SECRET_HINTS):
                raise ValueError(
                    f"'{key}' looks like a secret; never inline it: put it in an environment "
                    "variable and name that variable in source.security"
                )
        return props


FieldType = Literal["string", "long", "double", "boolean", "timestamp"]


class FieldSpec(_Model):
    name: str = Field(description="The column's name: a plain identifier, not starting with 'kafka_' (the "
                                  "prefix of the record's Kafka metadata columns).")
    # Parsed by tailfill.values.column_types.
    type: str = Field(description="The column's type: string, long, double, boolean, timestamp (UTC), "
                                  "timestamp_ntz (no zone), int, float, date, time, binary, decimal(p, s), or nested: "
                                  "struct<name: type, ...>, list<type>, map<string, type>.")
    required: bool = Field(default=False, description="A record that lacks this field, or holds null in it, goes "
                                                      "to the quarantine.")
    logical: str | None = Field(default=None, description="envelope: debezium: the Kafka Connect or Debezium logical "
                                "type the field's values are encoded in (io.debezium.time.MicroTimestamp, "
                                "org.apache.kafka.connect.data.Decimal, ...), for events without the JSON "
                                "converter's schema; an event's schema, when it has one, names its own.")

    @field_validator("type")
    @classmethod
    def _known_type(cls, text: str) -> str:
        field_type(text)  # raises ValueError naming what is wrong
        return text

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"field name {name!r} must be a plain identifier")
        if name.startswith(RESERVED_PREFIX):
            raise ValueError(f"field name {name!r} uses the reserved prefix '{RESERVED_PREFIX}'")
        return name


# Where the login of ``schema_registry.airflow_conn_id`` travels when the pipeline names no variables.
REGISTRY_USERNAME_ENV = "TAILFILL_REGISTRY_USERNAME"
REGISTRY_PASSWORD_ENV = "TAILFILL_REGISTRY_PASSWORD"


class SchemaRegistryConfig(_Model):
    """Where the writer schemas of Avro, Protobuf and JSON Schema records are (Confluent's REST API)."""

    url: str = Field(description="The registry as http(s)://host:port (no credentials in it), or 'embedded' for "
                                 "the development registry of `tailfill registry up`.")
    subject: str | None = Field(default=None, description="The subject of the value schema (null: <topic>-value).")
    key_subject: str | None = Field(default=None, description="The subject of the key schema, read with "
                                                              "format.key: registry (null: <topic>-key).")
    username_env: str | None = Field(default=None, description="Basic auth: the environment variable that holds "
                                                               "the login (with password_env).")
    password_env: str | None = Field(default=None, description="Basic auth: the environment variable that holds "
                                                               "the password (never the password).")
    airflow_conn_id: str | None = Field(
        default=None, description="An Airflow connection whose login and password Airflow's tasks hand to the job "
                                  "(in username_env and password_env if named, else TAILFILL_REGISTRY_USERNAME "
                                  "and TAILFILL_REGISTRY_PASSWORD).")
    timeout_seconds: float = Field(default=10.0, gt=0, description="The timeout of one request to the registry.")
    attempts: int = Field(default=5, ge=1, description="Tries per request, with backoff from 0.5 s doubling, "
                                                       "before the run fails naming the registry's URL.")

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if url != EMBEDDED and not re.fullmatch(r"https?://[^/@\s]+(/[^@\s]*)?", url):  # no user:password@
            raise ValueError(f"url {url!r} must be http(s)://host:port (credentials by username_env/password_env), "
                             "or 'embedded'")
        return url.rstrip("/")

    @model_validator(mode="after")
    def _both_credentials(self) -> SchemaRegistryConfig:
        if bool(self.username_env) != bool(self.password_env):
            raise ValueError("schema_registry needs both username_env and password_env, or neither")
        return self

    @property
    def credential_env(self) -> tuple[str, str] | None:
        """The environment variables holding the registry's login and password, or None without auth."""
        if self.username_env and self.password_env:
            return self.username_env, self.password_env
        if self.airflow_conn_id:
            return REGISTRY_USERNAME_ENV, REGISTRY_PASSWORD_ENV
        return None


class FormatConfig(_Model):
    type: str = Field(
        description="How values are decoded: json (into the declared fields), raw (the bytes kept as they are), or "
                    "Confluent's wire format with a Schema Registry: avro, protobuf, json_schema. Each format checks "
                    "the rest of this block by its own rules when the pipeline is loaded.",
        examples=["json", "raw", "avro", "protobuf", "json_schema"])
    fields: list[FieldSpec] = Field(default_factory=list, description="json: the declared columns (required "
                                                                      "there); the other formats take none.")
    max_value_bytes: int = Field(default=1_048_576, ge=1, description="A larger value goes to the quarantine.")
    unknown_fields: Literal["ignore", "quarantine", "evolve"] = Field(
        default="ignore", description="json: fields that are not declared are ignored (and counted in the run's "
                                      "summary), send their record to the quarantine (schema drift), or become "
                                      "table columns of an inferred type (evolve; a record whose value does not fit "
                                      "its column goes to the quarantine).")
    schema_registry: SchemaRegistryConfig | None = Field(
        default=None, description="avro, protobuf, json_schema: where the writer schemas are (required there).")
    on_incompatible_schema: Literal["quarantine", "fail"] = Field(
        default="quarantine",
        description="A writer schema that changes a column's type beyond a promotion, or lacks a field the table "
                    "requires (tailfill.required-fields): its records go to the quarantine with the reason, or "
                    "the run stops naming the field and both types.")
    envelope: Literal["none", "debezium"] = Field(
        default="none",
        description="Keyed pipelines (target.mode: upsert): none, each value is the row's new state and a "
                    "tombstone (a null value with a key) deletes the key; or debezium, each value is a Debezium "
                    "change event whose op r/c/u applies 'after' and d deletes 'before''s key: in JSON (with or "
                    "without the converter's schema/payload wrapper), or in avro, protobuf or json_schema through "
                    "the registry (the columns are the fields of the envelope's 'after' record).")
    key: Literal["raw", "string", "registry"] = Field(
        default="raw",
        description="The kafka_key column: the bytes as sent (raw); decoded UTF-8 (string, json and raw formats: "
                    "a key that is not UTF-8 sends its record to the quarantine, which keeps the raw key); or "
                    "decoded with its own writer schema from the registry (registry, registry formats).")

    @model_validator(mode="after")
    def _field_names_unique(self) -> FormatConfig:
        names = [f.name for f in self.fields]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate field names: {', '.join(dupes)}")
        return self


class S3Config(_Model):
    endpoint: str = Field(description="The S3 endpoint URL; always explicit, so no client falls back to cloud "
                                      "defaults.")
    region: str = Field(default="us-east-1", description="The S3 region.")
    access_key_env: str = Field(default="AWS_ACCESS_KEY_ID",
                                description="The environment variable that holds the access key id.")
    secret_key_env: str = Field(default="AWS_SECRET_ACCESS_KEY",
                                description="The environment variable that holds the secret access key.")


# Catalog properties that carry secrets: never inline, name an environment variable (credential_env).
CATALOG_SECRET_HINTS = ("credential", "token", "secret", "password")


class CatalogConfig(_Model):
    """The Iceberg catalog, opened with pyiceberg's ``load_catalog``; secrets only by environment variable."""

    name: str = Field(default="tailfill", description="The catalog's name in pyiceberg.")
    type: Literal["sql", "rest", "glue", "hive"] = Field(default="sql", description="The kind of Iceberg catalog.")
    uri: str | None = Field(default=None, description="sql: a SQLAlchemy URI (SQLite, Postgres); rest: the REST "
                                                      "endpoint; hive: thrift://host:port; glue: none.")
    warehouse: str | None = Field(default=None, description="The catalog's own warehouse (rest: e.g. "
                                                            "s3://warehouse); sql catalogs use target.warehouse.")
    credential_env: str | None = Field(default=None, description="The environment variable that holds the "
                                                                 "catalog's credential (rest OAuth: "
                                                                 "client_id:client_secret).")
    properties: dict[str, str] = Field(default_factory=dict, description="Further pyiceberg catalog properties; "
                                                                         "a key that looks like a secret is "
                                                                         "refused.")

    def __hash__(self) -> int:  # hashable despite the dict: targets key per-process caches
        return hash(self.model_dump_json())

    @model_validator(mode="after")
    def _usable(self) -> CatalogConfig:
        if self.uri is None and self.type != "glue":
            raise ValueError(f"a {self.type} catalog needs a uri")
        for key in self.properties:
            if any(h in key.lower() for h in CATALOG_SECRET_HINTS):
                raise ValueError(f"catalog property '{key}' looks like a secret; never inline it: put it in an "
                                 "environment variable and name that variable in target.catalog.credential_env")
        return self


class TargetConfig(_Model):
    catalog: CatalogConfig = Field(description="The Iceberg catalog that holds the tables.")
    namespace: str = Field(description="The tables' namespace in the catalog.")
    table: str = Field(description="The data table's name, or a template that routes each topic to a table of its "
                                   "own: {topic} (the topic's name) or {topic.N} (its N-th dot-separated part, from "
                                   "0), dots and dashes made _ (e.g. '{topic.2}': shop.public.orders to orders).")
    warehouse: str = Field(description="Where data files are written: a local path, or an s3:// URI (which needs "
                                       "target.s3).")
    quarantine_table: str | None = Field(default=None, description="The quarantine table's name (null: "
                                                                   "<table>_quarantine).")
    s3: S3Config | None = Field(default=None, description="The S3 endpoint and credentials of an s3:// "
                                                          "warehouse.")
    state_root: str | None = Field(
        default=None,
        description="Where the run state that processes share lives (tail health, stop requests, batch reports, "
                    "lanes, failures, the commit audit): <state_root>/<pipeline>/, and the validation results: "
                    "<state_root>/_validation/<pipeline>/. It must be on the warehouse's filesystem and reachable by "
                    "every machine of the pipeline (null: <warehouse>/_tailfill, <warehouse>/_validation). A warehouse "
                    "that is a table bucket (S3 Tables, SeaweedFS's -tableBucket) needs it on an ordinary bucket.")
    partition_by: tuple[str, ...] = Field(
        default=(),
        description="Iceberg partition transforms of the data table's columns: identity(c), year(c), month(c), "
                    "day(c), hour(c), bucket(N, c), truncate(W, c), e.g. [\"day(created_at)\", "
                    "\"bucket(16, user_id)\"]; c may be a struct's field (repo.id); empty: unpartitioned. A change "
                    "evolves the spec for new data.")

    mode: Literal["append", "upsert"] = Field(
        default="append",
        description="append: every record lands as a row of the data table. upsert: the data table is the "
                    "append-only record of every change, and a state table beside it holds each key's latest "
                    "row (merge-on-read: Tailfill writes position delete files; never equality deletes).")
    key: tuple[str, ...] = Field(
        default=(),
        description="upsert: the columns that identify a row (declared fields, or kafka_key for the Kafka "
                    "key); required there, refused with append.")
    version_by: str | None = Field(
        default=None,
        description="upsert: a long column that orders a key's changes when they can span Kafka partitions: "
                    "cdc_lsn (Postgres's source.lsn), cdc_binlog (MySQL's source.file and source.pos), cdc_gtid "
                    "(MySQL's source.gtid), or a declared one; null: the Kafka offset within the partition orders "
                    "them, and a key seen in two partitions stops the run naming the key and both partitions.")
    on_truncate: Literal["apply", "stop"] = Field(
        default="apply",
        description="upsert: a truncate (Debezium's op t) empties the state table as of its place in the source's "
                    "order (apply), or stops the run naming its partition and offset (stop).")
    state_table: str | None = Field(default=None, description="upsert: the state table's name (null: "
                                                              "<table>_state).")

    @field_validator("partition_by")
    @classmethod
    def _partition_terms_parse(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        for i, entry in enumerate(entries):
            try:
                parse_term(entry)
            except ValueError as exc:
                raise ValueError(f"entry {i}: {exc}") from None
        return entries

    @model_validator(mode="after")
    def _s3_needs_endpoint(self) -> TargetConfig:
        if self.warehouse.startswith("s3://") and self.s3 is None:
            raise ValueError(
                "an s3:// warehouse needs target.s3 with an explicit endpoint "
                "(clients never fall back to cloud defaults)"
            )
        if not self.warehouse.startswith("s3://") and "://" in self.warehouse:
            raise ValueError("warehouse must be a local path or an s3:// URI")
        if self.state_root is not None and (
                self.state_root.startswith("s3://") != self.warehouse.startswith("s3://")
                or (not self.state_root.startswith("s3://") and "://" in self.state_root)):
            raise ValueError(
                f"state_root {self.state_root!r} must be on the warehouse's filesystem: "
                + ("an s3:// URI (same endpoint as the warehouse)" if self.warehouse.startswith("s3://")
                   else "a local path (shared by every machine of the pipeline)")
            )
        return self

    @model_validator(mode="after")
    def _table_template(self) -> TargetConfig:
        if not is_template(self.table):
            return self
        problems = template_problems(self.table)
        if problems:
            raise ValueError(f"table {self.table!r}: {'; '.join(problems)}")
        given = [n for n in ("quarantine_table", "state_table") if getattr(self, n)]
        if given:
            raise ValueError(f"table {self.table!r} routes topics to tables of their own, each with its own "
                             f"{' and '.join(given)}: leave {' and '.join(given)} unset (each is <table>_quarantine, "
                             "<table>_state)")
        return self

    @property
    def routed(self) -> bool:
        """Whether ``table`` is a template that routes each topic to a table of its own."""
        return is_template(self.table)

    @model_validator(mode="after")
    def _keyed_settings(self) -> TargetConfig:
        if self.keyed and not self.key:
            raise ValueError("mode: upsert needs key: the columns that identify a row (e.g. key: [order_id])")
        if self.mode == "append":
            given = [n for n in ("key", "version_by", "state_table") if getattr(self, n)]
            given += ["on_truncate"] if self.on_truncate != "apply" else []
            if given:
                raise ValueError(f"{', '.join(given)} only apply to mode: upsert (this target appends)")
        if len(set(self.key)) != len(self.key):
            raise ValueError(f"key names a column twice: {list(self.key)}")
        return self

    @property
    def keyed(self) -> bool:
        """Whether the target is keyed (``mode: upsert``): each key's latest row in a state table beside the change
        log."""
        return self.mode == "upsert"

    @property
    def quarantine_name(self) -> str:
        return self.quarantine_table or f"{self.table}_quarantine"

    @property
    def state_name(self) -> str:
        """The keyed state table's name (``mode: upsert``)."""
        return self.state_table or f"{self.table}_state"


class BackfillConfig(_Model):
    slices: int = Field(ge=1, le=1024, description="How many slices a backfill's range is split into (the "
                                                   "backfill's default; the CLI's --slices and the form override "
                                                   "it).")
    max_offsets_per_batch: int = Field(ge=1, description="The first batch's size and every batch's limit.")
    min_batches_per_lane: int = Field(
        default=3, ge=1, description="A lane runs at least this many batches: each is at most this fraction of the "
                                     "lane's range (never under 1,000 offsets), so a lane of a small range still "
                                     "shows its progress in steps (1: max_offsets_per_batch alone).")
    batch_seconds: float | None = Field(
        default=None, gt=0, description="Size each later batch to take about this long by the measured cost of a "
                                        "batch (null: every batch is max_offsets_per_batch).")
    max_offsets_per_second: int | None = Field(
        default=None, ge=1, description="A rate limit over a backfill query (null: as fast as it goes). While a "
                                        "live tail misses its freshness objective, backfills also pause between "
                                        "batches.")
    max_consecutive_failures: int = Field(ge=0, description="Failed attempts in a row, without a batch of the "
                                                            "run's own committed, that are restarted; one more "
                                                            "stops the run with the cause.")
    restart_backoff_seconds: float = Field(ge=0, description="The wait before restarting a failed attempt, doubled "
                                                             "per consecutive failure (at most 60 s).")
    retry_ceiling_seconds: float = Field(
        default=RETRY_CEILING_SECONDS, gt=0,
        description="How long a run keeps restarting after a failure while it commits nothing, whatever the failures "
                    "(an unreachable broker, catalog or store included): no restart waits past it, and the first "
                    "failure past it fails the run in one line with the cause, how long it tried and the fix.")
    when_tail_unknown: Literal["yield", "proceed"] = Field(
        description="When the backfill cannot see the tail's state: 'yield' runs short batches on half the cores, "
                    "as beside a live tail; 'proceed' runs at full speed. Either way the progress line and "
                    "`tailfill status` say the tail is unknown.")


class TailConfig(_Model):
    trigger: Literal["available_now", "processing_time"] = Field(
        description="available_now: read to the topic's current end, then stop (a scheduled run); "
                    "processing_time: run until stopped, one batch per interval.")
    trigger_interval_seconds: float = Field(gt=0, description="The processing-time trigger's interval.")
    min_offsets_per_batch: int = Field(ge=1, description="The adaptive tail's smallest batch.")
    max_offsets_per_batch: int = Field(ge=1, description="The adaptive tail's largest batch: it sizes each batch "
                                                         "from the measured cost of a batch (fixed + per offset) to "
                                                         "fit the trigger interval, larger while a backlog waits.")
    freshness_seconds: float = Field(gt=0, description="The objective: the p95 produce-to-commit latency of a "
                                                       "batch's records, in seconds; backfills yield while the "
                                                       "tail misses it.")
    on_missed_objective: Literal["fail", "warn"] = Field(
        default="fail", description="When a tail run's batches miss the freshness objective: fail (the incremental "
                                    "run's objective task fails, after its report, naming the measured cause; the "
                                    "alerting hook is called) or warn (a warning on the run's tab and in its report, "
                                    "the alerting hook called, the run succeeds).")
    max_consecutive_failures: int = Field(ge=0, description="As backfill.max_consecutive_failures, for the tail.")
    restart_backoff_seconds: float = Field(ge=0, description="As backfill.restart_backoff_seconds, for the tail.")
    retry_ceiling_seconds: float = Field(default=RETRY_CEILING_SECONDS, gt=0,
                                         description="As backfill.retry_ceiling_seconds, for the tail.")
    stall_timeout_seconds: float = Field(
        default=300, gt=0, description="A tail that commits nothing for this long (at least three trigger intervals) "
                                       "while it has data to read or a batch in flight counts as failed: its query is "
                                       "restarted as a failure (tail.max_consecutive_failures), naming where it was "
                                       "stuck.")
    upkeep_every_seconds: float | None = Field(
        default=1800, gt=0, description="Without a maintenance block: once this long has passed since the data "
                                        "table's last compaction (or its first commit), the tail compacts both "
                                        "tables' small files and expires old snapshots (their batch audit archived "
                                        "first) beside its batches, with the defaults of docs/operations.md (no "
                                        "orphan cleanup); null: never. With a maintenance block, its settings and "
                                        "schedule govern instead.")
    schedule: str | None = Field(default=None, description="The incremental DAG's Airflow schedule, e.g. a cron "
                                                           "expression (null: triggered by hand only).")
    run_deadline_seconds: float | None = Field(
        default=None, gt=0, description="The incremental DAG's deadline alert: a run not finished this long after "
                                        "it was queued is recorded and alerted (null: none).")

    @model_validator(mode="after")
    def _bounds(self) -> TailConfig:
        if self.min_offsets_per_batch > self.max_offsets_per_batch:
            raise ValueError(f"min_offsets_per_batch ({self.min_offsets_per_batch}) is above "
                             f"max_offsets_per_batch ({self.max_offsets_per_batch})")
        return self


class DataExpectation(_Model):
    """One data expectation on a column of the run's new rows (checked with Great Expectations)."""

    column: str = Field(description="The column checked; a struct's field as a dotted path (repo.id).")
    not_null: bool = Field(default=False, description="No value may be null.")
    accepted_values: list[str | int | float | bool] | None = Field(
        default=None, description="Every value must be one of these.")
    min: float | None = Field(default=None, description="The smallest value allowed (number columns).")
    max: float | None = Field(default=None, description="The largest value allowed (number columns).")
    type: FieldType | None = Field(default=None, description="The type every value must have.")
    mostly: float = Field(default=1.0, gt=0, le=1, description="The fraction of rows that must pass (1: all).")

    @model_validator(mode="after")
    def _says_something(self) -> DataExpectation:
        if not (self.not_null or self.accepted_values is not None or self.min is not None
                or self.max is not None or self.type is not None):
            raise ValueError(f"expectation on '{self.column}' checks nothing: set not_null, accepted_values, "
                             "min/max or type")
        return self


class CompletenessConfig(_Model):
    """What the completeness check may accept as legitimately missing on the broker."""

    absent_offsets: Literal["verified", "allowed", "none"] = Field(
        default="verified",
        description="Offsets inside a committed range that the broker does not deliver: transaction markers, records "
                    "of aborted transactions (under read_committed), offsets log compaction removed. Each batch "
                    "records which offsets it was not delivered, and the isolation level it read under. 'verified': "
                    "accepted where the broker confirms them: validate reads them again (under the batch's isolation "
                    "level, then read_uncommitted) and names each one's reason; offsets below the partition's "
                    "earliest offset by then are accepted as not verifiable. 'allowed': accepted on the batch's "
                    "record, without asking the broker. 'none': every absent offset fails. An offset missing from "
                    "the table that its batch did not record as absent always fails (a batch committed before "
                    "batches recorded them is judged as then: with 'allowed', on its count of records read).")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> float:
    """``"90s"``, ``"30m"``, ``"24h"``, ``"7d"`` as seconds; a ValueError names the accepted form."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a duration: write a number and a unit s, m, h or d (e.g. 7d, 12h)")
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]


class MaintenanceConfig(_Model):
    """Table upkeep (``tailfill maintain``, the ``<pipeline>_maintenance`` DAG): every knob explicit."""

    target_file_bytes: int = Field(ge=1024, description="Compact data files smaller than this into files of "
                                                        "about this size.")
    expire_older_than: str = Field(description="Expire snapshots older than this duration (90s, 30m, 12h, 7d).")
    keep_last: int = Field(ge=1, description="Always keep at least this many most recent snapshots.")
    orphan_min_age: str = Field(description="Delete unreferenced files only when older than this duration. Keep it "
                                            "above a batch's time from prepare to commit: a slower batch's files are "
                                            "copied at its commit, or the batch is prepared again.")
    schedule: str | None = Field(description="The maintenance DAG's Airflow schedule, e.g. a cron expression "
                                             "(null: triggered by hand only).")

    @field_validator("expire_older_than", "orphan_min_age")
    @classmethod
    def _is_duration(cls, text: str) -> str:
        duration_seconds(text)
        return text


class RouteConfig(_Model):
    """One table of a routed pipeline (``target.table`` a template), where it differs from the pipeline: its
    columns, registry subjects and write mode. Each setting given replaces the pipeline's own for this table; a
    setting left out (null) is the pipeline's."""

    fields: list[FieldSpec] | None = Field(default=None, description="json: this table's declared columns, in "
                                           "their order (null: format.fields).")
    unknown_fields: Literal["ignore", "quarantine", "evolve"] | None = Field(
        default=None, description="json: as format.unknown_fields, for this table (null: the pipeline's).")
    subject: str | None = Field(default=None, description="avro, protobuf, json_schema: the subject of this "
                                                          "table's value schema (null: format.schema_registry."
                                                          "subject, else <topic>-value).")
    key_subject: str | None = Field(default=None, description="The subject of this table's key schema, read with "
                                                              "format.key: registry (null: format.schema_registry."
                                                              "key_subject, else <topic>-key).")
    envelope: Literal["none", "debezium"] | None = Field(default=None, description="As format.envelope, for this "
                                                                                  "table (null: the pipeline's).")
    mode: Literal["append", "upsert"] | None = Field(
        default=None, description="append or upsert, for this table (null: target.mode). Given, the table's key, "
                                  "version_by and on_truncate are this route's own, never the pipeline's.")
    key: tuple[str, ...] | None = Field(default=None, description="upsert: the columns that identify this "
                                                                  "table's rows (null: target.key).")
    version_by: str | None = Field(default=None, description="upsert: as target.version_by, for this table.")
    on_truncate: Literal["apply", "stop"] | None = Field(default=None, description="upsert: as target.on_truncate, "
                                                                                   "for this table.")
    partition_by: tuple[str, ...] | None = Field(default=None, description="As target.partition_by, for this table "
                                                                           "(null: the pipeline's).")
    expectations: list[DataExpectation] | None = Field(default=None, description="This table's data expectations "
                                                                                 "(null: the pipeline's).")

    def applied(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` (a pipeline's settings, as ``model_dump`` gives them) with this route's settings in place."""
        given = self.model_dump(exclude_none=True)
        fmt, target = data["format"], data["target"]
        for name in ("fields", "unknown_fields", "envelope"):
            if name in given:
                fmt[name] = given[name]
        for name in ("subject", "key_subject"):
            if name in given:
                if fmt.get("schema_registry") is None:
                    raise ValueError(f"{name}: a subject is read from format.schema_registry, and this pipeline has "
                                     "none (fix: remove it, or add format.schema_registry)")
                fmt["schema_registry"][name] = given[name]
        if "mode" in given:  # a table's mode brings its own key: none of the pipeline's keyed settings
            target.update(key=(), version_by=None, on_truncate="apply")
        for name in ("mode", "key", "version_by", "on_truncate", "partition_by"):
            if name in given:
                target[name] = given[name]
        if "expectations" in given:
            data["expectations"] = given["expectations"]
        return data


class PipelineConfig(_Model):
    """One pipeline: where records come from, how they are parsed, where they land."""

    name: Annotated[str, Field(pattern=PIPELINE_NAME)] = Field(
        description="The pipeline's name (lower case, digits, _): its DAGs are <name>_backfill, "
                    "<name>_incremental and <name>_maintenance, its run state <state root>/<name>/.")
    source: SourceConfig = Field(description="The Kafka topic and how to read it.")
    format: FormatConfig = Field(description="How record values (and keys) become columns.")
    target: TargetConfig = Field(description="The Iceberg tables and where their files go.")
    checkpoint_location: str = Field(description="A local folder for Spark's checkpoints; the table's ledger, not "
                                                 "the checkpoint, is where a run resumes.")
    backfill: BackfillConfig = Field(description="History: bounded runs over [from, to), by default "
                                                 "[earliest, cutover).")
    tail: TailConfig = Field(description="The live tail: runs from the cutover on.")
    completeness: CompletenessConfig = Field(default=CompletenessConfig(),
                                             description="What the proof may accept as absent on the broker.")
    expectations: list[DataExpectation] = Field(
        default_factory=list, description="Data expectations checked with Great Expectations on each run's new "
                                          "rows.")
    maintenance: MaintenanceConfig | None = Field(
        default=None, description="Table upkeep (`tailfill maintain`, and the <name>_maintenance DAG when set).")
    example: bool = Field(
        default=False, description="An example that needs what the demo does not start (a Schema Registry, a change "
                                   "stream): Airflow makes its DAGs only with TAILFILL_AIRFLOW_EXAMPLES=1; the "
                                   "command line runs it either way.")
    routes: dict[str, RouteConfig] = Field(
        default_factory=dict, description="A routed pipeline (target.table a template): the tables whose columns, "
                                          "subjects or write mode differ from the pipeline's, each by its table's name "
                                          "(as the template gives it) or by one of its topics. A table without an "
                                          "entry takes the pipeline's format and target.")
    path: str | None = Field(default=None, exclude=True, description="The file it was loaded from (set by the "
                                                                     "loader, not written in the YAML).")
    route: str | None = Field(default=None, exclude=True, description="Of one table of a routed pipeline: "
                              "'<table>:<topic>,<topic>' (set by tailfill.pipeline.routes, not written in the YAML).")

    @model_validator(mode="after")
    def _one_schema_for_several_topics(self) -> PipelineConfig:
        if self.target.routed:  # each table's own topics are checked when the topics are routed
            if not self.source.several:
                raise ValueError(f"target.table {self.target.table!r} routes topics to tables: read several topics "
                                 "(source.topics or source.topic_pattern), or name one table")
            self._routes_name_tables()
            return self
        if self.routes:
            raise ValueError(f"routes: {', '.join(self.routes)}: only a pipeline whose target.table is a template "
                             "(e.g. '{topic.2}') routes topics to tables (fix: remove routes, or make target.table a "
                             "template)")
        if self.source.several and self.target.mode == "upsert":
            raise ValueError("target.mode: upsert reads one topic: a keyed table of several topics is not supported "
                             "(fix: one keyed pipeline per topic)")
        registry = self.format.schema_registry
        if registry is not None and self.source.several and not registry.subject:
            raise ValueError("format.schema_registry.subject: a pipeline of several topics reads them with one "
                             "schema; name its subject (the default <topic>-value names one topic)")
        if registry is not None and self.source.several and self.format.key == "registry" and not registry.key_subject:
            raise ValueError("format.schema_registry.key_subject: a pipeline of several topics reads their keys with "
                             "one schema; name its subject")
        return self

    def _routes_name_tables(self) -> None:
        """Each route's key names a table the template can give, or a topic of the source."""
        for key in self.routes:
            if self.source.topics is not None:
                tables = {table_for(self.target.table, t) for t in self.source.topics if _placed(self, t)}
                if key not in tables and key not in self.source.topics:
                    raise ValueError(f"routes.{key}: names neither a table nor a topic of this pipeline (tables: "
                                     f"{', '.join(sorted(tables))}; topics: {', '.join(self.source.topics)})")
            elif not (self.source.matches(key) or TABLE_NAME.match(key)):
                raise ValueError(f"routes.{key}: names neither a table (letters, digits and _) nor a topic matching "
                                 f"{self.source.topic_pattern!r}")

    @property
    def ref(self) -> str:
        """How another process loads this pipeline: its file (or name), and of one table of a routed pipeline
        ``#<table>:<topics>`` after it (:func:`tailfill.pipeline.load.resolve_pipeline` reads it back)."""
        base = self.path or self.name
        return f"{base}#{self.route}" if self.route else base

    @property
    def secret_env_names(self) -> tuple[str, ...]:
        """The environment variables this pipeline reads secrets from (broker, registry, catalog)."""
        registry = self.format.schema_registry
        names = [*(self.source.security.credential_env or ()), *((registry.credential_env or ()) if registry else ()),
                 self.target.catalog.credential_env]
        return tuple(n for n in names if n)

    @property
    def subject(self) -> str:
        """The registry subject of the value schema: as configured, or ``<topic>-value``."""
        registry = self.format.schema_registry
        return (registry.subject if registry and registry.subject else None) or f"{self.source.topic}-value"

    @property
    def key_subject(self) -> str:
        """The registry subject of the key schema (``format.key: registry``): as configured, or ``<topic>-key``."""
        registry = self.format.schema_registry
        return (registry.key_subject if registry and registry.key_subject else None) or f"{self.source.topic}-key"

    def to_json(self) -> str:
        """Serialise for shipping to Spark executors (no file access needed there)."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> PipelineConfig:
        return cls.model_validate(json.loads(text))


def _placed(cfg: PipelineConfig, topic: str) -> bool:
    """Whether ``cfg``'s template gives ``topic`` a table (a topic it cannot place is named when it is routed)."""
    try:
        table_for(cfg.target.table, topic)
    except ValueError:
        return False
    return True
