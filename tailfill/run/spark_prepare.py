"""The Spark side of the two-phase commit's first phase: prepare a micro-batch's ranges on the executors.

A micro-batch of ``tailfill_kafka`` with ``output=ranges`` holds one small row per offset range,
grouped into a few Spark partitions. :func:`prepare_batch` has each group prepared in its executor
task by that worker's :class:`~tailfill.pipeline.executor.ExecutorContext` (read the group's
partitions with one consumer, decode, write Parquet, check nothing was dropped) and brings back only
the list of prepared files — or the task's error, as data; the records themselves never cross
between the JVM and Python. The driver then commits them (:class:`tailfill.lake.commit.Committer`).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from tailfill.errors import ErrorInfo
from tailfill.lake.prepare import PREPARED_SCHEMA, PreparedRange, failed, from_arrow, to_arrow
from tailfill.offsets import OffsetRange
from tailfill.pipeline.executor import executor_context
from tailfill.plumbing.whole_lines import line_printer
from tailfill.run.spark_connect import is_connect, session_cores
from tailfill.source.read_counts import BatchReads


def prepare_batch(ranges: DataFrame, shipped: str, run_id: str, data_location: str, quarantine_location: str,
                  table_columns: pa.Schema | None = None, reads: BatchReads | None = None,
                  pool: str | None = None) -> list[PreparedRange]:
    """Prepare every range of a micro-batch on the executors; returns what each prepared, or raises the error a task
    met (:class:`~tailfill.errors.RemoteError`, carrying its class, message, ``retryable`` and fix).
    ``shipped``: the pipeline's resolved config as JSON; ``table_columns``: the data table's columns now;
    ``reads``: where the tasks count the records they read while they run; ``pool``: the scheduler pool its tasks
    share (:func:`in_pool`)."""
    if pool is not None:
        in_pool(ranges.sparkSession, pool)

    def prepare(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ranges = [OffsetRange(r["kafka_topic"], r["kafka_partition"], r["start_offset"], r["end_offset"])
                  for batch in batches for r in batch.to_pylist()]
        if not ranges:
            return
        try:
            prepared = executor_context(shipped).prepare(run_id, ranges, data_location, quarantine_location,
                                                         table_columns, reads.counter(ranges) if reads else None)
        except Exception as exc:  # handed to the driver as data: its class, message, retryable, fix
            yield failed(ErrorInfo.of(exc))
            return
        yield to_arrow(prepared)

    return from_arrow(ranges.mapInArrow(prepare, from_arrow_schema(PREPARED_SCHEMA)).toArrow())


def in_pool(spark: SparkSession, pool: str) -> None:
    """Run this thread's next Spark jobs in the scheduler pool ``pool`` (made when first named). Under Spark's fair
    scheduler (``spark.scheduler.mode FAIR``, :func:`tailfill.run.runtime.spark_conf`) each pool gets its share of
    the cores: the jobs of a routed pipeline's tables, one pool each, take turns, where a table's batch would wait
    for every task of a larger table's batch to start. A Spark Connect client's session has no pools of its own
    (its server's handler, which prepares a live tail's batches, does)."""
    if not is_connect(spark):
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)


def warm_executors(spark: SparkSession, shipped: str) -> threading.Thread:
    """Start the executors' Python workers (imports, decoder, Kafka consumer) in the background.

    A new application's first batch otherwise waits ~2 s for them after the streaming query has
    spent ~4 s starting on the driver; warmed meanwhile, they are ready when it arrives. Workers
    are reused (``spark.python.worker.reuse``), so the warm ones take the batch. A failure here is
    only reported: the batch itself will meet (and report) whatever caused it.
    """
    tasks = session_cores(spark)

    def warm(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            executor_context(shipped).warm()
            yield batch

    def run() -> None:
        try:
            spark.range(tasks, numPartitions=tasks).mapInArrow(warm, "id long").collect()
        except Exception as exc:  # reported, not raised: see above
            line_printer(sys.stderr)(f"warming the executors failed (the run goes on): {exc}".splitlines()[0])

    thread = threading.Thread(target=run, name="warm-executors", daemon=True)
    thread.start()
    return thread
