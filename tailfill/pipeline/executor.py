"""An executor's context: what a Python worker needs to prepare a pipeline's ranges, built once and owned here.

The driver ships the pipeline's config with its addresses resolved (:attr:`Pipeline.shipped
<tailfill.pipeline.handle.Pipeline.shipped>`). Each Python worker Spark starts — and reuses for the
next tasks (``spark.python.worker.reuse``) — builds an :class:`ExecutorContext` from it the first time
a task needs one: a Kafka consumer, the format's decoder (with its Schema Registry client and the
writer schemas it has read), the warehouse's filesystem. The contexts of a process are closed by
:func:`close_contexts` (at exit too).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterator, Sequence

import pyarrow as pa

from tailfill.config import PipelineConfig
from tailfill.formats.registry import pipeline_format
from tailfill.formats.schema_registry import RegistryClient
from tailfill.lake.prepare import Destination, PreparedRange, prepare_ranges
from tailfill.offsets import OffsetRange
from tailfill.plumbing.warehouse import filesystem
from tailfill.source.kafka import OwnedConsumer, consumer_config, read_ranges
from tailfill.source.read_counts import ReadCounter

CONNECT_TIMEOUT_S = 10.0


class ExecutorContext:
    """One pipeline's consumer, decoder and filesystem in one Python worker."""

    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg
        self.fs = filesystem(cfg.target)
        self.consumer = OwnedConsumer(consumer_config(cfg.source))
        registry = cfg.format.schema_registry
        self.decoder = pipeline_format(cfg, RegistryClient(registry) if registry is not None else None).decoder()

    def read(self, ranges: list[OffsetRange]) -> Iterator[pa.RecordBatch]:
        """The records of ``ranges`` with this worker's consumer, then a marker per range."""
        return read_ranges(self.consumer.conf, ranges, on_expired=self.cfg.source.on_expired_offsets,
                           consumer=self.consumer)

    def prepare(self, run_id: str, ranges: Sequence[OffsetRange], data_location: str, quarantine_location: str,
                table_columns: pa.Schema | None, counter: ReadCounter | None = None) -> list[PreparedRange]:
        """Read, decode and write ``ranges`` (see :func:`~tailfill.lake.prepare.prepare_ranges`); ``counter``
        counts the records read as they come (progress within the batch)."""
        where = Destination(self.fs, data_location, quarantine_location, self.cfg.target.partition_by)
        read = self.read if counter is None else lambda todo: counter.counted(self.read(todo))
        return prepare_ranges(read, self.decoder, where, run_id, ranges, table_columns)

    def warm(self) -> None:
        """Connect the consumer now (the decoder is built already), before the first batch needs it."""
        self.consumer.get().list_topics(self.cfg.source.topic, timeout=CONNECT_TIMEOUT_S)  # None: every topic's

    def close(self) -> None:
        self.consumer.close()


_CONTEXTS: dict[str, ExecutorContext] = {}  # by the shipped config: one per pipeline in this worker
_LOCK = threading.Lock()


def executor_context(shipped: str) -> ExecutorContext:
    """This worker's context for the pipeline ``shipped`` describes (its resolved config as JSON), built once."""
    with _LOCK:
        context = _CONTEXTS.get(shipped)
        if context is None:
            if not _CONTEXTS:
                atexit.register(close_contexts)
            context = _CONTEXTS[shipped] = ExecutorContext(PipelineConfig.from_json(shipped))
        return context


def close_contexts() -> None:
    """Close every context of this process (before its broker goes away, or at exit)."""
    with _LOCK:
        contexts = list(_CONTEXTS.values())
        _CONTEXTS.clear()
    for context in contexts:
        context.close()
