"""The pipeline's Iceberg catalog as Spark settings: the same catalog pyiceberg opens, seen by Iceberg's SparkCatalog.

A SQL catalog (SQLite, Postgres) is read by Iceberg's ``JdbcCatalog`` from the tables pyiceberg keeps
(``iceberg_tables``, ``iceberg_namespace_properties``) under the same catalog name; a REST catalog by its endpoint.
An ``s3://`` warehouse is reached with ``S3FileIO`` on the pipeline's explicit endpoint and credentials, never a
cloud default; a local one with Hadoop's file system. No pyspark here: the settings are plain strings, which
:func:`tailfill.run.spark_session.use_catalog` lays on a session.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from tailfill.config import TargetConfig
from tailfill.errors import ConfigError

SPARK_CATALOG_TYPES = ("sql", "rest")  # the catalog types Tailfill gives Spark
SPARK_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"  # CALL, ALTER … WRITE
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
# pyiceberg's S3 properties → Iceberg Java's (S3FileIO); the region is Java's client.region.
_S3_KEYS = {"s3.endpoint": "s3.endpoint", "s3.access-key-id": "s3.access-key-id",
            "s3.secret-access-key": "s3.secret-access-key", "s3.region": "client.region"}
# pyiceberg properties that only pyiceberg's SQL catalog reads (SQLAlchemy's engine), never passed on.
_PYICEBERG_ONLY = {"type", "uri", "warehouse", "credential", "s3.force-virtual-addressing", "echo", "pool_pre_ping",
                   "init_catalog_tables"}


def spark_catalog_name(target: TargetConfig) -> str:
    """The catalog's name in Spark: pyiceberg's (``target.catalog.name``), which a SQL catalog's rows are kept under."""
    return target.catalog.name


def spark_catalog_conf(target: TargetConfig) -> dict[str, str]:
    """``spark.sql.catalog.<name>.*`` settings for the pipeline's catalog (secrets included: set them on a session,
    never on a command line); :class:`ConfigError` naming the catalog type Spark is not given here (Glue, Hive)."""
    from tailfill.lake.tables import catalog_properties  # here: pyiceberg stays out of what imports the constants

    cat = target.catalog
    props = catalog_properties(target)
    if cat.type not in SPARK_CATALOG_TYPES:
        raise ConfigError(f"target.catalog.type {cat.type!r}: Tailfill gives Spark sql and rest catalogs only "
                          "(fix: configure Iceberg's SparkCatalog for it in your own session)")
    if cat.type == "sql":
        iceberg = {"type": "jdbc", **jdbc_properties(props["uri"]), "warehouse": props["warehouse"]}
    else:
        iceberg = {"type": "rest", "uri": props["uri"]}
        if "warehouse" in props:
            iceberg["warehouse"] = props["warehouse"]
        if "credential" in props:
            iceberg["credential"] = props["credential"]
    for key, value in props.items():
        if key in _S3_KEYS:
            iceberg[_S3_KEYS[key]] = value
        elif key not in _PYICEBERG_ONLY and not key.startswith("s3."):
            iceberg.setdefault(key, value)  # the YAML's further catalog properties (a REST catalog's scope, say)
    iceberg["cache-enabled"] = "false"  # Tailfill commits all the time: each query reads the table as it is now
    if target.s3 is not None:
        iceberg |= {"io-impl": S3_FILE_IO, "s3.path-style-access": "true"}
    prefix = f"spark.sql.catalog.{spark_catalog_name(target)}"
    return {prefix: SPARK_CATALOG_CLASS, **{f"{prefix}.{k}": v for k, v in iceberg.items()}}


def jdbc_properties(uri: str) -> dict[str, str]:
    """A SQLAlchemy URI of a SQL catalog (``sqlite:///path``, ``postgresql+psycopg2://user:pw@host/db?…``) as
    Iceberg JdbcCatalog's ``uri`` (``jdbc:sqlite:path``, ``jdbc:postgresql://host/db?…``) and ``jdbc.*``
    properties (user and password taken out of the URI)."""
    if uri.startswith("sqlite:///"):
        path = uri.removeprefix("sqlite:///")
        if not path or path == ":memory:":
            raise ConfigError("target.catalog.uri: an in-memory SQLite catalog cannot be shared with Spark "
                              "(fix: a file, e.g. sqlite:///${TAILFILL_HOME}/catalog.db)")
        return {"uri": f"jdbc:sqlite:{path}"}
    parts = urlsplit(uri)
    if not parts.scheme.startswith("postgresql"):
        raise ConfigError(f"target.catalog.uri: a {parts.scheme} SQL catalog has no JDBC driver in Tailfill's Spark "
                          "sessions (fix: SQLite or Postgres)")
    host = parts.hostname or "localhost"
    address = f"{host}:{parts.port}" if parts.port else host
    query = urlencode([(_JDBC_QUERY_KEYS[k], v) for k, v in parse_qsl(parts.query) if k in _JDBC_QUERY_KEYS])
    out = {"uri": f"jdbc:postgresql://{address}{parts.path}{'?' + query if query else ''}"}
    if parts.username:
        out["jdbc.user"] = unquote(parts.username)
    if parts.password:
        out["jdbc.password"] = unquote(parts.password)
    return out


# libpq query parameters of a catalog URI → the Postgres JDBC driver's names for them; others are libpq's alone.
_JDBC_QUERY_KEYS = {"sslmode": "sslmode", "connect_timeout": "connectTimeout", "application_name": "ApplicationName",
                    "options": "options"}
