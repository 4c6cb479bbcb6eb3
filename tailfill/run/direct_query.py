"""A bounded request's batches planned here, on the driver, and run without a streaming query.

A backfill's slices and an available-now tail know where they end, so Spark's streaming engine gives them nothing
but its start: each query starts Python processes of its own (its source's runner and planners; over Spark
Connect, a ``foreachBatch`` worker on the server), writes a checkpoint and waits on its triggers: one to a few
seconds per query, more on a busy machine. :class:`DirectQuery` plans each batch with the source's own planning
(:class:`~tailfill.source.spark_reader.KafkaOptions`: the budget the pacer handed over, expired offsets refused,
ranges dealt to the tasks), makes a DataFrame of its ranges and calls the request's
:class:`~tailfill.run.batch.BatchHandler` with it, in a thread of its own. Over Spark Connect the handler runs in
the client: the ranges are prepared on the server's executors and committed from here.

To the poll loop (:mod:`tailfill.run.poll`) it is a streaming query (``awaitTermination``, ``status``, ``stop``,
``isActive``), so stops, cancels, stall checks and progress lines are the same; a failed attempt is raised by
``awaitTermination`` as :class:`DirectBatchFailed` for the restart loop, which starts the next attempt from the
same :class:`BatchCursor`: the batch that failed is planned again from where the last one committed (the ledger
skips whatever of it was committed already).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from tailfill.errors import BatchFailed, ErrorInfo
from tailfill.offsets import OffsetRange, PartitionOffsets
from tailfill.run.plan import IngestRequest
from tailfill.run.query_state import QueryState
from tailfill.run.restarts import Failure
from tailfill.run.spark_connect import is_connect, server_gone, server_went_away
from tailfill.source.spark_reader import KafkaOptions, batch_end, range_batch
from tailfill.values.schema import RANGE_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class DirectBatchFailed(Exception):
    """An attempt of a :class:`DirectQuery` failed; what failed, as data, is in the query state's ``failure``."""


class BatchCursor:
    """Where a request's next batch starts and its id: kept across the attempts of one request."""

    def __init__(self, start: PartitionOffsets, batch_id: int):
        self.start, self.batch_id = start, batch_id


def ranges_frame(spark: SparkSession, groups: list[list[OffsetRange]]) -> DataFrame:
    """A DataFrame of ``groups``' ranges (:data:`~tailfill.values.schema.RANGE_SCHEMA`), a Spark partition each."""
    from pyspark.sql.pandas.types import from_arrow_schema

    def emit(ids: object) -> object:
        for batch in ids:  # type: ignore[attr-defined]
            for group in batch.column(0).to_pylist():
                yield range_batch(groups[group])

    frame = spark.range(len(groups), numPartitions=len(groups))
    return frame.mapInArrow(emit, from_arrow_schema(RANGE_SCHEMA))


class DirectQuery:
    """The batches of one attempt of a bounded request, run in a thread until the request's end, a stop or a failure.

    ``handler``: the request's ``foreachBatch`` function; ``options``: its source's options (as a streaming query's
    ``tailfill_kafka`` would have them); ``cursor``: where this attempt starts, advanced after each batch.
    """

    def __init__(self, spark: SparkSession, req: IngestRequest, handler: Callable[[DataFrame, int], None],
                 options: dict[str, str], cursor: BatchCursor, state: QueryState):
        self.spark, self.req, self.handler, self.cursor, self.state = spark, req, handler, cursor, state
        self.opts = KafkaOptions(options, "ranges")
        self._tag = f"tailfill-batches-{uuid.uuid4().hex[:12]}"  # the Spark jobs of this attempt's batches
        self._stop = threading.Event()
        self._in_batch = False
        self._more = True
        self._failure: BaseException | None = None
        self._target: PartitionOffsets | None = None  # an available-now tail's end, once read
        self._thread = threading.Thread(target=self._run, name=f"batches-{req.name}", daemon=True)

    def start(self) -> DirectQuery:
        """Start the attempt's batches in their thread."""
        self._thread.start()
        return self

    @property
    def isActive(self) -> bool:  # StreamingQuery's name
        return self._thread.is_alive()

    @property
    def status(self) -> dict:
        """As a streaming query's: a batch in flight, data left to read, the step it is at."""
        return {"isTriggerActive": self._in_batch, "isDataAvailable": self._more and self.isActive,
                "message": self.state.step}

    def awaitTermination(self, timeout: float | None = None) -> bool:
        """Whether the attempt ended within ``timeout``; raises its failure when it failed (not when it was stopped):
        :class:`DirectBatchFailed`, or :class:`~tailfill.errors.ConnectServerError` when the server went away."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        failure, self._failure = self._failure, None
        if failure is None or self._stop.is_set():
            return True
        cause = failure.__context__ if isinstance(failure, BatchFailed) else failure
        if is_connect(self.spark) and cause is not None and server_gone(cause):
            raise server_went_away(self.req.label, cause, self.state.tally.offsets)
        raise DirectBatchFailed(str(failure)) from None  # the failure, as data, is the query state's

    def stop(self) -> None:
        """Stop at once, as a stopped query does: the batch in flight is interrupted, and replayed by the next run
        unless it was committing (a commit runs to its end). Returns when the attempt's thread has ended."""
        self._stop.set()
        if self._in_batch:
            with contextlib.suppress(Exception):  # a Spark that is gone has nothing left to interrupt
                self.spark.interruptTag(self._tag)
        self._thread.join()

    def _run(self) -> None:
        self.spark.addTag(self._tag)
        try:
            while not self._stop.is_set() and not self.state.stopping.is_set() and self._batch():
                pass  # once the query is being stopped, no batch starts: a stop between batches is one
        except BaseException as exc:  # for awaitTermination; what failed, as data, for the restart policy
            if self.state.failure is None:
                self.state.failure = Failure(ErrorInfo.of(exc), self.state.step)
            self._failure = exc
        finally:
            self._in_batch = False
            self.opts.consumer.close()
            with contextlib.suppress(Exception):
                self.spark.removeTag(self._tag)

    def _batch(self) -> bool:
        """Plan and run the next batch; False when there is nothing left to read."""
        cursor = self.cursor
        self.state.step = f"planning of batch {cursor.batch_id}"
        end = batch_end(cursor.start, self._end(), self.opts.budget())
        groups = [p.ranges for p in self.opts.input_partitions(cursor.start, end)]
        if not groups:
            self._more = False
            return False
        self._in_batch = True
        self.handler(ranges_frame(self.spark, groups), cursor.batch_id)
        self._in_batch = False
        cursor.start, cursor.batch_id = end, cursor.batch_id + 1
        return True

    def _end(self) -> PartitionOffsets:
        """The request's end: a backfill's bounds, or an available-now tail's, the broker's ends at this attempt's
        start (read once, as a streaming query reads them at its start)."""
        if self.req.end is not None:
            return self.req.end
        if self._target is None:
            self._target = self.opts.resolve(None, "ending")
        return self._target
