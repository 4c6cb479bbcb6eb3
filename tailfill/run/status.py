"""Per-partition status of a pipeline: committed ranges, gaps, cutover, broker end, lag."""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table import Table

from tailfill.lake.keyed import MergeCounts, applied_ranges, live_rows, merges_by_run, state_counts
from tailfill.lake.ledger import read_ledger
from tailfill.offsets import OffsetRange, TopicPartition, by_partition, gaps, subtract, total
from tailfill.run.plan import SourceState
from tailfill.state.store import StateStore, run_ids, run_queries, run_reports
from tailfill.values.drift import describe, unknown_in


@dataclass(frozen=True)
class PartitionStatus:
    tp: TopicPartition
    earliest: int
    high: int
    cutover: int | None
    committed: list[OffsetRange]
    gaps: list[OffsetRange]
    lost: list[OffsetRange]

    @property
    def lag(self) -> int:
        return max(self.high - (self.committed[-1].end if self.committed else self.earliest), 0)


def pipeline_status(state: SourceState) -> list[PartitionStatus]:
    committed = by_partition(state.ledger.committed)
    lost = by_partition(state.ledger.lost)
    out = []
    for tp in state.marks.high:
        ranges = committed.get(tp, [])
        span = [OffsetRange.of(tp, ranges[0].start, ranges[-1].end)] if ranges else []
        out.append(
            PartitionStatus(
                tp=tp,
                earliest=state.marks.low[tp],
                high=state.marks.high[tp],
                cutover=state.cutover.get(tp) if state.cutover else None,
                committed=ranges,
                gaps=gaps(ranges, span),
                lost=lost.get(tp, []),
            )
        )
    return out


def quarantined_rows(state: SourceState) -> int:
    """Rows in the quarantine table, from its current snapshot's totals (no data read; they survive
    snapshot expiry); 0 when the tables were never made."""
    if state.tables is None:
        return 0
    current = state.tables.quarantine.current_snapshot()
    summary = current.summary.additional_properties if current and current.summary else {}
    return int(summary.get("total-records", 0))


def unknown_fields_line(store: StateStore) -> str:
    """``fields not declared, latest run <id>: org (40 records, first at 0:12)`` (or ``none``), from the batch
    reports of the run written to last."""
    latest = max(((at, log) for run in run_ids(store) for log in run_queries(store, run)
                  if (at := log.last_at()) is not None), default=None, key=lambda x: x[0])
    if latest is None:
        return "fields not declared: no run yet"
    run_id = latest[1].run_id
    unknown = unknown_in(r.unknown_fields for r in run_reports(store, run_id))
    return f"fields not declared, latest run {run_id}: {describe(unknown) if unknown else 'none'}"


def _fmt_ranges(ranges: list[OffsetRange]) -> str:
    return " ".join(f"[{r.start},{r.end})" for r in ranges) or "-"


def format_status(name: str, rows: list[PartitionStatus], quarantined: int) -> str:
    """The one-screen status table."""
    header = f"{'partition':<24} {'committed':<22} {'gaps':<14} {'cutover':>9} {'earliest':>9} {'high':>9} {'lag':>7}"
    lines = [f"pipeline {name}", header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r.tp!s:<24} {_fmt_ranges(r.committed):<22} {_fmt_ranges(r.gaps):<14} "
            f"{r.cutover if r.cutover is not None else '-':>9} {r.earliest:>9} {r.high:>9} {r.lag:>7}"
        )
    all_gaps = [g for r in rows for g in r.gaps]
    lost = [g for r in rows for g in r.lost]
    lines.append("-" * len(header))
    lines += topic_lines(rows)
    lines.append(
        f"committed offsets: {sum(total(r.committed) for r in rows):,}   quarantined rows: {quarantined:,}   "
        f"lag: {sum(r.lag for r in rows):,}   gaps: {len(all_gaps)}"
        + (f"   lost (expired, recorded): {total(lost):,}" if lost else "")
    )
    return "\n".join(lines)


def topic_lines(rows: list[PartitionStatus]) -> list[str]:
    """One summary line per topic when the rows are of several (``topic shop.orders: 4 partitions, committed
    1,200, lag 0``); none for one topic."""
    topics = sorted({r.tp.topic for r in rows})
    if len(topics) < 2:
        return []
    out = []
    for topic in topics:
        mine = [r for r in rows if r.tp.topic == topic]
        out.append(f"topic {topic}: {len(mine)} partition{'s' * (len(mine) != 1)}, committed "
                   f"{sum(total(r.committed) for r in mine):,}, lag {sum(r.lag for r in mine):,}")
    return out


def keyed_status(changes: Table, state: Table, key: tuple[str, ...]) -> list[str]:
    """A keyed pipeline's state table: its key, live rows, how far it is behind the change log, what its merges did
    in all and in the latest run (from snapshot summaries and properties; no data read)."""
    live = live_rows(state)
    lag = subtract(read_ledger(changes).committed, applied_ranges(state))
    counts = state_counts(state)
    runs = merges_by_run(state)
    lines = [f"state table {'.'.join(state.name())} keyed by {list(key)}: {live:,} live rows; "
             f"{'up to date with the change log' if not lag else f'{total(lag):,} offsets behind the change log'}",
             f"  all merges: {counts.changes:,} changes = {counts.inserted:,} inserted + {counts.updated:,} updated + "
             f"{counts.deleted:,} deleted + {_truncated(counts, ' + ')}{counts.superseded:,} superseded"]
    if runs:
        run_id, c = list(runs.items())[-1]
        lines.append(f"  latest run {run_id}: {c.inserted:,} inserted, {c.updated:,} updated, "
                     f"{c.deleted:,} deleted, {_truncated(c, ', ')}{c.superseded:,} superseded")
    return lines


def _truncated(counts: MergeCounts, sep: str) -> str:
    """The truncates applied, as a term of the outcomes (nothing when none was)."""
    return f"{counts.truncated:,} truncated{sep}" if counts.truncated else ""
