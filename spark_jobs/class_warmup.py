"""spark-submit entry point: a small local job whose JVM loads the classes an ingest job loads, for the class
archive (:mod:`tailfill.run.class_warmup`). No broker, no table: a streaming query over a Python data source
into ``foreachBatch``, and a ``mapInArrow`` collected as Arrow, as the ingest job's batches do.
"""

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition


class _Reader(DataSourceStreamReader):
    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self) -> dict:
        return {"n": 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        yield (1,)


class _Ticks(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tailfill_warmup"

    def schema(self) -> str:
        return "n long"

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        return _Reader()


def _double(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield pa.record_batch([pa.compute.multiply(batch.column(0), 2)], names=["id"])


def _batch(frame: object, batch_id: int) -> None:
    spark = frame.sparkSession  # type: ignore[attr-defined]
    frame.count()  # type: ignore[attr-defined]
    spark.range(4, numPartitions=2).mapInArrow(_double, "id long").toArrow()


if __name__ == "__main__":
    import sys
    import tempfile

    session = SparkSession.builder.appName("tailfill-class-warmup").getOrCreate()
    session.dataSource.register(_Ticks)
    with tempfile.TemporaryDirectory(prefix="tailfill-warmup-") as checkpoint:
        query = (session.readStream.format("tailfill_warmup").load().writeStream.foreachBatch(_batch)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
    session.stop()
    sys.exit(0)
