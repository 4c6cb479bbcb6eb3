"""The fault suite: things fail at the wrong moment, and every offset still lands exactly once.

Seeds 000, 002 and 004 are data lost or jobs stuck when something failed mid-run. Each scenario
here breaks one real component while real jobs run — the job process (SIGKILL), the broker, the
S3 endpoint (through :class:`s3_fault_proxy.S3FaultProxy`), the catalog, or the table itself (two
writers) — then lets the pipeline recover the way a user would (the job's own restarts, or running
it again), and ends with :func:`fault_outcomes.prove`: ``validate --all`` and a count of every
offset. The session prints a scenario × outcome table (see ``tests/conftest.py``).

``pytest -m faults`` runs this suite alone; ``--soak`` makes it long (50 random SIGKILLs).
``TAILFILL_FAULT_SEED`` repeats a run's random kill moments (the seed is in the outcome table).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from fault_outcomes import prove
from helpers import backfill, committed, finished, in_background, kill_job_tree, submit_at_once, tail, wait_until
from s3_fault_proxy import Fault, S3FaultProxy
from tcp_outage import TcpOutage

from tailfill import cli
from tailfill.dev.broker import free_port, tansu_binary, wait_for_port
from tailfill.dev.postgres import LocalPostgres
from tailfill.dev.sample import produce_sample
from tailfill.lake.batch_report import read_reports, runs_dir
from tailfill.lake.files import written_by
from tailfill.lake.ledger import SUMMARY_RUN, read_cutover, read_ledger
from tailfill.lake.tables import ensure_tables
from tailfill.offsets import PartitionOffsets, intersect_all, total
from tailfill.run.spark_job import run
from tailfill.run.submit import JobSpec, backfill_spec, new_run_id, spark_submit_command, submit_env

pytestmark = [pytest.mark.integration, pytest.mark.faults]

PARTITIONS, BAD_EVERY = 4, 499


def committed_in(cfg, spec: JobSpec) -> int:
    """Offsets of a backfill spec's slices that the table holds."""
    data = ensure_tables(cfg).data
    data.refresh()
    return total(intersect_all(read_ledger(data).committed, [r for s in spec.slices for r in s.ranges]))


def batch_lines(reports: Path) -> int:
    """Batch reports written so far under one run's folder."""
    return sum(len(f.read_text().splitlines()) for f in reports.glob("*.jsonl")) if reports.exists() else 0


def total_planned(spec: JobSpec) -> int:
    return sum(total(s.ranges) for s in spec.slices)


# --- the job process dies ----------------------------------------------------------------------


class Victim:
    """One ``spark-submit`` of the SIGKILL scenario and the moment it dies at.

    At random: ``after_batches`` None kills it 1-10 s after launch (while the job starts); otherwise
    0-1.5 s after its query began its batches and committed that many of them (in a prepare, between
    prepare and commit, in a commit, or between batches). At a fixed point: ``pause`` holds the job at
    a failpoint of :mod:`tailfill.dev.faults` (after ``skip`` arrivals) and kills it there. Each victim
    has its own marker, so a kill takes only its own processes.
    """

    def __init__(self, spec: JobSpec, cfg, env: dict, log_path: Path, rng: random.Random,
                 pause: tuple[str, int] | None = None):
        self.spec, self.log_path, self.pause = spec, log_path, pause
        self.after_batches = rng.choice([None, None, 0, 1, 2]) if pause is None else -1
        self.delay = rng.uniform(1.0, 10.0) if self.after_batches is None else rng.uniform(0.0, 1.5)
        self.reports = runs_dir(cfg.name) / spec.run_id
        self.seen = batch_lines(self.reports)  # a rerun of the backfill keeps its run id: count from here
        tag = uuid.uuid4().hex
        self.marker, self.flags = f"TAILFILL_TEST_MARKER={tag}", log_path.with_suffix(".faults")
        env = env | {"TAILFILL_TEST_MARKER": tag}
        if pause is not None:
            env |= {"TAILFILL_FAULT_PAUSE": pause[0], "TAILFILL_FAULT_SKIP": str(pause[1]),
                    "TAILFILL_FAULT_DIR": str(self.flags)}
        self.started, self.kill_at = time.monotonic(), None
        with log_path.open("w") as log:
            self.proc = subprocess.Popen(spark_submit_command(spec), env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        if self.after_batches is None:
            self.kill_at = self.started + self.delay

    def due(self) -> bool:
        """Whether its moment has come (or it ended by itself)."""
        if self.proc.poll() is not None:
            return True
        if self.pause is not None:
            return (self.flags / self.pause[0]).exists()
        if self.kill_at is None and batch_lines(self.reports) >= self.seen + self.after_batches \
                and " offsets (" in self.log_path.read_text():
            self.kill_at = time.monotonic() + self.delay
        return self.kill_at is not None and time.monotonic() >= self.kill_at

    def kill(self) -> bool:
        """SIGKILL it and all its processes; True if it was still running."""
        running = self.proc.poll() is None
        kill_job_tree(self.proc, self.marker.encode())
        assert running or self.proc.returncode == 0, self.log_path.read_text()[-3000:]
        return running


def warehouse_files(cfg) -> tuple[set[str], set[str]]:
    """(Parquet files on disk, files the data and quarantine tables reference)."""
    on_disk = {str(p) for p in Path(cfg.target.warehouse).rglob("*.parquet")}
    referenced = set()
    for table in ensure_tables(cfg):
        table.refresh()
        referenced |= {t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()}
    return on_disk, referenced


def test_random_sigkills_of_backfill_and_tail_runs(spark, make_pipeline, home, tmp_path, soak):
    """SIGKILL ``spark-submit`` and all its processes (see :class:`Victim`), a backfill and a tail
    running side by side (each replaced by a new run as soon as it is killed), then run both to the
    end: each resumes from the ledger, nothing is lost or doubled, and no file a killed attempt wrote
    ever becomes part of the table.

    The first backfill dies at a fixed point while its executors write data files, the first tail
    between its prepare and its commit; every other kill is at a random moment.
    """
    kills = 50 if soak else 8  # at random; with the 2 fixed points, 10 kills in CI
    seed = int(os.environ.get("TAILFILL_FAULT_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    history, live_step, batch = 24_000, 2_000, 1_000
    # The sample's history is minutes old when the tail reads it: a freshness objective it can meet keeps
    # the backfill from yielding to a killed tail whose last heartbeat is still recent (run/governor.py).
    cfg = make_pipeline(backfill__slices=2, backfill__max_offsets_per_batch=batch, backfill__batch_seconds=None,
                        tail__max_offsets_per_batch=batch, tail__min_offsets_per_batch=batch,
                        tail__freshness_seconds=3_600)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, history, PARTITIONS, bad_every=BAD_EVERY)
    planned = backfill_spec(cfg)  # records the cutover at the end of the history
    assert planned is not None
    env = submit_env() | {"TAILFILL_HOME": str(home)}
    fixed = {"backfill": ("while-writing", 2), "tail": ("before-commit", 1)}  # each kind's first run
    active: dict[str, Victim] = {}
    killed: list[tuple[Victim, bool]] = []  # (victim, it had committed batches of its own)
    killed_files: set[str] = set()  # written by killed attempts, never committed
    launched = 0
    deadline = time.monotonic() + 60 * kills
    while sum(v.pause is None for v, _ in killed) < kills:
        assert time.monotonic() < deadline, f"only {len(killed)} kills landed in {60 * kills}s"
        backfill_left = committed_in(cfg, planned) < total_planned(planned)
        wanted = (["backfill"] if backfill_left else []) + ["tail"]
        for kind in wanted:
            if kind not in active and launched < 3 * kills + 2:
                if kind == "tail":
                    produce_sample(bs, topic, live_step, PARTITIONS, bad_every=BAD_EVERY)
                spec = planned if kind == "backfill" else JobSpec(str(cfg.path), "tail", new_run_id("tail"), once=True)
                launched += 1  # an interrupted backfill is run again with the same plan, as a retry would
                active[kind] = Victim(spec, cfg, env, tmp_path / f"job-{launched}.log", rng, fixed.pop(kind, None))
        for kind, victim in list(active.items()):
            if victim.due():
                del active[kind]
                running = victim.kill()
                assert running or victim.pause is None, f"{kind} ended before its failpoint"
                if running:
                    killed.append((victim, batch_lines(victim.reports) > victim.seen))
                    on_disk, referenced = warehouse_files(cfg)
                    assert referenced <= on_disk, "a committed snapshot references a file that is not there"
                    # Its own files by their names (the run id): the other writer's prepared files are not its.
                    left = {f for f in on_disk - referenced if written_by(f) == victim.spec.run_id}
                    if victim.pause == ("before-commit", 1):  # its batch was prepared: files written, not committed
                        assert left, "the attempt killed before its commit left no prepared files"
                    killed_files |= left
        time.sleep(0.2)
    for victim in active.values():  # the last ones: not counted, they die with the scenario
        victim.kill()

    results = run(planned, spark) + tail(spark, cfg)
    on_disk, referenced = warehouse_files(cfg)
    assert referenced <= on_disk, "a committed snapshot references a file that is not there"
    assert not killed_files & referenced, "a file of a killed attempt became part of the table"
    at_random = [(v, c) for v, c in killed if v.pause is None]
    starting = sum(v.after_batches is None for v, _ in at_random)
    prove(cfg, f"SIGKILL at fixed points, then at random moments ({'soak' if soak else 'CI'}, seed {seed})",
          f"{len(killed)} SIGKILLs of spark-submit and all its processes, a backfill and a tail side by side: 2 at "
          f"failpoints (executors writing data files; between prepare and commit), {starting} while a job "
          f"started, {len(at_random) - starting} 0-1.5 s into one of its first 3 batches",
          f"{sum(c for _, c in killed)} of the killed runs had committed batches of their own; each rerun resumed "
          f"at the ledger's position; the {len(killed_files)} files killed attempts wrote were never referenced",
          sum(r.restarts for r in results))


# --- the broker goes away ----------------------------------------------------------------------


@contextlib.contextmanager
def broker_behind_outage():
    """A tansu broker reachable only through a :class:`TcpOutage` relay (it advertises the relay's address).

    tansu's memory storage does not survive a real restart, and its s3 storage stalls fetches against
    moto here, so the restart is the broker's address going away and coming back: every connection
    reset, new ones refused, then the same address answering again with the same data.
    """
    port, relay_port = free_port(), free_port()
    proc = subprocess.Popen([tansu_binary(), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                             "--advertised-listener-url", f"tcp://127.0.0.1:{relay_port}",
                             "--storage-engine", "memory://tansu/"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        with TcpOutage(port, relay_port) as relay:
            yield f"127.0.0.1:{relay_port}", relay
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_broker_stopped_and_restarted_mid_run(spark, make_pipeline):
    """The broker goes away for 10 s while a backfill runs, then comes back on the same address."""
    with broker_behind_outage() as (bootstrap, relay):
        cfg = make_pipeline(source__bootstrap_servers=bootstrap, backfill__slices=1,
                            backfill__max_offsets_per_batch=1_000, backfill__batch_seconds=None,
                            backfill__max_offsets_per_second=2_000, backfill__max_consecutive_failures=3)
        produce_sample(bootstrap, cfg.source.topic, 16_000, PARTITIONS, bad_every=BAD_EVERY)
        thread, out = in_background(backfill, spark, cfg)
        wait_until(lambda: committed(cfg) >= 2_000, "the first batches to commit")
        relay.down()
        down_at = committed(cfg)
        time.sleep(10)
        relay.up()
        [result] = finished(thread, out)
        assert committed(cfg) > down_at
        prove(cfg, "broker stopped and restarted mid-run",
              f"the broker's address went away for 10 s (connections reset, new ones refused) after {down_at:,} "
              "of 16,000 offsets were committed, then answered again",
              "reads waited for the broker (librdkafka reconnects; the read's idle timeout bounds the wait) or the "
              "query restarted with backoff; the run completed", result.restarts,
              result.causes)


# --- the storage fails ---------------------------------------------------------------------------

# What S3 does wrong, at the data files (Parquet PUTs of the executors' multipart uploads) or at the
# commit (pyiceberg's manifests, manifest lists and metadata.json). The AWS SDK retries each request
# 3 times: the transient faults are absorbed by it, the persistent one fails the write and the job.
S3_FAULTS = {
    "write": [Fault("500", "PUT", r"\.parquet", times=2), Fault("503", "PUT", r"\.parquet", times=2),
              Fault("reset", "PUT", r"\.parquet", times=2), Fault("timeout", "PUT", r"\.parquet"),
              Fault("500", "PUT", r"\.parquet", times=3, after=True)],
    "commit": [Fault("500", "PUT", r"/metadata/", times=2), Fault("reset", "PUT", r"/metadata/", times=2),
               Fault("timeout", "PUT", r"/metadata/"), Fault("503", "PUT", r"/metadata/", times=3),
               Fault("500", "PUT", r"\.metadata\.json", times=3, after=True)],
}


@pytest.mark.parametrize("at", ["write", "commit"])
def test_s3_errors_at_data_file_write_and_at_commit(spark, make_pipeline, s3_endpoint, at):
    with S3FaultProxy(s3_endpoint, hold_seconds=2) as proxy:
        cfg = make_pipeline(s3_endpoint=proxy.endpoint, backfill__slices=1, backfill__max_offsets_per_batch=2_000,
                            backfill__batch_seconds=None, backfill__max_consecutive_failures=4,
                            backfill__restart_backoff_seconds=1)
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 8_000, PARTITIONS, bad_every=BAD_EVERY)
        planned = backfill_spec(cfg)  # tables and cutover are recorded before the faults are armed
        proxy.arm(*S3_FAULTS[at])
        [result] = run(planned, spark)
        proxy.disarm()
        injected = proxy.injected
        assert len(injected) == sum(f.times for f in S3_FAULTS[at]), "every armed fault should have struck"
        assert result.restarts >= 1 and all("OSError" in c or "S3" in c for c in result.causes), result.causes
        kinds = ", ".join(f"{k} ×{sum(i.kind == k for i in injected)}" for k in ("500", "503", "timeout", "reset"))
        prove(cfg, f"S3 errors at {'data-file write' if at == 'write' else 'commit'}",
              f"{len(injected)} faults on {'Parquet uploads' if at == 'write' else 'metadata writes'} "
              f"({kinds}); the last 3 in a row, after the write reached S3",
              "the AWS SDK's retries absorbed the transient ones; each persistent one failed "
              + ("a task's upload, and the batch was prepared again" if at == "write" else "the batch's commit")
              + " after a backoff (replays are idempotent by offsets; files of failed attempts never referenced)",
              result.restarts, result.causes)


def test_a_cutover_that_cannot_be_written_is_one_clear_error(make_pipeline, s3_endpoint, capsys):
    with S3FaultProxy(s3_endpoint) as proxy:
        cfg = make_pipeline(s3_endpoint=proxy.endpoint)
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 100, PARTITIONS)
        ensure_tables(cfg)
        proxy.arm(Fault("503", "PUT", r"/metadata/", times=3))  # more than the AWS SDK retries
        assert cli.main(["backfill", cfg.path]) == 2
        err = capsys.readouterr().err
        proxy.disarm()
        assert read_cutover(ensure_tables(cfg).data) is None  # nothing recorded: the next run tries again
    assert f"cannot record the cutover {{\"{cfg.source.topic}\"" in err and "demo_events" in err, err
    assert "Traceback" not in err


# --- the catalog goes away -----------------------------------------------------------------------


def test_catalog_unavailable_at_commit(spark, make_pipeline, tmp_path, monkeypatch):
    """Postgres (the Iceberg catalog) stops while a batch waits to commit, and comes back 6 s later."""
    base = Path(tempfile.mkdtemp(prefix="tailfill-pg-"))  # outside pytest's private tmp: the server's user reads it
    base.chmod(0o755)
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        catalog = stack.enter_context(LocalPostgres(base / "data", free_port(), databases=("iceberg",)))
        cfg = make_pipeline(catalog_uri=catalog.url("iceberg"), backfill__slices=1,
                            backfill__max_offsets_per_batch=2_000, backfill__batch_seconds=None,
                            backfill__max_consecutive_failures=5, backfill__restart_backoff_seconds=1)
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 12_000, PARTITIONS, bad_every=BAD_EVERY)
        faults = tmp_path / "faults"
        # The driver holds the second batch just before its commit (the workers are not affected).
        monkeypatch.setenv("TAILFILL_FAULT_DIR", str(faults))
        monkeypatch.setenv("TAILFILL_FAULT_PAUSE", "before-commit")
        monkeypatch.setenv("TAILFILL_FAULT_SKIP", "1")
        thread, out = in_background(backfill, spark, cfg)
        wait_until(lambda: (faults / "before-commit").exists(), "the second batch to reach its commit")
        held_at = committed(cfg)
        catalog.stop()
        (faults / "before-commit.release").touch()
        time.sleep(6)
        catalog.start()
        [result] = finished(thread, out)
        monkeypatch.delenv("TAILFILL_FAULT_PAUSE")
        assert result.restarts >= 1, result.causes
        prove(cfg, "catalog unavailable at commit",
              f"the Postgres catalog stopped for 6 s as batch 2 was about to commit ({held_at:,} offsets committed)",
              "the commit failed; the job read no ledger while the catalog was down, restarted with backoff and "
              "replayed the batch once it was back", result.restarts, result.causes)


# --- two writers at once ---------------------------------------------------------------------------


def test_overlapping_backfills_and_the_tail_at_once(postgres, make_pipeline, tmp_path):
    """Two backfills of overlapping ranges and a tail, as three ``spark-submit`` at once on one table.

    The catalog is on Postgres, where commits race for real (SQLite serialises writers on a file
    lock): pyiceberg's optimistic commit (``UPDATE … WHERE metadata_location = <the one read>``) and
    the ledger's re-read on conflict keep the writers apart. Their commits must interleave.
    """
    history, live = 12_000, 4_000
    database = f"iceberg_{uuid.uuid4().hex[:8]}"
    postgres.create_databases(database)
    cfg = make_pipeline(catalog_uri=postgres.url(database), backfill__slices=1, backfill__max_offsets_per_batch=1_000,
                        backfill__batch_seconds=None, tail__max_offsets_per_batch=1_000,
                        tail__min_offsets_per_batch=1_000)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, history, PARTITIONS, bad_every=BAD_EVERY)
    assert backfill_spec(cfg) is not None  # records the cutover at the end of the history
    produce_sample(bs, topic, live, PARTITIONS, bad_every=BAD_EVERY)
    per = history // PARTITIONS

    def bounds(lo: int, hi: int) -> tuple[PartitionOffsets, PartitionOffsets]:
        """``[lo, hi)`` on every partition."""
        return (PartitionOffsets.from_dict({topic: {str(p): lo for p in range(PARTITIONS)}}),
                PartitionOffsets.from_dict({topic: {str(p): hi for p in range(PARTITIONS)}}))

    first = backfill_spec(cfg, *bounds(0, 2 * per // 3))
    second = backfill_spec(cfg, *bounds(per // 3, per))
    specs = [first, second, JobSpec(str(cfg.path), "tail", new_run_id("tail"), once=True)]
    submit_at_once(specs, tmp_path)
    overlap = (2 * per // 3 - per // 3) * PARTITIONS
    reports = [b for spec in specs for f in (runs_dir(cfg.name) / spec.run_id).glob("*.jsonl") for b in read_reports(f)]
    skipped = sum(r.size for b in reports for r in b.skipped)
    assert skipped <= overlap, "a writer skipped offsets outside the overlap"
    data = ensure_tables(cfg).data  # in commit order, some run's commits are split by another's
    order = [s.summary.additional_properties[SUMMARY_RUN]
             for s in sorted(data.snapshots(), key=lambda s: s.sequence_number)
             if s.summary and SUMMARY_RUN in s.summary.additional_properties]
    assert set(order) == {spec.run_id for spec in specs}, order
    switches = sum(a != b for a, b in itertools.pairwise(order))
    assert switches > len(specs) - 1, f"the runs committed one after another, not concurrently: {order}"
    prove(cfg, "two writers: overlapping backfills and the tail at once",
          f"backfills of [0, {2 * per // 3}) and [{per // 3}, {per}) per partition ({overlap:,} offsets in both) "
          "and a tail of the 4,000 after the cutover: three spark-submits on one table, catalog on Postgres",
          f"commits interleaved ({switches} switches between writers); each commit re-read the ledger: {skipped:,} "
          "offsets read by both were committed by one and skipped by the other", 0)
