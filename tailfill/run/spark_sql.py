"""``tailfill sql``: Spark SQL against a pipeline's Iceberg catalog, one statement or a small shell.

The session is a local one with Tailfill's settings (:func:`~tailfill.run.spark_session.get_session`), the
pipeline's catalog current (:func:`~tailfill.run.spark_session.use_catalog`); results print as a text table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

from pyspark.errors import PySparkException
from pyspark.logger import PySparkLogger
from pyspark.sql import SparkSession

from tailfill.config import TargetConfig
from tailfill.run.overview import format_rows
from tailfill.run.spark_session import get_session, use_catalog

CELL_WIDTH = 120  # a value longer than this is cut (a snapshot's summary, say)
PROMPT = "spark-sql> "
MORE = "        -> "
# pyspark's loggers that print a failed statement's error, with the JVM's stack, as JSON on stderr by themselves.
QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def sql_session(target: TargetConfig) -> SparkSession:
    """A local Spark session whose current catalog is the pipeline's (in its namespace once it exists)."""
    spark = get_session(app_name="tailfill-sql")
    use_catalog(spark, target)
    for name in QUERY_CONTEXT_LOGGERS:  # their records go where the command's own log records go
        logger = PySparkLogger.getLogger(name)  # made as pyspark makes it (a plain Logger would fail its calls)
        logger.handlers.clear()
        logger.handlers.append(_ToRootLogger())
    return spark


class _ToRootLogger(logging.Handler):
    """Hands a record to the root logger's handlers (the command's log), where pyspark's loggers do not."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger().handle(record)


def run_statement(spark: SparkSession, statement: str) -> str:
    """Run one statement; its rows as a text table (a statement without rows: ``(0 rows)``)."""
    return format_rows(spark.sql(statement).toArrow(), CELL_WIDTH)


def statements(lines: Iterable[str], prompt: Callable[[str], None]) -> Iterator[str]:
    """The statements of ``lines``, each ended by ``;`` at a line's end (a statement left open at the end is
    one too); ``prompt`` is told which prompt goes before each line."""
    held: list[str] = []
    prompt(PROMPT)
    for line in lines:
        held.append(line.rstrip("\n"))
        if held[-1].rstrip().endswith(";"):
            text = "\n".join(held).rstrip().rstrip(";").strip()
            held = []
            if text:
                yield text
        prompt(MORE if held and "".join(held).strip() else PROMPT)
    text = "\n".join(held).strip()
    if text:
        yield text


def shell(spark: SparkSession, lines: Iterable[str], say: Callable[[str], None],
          prompt: Callable[[str], None]) -> int:
    """Run each statement of ``lines`` (:func:`statements`), printing its result or its error and going on; the
    number of statements that failed."""
    failed = 0
    for text in statements(lines, prompt):
        try:
            say(run_statement(spark, text))
        except PySparkException as exc:
            failed += 1
            say(f"error: {first_line(exc)}")
    return failed


def first_line(exc: BaseException) -> str:
    """A Spark error's first line: its class and message, without the JVM's stack."""
    return next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
