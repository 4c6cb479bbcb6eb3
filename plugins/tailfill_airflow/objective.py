"""The tail's freshness objective, checked on a run's batches: met, or missed with the numbers, the measured
cause and its fix.

The objective is the pipeline's ``tail.freshness_seconds`` (p95 produce-to-commit latency of a batch's
records). A run misses it when any of its batches' p95 is above it; ``tail.on_missed_objective`` says
whether that fails the incremental run's ``objective`` task (the default) or warns (the run's tab, its
report, the alerting hook). A miss is put down to what the run measured, first match wins:

- **outage**: the job restarted its query, or the task was tried again (a part failed: the broker, the
  catalog, Spark), so records waited while it was down;
- **slow batch**: a batch that missed took longer itself than the objective;
- **backlog**: the run's first batch met the objective and later ones missed it (records waited behind the
  run's earlier batches);
- **schedule**: the first batch missed it already: its records waited for the run to start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from tailfill.state.records import BatchReport


@dataclass(frozen=True)
class ObjectiveCheck:
    """A run's batches against the freshness objective: how many were measured, how many missed, the worst p95,
    and of a miss the measured cause and its fix."""

    objective_seconds: float
    batches: int  # batches with a measured freshness
    missed: int
    worst_p95: float | None
    cause: str | None = None
    fix: str | None = None

    @property
    def met(self) -> bool:
        return self.missed == 0

    def asdict(self) -> dict:
        return asdict(self) | {"met": self.met}

    def asstr(self) -> str:
        objective = f"p95 ≤ {self.objective_seconds:g}s"
        if not self.batches:
            return f"freshness objective {objective}: no batch measured in this run"
        worst = f"worst batch p95 {self.worst_p95:,.1f}s"
        if self.met:
            return f"freshness objective {objective}: met by all {self.batches} batch(es) ({worst})"
        return (f"freshness objective {objective} MISSED by {self.missed} of {self.batches} batch(es) ({worst}): "
                f"{self.cause} (fix: {self.fix})")


def check_objective(objective_seconds: float, reports: list[BatchReport], restarts: Sequence[dict] = (),
                    tries: int = 1) -> ObjectiveCheck:
    """``reports`` (a run's batches) against the objective; ``restarts`` (the lane record's restarts of the job's
    query, every try's) and ``tries`` (the tail task's tries) tell an outage from the rest."""
    measured = sorted((r for r in reports if r.freshness), key=lambda r: (r.at, r.batch_id))
    late = [r for r in measured if r.freshness["p95"] > objective_seconds]
    worst = max((r.freshness["p95"] for r in measured), default=None)
    check = ObjectiveCheck(objective_seconds, len(measured), len(late), worst)
    if not late:
        return check
    cause, fix = missed_cause(objective_seconds, measured, late, restarts, tries)
    return ObjectiveCheck(objective_seconds, len(measured), len(late), worst, cause, fix)


def missed_cause(objective_seconds: float, measured: list[BatchReport], late: list[BatchReport],
                 restarts: Sequence[dict], tries: int) -> tuple[str, str]:
    """Why batches missed the objective, from what the run measured, and the fix: (cause, fix)."""
    if restarts or tries > 1:
        last = " ".join(str(restarts[-1].get("cause") or "").split())[:300] if restarts else ""
        said = f"the job restarted its query {len(restarts)} time(s)" if restarts else ""
        tried = f"the task ran {tries} tries" if tries > 1 else ""
        return (f"outage: {' and '.join(filter(None, (said, tried)))} in this run"
                + (f" (last cause: {last})" if last else ""),
                "the restarts on the run's Tailfill tab name the part that failed; once it works, the next runs "
                "catch up and meet the objective again")
    slow = max(late, key=lambda r: r.seconds)
    if slow.seconds > objective_seconds:
        return (f"slow batch: batch {slow.batch_id} took {slow.seconds:,.1f}s itself, longer than the objective",
                "smaller batches (tail.max_offsets_per_batch) or more Spark resources for the tail")
    if late[0] is not measured[0]:
        ahead = measured.index(late[0])
        return (f"backlog: the run's first {ahead} batch(es) met it, then records waited behind them "
                f"({sum(r.offsets for r in measured):,} offsets in {len(measured)} batches)",
                "larger batches (tail.max_offsets_per_batch) or more Spark resources, so a run catches up in fewer "
                "batches; or run the incremental DAG more often, so less waits for each run")
    return (f"schedule: the run's first batch missed it already (p95 {measured[0].freshness['p95']:,.1f}s): its "
            "records waited for the run to start",
            f"run the incremental DAG more often than every {objective_seconds:g}s, or set tail.freshness_seconds "
            "to what its schedule allows")
