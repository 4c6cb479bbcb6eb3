"""A failed job explained in one line: what failed, the cause, the fix — then what was committed.

The job says what happened as data (:mod:`tailfill.run.contract`): each restart of a query is an
event carrying its error, and its result carries the error that stopped it, with the error's fix.
The JVM's stack traces and Spark's banner are output for the file, never read for a cause. The
full output goes to a file beside the run's batch reports, so the task log and the task's error
can start with the cause instead of the command line and ~200 lines of Java.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tailfill.errors import ErrorInfo, TailfillError
from tailfill.offsets import merge
from tailfill.redact import redact_text
from tailfill.run.contract import JobResult, Restarted, read_event
from tailfill.state.records import BatchReport

log = logging.getLogger(__name__)
# The job's own lines, worth the task log: its progress ("[label] ..."), its error, its events.
_OWN = re.compile(r"^(\[[^\]]+\] |error: |TAILFILL_RESULT |TAILFILL_RESTART |preflight |warning: )")
_RESUME = "then clear this task: it resumes at the first uncommitted offset"


@dataclass
class JobOutput:
    """What a job printed, sorted: its own lines, its restarts and its result (what a failure's cause is)."""

    own: list[str] = field(default_factory=list)
    restarts: list[Restarted] = field(default_factory=list)
    result: JobResult | None = None
    lines: int = 0

    def observe(self, line: str) -> bool:
        """Record one output line; True when it is one of the job's own lines (worth the task log)."""
        line = line.rstrip()
        self.lines += 1
        event = read_event(line)
        if isinstance(event, Restarted):
            self.restarts.append(event)
        elif isinstance(event, JobResult):
            self.result = event
        own = bool(_OWN.match(line))
        if own:
            self.own.append(line)
        return own

    @property
    def error(self) -> ErrorInfo | None:
        """What stopped the job: its result's error, else the cause of its last restart (a job killed while
        it restarted), else None (nothing the job said)."""
        if self.result is not None and self.result.error is not None:
            return self.result.error
        return self.restarts[-1].error if self.restarts else None

    @property
    def cause(self) -> str:
        error = self.error
        if error is None:
            return "no cause printed"
        return error.message if self.result is not None and self.result.error is error else str(error)


def restart_record(event: Restarted, try_number: int, at: float) -> dict:
    """One restart of a job's query as the lane record keeps it (its cause redacted, on one line)."""
    return {"try": try_number, "at": round(at, 3), "label": event.label, "failures": event.failures,
            "tolerated": event.tolerated, "step": event.step, "cause": " ".join(redact_text(str(event.error)).split()),
            "wait_seconds": event.wait_seconds}


def fix_for(error: ErrorInfo | None) -> str:
    """The fix to suggest for ``error``, unless its message already names one."""
    if error is None:
        return f"{TailfillError.fix}, {_RESUME}"
    if "(fix:" in error.message:
        return ""
    return f"{error.fix}, {_RESUME}" if error.then_resume else error.fix


def committed_summary(reports: list[BatchReport]) -> str:
    """What the run committed before it stopped: offsets, rows, batches and the ranges."""
    if not reports:
        return "committed before the failure: nothing (no batch of this run finished)"
    ranges = merge([r for b in reports for r in b.committed])
    offsets = sum(b.offsets for b in reports)
    rows = sum(b.rows for b in reports)
    quarantined = sum(b.quarantined for b in reports)
    shown = ", ".join(map(str, ranges[:8])) + (f" and {len(ranges) - 8} more" if len(ranges) > 8 else "")
    return (f"committed before the failure: {offsets:,} offsets ({rows:,} rows, {quarantined:,} quarantined) in "
            f"{len(reports)} batches, kept: {shown or 'only replays of committed batches'}")


def headline(what: str, output: JobOutput, returncode: int | str | None) -> str:
    """``<what> failed (exit N): <cause> (fix: …)`` — one line."""
    cause = " ".join(output.cause.split())
    fix = fix_for(output.error)
    return f"{what} failed (exit {returncode}): {cause}" + (f" (fix: {fix})" if fix else "")


FAILURE_KEY = "failure"  # the XCom of a failed try: what failed, the cause, the fix


def push_failure(ti: Any, what: str, error_class: str, cause: str, fix: str | None, retryable: bool) -> None:
    """A failed try's cause and fix as the task's ``failure`` XCom (for automation through the REST API)."""
    ti.xcom_push(key=FAILURE_KEY, value={"what": what, "error_class": error_class, "cause": cause, "fix": fix,
                                         "retryable": retryable, "try_number": getattr(ti, "try_number", None)})


@contextlib.contextmanager
def causes_first(what: str) -> Iterator[None]:
    """Around a worker-side task (preflight, plan, tune): a Tailfill error becomes one line, cause and
    fix first, not a traceback through the planner. One that cannot succeed on a retry (an unreachable
    broker, a bad setting, impossible bounds) fails the task at once; a retryable one lets Airflow retry."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    try:
        yield
    except TailfillError as exc:
        cause = redact_text(str(exc).splitlines()[0])
        line = f"{what} failed: {cause}"
        log.error(line)
        from airflow.sdk import get_current_context

        try:
            ti = get_current_context()["ti"]
        except RuntimeError:  # not in a task (a test, a script): the line is the whole report
            ti = None
        if ti is not None:
            push_failure(ti, what, type(exc).__name__, cause, None if "(fix:" in cause else exc.fix, exc.retryable)
        raise (AirflowException if exc.retryable else AirflowFailException)(line) from None
