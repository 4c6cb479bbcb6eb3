"""Assertions and runners shared by the integration tests."""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import duckdb
import duckdb_extension_avro
import duckdb_extension_iceberg
import pyarrow.parquet as pq
import pytest
import yaml
from processes import kill_marked

from tailfill.config import PipelineConfig
from tailfill.errors import SPARK_INFRASTRUCTURE
from tailfill.lake.ledger import read_ledger
from tailfill.lake.tables import Tables
from tailfill.offsets import PartitionOffsets, TopicPartition, total
from tailfill.pipeline.handle import open_pipeline
from tailfill.plumbing.warehouse import filesystem, fs_path
from tailfill.proof.validate import validate
from tailfill.run.contract import IngestResult, JobSpec, new_run_id, parse_result
from tailfill.run.planner import backfill_spec
from tailfill.run.submit import spark_submit_command, submit_env
from tailfill.source.kafka import consumer_config, list_partitions, watermarks
from tailfill.source.stream_api import ADMISSION_CONTROL
from tailfill.values.partition_terms import parse_terms

DEMO = Path(__file__).resolve().parent.parent / "pipelines" / "demo.yaml"

# Bounded requests run as streaming queries (TAILFILL_BOUNDED_RUNS=query) need Spark's admission control of Python
# stream readers, which Spark 4.2 has and Spark 4.1 (the Spark Tailfill runs) has not: refused there, so not tested.
needs_admission_control = pytest.mark.skipif(not ADMISSION_CONTROL, reason="bounded runs as streaming queries need "
                                             "admission control of Python stream readers (Spark 4.2+)")
QUERY_RUNS = pytest.param("query", marks=needs_admission_control)


JAVA_LOG = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (ERROR|WARN) |\bERROR \w+:|^\s+at [\w.$]+\(")


def noise(output: str) -> list[str]:
    """The lines of a command's terminal output that are not for people: a Python traceback, an exception, a
    logging error, a Java log line or stack frame, the JVM's start-up warning."""
    return [line for line in output.splitlines()
            if "Traceback" in line or "Exception" in line or "Logging error" in line or JAVA_LOG.search(line)
            or line.startswith("WARNING: Using incubator modules")]


def tables_of(cfg: PipelineConfig) -> Tables:
    """The pipeline's tables as they are now (read, as every check reads them); they must exist."""
    with open_pipeline(cfg) as pipeline:
        tables = pipeline.open_tables()
    assert tables is not None, f"the tables of {cfg.name} were never made"
    return tables


def provision(cfg: PipelineConfig) -> Tables:
    """The pipeline's tables, made (or evolved) as the planner makes them before a run."""
    with open_pipeline(cfg) as pipeline:
        return pipeline.provision_tables()


def ingested(cfg: PipelineConfig) -> tuple[Counter, Counter]:
    """(partition, offset) counts in the data table and in the quarantine table."""
    data, quarantine = tables_of(cfg)
    counts = []
    for table in (data, quarantine):
        table.refresh()
        arrow = table.scan(selected_fields=("kafka_partition", "kafka_offset")).to_arrow()
        counts.append(Counter(zip(arrow["kafka_partition"].to_pylist(), arrow["kafka_offset"].to_pylist(),
                                  strict=True)))
    return counts[0], counts[1]


def assert_exactly_once(cfg: PipelineConfig, high: dict[int, int]) -> tuple[Counter, Counter]:
    """Every offset ``[0, high[p])`` of every partition is in data or quarantine exactly once."""
    rows, bad = ingested(cfg)
    both = rows + bad
    dupes = sorted(k for k, n in both.items() if n > 1)
    overlap = sorted(set(rows) & set(bad))
    expected = {(p, o) for p, h in high.items() for o in range(h)}
    assert expected, f"no offsets to check (high watermarks {high}): the test ingested nothing"
    missing = sorted(expected - set(both))
    extra = sorted(set(both) - expected)
    assert not dupes, f"duplicated offsets: {dupes[:10]}"
    assert not overlap, f"offsets both stored and quarantined: {overlap[:10]}"
    assert not missing, f"{len(missing)} missing offsets, first {missing[:10]}"
    assert not extra, f"unexpected offsets: {extra[:10]}"
    return rows, bad


def high_watermarks(cfg: PipelineConfig) -> dict[int, int]:
    from tailfill.source.kafka import consumer_config, list_partitions, watermarks

    conf = consumer_config(cfg.source)
    marks = watermarks(conf, list_partitions(conf, cfg.source.topic))
    return {tp.partition: marks.high[tp] for tp in marks.high}


def backfill(spark, cfg: PipelineConfig, start: dict | None = None, end: dict | None = None,
             slices: int | None = None) -> list[IngestResult]:
    """Plan a backfill as ``tailfill backfill`` does and run the job in-process on the shared session."""
    from tailfill.run.spark_job import run

    with open_pipeline(cfg) as pipeline:
        spec = backfill_spec(pipeline, start and PartitionOffsets.from_dict(start),
                             end and PartitionOffsets.from_dict(end), slices)
    return [] if spec is None else run(spec, spark)


def tail_spec(cfg: PipelineConfig, once: bool = True, stop_after: float | None = None) -> JobSpec:
    """The tail's spec as ``tailfill tail`` plans it (recording the cutover when there is none yet)."""
    from tailfill.run.planner import TailRequest, plan_tail

    with open_pipeline(cfg) as pipeline:
        return plan_tail(pipeline, TailRequest(once, stop_after), new_run_id("tail")).spec


def tail(spark, cfg: PipelineConfig, once: bool = True, stop_after: float | None = None) -> list[IngestResult]:
    """Plan the tail as ``tailfill tail`` does and run the job in-process on the shared session (same code as
    spark_jobs/ingest.py)."""
    from tailfill.run.spark_job import run

    return run(tail_spec(cfg, once, stop_after), spark)


def kill_job_tree(proc: subprocess.Popen, marker: bytes) -> None:
    """SIGKILL a job started with ``start_new_session`` and every process carrying ``marker`` (``NAME=value``
    in its environment: a worker that left the process group still dies with the job)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    kill_marked(marker)  # raises if any is still running after SIGKILL


def submit_at_once(specs: list[JobSpec], logs: Path, master: str = "local[1]") -> dict[str, list[IngestResult]]:
    """Run ``specs`` as concurrent ``spark-submit`` jobs (output in ``logs/<run id>.log``); each must exit 0.

    Returns each run id's results, as its job printed them."""
    procs = []
    try:
        for spec in specs:
            log = (logs / f"{spec.run_id}.log").open("w")
            procs.append((spec, log, subprocess.Popen(spark_submit_command(spec, master), env=submit_env(),
                                                      stdout=log, stderr=subprocess.STDOUT)))
        codes = {spec.run_id: proc.wait(timeout=600) for spec, _, proc in procs}
    finally:
        for _, log, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    results = {}
    for spec in specs:
        output = (logs / f"{spec.run_id}.log").read_text()
        assert codes[spec.run_id] == 0, output[-5000:]
        document = parse_result(output.splitlines())
        assert document is not None, f"{spec.run_id} printed no result document:\n{output[-3000:]}"
        results[spec.run_id] = document.results
    return results


def committed(cfg: PipelineConfig) -> int:
    """Offsets the data table's ledger holds (none before the planner made the table)."""
    with open_pipeline(cfg) as pipeline:
        tables = pipeline.open_tables()
    return total(read_ledger(tables.data).committed) if tables is not None else 0


def in_background(fn, *args) -> tuple[threading.Thread, dict]:
    """Run ``fn(*args)`` in a thread; the dict gets its ``result`` or its ``error``."""
    out: dict = {}

    def target() -> None:
        try:
            out["result"] = fn(*args)
        except BaseException as exc:  # handed to the test, which re-raises it
            out["error"] = exc

    thread = threading.Thread(target=target, name=f"job-{fn.__name__}", daemon=True)
    thread.start()
    return thread, out


def finished(thread: threading.Thread, out: dict, timeout: float = 600):
    thread.join(timeout)
    assert not thread.is_alive(), f"the job did not finish within {timeout:.0f}s"
    if "error" in out:
        raise out["error"]
    return out["result"]


def set_dotted(data: dict, changes: dict, drop_none: bool = False) -> dict:
    """``data`` (a pipeline's YAML, as loaded) with ``changes`` applied in place: each key a path with ``__``
    between the levels (``target__key``), each value the leaf's new value; with ``drop_none``, None removes a
    leaf that is there."""
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node[key]
        if drop_none and value is None and leaf in node:
            del node[leaf]
        else:
            node[leaf] = value
    return data


def write_demo_pipeline(path: Path, name: str, bootstrap_servers: str, **changes) -> Path:
    """Write the demo pipeline's YAML to ``path`` as ``name``, reading a fresh topic of ``bootstrap_servers``,
    with ``changes`` applied as :func:`set_dotted` applies them (``target__table="x"``)."""
    data = yaml.safe_load(DEMO.read_text())
    data["name"] = name
    data["source"]["bootstrap_servers"] = bootstrap_servers
    data["source"]["topic"] = f"t-{uuid.uuid4().hex[:10]}"
    path.write_text(yaml.safe_dump(set_dotted(data, changes)))
    return path


def one_batch_backfill(make_pipeline, records: int) -> tuple[PipelineConfig, JobSpec]:
    """A pipeline of one partition holding ``records`` records, and the spec of its backfill in one slice (one batch,
    one task: the first batch's size is the pipeline's ``backfill.max_offsets_per_batch``, the lane not split into
    several)."""
    from tailfill.dev.sample import produce_sample

    cfg = make_pipeline(source__partitions=1, backfill__slices=1, backfill__min_batches_per_lane=1)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, records, 1)
    with open_pipeline(cfg) as pipeline:
        spec = backfill_spec(pipeline, None, None, 1)
    assert spec is not None
    return cfg, spec


def on_runner(runner, spec: JobSpec):
    """``start`` for :func:`read_before_commit`: ``spec`` submitted to ``runner`` and waited for in a thread (a
    runner may hand its lines on only while it is waited for)."""

    def start(on_line):
        thread, out = in_background(lambda: runner.submit(spec, on_line).wait())

        def wait() -> None:
            outcome = finished(thread, out)
            assert outcome.code == 0, outcome

        return thread.is_alive, wait

    return start


READING = re.compile(r"\] 0/([\d,]+) offsets \(0%\) committed, ([\d,]+) read in batch 0;")


def read_before_commit(cfg: PipelineConfig, records: int, paused, start) -> list[str]:
    """Run a single-batch job of ``records`` offsets, held in the middle of its batch by ``paused`` (the
    ``paused_batches`` fixture); ``start(on_line)`` starts it and returns (is it running, wait for its end).
    Checks that its progress line said what the batch's task had read, strictly between 0 and ``records``,
    while nothing was committed, and never once it was; returns the job's lines."""
    lines: list[str] = []
    paused.arm()
    running, wait = start(lines.append)
    try:
        wait_until(lambda: any(READING.search(line) for line in lines) or not running(),
                   "a progress line saying what the batch in flight read", timeout=300)
        assert committed(cfg) == 0  # said while the batch was in flight
    finally:
        paused.release()
    wait()
    reading = [(int(m[1].replace(",", "")), int(m[2].replace(",", ""))) for line in lines
               if (m := READING.search(line))]
    assert reading and all(planned == records and 0 < read < records for planned, read in reading), "\n".join(lines)
    assert [line for line in lines if "read in batch" in line and not READING.search(line)] == [], "\n".join(lines)
    assert committed(cfg) == records
    return lines


def wait_until(condition, what: str, timeout: float = 180, poll: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll)


def assert_one_partition_value_per_file(cfg, table) -> int:
    """Every live file's rows share one value of every partition term, the one its manifest entry names."""
    terms, fs = parse_terms(cfg.target.partition_by), filesystem(cfg.target)
    table.refresh()
    tasks = list(table.scan().plan_files())
    for task in tasks:
        rows = pq.read_table(fs_path(task.file.file_path), filesystem=fs)
        recorded = [task.file.partition[i] for i in range(len(task.file.partition))]
        for i, term in enumerate(terms):
            assert set(term.values_in(rows).to_pylist()) == {recorded[i]}, (task.file.file_path, str(term))
    return len(tasks)


def offline_duckdb() -> duckdb.DuckDBPyConnection:
    """DuckDB with the iceberg extension (and the avro one it needs) from their wheels: nothing downloaded."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                 "allow_unsigned_extensions": True})
    for package in (duckdb_extension_avro, duckdb_extension_iceberg):
        (path,) = pathlib.Path(package.__file__).parent.glob("extensions/*/*.duckdb_extension")
        con.execute(f"LOAD '{path}'")
    return con


def github_event(i: int) -> dict:
    """A GitHub-style event: nested objects, a list of objects, timestamps; ``org`` in every third one only."""
    event = {"id": str(10_000 + i), "type": ("PushEvent", "WatchEvent")[i % 2], "public": i % 5 != 0,
             "actor": {"id": i % 97, "login": f"user{i % 97}", "display_login": None},
             "repo": {"id": i % 13, "name": f"org/repo{i % 13}"},
             "payload": {"size": i % 4, "pushed_at": f"2026-02-0{1 + i % 2}T12:00:00Z",
                         "commits": [{"sha": f"{i:040x}", "message": f"change {i}", "distinct": True}] * (i % 3)},
             "created_at": f"2026-01-0{1 + i % 3}T0{i % 10}:00:00Z", "score": i % 7 + (0.5 if i % 2 else 0)}
    if i % 3 == 0:
        event["org"] = {"id": 7, "login": "acme"}
    return event


def stored(cfg) -> Counter:
    """(topic, partition, offset) of every row in the data and quarantine tables."""
    out: Counter = Counter()
    for table in tables_of(cfg):
        table.refresh()
        arrow = table.scan(selected_fields=("kafka_topic", "kafka_partition", "kafka_offset")).to_arrow()
        out.update(zip(*(arrow[c].to_pylist() for c in ("kafka_topic", "kafka_partition", "kafka_offset")),
                       strict=True))
    return out


def ends(cfg, topics: list[str]) -> dict[TopicPartition, int]:
    conf = consumer_config(cfg.source)
    parts = [tp for t in topics for tp in list_partitions(conf, t)]
    marks = watermarks(conf, parts)
    return {tp: marks.high[tp] for tp in parts}


def assert_each_offset_once(cfg, topics: list[str]) -> Counter:
    """Every offset of every partition of ``topics`` is in the tables exactly once, and nothing else is;
    the proof (``validate --all``) says so too. Returns the offsets per topic."""
    rows = stored(cfg)
    expected = {(tp.topic, tp.partition, o) for tp, end in ends(cfg, topics).items() for o in range(end)}
    assert expected
    assert not [k for k, n in rows.items() if n > 1], "duplicated offsets"
    assert set(rows) == expected, (f"missing {sorted(expected - set(rows))[:5]}, "
                                   f"unexpected {sorted(set(rows) - expected)[:5]}")
    result = validate(open_pipeline(cfg), all_runs=True)
    assert result.success, result.problems
    assert sum(p["missing"] + p["duplicated"] for p in result.partitions) == 0
    return Counter(t for t, _, _ in rows)


def besides_infrastructure(causes: list[str]) -> list[str]:
    """The restart causes that are not Spark's own infrastructure failing (on a busy machine its Python workers
    may be too slow to start: a restart of its own kind, with its own budget)."""
    return [c for c in causes if not any(s in c for s in SPARK_INFRASTRUCTURE)]


@contextlib.contextmanager
def small_disk(path: Path, size: str):
    """A tmpfs of ``size`` at ``path`` (root only: skipped elsewhere), unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"a full disk needs a small filesystem: mounting a tmpfs failed ({done.stderr.strip()})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte with one file; returns it (delete it to free the space)."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65_536)
    with filler.open("ab", buffering=0) as out, contextlib.suppress(OSError):  # the last partial block
        for _ in range(65_536):
            out.write(b"\0")
    return filler
