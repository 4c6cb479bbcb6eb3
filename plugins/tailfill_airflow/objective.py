"""The tail's freshness objective, checked on a run's batches: met, or missed with the numbers and the fix.

The objective is the pipeline's ``tail.freshness_seconds`` (p95 produce-to-commit latency of a batch's
records). A run misses it when any of its batches' p95 is above it; ``tail.on_missed_objective`` says
whether that warns (the run's tab, its report, the alerting hook) or fails the run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tailfill.state.records import BatchReport


@dataclass(frozen=True)
class ObjectiveCheck:
    """A run's batches against the freshness objective: how many were measured, how many missed, the worst p95."""

    objective_seconds: float
    batches: int  # batches with a measured freshness
    missed: int
    worst_p95: float | None

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
        return (f"freshness objective {objective} MISSED by {self.missed} of {self.batches} batch(es) ({worst}) "
                f"(fix: run the incremental DAG more often than every {self.objective_seconds:g}s, or set "
                "tail.freshness_seconds to what its schedule allows)")


def check_objective(objective_seconds: float, reports: list[BatchReport]) -> ObjectiveCheck:
    """``reports`` (a run's batches) against the objective."""
    p95s = [r.freshness["p95"] for r in reports if r.freshness]
    return ObjectiveCheck(objective_seconds, len(p95s), sum(p > objective_seconds for p in p95s),
                          max(p95s) if p95s else None)
