"""A SparkSession with Tailfill's settings (:mod:`tailfill.run.runtime`) and data sources registered."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

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
