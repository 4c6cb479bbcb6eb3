"""The Spark side of the two-phase commit, for ``foreachBatch``: prepare on the executors, commit here.

A micro-batch of ``tailfill_kafka`` with ``output=ranges`` holds one small row per offset range,
grouped into a few Spark partitions. :func:`prepare_batch` runs
:func:`tailfill.lake.prepare.prepare_ranges` for each group in its executor task (read the group's
partitions with one consumer, parse, write Parquet, check nothing was dropped) and brings back only
the list of prepared files; the records themselves never cross between the JVM and Python. The
driver then commits them (:func:`tailfill.lake.commit.commit_prepared`).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from tailfill.config import PipelineConfig
from tailfill.lake.prepare import PREPARED_SCHEMA, PreparedRange, from_arrow, prepare_ranges, to_arrow, warm_up
from tailfill.offsets import OffsetRange

_CONFIGS: dict[str, PipelineConfig] = {}


def _config(text: str) -> PipelineConfig:
    """The pipeline, parsed once per Python worker."""
    if text not in _CONFIGS:
        _CONFIGS[text] = PipelineConfig.from_json(text)
    return _CONFIGS[text]


def prepare_batch(ranges: DataFrame, cfg: PipelineConfig, run_id: str, data_location: str,
                  quarantine_location: str, table_columns: pa.Schema | None = None) -> list[PreparedRange]:
    """Prepare every range of a micro-batch on the executors; returns what each prepared.
    ``table_columns``: the data table's columns now (registry formats check writer schemas against them)."""
    cfg_json = cfg.to_json()

    def prepare(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cfg_ = _config(cfg_json)
        ranges = [OffsetRange(r["kafka_topic"], r["kafka_partition"], r["start_offset"], r["end_offset"])
                  for batch in batches for r in batch.to_pylist()]
        if ranges:
            yield to_arrow(prepare_ranges(cfg_, run_id, ranges, data_location, quarantine_location, table_columns))

    return from_arrow(ranges.mapInArrow(prepare, from_arrow_schema(PREPARED_SCHEMA)).toArrow())


def warm_executors(spark: SparkSession, cfg: PipelineConfig) -> threading.Thread:
    """Start the executors' Python workers (imports, parser, Kafka consumer) in the background.

    A new application's first batch otherwise waits ~2 s for them after the streaming query has
    spent ~4 s starting on the driver; warmed meanwhile, they are ready when it arrives. Workers
    are reused (``spark.python.worker.reuse``), so the warm ones take the batch. A failure here is
    only reported: the batch itself will meet (and report) whatever caused it.
    """
    cfg_json, tasks = cfg.to_json(), spark.sparkContext.defaultParallelism

    def warm(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            warm_up(_config(cfg_json))
            yield batch

    def run() -> None:
        try:
            spark.range(tasks, numPartitions=tasks).mapInArrow(warm, "id long").collect()
        except Exception as exc:  # reported, not raised: see above
            print(f"warming the executors failed (the run goes on): {exc}".splitlines()[0], file=sys.stderr)

    thread = threading.Thread(target=run, name="warm-executors", daemon=True)
    thread.start()
    return thread
