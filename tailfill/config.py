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
from tailfill.values.schema import field_type

RESERVED_PREFIX = "kafka_"
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

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    username_env: str | None = None
    password_env: str | None = None
    airflow_conn_id: str | None = None

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
    bootstrap_servers: str = Field(description="host:port list, or 'embedded' for the local broker")
    topic: str
    partitions: int | None = Field(default=None, ge=1, description="expected partition count")
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    on_expired_offsets: Literal["fail", "record_gap"] = "fail"
    security: SecurityConfig = SecurityConfig()
    consumer: dict[str, str | int | bool] = Field(default_factory=dict)

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
    name: str
    # A scalar (string, long, double, boolean, timestamp, int, float, date, binary, decimal(p, s)) or a
    # nested type (struct<name: type, ...>, list<type>, map<string, type>): see tailfill.values.column_types.
    type: str
    required: bool = False

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

    url: str = Field(description="http(s)://host:port of the registry, or 'embedded' for `tailfill registry up`")
    subject: str | None = Field(default=None, description="subject of the value schema (default: <topic>-value)")
    key_subject: str | None = Field(default=None, description="subject of the key schema, with format.key: registry "
                                                              "(default: <topic>-key)")
    username_env: str | None = None  # basic auth: the variables holding login and password, never inline
    password_env: str | None = None
    airflow_conn_id: str | None = None
    timeout_seconds: float = Field(default=10.0, gt=0)
    attempts: int = Field(default=5, ge=1, description="tries per request before the run fails (with backoff)")

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
    # One of the formats Tailfill knows (tailfill.formats.registry: json, raw, avro, protobuf, json_schema); each
    # checks the rest of this block by its own rules when the pipeline is loaded.
    type: str
    fields: list[FieldSpec] = Field(default_factory=list)
    max_value_bytes: int = Field(default=1_048_576, ge=1)
    unknown_fields: Literal["ignore", "quarantine"] = "ignore"
    schema_registry: SchemaRegistryConfig | None = None
    # A writer schema that changes a column's type beyond a promotion, or lacks a field the table requires
    # (tailfill.required-fields): its records go to quarantine with the reason, or the run stops naming the
    # field and both types (or the schema id that lacks it).
    on_incompatible_schema: Literal["quarantine", "fail"] = "quarantine"
    # The table's kafka_key: the bytes as sent ("raw"), decoded UTF-8 ("string"; a key that is not
    # UTF-8 sends its record to the quarantine, which keeps the raw key), or (registry formats) decoded
    # with its own writer schema from the registry ("registry": the key subject's type, e.g. a struct).
    key: Literal["raw", "string", "registry"] = "raw"

    @model_validator(mode="after")
    def _field_names_unique(self) -> FormatConfig:
        names = [f.name for f in self.fields]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate field names: {', '.join(dupes)}")
        return self


class S3Config(_Model):
    endpoint: str
    region: str = "us-east-1"
    access_key_env: str = "AWS_ACCESS_KEY_ID"
    secret_key_env: str = "AWS_SECRET_ACCESS_KEY"


# Catalog properties that carry secrets: never inline, name an environment variable (credential_env).
CATALOG_SECRET_HINTS = ("credential", "token", "secret", "password")


class CatalogConfig(_Model):
    """The Iceberg catalog, opened with pyiceberg's ``load_catalog``; secrets only by environment variable."""

    name: str = "tailfill"
    type: Literal["sql", "rest", "glue", "hive"] = "sql"
    # sql: SQLAlchemy URI; rest: the REST endpoint; hive: thrift://host:port; glue: none (AWS's).
    uri: str | None = None
    warehouse: str | None = None  # the catalog's warehouse (REST: e.g. s3://warehouse); sql: target.warehouse
    credential_env: str | None = None  # variable holding the credential (REST OAuth: client_id:client_secret)
    properties: dict[str, str] = Field(default_factory=dict)  # further pyiceberg catalog properties, no secrets

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
    catalog: CatalogConfig
    namespace: str
    table: str
    warehouse: str
    quarantine_table: str | None = None
    s3: S3Config | None = None
    # Where the run state processes share lives (tail health, stop requests, batch reports, lanes,
    # failures): <state_root>/<pipeline>/. None: <warehouse>/_tailfill. Every machine of a pipeline
    # must reach it; it is on the warehouse's filesystem (a local path beside a local warehouse, an
    # s3:// URI beside an s3:// one).
    state_root: str | None = None
    # Iceberg partition transforms of the data table, e.g. ["day(created_at)", "bucket(16, user_id)"];
    # empty: unpartitioned. Changing it later evolves the table's spec for new data.
    partition_by: tuple[str, ...] = ()

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

    @property
    def quarantine_name(self) -> str:
        return self.quarantine_table or f"{self.table}_quarantine"


class BackfillConfig(_Model):
    slices: int = Field(ge=1, le=1024)
    max_offsets_per_batch: int = Field(ge=1)
    # Size each batch to take about this long, from the measured rate (a backfill has no freshness
    # deadline; the budget keeps each commit well inside any). None: every batch is the maximum.
    batch_seconds: float | None = Field(default=None, gt=0)
    # At most this many offsets per second over a backfill query (None: as fast as it goes). While
    # a live tail misses its freshness objective, backfills also pause between batches.
    max_offsets_per_second: int | None = Field(default=None, ge=1)
    max_consecutive_failures: int = Field(ge=0)
    # Wait this long before restarting a failed attempt, doubling per consecutive failure (max 60 s).
    restart_backoff_seconds: float = Field(ge=0)
    # When the governor cannot see the tail (no tail state published under the state root, or it
    # cannot be read): "yield" runs short batches on half the cores as beside a live tail; "proceed"
    # runs at full speed. Either way the progress line and `tailfill status` say the tail is unknown.
    when_tail_unknown: Literal["yield", "proceed"]


class TailConfig(_Model):
    trigger: Literal["available_now", "processing_time"]
    trigger_interval_seconds: float = Field(gt=0)
    # The adaptive tail sizes each batch within [min, max] from its measured rate and the backlog.
    min_offsets_per_batch: int = Field(ge=1)
    max_offsets_per_batch: int = Field(ge=1)
    # The objective: produce-to-commit latency (p95 of a batch's records) at most this many seconds.
    freshness_seconds: float = Field(gt=0)
    max_consecutive_failures: int = Field(ge=0)
    restart_backoff_seconds: float = Field(ge=0)  # as backfill.restart_backoff_seconds
    schedule: str | None = None
    # The incremental DAG's Airflow deadline alert: a run not finished this long after it was queued is
    # recorded and alerted. None: no deadline (Airflow 3.3.2's `dags test` fails on a DAG that has one).
    run_deadline_seconds: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _bounds(self) -> TailConfig:
        if self.min_offsets_per_batch > self.max_offsets_per_batch:
            raise ValueError(f"min_offsets_per_batch ({self.min_offsets_per_batch}) is above "
                             f"max_offsets_per_batch ({self.max_offsets_per_batch})")
        return self


class DataExpectation(_Model):
    """One data expectation on a column of the run's new rows (checked with Great Expectations)."""

    column: str
    not_null: bool = False
    accepted_values: list[str | int | float | bool] | None = None
    min: float | None = None
    max: float | None = None
    type: FieldType | None = None
    mostly: float = Field(default=1.0, gt=0, le=1)

    @model_validator(mode="after")
    def _says_something(self) -> DataExpectation:
        if not (self.not_null or self.accepted_values is not None or self.min is not None
                or self.max is not None or self.type is not None):
            raise ValueError(f"expectation on '{self.column}' checks nothing: set not_null, accepted_values, "
                             "min/max or type")
        return self


class CompletenessConfig(_Model):
    """What the completeness check may accept as legitimately missing on the broker."""

    # "none": every offset of a committed range must be a row or a quarantined row.
    # "allowed": offsets the source never returned (compaction, transaction markers) are accepted
    # when rows + quarantined equal what the source read for that batch.
    absent_offsets: Literal["none", "allowed"] = "none"


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

    target_file_bytes: int = Field(ge=1024, description="compact data files smaller than this into files of it")
    expire_older_than: str = Field(description="expire snapshots older than this duration (e.g. 7d)")
    keep_last: int = Field(ge=1, description="always keep at least this many most recent snapshots")
    orphan_min_age: str = Field(description="delete unreferenced files only when older than this (e.g. 1d)")
    schedule: str | None = Field(description="cron schedule of the maintenance DAG (null: manual only)")

    @field_validator("expire_older_than", "orphan_min_age")
    @classmethod
    def _is_duration(cls, text: str) -> str:
        duration_seconds(text)
        return text


class PipelineConfig(_Model):
    """One pipeline: where records come from, how they are parsed, where they land."""

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]
    source: SourceConfig
    format: FormatConfig
    target: TargetConfig
    checkpoint_location: str
    backfill: BackfillConfig
    tail: TailConfig
    completeness: CompletenessConfig = CompletenessConfig()
    expectations: list[DataExpectation] = Field(default_factory=list)
    maintenance: MaintenanceConfig | None = None
    path: str | None = Field(default=None, exclude=True)

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
