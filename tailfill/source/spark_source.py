"""``tailfill_kafka``: a PySpark Python Data Source for Kafka, batch and streaming.

Options (offsets in the JSON format of Spark's Kafka connector, ``{"topic": {"0": 42}}``):

- ``source``: the pipeline's ``source`` block as JSON (broker address, topic, security, consumer settings)
- ``startingOffsets``: JSON or ``earliest`` (required; ``latest`` is refused: it skips data)
- ``endingOffsets``: JSON or ``latest`` (batch default ``latest``; streaming default unbounded)
- ``maxOffsetsPerTrigger``: cap per micro-batch, shared across partitions by pending size
- ``budgetFile``: a JSON file ``{"max_offsets": N, "tasks": K}`` read before each micro-batch; when
  present it sets the batch's cap (at most ``maxOffsetsPerTrigger``) and, optionally, its number of
  tasks (at most ``tasks``), so a driver can size batches and yield cores as it goes
- ``failureFile``: where a streaming reader writes the error its planning failed with, as data
  (:mod:`tailfill.source.handoff`), for a driver that restarts the query
- ``output``: ``records`` (default) — the records themselves (:data:`~tailfill.values.schema.RAW_SCHEMA`);
  or ``ranges`` — one row per offset range (:data:`~tailfill.values.schema.RANGE_SCHEMA`), for a writer
  that reads its ranges where it writes them (Tailfill's ingest, :mod:`tailfill.run.spark_prepare`)
- ``tasks``: with ``ranges``, deal each batch's ranges into at most this many input partitions of
  near-equal size — several partitions read by one consumer, or a large range halved so that every
  task works (see :func:`tailfill.offsets.deal`); default one range each
- ``includeRangeMarkers``: with ``records``, ``true`` adds one marker row per range recording what was read

One input partition per topic-partition range ``[start, end)``; rows come as Arrow batches.

This module is the data source alone, and imports little: Spark instantiates it (and asks its
schema) in a Python process of its own for every ``load()``, on the way to a query's first batch.
The readers, with the pipeline model and the Kafka client, are in :mod:`tailfill.source.spark_reader`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader
    from pyspark.sql.types import StructType


OUTPUTS = ("records", "ranges")


def output_of(options: dict[str, str]) -> str:
    """The ``output`` option (Spark lower-cases option keys), checked."""
    output = {k.lower(): v for k, v in options.items()}.get("output", "records")
    if output not in OUTPUTS:
        from tailfill.errors import ConfigError

        raise ConfigError(f"tailfill_kafka option output={output!r}: use one of {', '.join(OUTPUTS)}")
    return output


class KafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tailfill_kafka"

    def schema(self) -> str:
        from tailfill.values.schema import RANGE_SCHEMA, RAW_SCHEMA, spark_ddl

        return spark_ddl(RANGE_SCHEMA if output_of(dict(self.options)) == "ranges" else RAW_SCHEMA)

    def reader(self, schema: StructType) -> DataSourceReader:
        from tailfill.source.spark_reader import KafkaBatchReader, KafkaOptions

        return KafkaBatchReader(KafkaOptions(dict(self.options), output_of(dict(self.options))))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from tailfill.source.spark_reader import KafkaOptions, KafkaStreamReader

        return KafkaStreamReader(KafkaOptions(dict(self.options), output_of(dict(self.options))))
