"""Where the data lands: the Iceberg catalog, the warehouse filesystem, and the pipeline's tables.

Works the same for a local warehouse and an ``s3://`` one; every S3 client gets the pipeline's
explicit endpoint and credentials, never a cloud default. Catalog and filesystem are opened once
per process and reused; tables are loaded fresh on every call (their state changes under us).
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.table import Table

from tailfill.config import PipelineConfig, TargetConfig
from tailfill.errors import LakeError
from tailfill.schema import QUARANTINE_SCHEMA, table_schema


def _s3_credentials(target: TargetConfig) -> tuple[str, str]:
    assert target.s3 is not None
    missing = [v for v in (target.s3.access_key_env, target.s3.secret_key_env) if not os.environ.get(v)]
    if missing:
        raise LakeError(f"target.s3 needs credentials in the environment: {', '.join(missing)} not set")
    return os.environ[target.s3.access_key_env], os.environ[target.s3.secret_key_env]


def warehouse_uri(target: TargetConfig) -> str:
    """The warehouse as a URI pyiceberg understands (``file:///…`` or ``s3://…``)."""
    if target.warehouse.startswith("s3://"):
        return target.warehouse.rstrip("/")
    return Path(target.warehouse).absolute().as_uri()


def catalog_properties(target: TargetConfig) -> dict[str, str]:
    props = {"uri": target.catalog.uri, "warehouse": warehouse_uri(target)}
    if target.s3 is not None:
        key, secret = _s3_credentials(target)
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


@functools.lru_cache(maxsize=16)
def filesystem(target: TargetConfig) -> pafs.FileSystem:
    """A pyarrow filesystem for the warehouse (used by Spark executors to write data files)."""
    if target.s3 is None:
        return pafs.LocalFileSystem()
    key, secret = _s3_credentials(target)
    endpoint = urlparse(target.s3.endpoint)
    return pafs.S3FileSystem(
        access_key=key,
        secret_key=secret,
        region=target.s3.region,
        endpoint_override=endpoint.netloc,
        scheme=endpoint.scheme or "http",
        allow_bucket_creation=False,
    )


def fs_path(uri: str) -> str:
    """A warehouse URI as a path for :func:`filesystem` (``file:///a/b`` → ``/a/b``, ``s3://b/k`` → ``b/k``)."""
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        return f"{parsed.netloc}{parsed.path}"
    if parsed.scheme == "file":
        return parsed.path
    return uri


def _ensure(catalog: Catalog, ident: tuple[str, str], schema: pa.Schema) -> Table:
    try:
        return catalog.load_table(ident)
    except NoSuchTableError:
        pass
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(ident[0])
    try:
        return catalog.create_table(ident, schema=schema, properties={"format-version": "2"})
    except TableAlreadyExistsError:
        return catalog.load_table(ident)


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
