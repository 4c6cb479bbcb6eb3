"""A failed ``spark-submit`` explained in one line: what failed, where, the fix — then what was committed.

The job's own lines (``error: …`` on exit, ``[lane] batch failed …`` on a restart, a Python
exception's last line) name the cause; the JVM's stack traces and Spark's banner do not. The full
output goes to a file beside the run's batch reports, so the task log and the task's error can
start with the cause instead of the command line and ~200 lines of Java.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tailfill.offsets import merge
from tailfill.state.records import BatchReport

_JOB_ERROR = re.compile(r"^error: (.+)$")
_RESTART = re.compile(r"^\[[^\]]+\] batch failed .*$")
_PY_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt)): (.+)$")
_OWN = re.compile(r"^(\[[^\]]+\] |error: |TAILFILL_RESULT |preflight |warning: )")

# Fixes by what the cause names; the first match wins. Every fix ends with how to resume.
_RESUME = "then clear this task: it resumes at the first uncommitted offset"
FIXES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"ALL_BROKERS_DOWN|BrokerError|TRANSPORT|Connection refused|broker", re.I),
     f"check that the brokers in source.bootstrap_servers are up and reachable, {_RESUME}"),
    (re.compile(r"ExpiredOffsets|retention|OFFSET_OUT_OF_RANGE", re.I),
     "offsets expired before they were read: see the named gap, and raise the topic's retention or accept "
     "the loss with completeness.absent_offsets"),
    (re.compile(r"ConfigError|config", re.I), f"correct the pipeline YAML as the message says, {_RESUME}"),
    (re.compile(r"CommitConflict|LakeError|catalog|S3|NoSuchBucket|AccessDenied", re.I),
     f"check the catalog and the warehouse storage (target.*), {_RESUME}"),
    (re.compile(r"OutOfMemory|Java heap|memory", re.I),
     f"lower the batch cap (max_offsets_per_batch) or give the driver more memory, {_RESUME}"),
)
GENERIC_FIX = f"read the cause in the job output, fix it, {_RESUME}"


@dataclass
class JobOutput:
    """What a ``spark-submit`` printed, sorted: the job's own lines and the cause of a failure."""

    own: list[str] = field(default_factory=list)
    restarts: list[str] = field(default_factory=list)
    error: str | None = None  # the job's ``error: …`` line (its deliberate exit)
    python_error: str | None = None  # the last ``SomeError: message`` (an unexpected crash)
    lines: int = 0

    def observe(self, line: str) -> bool:
        """Record one output line; True when it is one of the job's own lines (worth the task log)."""
        line = line.rstrip()
        self.lines += 1
        if m := _JOB_ERROR.match(line):
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


def fix_for(cause: str) -> str:
    """The fix to suggest for a cause, unless the cause already names one."""
    if "(fix:" in cause:
        return ""
    return next((fix for pattern, fix in FIXES if pattern.search(cause)), GENERIC_FIX)


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
    fix = fix_for(cause)
    return f"{what} failed (exit {returncode}): {cause}" + (f" (fix: {fix})" if fix else "")
