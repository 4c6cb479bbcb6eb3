"""Every error Tailfill raises on purpose, under one base that says whether a restart can help, and
what an error is when it travels between processes: :class:`ErrorInfo`, data.

An error that happens where its caller cannot catch it — on an executor, in the process where Spark
plans a batch, in a Spark job seen from the process that submitted it — is handed on as an
:class:`ErrorInfo` (its class's name, message, ``retryable``, ``fix``), never as a traceback to be
read back: :class:`RemoteError` raises it again on the other side. The restart policy and the fix
shown to the person running the pipeline read those fields.
"""

from __future__ import annotations

import errno
from dataclasses import asdict, dataclass, replace
from typing import ClassVar


class TailfillError(RuntimeError):
    """Base of Tailfill's errors; ``retryable`` says whether running the same work again can succeed,
    ``fix`` what the person running the pipeline should do, and ``then_resume`` whether running again
    after the fix resumes the work (a fix that cannot bring data back does not)."""

    retryable: ClassVar[bool] = False
    infrastructure: ClassVar[bool] = False  # the machinery around the work failed (Spark's, the broker), not the work
    fix: ClassVar[str] = "read the cause in the job output, fix it"
    then_resume: ClassVar[bool] = True


class ConfigError(TailfillError, ValueError):
    """A pipeline definition is malformed or disagrees with the world; the message names file, field and fix."""

    fix = "correct the pipeline YAML as the message says"


class BrokerError(TailfillError):
    """The embedded broker could not be found, started or reached."""

    fix = "check that the brokers in source.bootstrap_servers are up and reachable"


class SourceError(TailfillError):
    """The broker could not be reached or did not return what was asked for (often transient)."""

    retryable = True
    fix = BrokerError.fix


class BrokerUnresponsive(SourceError):
    """The broker answered no request of a kind (fetch, offsets) for longer than a read waits.

    Not the batch's fault: like Spark's machinery failing, it is restarted with patience of its own that
    leaves the batch's failure budget alone (:mod:`tailfill.run.restarts`), and the run goes on when the
    broker answers again.
    """

    infrastructure: ClassVar[bool] = True
    fix = ("check that the brokers in source.bootstrap_servers are up, reachable and answering (their log, their "
           "CPU); a run restarts with patience and resumes where it stopped once they answer")


class ExpiredOffsetsError(SourceError):
    """Requested offsets are no longer in the topic (retention or deletion): no restart brings them back."""

    retryable = False
    fix = ("offsets expired before they were read: see the named gap, and raise the topic's retention or accept "
           "the loss with source.on_expired_offsets: record_gap")
    then_resume = False

    def __init__(self, lost: object, earliest: int):
        self.lost = lost
        super().__init__(
            f"offsets {lost} are no longer in the topic (earliest available is {earliest}); "
            "they were removed by retention before being ingested. Set source.on_expired_offsets: "
            "record_gap to skip them and record the gap, or restore the data"
        )


class TopicRecreatedError(SourceError):
    """A topic's id is not the one the table recorded: it was deleted and created again under the same name."""

    retryable = False
    fix = ("find out what happened to the topic; to ingest the new topic from its start, `tailfill reset PIPELINE` "
           "(the table starts over) or point the pipeline at a new table")
    then_resume = False


class ReplayExpiredError(SourceError):
    """Committed offsets a replay asked for are no longer on the broker: nothing was replayed."""

    retryable = False
    fix = "replay from the partition's earliest offset on; the rows of the older offsets stay as they are"


class RecordError(TailfillError, ValueError):
    """Why one record cannot become a row (it goes to quarantine with this message)."""


class LakeError(TailfillError):
    """The catalog or warehouse is unreachable or misconfigured."""

    fix = "check the catalog and the warehouse storage (target.*)"


class CatalogUnreachable(LakeError):
    """A batch's commit could not reach the catalog (its server refused or dropped the connection).

    Not the batch's fault: like a broker that answers nothing, it is restarted with patience of its own that
    leaves the batch's failure budget alone (:mod:`tailfill.run.restarts`); nothing was committed by it, and the
    batch commits when the catalog answers again.
    """

    retryable: ClassVar[bool] = True
    infrastructure: ClassVar[bool] = True
    fix = "bring the catalog's server back (its own log says why it went away); the run goes on when it answers"


class DiskFullError(LakeError):
    """A write found its disk full; the message names the file and what it is. Nothing was committed by it.

    Not retried: a restart a few seconds later meets the same full disk, and each attempt's partial files take
    what space a cleanup frees. The run stops at once; run it again once there is space."""

    fix = ("free space on that disk or give it more (the warehouse, the catalog or the state root), then run "
           "again: what was committed stays, the rest is written again")


class PermissionDenied(LakeError):
    """A write or read was refused: the file's permissions, or credentials without the right. Not retried."""

    fix = ("give the user that runs Tailfill (or the credentials of target.s3, the catalog's) the right to read and "
           "write the place the message names, then run again: what was committed stays")


class StoreGone(LakeError):
    """The bucket a run writes to does not exist (deleted, or never made). Not retried."""

    fix = ("create the bucket the message names again, or point the pipeline's target at where its data is now, then "
           "run again")


class PreparedFilesGone(LakeError):
    """A batch's prepared files were removed by an orphan cleanup before its commit (they were older than the
    cleanup's cutoff); nothing was committed, and preparing the batch again writes them anew."""

    retryable = True
    fix = ("nothing to do if it is rare; if it repeats, raise maintenance.orphan_min_age above the time a batch "
           "takes from prepare to commit")


class CommitConflictError(LakeError):
    """Other writers kept committing to the table first; trying again later can succeed."""

    retryable = True


class DroppedRecordsError(TailfillError):
    """A writer produced fewer rows than the source read: refusing to commit."""


class RegistryError(TailfillError):
    """The Schema Registry could not be reached (after retries) or refused a request; the message names its URL."""

    retryable = True
    fix = "check that the Schema Registry in format.schema_registry.url is up and reachable (and its credentials)"


class SchemaChangeError(TailfillError):
    """A writer schema changed a column in a way the table cannot follow, or lacks a field the table requires
    (``on_incompatible_schema: fail``)."""

    fix = ("make the producers' schema compatible again, or set format.on_incompatible_schema: quarantine to keep "
           "such records in the quarantine table")


class ChangeStreamError(TailfillError):
    """A keyed pipeline's change stream asks for what Tailfill cannot apply as configured (a key or a truncate whose
    order against other partitions is unknown without ``target.version_by``, a change without that version, a
    truncate with ``target.on_truncate: stop``); running again meets the same change."""

    fix = ("see the change the message names; set target.version_by to what the connector carries (cdc_lsn, "
           "cdc_binlog, cdc_gtid), or target.on_truncate: apply for a truncate")


class PreflightError(TailfillError):
    """A pipeline is not ready to run; the message says what to fix."""

    fix = "fix what the failed check names (the broker, topic, catalog, warehouse, Spark or disk), then run again"


class IngestError(TailfillError):
    """An ingest run stopped; the message names the cause."""


class JobCancelled(IngestError):
    """A job on Spark Connect was stopped because its caller went away or asked it to."""

    fix = "nothing to fix: what it committed stays; running it again resumes"


class BatchFailed(IngestError):
    """A micro-batch failed; the one short line Spark gets back from ``foreachBatch``.

    The failure itself, as data, is in the query's state for the restart policy, and its traceback is in the
    driver's log. Spark matches the text of a failure met after a stop with a regular expression that recurses per
    character: a traceback of a few thousand characters overflowed the stream thread's stack, which then died
    without a cause, and the run looked finished.
    """

    retryable = True


class QueryEnded(IngestError):
    """A live tail's streaming query ended by itself: nobody stopped it and Spark reported no failure."""

    retryable = True
    fix = "the Spark driver's log holds what ended the stream thread; running the tail again resumes from the ledger"


class QueryStalled(IngestError):
    """A streaming query committed nothing for longer than its pipeline allows while it had work to do."""

    retryable = True
    fix = ("the message names the step it was stuck at and what Spark was doing; a broker that answers no fetch is the "
           "usual cause (its own log); raise tail.stall_timeout_seconds if batches are only slow")


class TailRunning(TailfillError):
    """Another tail of the pipeline runs (its host, process and start are named): one tail per pipeline."""

    fix = ("let it run, or stop it first (`tailfill stop-tail PIPELINE`, or a signal to its command on its host); a "
           "claim whose process is gone is taken over by the next tail")


class SparkServerError(TailfillError):
    """A Spark Connect server could not be started, reached, or would not take a job."""

    retryable = True
    fix = ("see $TAILFILL_HOME/logs/connect-server.log; a local server busy with other settings takes the job once "
           "its jobs end; `tailfill connect-server down` then `up` starts a fresh one")


class ConnectServerError(SparkServerError):
    """A Spark Connect server could not be reached, or went away while a job ran on it."""

    fix = ("run it again: what was committed stays and the retry resumes from the ledger, on a new local server "
           "(see $TAILFILL_HOME/logs/connect-server.log) or on the remote one once it is back")


class InjectedFault(TailfillError):
    """A failure a test asked for (see :mod:`tailfill.failpoints`)."""

    retryable = True


class RemoteError(TailfillError):
    """An error that happened in another process, raised again here from its :class:`ErrorInfo`."""

    def __init__(self, info: ErrorInfo):
        super().__init__(info.message)
        self.info = info
        self.retryable = info.retryable  # type: ignore[misc]  # this error's, not the class's
        self.fix = info.fix  # type: ignore[misc]
        self.then_resume = info.then_resume  # type: ignore[misc]
        self.infrastructure = info.infrastructure  # type: ignore[misc]


class QueryFailed(IngestError):
    """A query stopped on a failure no restart can help, or after more failures in a row than its pipeline
    tolerates; ``last`` is the (last) failure's cause: its class, ``retryable`` and fix are this error's."""

    def __init__(self, message: str, last: ErrorInfo):
        super().__init__(message)
        self.info = replace(last, message=message)


# A foreign error's fix, by the library that raised it (its class's module): the first match wins.
FOREIGN_FIXES: tuple[tuple[str, type[TailfillError]], ...] = (
    ("confluent_kafka", BrokerError), ("cimpl", BrokerError),
    ("pyiceberg", LakeError), ("sqlalchemy", LakeError), ("psycopg2", LakeError), ("pyarrow", LakeError),
)
# Failures that no wait or restart can fix, known by an OSError's number or by the words of a library that gives its
# text alone (Arrow, SQLite, the AWS SDK): the run stops at once, saying what to fix.
FULL_DISK_SIGNS = ("no space left on device", "[errno 28]", "database or disk is full", "disk quota exceeded")
DENIED_SIGNS = ("access_denied", "accessdenied", "access denied", "forbidden", "permission denied")
GONE_SIGNS = ("nosuchbucket", "no_such_bucket", "bucket does not exist")
MEMORY_FIX = "lower the batch cap (max_offsets_per_batch) or give the driver more memory"
# Spark's own failures that are the machine's, not a batch's (a Python worker that could not start in time), known
# by Spark's wording: restarts of their own, with more patience (tailfill.run.restarts).
SPARK_INFRASTRUCTURE = ("Python worker failed to connect back",)
INFRASTRUCTURE_FIX = ("the machine was too busy to start Spark's Python workers in time: give Spark more cores or run "
                      "fewer jobs at once")


@dataclass(frozen=True)
class ErrorInfo:
    """An error as data: what crosses between processes instead of a traceback.

    ``error_class``: the exception's class name (Tailfill's, or a foreign one such as ``OSError``);
    ``message``: its text (a foreign one's first line); ``retryable``: whether running the same work again can succeed
    (a foreign error: yes, within the failure budget); ``fix``: what the person running the pipeline
    should do; ``then_resume``: whether running again after the fix resumes the work;
    ``infrastructure``: the machinery around the work failed (Spark's: :data:`SPARK_INFRASTRUCTURE`; a broker that
    answers nothing: :class:`BrokerUnresponsive`), not the work.
    """

    error_class: str
    message: str
    retryable: bool = True
    fix: str = TailfillError.fix
    then_resume: bool = True
    infrastructure: bool = False

    @classmethod
    def of(cls, exc: BaseException) -> ErrorInfo:
        """``exc`` as data. Of a chain of exceptions (one raised while handling another), the first Tailfill
        error from the root says what happened; without one, the root itself does."""
        chain = [exc]
        while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and nxt not in chain:
            chain.append(nxt)
        chain.reverse()  # the root first
        ours = next((e for e in chain if isinstance(e, TailfillError)), None)
        if ours is not None:
            info = getattr(ours, "info", None)
            if isinstance(info, ErrorInfo):
                return info
            return cls(type(ours).__name__, str(ours), ours.retryable, ours.fix, ours.then_resume,
                       infrastructure=ours.infrastructure)
        root = chain[0]
        sign = _infrastructure_line(str(exc))
        if sign is not None:
            return cls(type(root).__name__, sign, True, INFRASTRUCTURE_FIX, infrastructure=True)
        permanent = next((kind for e in chain if (kind := unfixable_by_retry(e)) is not None), None)
        if permanent is not None:
            return cls(permanent.__name__, _first_line(root), False, permanent.fix)
        return cls(type(root).__name__, _first_line(root), True, _foreign_fix(root))

    @classmethod
    def foreign(cls, kind: str, text: str) -> ErrorInfo:
        """A failure known only by its text (Spark's own, from the JVM): its first line, or the line that says
        Spark's machinery failed."""
        sign = _infrastructure_line(text)
        if sign is not None:
            return cls(kind, sign, True, INFRASTRUCTURE_FIX, infrastructure=True)
        first = text.strip().splitlines()[0] if text.strip() else kind
        permanent = _unfixable_text(text)
        if permanent is not None:
            return cls(permanent.__name__, first, False, permanent.fix)
        return cls(kind, first)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ErrorInfo:
        known = ("error_class", "message", "retryable", "fix", "then_resume", "infrastructure")
        return cls(**{k: data[k] for k in known if k in data})

    def __str__(self) -> str:
        return f"{self.error_class}: {self.message}"


def unfixable_by_retry(exc: BaseException) -> type[TailfillError] | None:
    """The kind of failure ``exc`` is when no restart can fix it (:class:`DiskFullError`, :class:`PermissionDenied`,
    :class:`StoreGone`), by its error number or its words; None for any other."""
    if isinstance(exc, DiskFullError | PermissionDenied | StoreGone):
        return type(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        by_number = {errno.ENOSPC: DiskFullError, errno.EDQUOT: DiskFullError, errno.EACCES: PermissionDenied,
                     errno.EPERM: PermissionDenied, errno.EROFS: PermissionDenied}.get(exc.errno)
        if by_number is not None:
            return by_number
    return _unfixable_text(str(exc))


def _unfixable_text(text: str) -> type[TailfillError] | None:
    """:func:`unfixable_by_retry` of an error known by its text alone."""
    lowered = text.lower()
    for signs, kind in ((FULL_DISK_SIGNS, DiskFullError), (DENIED_SIGNS, PermissionDenied), (GONE_SIGNS, StoreGone)):
        if any(sign in lowered for sign in signs):
            return kind
    return None


def _infrastructure_line(text: str) -> str | None:
    """The line of ``text`` that names one of Spark's infrastructure failures, or None."""
    return next((line.strip() for line in text.splitlines() if any(s in line for s in SPARK_INFRASTRUCTURE)), None)


PY4J_CALL = "An error occurred while calling "  # how py4j begins the text of an error the JVM raised
_PY_CHAIN = ("Traceback (most recent call last):", "During handling of the above exception",
             "The above exception was the direct cause")


def _first_line(exc: BaseException) -> str:
    """What ``exc`` says in one line: its first, or of an error from the JVM, the line that names the cause."""
    text = str(exc).strip()
    if not text:
        return repr(exc)
    lines = text.splitlines()
    if lines[0].startswith(PY4J_CALL):
        return jvm_cause(lines[1:]) or lines[0]
    return lines[0]


def jvm_cause(lines: list[str]) -> str | None:
    """The line of a JVM error's text that says what failed: the exception a Python worker raised, if the text
    carries its traceback (a failed task's ``PythonException``), else the JVM exception's own first line."""
    start = next((i for i, line in enumerate(lines) if line.rstrip().endswith(_PY_CHAIN[0])), None)
    if start is not None:
        said = None
        for line in lines[start + 1:]:
            if line.startswith("\tat "):  # the JVM's stack again: the Python traceback ended
                break
            if line.strip() and not line[0].isspace() and not line.startswith(_PY_CHAIN):
                said = line.strip()
        if said:
            return said
    return next((line.lstrip(": ").strip() for line in lines if line.strip(": \t")), None)


def _foreign_fix(exc: BaseException) -> str:
    if isinstance(exc, MemoryError):
        return MEMORY_FIX
    module = type(exc).__module__ or ""
    found = next((cls for prefix, cls in FOREIGN_FIXES if module.startswith(prefix)), None)
    return found.fix if found is not None else TailfillError.fix
