"""Per-partition status of a pipeline: committed ranges, gaps, cutover, broker end, lag."""

from __future__ import annotations

from dataclasses import dataclass

from tailfill.offsets import OffsetRange, TopicPartition, by_partition, gaps, total
from tailfill.run.plan import SourceState


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
    lines.append(
        f"committed offsets: {sum(total(r.committed) for r in rows):,}   quarantined rows: {quarantined:,}   "
        f"lag: {sum(r.lag for r in rows):,}   gaps: {len(all_gaps)}"
        + (f"   lost (expired, recorded): {total(lost):,}" if lost else "")
    )
    return "\n".join(lines)
