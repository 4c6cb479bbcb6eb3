"""The pipeline's Iceberg tables and their SQL catalog (SQLite by default, Postgres in compose).

The catalog is opened once per process and reused; tables are loaded fresh on every call (their
state changes under us). Files and the warehouse itself are :mod:`tailfill.lake.storage`'s.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import Table

from tailfill.config import PipelineConfig, TargetConfig
from tailfill.errors import LakeError
from tailfill.lake.storage import s3_credentials, warehouse_uri
from tailfill.schema import QUARANTINE_SCHEMA, table_schema


def catalog_properties(target: TargetConfig) -> dict[str, str]:
    props = {"uri": target.catalog.uri, "warehouse": warehouse_uri(target)}
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
    return props


@functools.lru_cache(maxsize=16)
def load_catalog(target: TargetConfig) -> Catalog:
    """The pipeline's Iceberg SQL catalog (SQLite by default, Postgres in compose), one per process."""
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    try:
        if target.catalog.uri.startswith("sqlite:///"):
            Path(target.catalog.uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        if not target.warehouse.startswith("s3://"):
            Path(target.warehouse).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LakeError(f"cannot create the local warehouse or catalog directory: {exc}") from exc
    try:
        return SqlCatalog(target.catalog.name, **catalog_properties(target))
    except Exception as exc:
        raise LakeError(f"cannot open the Iceberg catalog at {target.catalog.uri}: {exc}") from exc


# pyiceberg (0.12) retries a conflicting commit by itself, re-applying the *same* updates on the
# newer metadata: the ledger property computed from the old state would then overwrite the ranges
# a concurrent writer just committed (seen with two backfill lanes and a tail on Postgres). With
# no retries there, the conflict reaches lake.ledger.commit_batch, which re-reads and recomputes.
TABLE_PROPERTIES = {"format-version": "2", "commit.retry.num-retries": "0"}


def _ensure(catalog: Catalog, ident: tuple[str, str], schema: pa.Schema) -> Table:
    try:
        return _with_table_properties(catalog.load_table(ident))
    except NoSuchTableError:
        pass
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(ident[0])
    try:
        return catalog.create_table(ident, schema=schema, properties=TABLE_PROPERTIES)
    except TableAlreadyExistsError:
        return _with_table_properties(catalog.load_table(ident))


def _with_table_properties(table: Table) -> Table:
    """``table`` with :data:`TABLE_PROPERTIES` (tables made before one was added get it once)."""
    missing = {k: v for k, v in TABLE_PROPERTIES.items() if k != "format-version" and table.properties.get(k) != v}
    if missing:
        # A concurrent writer that committed first fails this one: then reload, and it is set next time.
        with contextlib.suppress(CommitFailedException), table.transaction() as tx:
            tx.set_properties(missing)
        table.refresh()
    return table


class Tables(NamedTuple):
    """A pipeline's data table and its quarantine table."""

    data: Table
    quarantine: Table


def ensure_tables(cfg: PipelineConfig) -> Tables:
    """The pipeline's data table and quarantine table as they are now, created on first use."""
    catalog = load_catalog(cfg.target)
    ns = cfg.target.namespace
    try:
        data = _ensure(catalog, (ns, cfg.target.table), table_schema(cfg.format.fields))
        quarantine = _ensure(catalog, (ns, cfg.target.quarantine_name), QUARANTINE_SCHEMA)
    except Exception as exc:
        raise LakeError(f"cannot create or load tables in {ns} at {warehouse_uri(cfg.target)}: {exc}") from exc
    return Tables(data, quarantine)
