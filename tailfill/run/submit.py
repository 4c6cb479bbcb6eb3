"""The ingest job's contract and its submission: what goes in (:class:`JobSpec`), what comes out
(:class:`JobResult`, one JSON document), and the ``spark-submit`` command that runs it. No pyspark here.

The planner (:mod:`tailfill.run.planner`) builds every :class:`JobSpec` the CLI and the Airflow DAGs
pass as ``spec.argv()``; the job parses it back with :meth:`JobSpec.parse`, so the two sides cannot
disagree on an argument; its result comes back through :func:`parse_result`. A backfill
spec carries its slices' exact bounds: the job runs what was planned, nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TextIO

from tailfill.config import PipelineConfig
from tailfill.errors import ConfigError, error_class
from tailfill.offsets import PartitionOffsets
from tailfill.redact import redact_data, redact_text
from tailfill.run import runtime
from tailfill.run.plan import Mode, Slice

RESULT_PREFIX = "TAILFILL_RESULT "


def new_run_id(mode: Mode) -> str:
    return f"{mode}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class JobSpec:
    """One run of the ingest job: a pipeline, a mode, a run id, and for a backfill its slices."""

    pipeline: str  # name or path of the pipeline YAML
    mode: Mode
    run_id: str
    slices: tuple[Slice, ...] = ()  # backfill: exactly these slices (bounds as planned)
    once: bool = False  # tail: ingest what is there now, then stop
    stop_after_seconds: float | None = None  # processing-time tail: stop between batches after this long
    max_offsets_per_batch: int | None = None  # override of the pipeline's cap (tuned from measurements)
    max_offsets_per_second: int | None = None  # backfill: override of the pipeline's rate limit

    def argv(self) -> list[str]:
        """The job's command-line arguments."""
        out = ["--pipeline", self.pipeline, "--mode", self.mode, "--run-id", self.run_id]
        if self.slices:
            out += ["--slices", json.dumps([s.to_dict() for s in self.slices], separators=(",", ":"))]
        if self.once:
            out.append("--once")
        if self.stop_after_seconds is not None:
            out += ["--stop-after", str(self.stop_after_seconds)]
        if self.max_offsets_per_batch is not None:
            out += ["--max-offsets-per-batch", str(self.max_offsets_per_batch)]
        if self.max_offsets_per_second is not None:
            out += ["--max-offsets-per-second", str(self.max_offsets_per_second)]
        return out

    @classmethod
    def parse(cls, argv: list[str] | None = None) -> JobSpec:
        p = argparse.ArgumentParser(prog="spark_jobs/ingest.py", description="Tailfill's ingest job")
        p.add_argument("--pipeline", required=True, help="pipeline name or path to its YAML")
        p.add_argument("--mode", choices=("backfill", "tail"), required=True)
        p.add_argument("--run-id", required=True, help="run id recorded in every commit")
        p.add_argument("--slices", help="backfill: JSON list of slices {index, count, start, end}")
        p.add_argument("--once", action="store_true", help="tail: ingest what is there now, then stop")
        p.add_argument("--stop-after", type=float, help="tail with processing time: stop between batches after N s")
        p.add_argument("--max-offsets-per-batch", type=int, help="override the pipeline's cap for this run")
        p.add_argument("--max-offsets-per-second", type=int, help="backfill: override the pipeline's rate limit")
        a = p.parse_args(argv)
        if a.mode == "backfill" and not a.slices:
            p.error("a backfill needs --slices (plan with `tailfill backfill` or the backfill DAG)")
        slices = tuple(Slice.from_dict(d) for d in json.loads(a.slices)) if a.slices else ()
        return cls(a.pipeline, a.mode, a.run_id, slices, a.once, a.stop_after, a.max_offsets_per_batch,
                   a.max_offsets_per_second)


def backfill_spec(cfg: PipelineConfig, start: PartitionOffsets | None = None, end: PartitionOffsets | None = None,
                  slices: int | None = None, run_id: str | None = None,
                  max_offsets_per_second: int | None = None) -> JobSpec | None:
    """A one-lane backfill of ``[start, end)`` (default ``[earliest, cutover)``), planned by
    :func:`tailfill.run.planner.plan_backfill_lanes`; None if all is committed."""
    from tailfill.run.planner import BackfillRequest, plan_backfill_lanes  # the planner builds JobSpecs

    run_id = run_id or new_run_id("backfill")
    request = BackfillRequest(start, end, slices, max_offsets_per_second=max_offsets_per_second)
    specs = plan_backfill_lanes(cfg, request, lambda _lane: run_id).specs
    return specs[0] if specs else None


@dataclass
class IngestResult:
    """What one streaming query of a run did (a backfill run has one per slice)."""

    run_id: str
    label: str
    batches: int = 0
    offsets: int = 0
    rows: int = 0
    quarantined: int = 0
    skipped_offsets: int = 0
    seconds: float = 0.0
    restarts: int = 0
    causes: list[str] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)  # seconds by stage, summed over the batches
    freshness: dict | None = None  # produce-to-commit latency over the run's records (p50, p95, max, records)
    warnings: list[str] = field(default_factory=list)  # e.g. the tail cannot keep up with the incoming rate

    @property
    def rows_per_second(self) -> float:
        return (self.rows + self.quarantined) / self.seconds if self.seconds else 0.0


@dataclass
class JobResult:
    """What one run of the job hands back to its caller, as ONE JSON document (:meth:`line`).

    ``results``: one :class:`IngestResult` per streaming query that finished; ``error``: the cause
    when the run could not complete, with the error's class name and that class's fix.
    """

    results: list[IngestResult] = field(default_factory=list)
    error: str | None = None
    error_class: str | None = None

    @property
    def fix(self) -> str | None:
        """The fix the error's class carries (None for a success or an error that is not Tailfill's)."""
        cls = error_class(self.error_class) if self.error_class else None
        return cls.fix if cls is not None else None

    def asdict(self) -> dict:
        return {"results": [asdict(r) for r in self.results], "error": self.error, "error_class": self.error_class,
                "fix": self.fix}

    def line(self) -> str:
        """The job's last stdout line: this document for the process that submitted it."""
        return RESULT_PREFIX + json.dumps(redact_data(self.asdict()))

    @classmethod
    def from_dict(cls, data: dict) -> JobResult:
        return cls([IngestResult(**r) for r in data.get("results", [])], data.get("error"), data.get("error_class"))


def parse_result(lines: Iterable[str]) -> JobResult | None:
    """The job's result document from its output lines (the last ``TAILFILL_RESULT`` one), or None."""
    found = None
    for line in lines:
        if line.startswith(RESULT_PREFIX):
            found = line
    return JobResult.from_dict(json.loads(found[len(RESULT_PREFIX):])) if found else None


def parse_conf(pairs: list[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` Spark settings, as ``spark-submit --conf`` takes them; a malformed one is an error."""
    conf: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or key != key.strip():
            raise ConfigError(f"--conf {pair!r}: expected KEY=VALUE (fix: e.g. --conf spark.executor.memory=2g)")
        conf[key] = value
    return conf


def spark_submit_command(spec: JobSpec, master: str | None = None, conf: dict[str, str] | None = None) -> list[str]:
    """The full ``spark-submit`` command for ``spec``, shipping the tailfill code to the executors.

    ``master`` defaults to :func:`runtime.master`; ``conf`` is laid over Tailfill's Spark settings
    (:func:`runtime.spark_conf`). Builds the ``--py-files`` archive (:func:`runtime.code_archive`),
    so executors need only tailfill's dependencies, never tailfill itself.
    """
    cmd = [runtime.spark_submit(), "--master", master or runtime.master()]
    for key, value in (runtime.spark_conf() | (conf or {})).items():
        cmd += ["--conf", f"{key}={value}"]
    cmd += ["--py-files", str(runtime.code_archive())]
    return [*cmd, str(runtime.job_file()), *spec.argv()]


def submit_env() -> dict[str, str]:
    """This process's environment with Tailfill's Spark environment and shipped code on top."""
    return {**os.environ, **runtime.spark_env(), **runtime.shipped_code_env()}


def _relay(lines: Iterable[str], out: TextIO) -> None:
    for line in lines:
        out.write(redact_text(line))
        out.flush()


def run_job(spec: JobSpec, master: str | None = None,
            conf: dict[str, str] | None = None) -> tuple[int, list[IngestResult]]:
    """Run the job (see :func:`spark_submit_command`), streaming its progress through; returns (exit code, results).

    Both of the job's streams are relayed line by line with secrets redacted (Spark and the JVM
    print exception texts that may quote a setting).
    """
    proc = subprocess.Popen(spark_submit_command(spec, master, conf), env=submit_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace")
    assert proc.stdout is not None and proc.stderr is not None
    errors = threading.Thread(target=_relay, args=(proc.stderr, sys.stderr), name="spark-submit-stderr", daemon=True)
    errors.start()
    documents = []
    for line in proc.stdout:
        if line.startswith(RESULT_PREFIX):
            documents.append(line)
        else:
            _relay([line], sys.stdout)
    code = proc.wait()
    errors.join(timeout=30)  # a worker the job left behind may hold the pipe; never wait on it for ever
    document = parse_result(documents)
    return code, document.results if document else []
