"""A failed ``spark-submit`` explained in one line: what failed, where, the fix — then what was committed.

The job's own lines (``error: …`` on exit, ``[lane] batch failed …`` on a restart, a Python
exception's last line) name the cause; the JVM's stack traces and Spark's banner do not. The full
output goes to a file beside the run's batch reports, so the task log and the task's error can
start with the cause instead of the command line and ~200 lines of Java.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from tailfill.errors import BrokerError, ConfigError, ExpiredOffsetsError, LakeError, TailfillError, error_class
from tailfill.offsets import merge
from tailfill.redact import redact_text
from tailfill.state.records import BatchReport

log = logging.getLogger(__name__)
_JOB_ERROR = re.compile(r"^error: (.+)$")
_RESTART = re.compile(r"^\[[^\]]+\] batch failed .*$")
_PY_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt)): (.+)$")
_OWN = re.compile(r"^(\[[^\]]+\] |error: |TAILFILL_RESULT |preflight |warning: )")

# A Tailfill error carries its own fix (``tailfill.errors``); a cause from elsewhere (Kafka, the JVM,
# the storage) gets the fix of the error class it amounts to, by what it names. The first match wins.
_CLASS_NAME = re.compile(r"\b([A-Z]\w*(?:Error|Fault))\b")
_OOM_FIX = "lower the batch cap (max_offsets_per_batch) or give the driver more memory"
FOREIGN: tuple[tuple[re.Pattern, type[TailfillError] | str], ...] = (
    (re.compile(r"ALL_BROKERS_DOWN|TRANSPORT|Connection refused|broker", re.I), BrokerError),
    (re.compile(r"retention|OFFSET_OUT_OF_RANGE", re.I), ExpiredOffsetsError),
    (re.compile(r"config", re.I), ConfigError),
    (re.compile(r"catalog|S3|NoSuchBucket|AccessDenied", re.I), LakeError),
    (re.compile(r"OutOfMemory|Java heap|memory", re.I), _OOM_FIX),
)
_RESUME = "then clear this task: it resumes at the first uncommitted offset"


@dataclass
class JobOutput:
    """What a ``spark-submit`` printed, sorted: the job's own lines and the cause of a failure."""

    own: list[str] = field(default_factory=list)
    restarts: list[str] = field(default_factory=list)
    error: str | None = None  # the job's ``error: …`` line (its deliberate exit)
    python_error: str | None = None  # the last ``SomeError: message`` (an unexpected crash)
    error_class: str | None = None  # the class of the job's error, from its result document
    lines: int = 0

    def observe(self, line: str) -> bool:
        """Record one output line; True when it is one of the job's own lines (worth the task log)."""
        line = line.rstrip()
        self.lines += 1
        if line.startswith("TAILFILL_RESULT "):
            from tailfill.run.submit import parse_result  # not at parse time: it imports the planner

            document = parse_result([line])
            self.error_class = document.error_class if document else None
        elif m := _JOB_ERROR.match(line):
            self.error = m.group(1)
        elif _RESTART.match(line):
            self.restarts.append(line)
        elif m := _PY_ERROR.match(line.strip()):
            self.python_error = line.strip()
        own = bool(_OWN.match(line))
        if own:
            self.own.append(line)
        return own

    @property
    def cause(self) -> str:
        return self.error or self.python_error or (self.restarts[-1] if self.restarts else "") or "no cause printed"


def fix_for(cause: str, error_class_name: str | None = None) -> str:
    """The fix to suggest for a cause (of the error class named, if known), unless the cause already names one."""
    if "(fix:" in cause:
        return ""
    # The job's error class, then the classes the cause names (a wrapper's message names its root cause):
    # the first that knows a fix of its own.
    named = [error_class(n) for n in ([error_class_name] if error_class_name else []) + _CLASS_NAME.findall(cause)]
    cls = next((c for c in named if c is not None and c.fix != TailfillError.fix), None)
    fix: type[TailfillError] | str = cls or next((f for pattern, f in FOREIGN if pattern.search(cause)), TailfillError)
    if isinstance(fix, str):
        return f"{fix}, {_RESUME}"
    return f"{fix.fix}, {_RESUME}" if fix.then_resume else fix.fix


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
    fix = fix_for(cause, output.error_class)
    return f"{what} failed (exit {returncode}): {cause}" + (f" (fix: {fix})" if fix else "")


@contextlib.contextmanager
def causes_first(what: str) -> Iterator[None]:
    """Around a worker-side task (preflight, plan, tune): a Tailfill error becomes one line, cause and
    fix first, not a traceback through the planner. One that cannot succeed on a retry (an unreachable
    broker, a bad setting, impossible bounds) fails the task at once; a retryable one lets Airflow retry."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    try:
        yield
    except TailfillError as exc:
        line = f"{what} failed: {redact_text(str(exc).splitlines()[0])}"
        log.error(line)
        raise (AirflowException if exc.retryable else AirflowFailException)(line) from None
