"""A SparkSession bound to loopback, with the project's data sources registered."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from tailfill.submit import REPO

LOOPBACK = "127.0.0.1"
LOG4J = REPO / "spark_jobs" / "log4j2.properties"


def loopback_env() -> dict[str, str]:
    """Environment for Spark processes: loopback only, workers on this interpreter."""
    return {
        "SPARK_LOCAL_IP": LOOPBACK,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def get_session(master: str = "local[2]", app_name: str = "tailfill") -> SparkSession:
    """Get or create the session: UTC, with tailfill's data sources registered.

    Under ``spark-submit`` the master and driver address it was given win (a cluster master
    from Airflow's ``spark_default`` connection, say); otherwise the session runs ``local[2]``
    bound to loopback.
    """
    for key, value in loopback_env().items():
        os.environ.setdefault(key, value)
    builder = SparkSession.builder.appName(app_name)
    # spark-submit starts the Python driver with a gateway already open, and was given the master
    # and driver address itself (submit.py, or SparkSubmitOperator from spark_default).
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = (builder.master(os.environ.get("TAILFILL_SPARK_MASTER", master))
                   .config("spark.driver.host", LOOPBACK).config("spark.driver.bindAddress", LOOPBACK))
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile={LOG4J}" if LOG4J.exists() else "")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(os.environ.get("TAILFILL_SPARK_LOG_LEVEL", "ERROR"))
    register_sources(spark)
    return spark


def register_sources(spark: SparkSession) -> None:
    from tailfill.spark.iceberg_sink import IcebergSinkDataSource
    from tailfill.spark.kafka_source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
    spark.dataSource.register(IcebergSinkDataSource)
