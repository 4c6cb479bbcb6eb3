"""Every error Tailfill raises on purpose, under one base that says whether a restart can help.

A run that fails inside Spark only sees its cause as text (the Python traceback travels through the
JVM), so :func:`error_class` maps a class name found there back to its class, and the restart
policy and the fix shown to the person running the pipeline ask the class (``retryable``, ``fix``),
never a list of names kept somewhere else.
"""

from __future__ import annotations

from typing import ClassVar


class TailfillError(RuntimeError):
    """Base of Tailfill's errors; ``retryable`` says whether running the same work again can succeed,
    ``fix`` what the person running the pipeline should do, and ``then_resume`` whether running again
    after the fix resumes the work (a fix that cannot bring data back does not)."""

    retryable: ClassVar[bool] = False
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


class ExpiredOffsetsError(SourceError):
    """Requested offsets are no longer in the topic (retention or deletion): no restart brings them back."""

    retryable = False
    fix = ("offsets expired before they were read: see the named gap, and raise the topic's retention or accept "
           "the loss with completeness.absent_offsets")
    then_resume = False

    def __init__(self, lost: object, earliest: int):
        self.lost = lost
        super().__init__(
            f"offsets {lost} are no longer in the topic (earliest available is {earliest}); "
            "they were removed by retention before being ingested. Set source.on_expired_offsets: "
            "record_gap to skip them and record the gap, or restore the data"
        )


class RecordError(TailfillError, ValueError):
    """Why one record cannot become a row (it goes to quarantine with this message)."""


class LakeError(TailfillError):
    """The catalog or warehouse is unreachable or misconfigured."""

    fix = "check the catalog and the warehouse storage (target.*)"


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


class PreflightError(TailfillError):
    """A pipeline is not ready to run; the message says what to fix."""


class IngestError(TailfillError):
    """An ingest run stopped; the message names the cause."""


class JobCancelled(IngestError):
    """A job on the warm Spark server was stopped because its caller went away or asked it to."""

    fix = "nothing to fix: what it committed stays; running it again resumes"


class SparkServerError(TailfillError):
    """The warm Spark server could not be started, reached, or would not take a job."""

    retryable = True
    fix = "see $TAILFILL_HOME/logs/spark-server.log; `tailfill spark-server down` then `up` starts a fresh one"


class InjectedFault(TailfillError):
    """A failure a test asked for (see :mod:`tailfill.failpoints`)."""

    retryable = True


def _subclasses(cls: type[TailfillError]) -> list[type[TailfillError]]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def error_class(name: str) -> type[TailfillError] | None:
    """The Tailfill error class called ``name`` (as a traceback prints it), or None for anything else."""
    return next((c for c in [TailfillError, *_subclasses(TailfillError)] if c.__name__ == name), None)


def is_retryable(name: str) -> bool:
    """Whether a failure whose root cause is the exception class ``name`` may succeed when run again.

    Unknown causes (Spark, the JVM, the network) are retried within the failure budget.
    """
    cls = error_class(name)
    return True if cls is None else cls.retryable
