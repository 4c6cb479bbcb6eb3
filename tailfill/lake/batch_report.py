"""What each committed micro-batch did, one JSON line per batch, in one runs folder.

``$TAILFILL_HOME/runs/<pipeline>/<run id>/<query>.jsonl`` — written by the sink's commit on the
driver, read by the progress lines, the run's summary and the throughput tuning.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tailfill.config import tailfill_home
from tailfill.durable import append_line, complete_lines
from tailfill.offsets import OffsetRange, ranges_from_json, ranges_to_json


@dataclass(frozen=True)
class BatchReport:
    """One micro-batch: its offsets, what became rows or quarantine, what the commit did, how long it took."""

    batch_id: int
    at: float  # when the commit finished (unix seconds)
    seconds: float  # from the batch's trigger (or the previous batch's end) to the end of this commit
    offsets: int
    records: int  # what the source read (offsets minus absent or expired ones)
    rows: int
    quarantined: int
    committed: list[OffsetRange] = field(default_factory=list)
    skipped: list[OffsetRange] = field(default_factory=list)  # already committed (a replay)
    snapshot_id: int | None = None
    commit_ms: float = 0.0
    # Where the time went: plan (Spark, between batches), prepare (wall), read/parse/write (summed
    # over the batch's tasks, which run in parallel), commit; yield: a backfill's wait for its rate
    # limit or the tail, after the commit.
    stages: dict[str, float] = field(default_factory=dict)
    # Produce-to-commit latency of the batch's records (p50, p95, max seconds; records): Kafka
    # timestamp to this commit. The tail's freshness; for a backfill, how old the history is.
    freshness: dict | None = None

    def to_json(self) -> str:
        data = asdict(self)
        data["committed"], data["skipped"] = ranges_to_json(self.committed), ranges_to_json(self.skipped)
        return json.dumps(data)

    @classmethod
    def from_json(cls, line: str) -> BatchReport:
        data = json.loads(line)
        data["committed"], data["skipped"] = ranges_from_json(data["committed"]), ranges_from_json(data["skipped"])
        return cls(**data)


def format_stages(stages: dict[str, float]) -> str:
    """``plan 0.6s, prepare 1.2s, …``: where a batch's (or a run's) time went."""
    return ", ".join(f"{k} {v:.1f}s" for k, v in stages.items())


def runs_dir(pipeline: str) -> Path:
    """Where a pipeline's batch reports live: one folder per run."""
    return tailfill_home() / "runs" / pipeline


def report_file(pipeline: str, run_id: str, query: str) -> Path:
    """The report file of one query of one run (a backfill run has one query per slice)."""
    return runs_dir(pipeline) / run_id / f"{query}.jsonl"


def append_report(path: Path, report: BatchReport) -> None:
    append_line(path, report.to_json())


def read_reports(path: Path) -> list[BatchReport]:
    """The batch reports in ``path``, oldest first (none if it does not exist yet).

    A line still being written (no newline yet) is not a report yet; a line torn by a killed writer
    (ended by the next append, see :func:`tailfill.durable.append_line`) is not a report at all.
    """
    out = []
    for line in complete_lines(path):
        try:
            out.append(BatchReport.from_json(line))
        except (ValueError, TypeError, KeyError):
            continue  # torn by a kill: the ledger, not this telemetry, holds what was committed
    return out


def recent_reports(pipeline: str, files: int) -> list[BatchReport]:
    """The batch reports of the ``files`` most recently written report files of a pipeline."""
    folder = runs_dir(pipeline)
    if not folder.is_dir():
        return []
    paths = sorted(folder.glob("*/*.jsonl"), key=lambda p: p.stat().st_mtime)[-files:]
    return [r for p in paths for r in read_reports(p)]
