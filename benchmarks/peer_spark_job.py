"""The Spark peer of benchmarks/peers.py: what a Spark engineer writes to land a Kafka topic in a table.

Spark Structured Streaming with Spark's own Kafka source (``readStream.format("kafka")``, earliest offsets), the
events' JSON decoded with ``from_json``, ``trigger(availableNow=True)`` and a checkpoint, so a run killed at any
moment is run again and resumes. The sink is an Iceberg table through Iceberg's Spark runtime (a JdbcCatalog on
SQLite) when the jars given hold one for this Spark version; otherwise Spark's own Parquet file sink, which commits
its files with its ``_spark_metadata`` log. Every row keeps its Kafka topic, partition, offset and timestamp.
With TRIGGER_SECONDS the query runs on a processing-time trigger until it is stopped (a live tail), not
``availableNow``.

    python peer_spark_job.py BOOTSTRAP TOPIC FOLDER JARS_FOLDER [TRIGGER_SECONDS]
"""

from __future__ import annotations

import sys
from pathlib import Path

EVENT_SCHEMA = "event_id STRING, user_id BIGINT, kind STRING, amount DOUBLE, created_at TIMESTAMP"
CATALOG = "bench"
TABLE = f"{CATALOG}.bench.events"


def has_iceberg_runtime(jars: list[Path]) -> bool:
    """Whether ``jars`` hold Iceberg's Spark runtime (the benchmark's set for this Spark version pins one if it
    exists)."""
    return any(j.name.startswith("iceberg-spark-runtime-") for j in jars)


def main(bootstrap: str, topic: str, folder: Path, jars_folder: Path, trigger_s: int | None = None) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, from_json

    jars = sorted(jars_folder.glob("*.jar"))
    iceberg = has_iceberg_runtime(jars)
    builder = (SparkSession.builder.master("local[2]").appName("peer-spark")
               .config("spark.jars", ",".join(str(j) for j in jars))
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    if iceberg:
        builder = (builder.config("spark.sql.extensions",
                                  "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
                   .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
                   .config(f"spark.sql.catalog.{CATALOG}.catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog")
                   .config(f"spark.sql.catalog.{CATALOG}.uri", f"jdbc:sqlite:{folder / 'catalog.db'}")
                   .config(f"spark.sql.catalog.{CATALOG}.warehouse", f"file://{folder / 'warehouse'}"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").load()
              .select("topic", "partition", "offset", col("timestamp").alias("kafka_timestamp"),
                      from_json(col("value").cast("string"), EVENT_SCHEMA).alias("e"))
              .select("topic", "partition", "offset", "kafka_timestamp", "e.*"))
    trigger = {"processingTime": f"{trigger_s} seconds"} if trigger_s else {"availableNow": True}
    writer = events.writeStream.trigger(**trigger).option("checkpointLocation", str(folder / "checkpoint"))
    if iceberg:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.bench")
        spark.sql(f"CREATE TABLE IF NOT EXISTS {TABLE} (topic STRING, partition INT, offset BIGINT, "
                  f"kafka_timestamp TIMESTAMP, {EVENT_SCHEMA}) USING iceberg")
        query = writer.format("iceberg").outputMode("append").toTable(TABLE)
    else:
        query = writer.format("parquet").option("path", str(folder / "table")).start()
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]) if sys.argv[5:] else None)
