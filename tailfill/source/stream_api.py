"""Admission control of a Python streaming data source, where the Spark that runs it has it.

Spark 4.2 gives a Python stream reader its batch's start and read limit (``latestOffset(start, limit)``) and an
available-now trigger of its own (``SupportsTriggerAvailableNow``, in ``pyspark.sql.streaming.datasource``).
Spark 4.1, the Spark Tailfill runs (the newest with an Iceberg runtime), has neither: it asks ``latestOffset()``
alone, so the reader keeps the batch's start itself (:class:`~tailfill.source.spark_reader.KafkaStreamReader`)
and caps each batch with its own budget, as it does on 4.2. The names below are Spark's where it has them, and
stand-ins Spark never calls where it has not.
"""

from __future__ import annotations

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # Spark 4.1
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in: what a batch may read."""

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: all that is available."""

    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: at most ``max_rows``."""

        def __init__(self, max_rows: int):
            self.max_rows = max_rows

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: Spark 4.1 never calls ``prepareForTriggerAvailableNow`` of a Python source."""

        def prepareForTriggerAvailableNow(self) -> None:
            """Nothing: see the class."""

__all__ = ["ADMISSION_CONTROL", "ReadAllAvailable", "ReadLimit", "ReadMaxRows", "SupportsTriggerAvailableNow"]
