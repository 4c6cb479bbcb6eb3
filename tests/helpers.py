"""Assertions and runners shared by the integration tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from tailfill.config import PipelineConfig
from tailfill.lake.tables import ensure_tables
from tailfill.offsets import PartitionOffsets
from tailfill.run.submit import IngestResult, JobSpec, backfill_spec, new_run_id


def ingested(cfg: PipelineConfig) -> tuple[Counter, Counter]:
    """(partition, offset) counts in the data table and in the quarantine table."""
    data, quarantine = ensure_tables(cfg)
    counts = []
    for table in (data, quarantine):
        table.refresh()
        arrow = table.scan(selected_fields=("kafka_partition", "kafka_offset")).to_arrow()
        counts.append(Counter(zip(arrow["kafka_partition"].to_pylist(), arrow["kafka_offset"].to_pylist(),
                                  strict=True)))
    return counts[0], counts[1]


def assert_exactly_once(cfg: PipelineConfig, high: dict[int, int]) -> tuple[Counter, Counter]:
    """Every offset ``[0, high[p])`` of every partition is in data or quarantine exactly once."""
    rows, bad = ingested(cfg)
    both = rows + bad
    dupes = sorted(k for k, n in both.items() if n > 1)
    overlap = sorted(set(rows) & set(bad))
    expected = {(p, o) for p, h in high.items() for o in range(h)}
    missing = sorted(expected - set(both))
    extra = sorted(set(both) - expected)
    assert not dupes, f"duplicated offsets: {dupes[:10]}"
    assert not overlap, f"offsets both stored and quarantined: {overlap[:10]}"
    assert not missing, f"{len(missing)} missing offsets, first {missing[:10]}"
    assert not extra, f"unexpected offsets: {extra[:10]}"
    return rows, bad


def high_watermarks(cfg: PipelineConfig) -> dict[int, int]:
    from tailfill.source.kafka import consumer_config, list_partitions, watermarks

    conf = consumer_config(cfg.source)
    marks = watermarks(conf, list_partitions(conf, cfg.source.topic))
    return {tp.partition: marks.high[tp] for tp in marks.high}


def backfill(spark, cfg: PipelineConfig, start: dict | None = None, end: dict | None = None,
             slices: int | None = None) -> list[IngestResult]:
    """Plan a backfill as ``tailfill backfill`` does and run the job in-process on the shared session."""
    from tailfill.run.spark_job import run

    spec = backfill_spec(cfg, start and PartitionOffsets.from_dict(start), end and PartitionOffsets.from_dict(end),
                         slices)
    return [] if spec is None else run(spec, spark)


def tail(spark, cfg: PipelineConfig, once: bool = True, stop_after: float | None = None) -> list[IngestResult]:
    """Run the tail job in-process on the shared session (same code as spark_jobs/ingest.py)."""
    from tailfill.run.spark_job import run

    return run(JobSpec(cfg.path, "tail", new_run_id("tail"), once=once, stop_after_seconds=stop_after), spark)


def processes_with(marker: str) -> list[int]:
    """PIDs whose environment contains ``marker`` (our fault dir): the whole job tree."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "environ").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def kill_job_tree(proc: subprocess.Popen, marker: str) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        for pid in left:  # a worker that left the process group still dies with the job
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    assert not processes_with(marker), "processes of the killed job are still running"
