"""Whether the live tail meets its freshness objective: the one verdict on a :class:`TailHealth`.

``tailfill status``, preflight, the incremental DAG's report, the Airflow pipeline page and a
backfill's governor all read it from :func:`tail_verdict`, so none of them can say "meets" while
another says "behind". The tail is *behind* when its last batch's measured p95 is above the
objective, or when the backlog it left would take longer than the objective to commit at the rate
the tail can take; it *meets* the objective only when neither is so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailfill.state.records import TailHealth

VerdictState = Literal["no batch yet", "meets", "behind", "caught up"]


def _secs(value: float) -> str:
    return f"{value:,.0f}s" if value >= 10 else f"{value:.1f}s"


@dataclass(frozen=True)
class TailVerdict:
    """The tail against its objective: a state and, when it is not met, the figures that say why."""

    state: VerdictState
    objective_seconds: float
    reasons: tuple[str, ...] = ()  # each with its figures: ``tail freshness p95 397s > objective 60s``
    backlog_late: bool = False  # one reason is the backlog (it names the backlog's size)

    @property
    def behind(self) -> bool:
        """The tail misses its objective now: what a backfill yields to."""
        return self.state == "behind"

    def asstr(self) -> str:
        """``meets the objective p95 ≤ 60s``, ``BEHIND the objective p95 ≤ 60s: …`` and so on."""
        objective = f"the objective p95 ≤ {self.objective_seconds:g}s"
        why = "; ".join(self.reasons)
        if self.state == "meets":
            return f"meets {objective}"
        if self.state == "behind":
            return f"BEHIND {objective}: {why}"
        if self.state == "caught up":
            return f"caught up (nothing left to read), but its last batch missed {objective}: {why}"
        return f"no batch measured yet against {objective}"


def drain_rate(health: TailHealth) -> float:
    """The most offsets/s the tail takes: its measured rate within its cap per trigger (the cap alone before a
    rate is measured)."""
    return health.capacity_per_s or health.max_offsets_per_batch / health.trigger_interval_seconds


def backlog_seconds(health: TailHealth) -> float | None:
    """How long the tail's backlog takes to commit at :func:`drain_rate`, or None without a backlog measured."""
    if health.backlog is None:
        return None
    rate = drain_rate(health)
    return health.backlog / rate if rate > 0 else float("inf")


def tail_verdict(health: TailHealth) -> TailVerdict:
    """The tail's state against its objective, from its last batch's p95 and the backlog it left."""
    objective = health.freshness_objective_seconds
    reasons = []
    if health.freshness is not None and health.freshness.p95 > objective:
        reasons.append(f"tail freshness p95 {_secs(health.freshness.p95)} > objective {objective:g}s")
    wait = backlog_seconds(health)
    if wait is not None and wait > objective:
        reasons.append(f"backlog {health.backlog:,} offsets takes ~{_secs(wait)} to commit at "
                       f"{drain_rate(health):,.0f} offsets/s > objective {objective:g}s")
    if health.freshness is None and not reasons:
        return TailVerdict("no batch yet", objective)  # nothing measured (or records without timestamps)
    if not reasons:
        return TailVerdict("meets", objective)
    state: VerdictState = "caught up" if health.backlog == 0 else "behind"
    return TailVerdict(state, objective, tuple(reasons), backlog_late=wait is not None and wait > objective)
