"""The pipeline's Iceberg tables and their catalog (SQL: SQLite by default, Postgres in compose; REST, Glue, Hive).

Reading never creates: :func:`open_tables` loads the tables as they are (None when they were never
made) and changes nothing — what preflight, status, validation and the Airflow pages use.
:func:`provision_tables` creates them and evolves them to the pipeline's settings (namespace,
schema, partition spec, properties): the planner's job, before a run. The catalog is opened by the
owner of a pipeline's handle (:mod:`tailfill.pipeline.handle`), once, and closed with it. Files and
the warehouse itself are :mod:`tailfill.plumbing.warehouse`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import Table
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from tailfill.config import TargetConfig
from tailfill.errors import LakeError, RegistryError, SchemaChangeError
from tailfill.formats.base import Format
from tailfill.lake.data_files import spec_terms
from tailfill.lake.schema_change import evolve
from tailfill.lake.transaction import transaction
from tailfill.plumbing.retry import retrying
from tailfill.plumbing.warehouse import s3_credentials, warehouse_uri
from tailfill.redact import redact_text
from tailfill.values.partition_terms import parse_terms
from tailfill.values.schema import QUARANTINE_SCHEMA

CATALOG_OPEN_ATTEMPTS = 5
CATALOG_CONNECT_TIMEOUT_S = 10  # a Postgres catalog's connection, unless its URI sets connect_timeout
KEY_PROP = "tailfill.key"  # a state table's key columns (JSON list), set when it is made
CHANGES_PROP = "tailfill.changes"  # the change log (namespace.table) a state table folds, set when it is made


def catalog_properties(target: TargetConfig) -> dict[str, str]:
    """pyiceberg's properties for the pipeline's catalog, secrets read from the variables the config names."""
    cat = target.catalog
    props = {**cat.properties, "type": cat.type,
             "warehouse": cat.warehouse or (warehouse_uri(target) if cat.type == "sql" else None)}
    if cat.uri is not None:
        props["uri"] = with_connect_timeout(cat.uri)
    if cat.credential_env is not None:
        if not os.environ.get(cat.credential_env):
            raise LakeError(f"target.catalog.credential_env names {cat.credential_env}, which is not set")
        props["credential"] = os.environ[cat.credential_env]
    if target.s3 is not None:
        key, secret = s3_credentials(target)
        props.update(
            {
                "s3.endpoint": target.s3.endpoint,
                "s3.region": target.s3.region,
                "s3.access-key-id": key,
                "s3.secret-access-key": secret,
                "s3.force-virtual-addressing": "false",
            }
        )
    return {k: v for k, v in props.items() if v is not None}


def with_connect_timeout(uri: str) -> str:
    """A Postgres catalog's ``uri`` with libpq's ``connect_timeout`` (:data:`CATALOG_CONNECT_TIMEOUT_S`) unless it
    sets one: without it, a server that takes the connection and never answers holds a run for ever."""
    if not uri.startswith("postgresql") or "connect_timeout=" in uri:
        return uri
    return f"{uri}{'&' if '?' in uri else '?'}connect_timeout={CATALOG_CONNECT_TIMEOUT_S}"


def catalog_label(target: TargetConfig) -> str:
    """Where the catalog is, as messages name it: its (redacted) uri, or its type when it has none (Glue)."""
    return redact_text(target.catalog.uri or f"({target.catalog.type})")


def load_catalog(target: TargetConfig) -> Catalog:
    """The pipeline's Iceberg catalog: SQL (SQLite by default, Postgres in compose), REST, Glue or Hive, through
    pyiceberg's ``load_catalog``; :func:`close_catalog` when done with it."""
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    uri = target.catalog.uri or ""
    try:
        if uri.startswith("sqlite:///"):
            Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        if not target.warehouse.startswith("s3://"):
            Path(target.warehouse).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LakeError(f"cannot create the local warehouse or catalog directory: {exc}") from exc
    props = catalog_properties(target)
    try:  # a lost creation race: the winner's tables exist now, and opening again finds them
        for attempt in retrying(CATALOG_OPEN_ATTEMPTS, on=SQLAlchemyError, when=_lost_creation_race, first_wait=0.1,
                                max_wait=1.0):
            with attempt:
                return pyiceberg_load_catalog(target.catalog.name, **props)
    except Exception as exc:  # errors may quote the URL or a credential: the message is redacted as a whole
        raise LakeError(redact_text(f"cannot open the Iceberg catalog at {catalog_label(target)}: {exc}")) from exc
    raise AssertionError("unreachable: the last attempt returns or raises")


def close_catalog(catalog: Catalog) -> None:
    """Let go of the catalog's connections (a SQL catalog's pool; other catalogs hold none open)."""
    engine = getattr(catalog, "engine", None)
    if engine is not None:
        engine.dispose()


def _lost_creation_race(exc: BaseException) -> bool:
    """Whether opening a new catalog failed because another process created its tables at the same time.

    pyiceberg checks for its tables and creates them if absent; two processes opening a new catalog at
    once (backfill lanes, a tail, upkeep) can both find them absent, and the loser's CREATE fails.
    """
    text = str(exc)
    return isinstance(exc, SQLAlchemyError) and ("already exists" in text or "duplicate key" in text)


# pyiceberg retries a conflicting commit by re-basing its snapshot but re-applies the transaction's
# other updates as they were: a stale ``tailfill.committed-ranges`` would overwrite a concurrent
# writer's. Tailfill's commits retry themselves from a fresh read (ledger, compaction), so pyiceberg's
# own retry is off on every Tailfill table. Every commit also deep-copies the table metadata several
# times, metadata log included: keeping 10 previous metadata files (not pyiceberg's 100, deleted as
# they drop out) keeps that cost flat once snapshots are expired (see ``tailfill maintain``).
TABLE_PROPERTIES = {"format-version": "2", "commit.retry.num-retries": "0",
                    "write.metadata.previous-versions-max": "10", "write.metadata.delete-after-commit.enabled": "true"}


NewTable = Callable[[], tuple[pa.Schema, dict[str, str]]]  # a new table's schema and more properties


def _ensure(catalog: Catalog, ident: tuple[str, str], schema: pa.Schema | NewTable,
            partition_by: Sequence[str] = ()) -> Table:
    """Load the table ``ident``, or create it with ``schema`` (a callable: asked only then, for the schema and
    more table properties) and the spec; a concrete ``schema`` also adds the columns an older table lacks."""
    try:
        table = catalog.load_table(ident)
    except NoSuchTableError:
        # Two writers creating the namespace at once: the loser sees the SQL catalog's IntegrityError.
        with contextlib.suppress(NamespaceAlreadyExistsError, IntegrityError):
            catalog.create_namespace(ident[0])
        try:
            new_schema, more = schema() if callable(schema) else (schema, {})
            with catalog.create_table_transaction(ident, schema=new_schema,
                                                  properties={**TABLE_PROPERTIES, **more}) as tx:
                if partition_by:
                    with tx.update_spec() as spec:
                        for term in parse_terms(partition_by):
                            spec.add_field(term.column, term.iceberg(), term.field_name)
            return catalog.load_table(ident)
        except (TableAlreadyExistsError, CommitFailedException):
            table = catalog.load_table(ident)
    if not callable(schema):  # the data table's columns follow its format (lake.schema_change)
        _add_missing_columns(table, schema)
    evolve_spec(table, list(partition_by))
    missing = {k: v for k, v in TABLE_PROPERTIES.items() if table.properties.get(k) != v and k != "format-version"}
    if missing:  # a table created before the property existed
        with contextlib.suppress(CommitFailedException), transaction(table) as tx:
            tx.set_properties(missing)
        table.refresh()
    return table


def _add_missing_columns(table: Table, schema: pa.Schema) -> None:
    """Add the columns of ``schema`` a table created by an older Tailfill lacks (e.g. ``kafka_headers``)."""
    missing = [f for f in schema if f.name not in table.schema().column_names]
    if not missing:
        return
    with contextlib.suppress(CommitFailedException), table.update_schema() as update:  # lost a race: it is done
        update.union_by_name(pa.schema(missing))
    table.refresh()


def evolve_spec(table: Table, partition_by: list[str]) -> None:
    """Make ``table``'s partition spec ``partition_by`` for the data written from now on (files already
    written keep theirs); a change Iceberg refuses stops with one line naming both specs."""
    try:  # another process changed the table first: look again
        for attempt in retrying(CATALOG_OPEN_ATTEMPTS, on=CommitFailedException):
            with attempt:
                _evolve_spec_once(table, partition_by)
    except CommitFailedException:
        raise LakeError(f"the partition spec of {'.'.join(table.name())} kept changing under us") from None


def _evolve_spec_once(table: Table, partition_by: list[str]) -> None:
    table.refresh()
    current = spec_terms(table.spec(), table.schema())
    if current == partition_by:
        return
    try:
        with table.update_spec() as spec:
            for field, term in zip(table.spec().fields, current, strict=True):
                if term not in partition_by:
                    spec.remove_field(field.name)
            for term in parse_terms(partition_by):
                if str(term) not in current:
                    spec.add_field(term.column, term.iceberg(), term.field_name)
    except ValueError as exc:
        raise LakeError(f"cannot change the partition spec of {'.'.join(table.name())} from {current} to "
                        f"{partition_by}: {exc} (fix: restore target.partition_by)") from None
    table.refresh()
    if spec_terms(table.spec(), table.schema()) != partition_by:  # e.g. a reordering Iceberg cannot express
        raise LakeError(f"cannot change the partition spec of {'.'.join(table.name())} from {current} to "
                        f"{partition_by}: only adding and removing transforms is supported, not reordering "
                        "(fix: restore target.partition_by)")


class Tables(NamedTuple):
    """A pipeline's data table and its quarantine table."""

    data: Table
    quarantine: Table


def open_tables(catalog: Catalog, target: TargetConfig) -> Tables | None:
    """The pipeline's data table and quarantine table as they are now, or None when they were never made (or
    only one of them was). Creates and changes nothing."""
    try:
        return Tables(catalog.load_table((target.namespace, target.table)),
                      catalog.load_table((target.namespace, target.quarantine_name)))
    except NoSuchTableError:
        return None
    except Exception as exc:
        where = f"{target.namespace} at {warehouse_uri(target)}"
        raise LakeError(redact_text(f"cannot load tables in {where}: {exc}")) from exc


def provision_tables(catalog: Catalog, target: TargetConfig, fmt: Format) -> Tables:
    """The pipeline's data table and quarantine table, created if they are not there yet (the data table with
    what its format says of a new table) and evolved to the pipeline's settings (the columns the YAML declares,
    partition spec, table properties): the planner's, before a run."""
    ns = target.namespace

    def new_data_table() -> tuple[pa.Schema, dict[str, str]]:
        new = fmt.new_table()
        return new.schema, new.properties

    try:
        data = _ensure(catalog, (ns, target.table), new_data_table, target.partition_by)
        declared = fmt.declared_columns(fmt.fmt)
        if declared is not None and fmt.fmt.fields:  # a field added to format.fields: a new column before any
            evolve(data, declared, "format.fields")  # row carries it
        quarantine = _ensure(catalog, (ns, target.quarantine_name), QUARANTINE_SCHEMA)
    except (LakeError, RegistryError, SchemaChangeError):
        raise
    except Exception as exc:
        where = f"{ns} at {warehouse_uri(target)}"
        raise LakeError(redact_text(f"cannot create or load tables in {where}: {exc}")) from exc
    return Tables(data, quarantine)


def provision_state_table(catalog: Catalog, target: TargetConfig, data: Table) -> Table:
    """A keyed pipeline's state table (``target.mode: upsert``): made if missing with the data table's columns and
    the key recorded, and given the columns the data table gained since (the planner's, before a run)."""
    ident = (target.namespace, target.state_name)
    changes = ".".join(data.name()[-2:])

    def new_state_table() -> tuple[pa.Schema, dict[str, str]]:
        return data.schema().as_arrow(), {KEY_PROP: json.dumps(list(target.key)), CHANGES_PROP: changes}

    try:
        state = _ensure(catalog, ident, new_state_table)
        folds = state.properties.get(CHANGES_PROP)
        if folds is None:  # made before the change log was recorded: it is this pipeline's from now on
            with transaction(state) as tx:
                tx.set_properties({CHANGES_PROP: changes})
        elif folds != changes:
            raise LakeError(f"the state table {'.'.join(ident)} holds the state of the change log {folds}, not of "
                            f"this pipeline's {changes}: give the pipeline a state table of its own "
                            "(target.state_table)")
        _add_missing_columns(state, data.schema().as_arrow())
    except LakeError:
        raise
    except Exception as exc:
        where = f"{target.namespace} at {warehouse_uri(target)}"
        raise LakeError(redact_text(f"cannot create or load the state table {target.state_name} in {where}: "
                                    f"{exc}")) from exc
    recorded = json.loads(state.properties.get(KEY_PROP, "[]"))
    if recorded != list(target.key):
        raise LakeError(f"the state table {'.'.join(ident)} is keyed by {recorded}, the pipeline by "
                        f"{list(target.key)}: restore target.key, or drop the state table to rebuild it")
    return state


def open_state_table(catalog: Catalog, target: TargetConfig) -> Table | None:
    """A keyed pipeline's state table as it is now, or None when it was never made. Changes nothing."""
    try:
        return catalog.load_table((target.namespace, target.state_name))
    except NoSuchTableError:
        return None
    except Exception as exc:
        raise LakeError(redact_text(f"cannot load the state table {target.state_name}: {exc}")) from exc
