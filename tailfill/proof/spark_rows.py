"""A table's rows within offset windows as a Spark DataFrame (for Great Expectations' Spark datasource)."""

from __future__ import annotations

from pyiceberg.table import Table
from pyspark.sql import DataFrame, SparkSession

from tailfill.offsets import OffsetRange, merge
from tailfill.proof.audit import range_filter


def spark_filter(windows: list[OffsetRange]) -> str:
    """The same selection as a Spark SQL predicate."""
    terms = [f"(kafka_partition = {r.partition} AND kafka_offset >= {r.start} AND kafka_offset < {r.end})"
             for r in merge(windows)]
    return " OR ".join(terms) or "false"


def rows_dataframe(spark: SparkSession, table: Table, windows: list[OffsetRange]) -> DataFrame:
    """The table's rows within ``windows`` as a Spark DataFrame.

    Local data files without delete files are read by Spark directly; anything else (S3, which
    Spark cannot read here without hadoop-aws, or files with deletes) goes through pyiceberg.
    """
    table.refresh()
    scan = table.scan(row_filter=range_filter(windows))
    tasks = list(scan.plan_files())
    local = all(t.file.file_path.startswith("file://") and not t.delete_files for t in tasks)
    if tasks and local:
        return spark.read.parquet(*[t.file.file_path for t in tasks]).where(spark_filter(windows))
    arrow = scan.to_arrow()
    return spark.createDataFrame(arrow) if arrow.num_rows else spark.createDataFrame([], _spark_schema(table))


def _spark_schema(table: Table):
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema_to_pyarrow(table.schema(), include_field_ids=False))
