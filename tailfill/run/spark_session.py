"""A SparkSession with Tailfill's settings (:mod:`tailfill.run.runtime`) and data sources registered."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

from tailfill.config import TargetConfig
from tailfill.errors import LakeError
from tailfill.lake.spark_catalog import ICEBERG_EXTENSIONS, spark_catalog_conf, spark_catalog_name
from tailfill.plumbing import jvm_jars
from tailfill.run import runtime
from tailfill.settings import settings


def get_session(app_name: str = "tailfill") -> SparkSession:
    """Get or create the session, with the ``tailfill_kafka`` data source registered.

    Under ``spark-submit`` the settings it was given win (the master of Airflow's ``spark_default``
    connection, say: :func:`tailfill.run.submit.spark_submit_command` passes the same settings);
    otherwise the session runs on :func:`runtime.master` with :func:`runtime.spark_conf`.
    """
    for key, value in runtime.spark_env().items():
        os.environ.setdefault(key, value)
    builder = SparkSession.builder.appName(app_name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not started by spark-submit
        builder = builder.master(runtime.master())
        for key, value in runtime.spark_conf().items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings().spark_log_level)
    register_sources(spark)
    return spark


def register_sources(spark: SparkSession) -> None:
    from tailfill.source.spark_source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)


def has_iceberg(spark: SparkSession) -> bool:
    """Whether ``spark`` was started with Iceberg's Spark runtime and SQL extensions (:func:`runtime.iceberg_conf`)."""
    return ICEBERG_EXTENSIONS in spark.conf.get("spark.sql.extensions", "").split(",")


def add_catalog(spark: SparkSession, target: TargetConfig) -> bool:
    """Give ``spark`` the pipeline's Iceberg catalog (:func:`spark_catalog_conf`) unless a catalog of that name is
    set to another one already (a Spark session loads a catalog once and keeps it); whether it has this one now."""
    conf = spark_catalog_conf(target)
    if any(spark.conf.get(k, None) not in (None, v) for k, v in conf.items()):
        return False
    for key, value in conf.items():
        spark.conf.set(key, value)
    return True


def use_catalog(spark: SparkSession, target: TargetConfig) -> str:
    """Give ``spark`` the pipeline's Iceberg catalog (:func:`add_catalog`) and make it the current catalog, in the
    pipeline's namespace once that exists; the catalog's name. :class:`LakeError` when the session has no Iceberg
    runtime or another catalog of that name; :class:`~tailfill.plumbing.jvm_jars.JarsError` with the fetch command
    when Iceberg's jars are not installed."""
    jvm_jars.jar_files("iceberg")  # absent: one line with the command that fetches them
    if not has_iceberg(spark):
        raise LakeError("this Spark session was started without Iceberg's Spark runtime on its class path "
                        "(fix: start it with tailfill.run.runtime.spark_conf(), as every Tailfill session is)")
    name = spark_catalog_name(target)
    if not add_catalog(spark, target):
        raise LakeError(f"this Spark session has another Iceberg catalog named {name!r} already "
                        "(fix: a new session for this pipeline: spark.newSession())")
    namespace = f"{quoted(name)}.{quoted(target.namespace)}"
    spark.sql(f"USE {namespace if spark.catalog.databaseExists(namespace) else quoted(name)}")
    return name


def quoted(identifier: str) -> str:
    """``identifier`` as a Spark SQL identifier in backticks."""
    return "`" + identifier.replace("`", "``") + "`"
