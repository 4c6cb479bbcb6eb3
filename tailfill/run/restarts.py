"""When a failed query is started again, and when the run gives up instead: a pure policy.

A streaming query that fails is restarted from its checkpoint (its planned batch is replayed with the
same offsets), after a wait that doubles with every consecutive failure. A failure whose error says no
restart can help (:attr:`~tailfill.errors.ErrorInfo.retryable` false: expired offsets, a bad setting, a
dropped record) stops the run at once. Failed attempts that commit no batch of this run count against
the pipeline's budget (``max_consecutive_failures``); past it the run stops, naming the step the
attempts failed at (no endless restart loop). One that committed a batch starts the count again.

The infrastructure around the work failing (:attr:`~tailfill.errors.ErrorInfo.infrastructure`) says
nothing of the batch: Spark's own machinery (a Python worker that could not connect back to its executor,
the machine too busy to start one in time), a broker answering no request
(:class:`~tailfill.errors.BrokerUnresponsive`) or a catalog that cannot be reached at commit
(:class:`~tailfill.errors.CatalogUnreachable`). Such failures have one allowance and a longer backoff of
their own, and leave the batch's budget alone; past it, they count as the batch's. The allowance is the
run's until it commits again: a batch-level failure in between does not give it back.

Whatever the kind, a run keeps trying for at most ``retry_ceiling_seconds`` after its first failure since
it last committed: no restart waits past the ceiling, and the first failure at or past it stops the run,
saying how long it tried.

Everything here is values in, a decision out: the time of each failure is given (``now``), never read, and
nothing sleeps or touches Spark (tested as the governor is).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tailfill.config import RETRY_CEILING_SECONDS
from tailfill.errors import ErrorInfo

MAX_BACKOFF_S = 60.0  # the longest wait before a restart, however many failures came before
INFRASTRUCTURE_ATTEMPTS = 5  # in a row, on top of the batch's budget
INFRASTRUCTURE_BACKOFF_S = 15.0  # the first wait; doubled per infrastructure failure in a row (at most 120 s)
INFRASTRUCTURE_MAX_BACKOFF_S = 120.0
PLANNING = "planning a batch (the source, reading offsets on the driver)"


@dataclass(frozen=True)
class Failure:
    """One failed attempt of a query: what failed, at which step, and whether it committed a batch first."""

    error: ErrorInfo
    step: str = PLANNING
    advanced: bool = False  # the attempt committed at least one batch of this run before it failed


@dataclass(frozen=True)
class Decision:
    """What to do after a failure: restart after ``wait_seconds``, or stop (``stop`` says why, in one line)."""

    failures: int  # failed attempts in a row (of the kind that failed now)
    tolerated: int
    wait_seconds: float = 0.0
    stop: str | None = None


@dataclass(frozen=True)
class RestartPolicy:
    """The restart budget of one query (``max_consecutive_failures``, ``restart_backoff_seconds``,
    ``retry_ceiling_seconds``)."""

    tolerated: int
    backoff_seconds: float
    ceiling_seconds: float = RETRY_CEILING_SECONDS

    def start(self) -> Restarts:
        return Restarts(self)


@dataclass(frozen=True)
class Restarts:
    """A query's failures since it last made progress, and the policy that judges them."""

    policy: RestartPolicy
    failures: tuple[Failure, ...] = ()  # batch failures in a row: they count against the budget
    infrastructure: int = 0  # infrastructure failures since the last commit: one allowance, never given back
    since: float | None = None  # when the first failure since the last commit was seen (None: none yet)

    def after(self, failure: Failure, now: float = 0.0) -> tuple[Restarts, Decision]:
        """The state after ``failure``, seen at ``now`` (seconds, any monotonic clock), and what to do about it."""
        if not failure.error.retryable:
            return self, Decision(len(self.failures) + 1, self.policy.tolerated, stop=f"{failure.error}")
        if failure.advanced:  # the attempt committed a batch of this run: it does not count, the count starts again
            return (Restarts(self.policy, since=now),
                    Decision(0, self.policy.tolerated, min(self.policy.backoff_seconds, self.policy.ceiling_seconds)))
        state, decision = replace(self, since=now if self.since is None else self.since)._budget(failure)
        if decision.stop is not None:
            return state, decision
        tried = now - (state.since or 0.0)
        left = self.policy.ceiling_seconds - tried
        if left <= 0:
            return state, replace(decision, wait_seconds=0.0, stop=(
                f"gave up after {tried:.0f}s of failed attempts without committing any offset "
                f"(retry_ceiling_seconds: {self.policy.ceiling_seconds:g}; {state.attempts} attempts failed); "
                f"last cause: {failure.error}"))
        return state, replace(decision, wait_seconds=min(decision.wait_seconds, left))

    @property
    def attempts(self) -> int:
        """Failed attempts since the last commit, of either kind."""
        return len(self.failures) + self.infrastructure

    def _budget(self, failure: Failure) -> tuple[Restarts, Decision]:
        """The budgets' say on a retryable failure that committed nothing (the ceiling aside)."""
        if failure.error.infrastructure and self.infrastructure < INFRASTRUCTURE_ATTEMPTS:
            n = self.infrastructure + 1
            wait = min(INFRASTRUCTURE_BACKOFF_S * 2 ** (n - 1), INFRASTRUCTURE_MAX_BACKOFF_S)
            return replace(self, infrastructure=n), Decision(n, INFRASTRUCTURE_ATTEMPTS, wait)
        now = replace(self, failures=(*self.failures, failure))
        n, tolerated = len(now.failures), self.policy.tolerated
        if n > tolerated:
            steps = [f.step for f in now.failures]
            where = (f"each at the same step: {steps[-1]}" if len(set(steps)) == 1
                     else "at: " + "; ".join(dict.fromkeys(steps)))
            return now, Decision(n, tolerated, stop=(
                f"{n} consecutive failed attempts without committing any offset (tolerated: {tolerated}), "
                f"{where}; last cause: {failure.error}"))
        return now, Decision(n, tolerated, min(self.policy.backoff_seconds * 2 ** (n - 1), MAX_BACKOFF_S))
