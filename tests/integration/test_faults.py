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
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml
from conftest import REPO
from crashes import CatalogServer, own_postgres
from fault_outcomes import prove
from helpers import (
    backfill,
    besides_infrastructure,
    committed,
    fill,
    finished,
    in_background,
    kill_job_tree,
    provision,
    small_disk,
    submit_at_once,
    tables_of,
    tail,
    tail_spec,
    wait_until,
)
from s3_fault_proxy import Fault, S3FaultProxy
from tcp_outage import broker_behind_outage

from tailfill import cli
from tailfill.dev.change_stream import change_stream, fold, produce_changes
from tailfill.dev.sample import produce_sample
from tailfill.errors import TailfillError
from tailfill.lake.batch_summary import SUMMARY_RUN, BatchSummary
from tailfill.lake.files import written_by
from tailfill.lake.ledger import batch_summaries, read_cutover, read_ledger
from tailfill.offsets import (
    OffsetRange,
    PartitionOffsets,
    intersect_all,
    merge,
    subtract,
    total,
)
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.run.contract import JobSpec
from tailfill.run.planner import backfill_spec
from tailfill.run.spark_job import run
from tailfill.run.submit import spark_submit_command, submit_env
from tailfill.state.store import StateStore, run_reports

pytestmark = [pytest.mark.integration, pytest.mark.faults]

PARTITIONS, BAD_EVERY = 4, 499


def committed_in(cfg, spec: JobSpec) -> int:
    """Offsets of a backfill spec's slices that the table holds."""
    data = tables_of(cfg).data
    data.refresh()
    return total(intersect_all(read_ledger(data).committed, [r for s in spec.slices for r in s.ranges]))


def batch_lines(cfg, run_id: str) -> int:
    """Batch reports written so far by one run."""
    return len(run_reports(StateStore.of(cfg), run_id))


def total_planned(spec: JobSpec) -> int:
    return sum(total(s.ranges) for s in spec.slices)


# --- the job process dies ----------------------------------------------------------------------


class Victim:
    """One ``spark-submit`` of the SIGKILL scenario and the moment it dies at.

    At random: ``after_batches`` None kills it 1-10 s after launch (while the job starts); otherwise
    0-1.5 s after its query began its batches and committed that many of them (in a prepare, between
    prepare and commit, in a commit, or between batches). At a fixed point: ``pause`` holds the job at
    a failpoint of :mod:`tailfill.failpoints` (after ``skip`` arrivals) and kills it there. Each victim
    has its own marker, so a kill takes only its own processes.
    """

    def __init__(self, spec: JobSpec, cfg, env: dict, log_path: Path, rng: random.Random,
                 pause: tuple[str, int] | None = None):
        self.spec, self.log_path, self.pause = spec, log_path, pause
        self.after_batches = rng.choice([None, None, 0, 1, 2]) if pause is None else -1
        self.delay = rng.uniform(1.0, 10.0) if self.after_batches is None else rng.uniform(0.0, 1.5)
        self.cfg = cfg
        self.seen = batch_lines(cfg, spec.run_id)  # a rerun of the backfill keeps its run id: count from here
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
        if self.kill_at is None and batch_lines(self.cfg, self.spec.run_id) >= self.seen + self.after_batches \
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
    """(Parquet files on disk, files the data and quarantine tables reference). The tables are read first: a job
    still running may commit in between, and a file it commits was on disk before its commit."""
    referenced = set()
    for table in tables_of(cfg):
        table.refresh()
        referenced |= {t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()}
    on_disk = {str(p) for p in Path(cfg.target.warehouse).rglob("*.parquet")}
    return on_disk, referenced


class Events:
    """The scenario's records: sample events (one in :data:`BAD_EVERY` malformed) into an append table; ``most``:
    how many it may be asked for in all."""

    table = "events"

    def __init__(self, make_pipeline, most: int, **settings):
        self.cfg = make_pipeline(**settings)

    def produce(self, count: int) -> None:
        produce_sample(self.cfg.source.bootstrap_servers, self.cfg.source.topic, count, PARTITIONS,
                       bad_every=BAD_EVERY)

    def check(self) -> None:
        """What the table must hold besides every offset once (:func:`fault_outcomes.prove` counts those)."""


class Changes(Events):
    """The scenario's records: a Debezium change stream (inserts, updates, deletes, tombstones) into a keyed
    table, whose state must be the fold of every change produced."""

    table = "keyed table"

    def __init__(self, make_pipeline, most: int, **settings):
        shipped = yaml.safe_load((REPO / "pipelines/orders_cdc.yaml").read_text())  # its format and key
        self.cfg = make_pipeline(format=shipped["format"], target__mode="upsert", target__key=["order_id"],
                                 target__state_table="itest_state", expectations=[], **settings)
        self.stream = change_stream(most, most // 10, partitions=PARTITIONS, snapshot=2_000)
        self.sent = 0

    def produce(self, count: int) -> None:
        changes, self.sent = self.stream[self.sent:self.sent + count], self.sent + count
        assert len(changes) == count, "the scenario produced more changes than its stream holds"
        produce_changes(self.cfg.source.bootstrap_servers, self.cfg.source.topic, changes, PARTITIONS)

    def check(self) -> None:
        state = open_pipeline(self.cfg).open_state_table()
        rows = state.scan(selected_fields=("order_id", "kafka_partition", "kafka_offset")).to_arrow().to_pylist()
        held = {r["order_id"]: (r["kafka_partition"], r["kafka_offset"]) for r in rows}
        assert len(held) == len(rows), "a key has two rows in the state"
        assert held == fold(self.stream[:self.sent]), "the state is not the fold of the changes produced"


@pytest.mark.parametrize("records", [Events, Changes], ids=["events", "changes"])
def test_random_sigkills_of_backfill_and_tail_runs(spark, make_pipeline, home, tmp_path, soak, records):
    """SIGKILL ``spark-submit`` and all its processes (see :class:`Victim`), a backfill and a tail
    running side by side (each replaced by a new run as soon as it is killed), then run both to the
    end: each resumes from the ledger, nothing is lost or doubled, and no file a killed attempt wrote
    ever becomes part of the table. With a keyed table (``changes``) the kills also land in its merges,
    and its state must end as the fold of every change.

    The first backfill dies at a fixed point while its executors write data files, the first tail
    between its prepare and its commit; every other kill is at a random moment.
    """
    kills = soak or 5  # at random (--soak: 50, or --soak-kills); with the 2 fixed points, 7 kills in CI
    seed = int(os.environ.get("TAILFILL_FAULT_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    began = time.monotonic()
    history, live_step, batch = 24_000, 2_000, 1_000
    # The sample's history is minutes old when the tail reads it: a freshness objective it can meet keeps
    # the backfill from yielding to a killed tail whose last heartbeat is still recent (run/governor.py).
    feed = records(make_pipeline, history + live_step * (3 * kills + 2), backfill__slices=2,
                   backfill__max_offsets_per_batch=batch,
                   backfill__batch_seconds=None, tail__max_offsets_per_batch=batch,
                   tail__min_offsets_per_batch=batch, tail__freshness_seconds=3_600)
    cfg = feed.cfg
    feed.produce(history)
    planned = backfill_spec(open_pipeline(cfg))  # records the cutover at the end of the history
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
                    feed.produce(live_step)
                spec = planned if kind == "backfill" else tail_spec(cfg)
                launched += 1  # an interrupted backfill is run again with the same plan, as a retry would
                active[kind] = Victim(spec, cfg, env, tmp_path / f"job-{launched}.log", rng, fixed.pop(kind, None))
        for kind, victim in list(active.items()):
            if victim.due():
                del active[kind]
                running = victim.kill()
                assert running or victim.pause is None, f"{kind} ended before its failpoint"
                if running:
                    killed.append((victim, batch_lines(victim.cfg, victim.spec.run_id) > victim.seen))
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
    feed.check()
    at_random = [(v, c) for v, c in killed if v.pause is None]
    starting = sum(v.after_batches is None for v, _ in at_random)
    prove(cfg, f"SIGKILL at fixed points, then at random moments, {feed.table} ({'soak' if soak else 'CI'}, "
          f"seed {seed}, {(time.monotonic() - began) / 60:.0f} min)",
          f"{len(killed)} SIGKILLs of spark-submit and all its processes, a backfill and a tail side by side: 2 at "
          f"failpoints (executors writing data files; between prepare and commit), {starting} while a job "
          f"started, {len(at_random) - starting} 0-1.5 s into one of its first 3 batches",
          f"{sum(c for _, c in killed)} of the killed runs had committed batches of their own; each rerun resumed "
          f"at the ledger's position; the {len(killed_files)} files killed attempts wrote were never referenced",
          sum(r.restarts for r in results))


# --- the broker goes away ----------------------------------------------------------------------


def test_broker_stopped_and_restarted_mid_run(spark, make_pipeline):
    """The broker goes away for 10 s while a backfill runs, then comes back on the same address.

    The job must feel it (a restart, or a batch that waited through the outage) and complete.
    """
    outage = 10.0
    with broker_behind_outage() as (bootstrap, relay):
        cfg = make_pipeline(source__bootstrap_servers=bootstrap, backfill__slices=1,
                            backfill__max_offsets_per_batch=1_000, backfill__batch_seconds=None,
                            backfill__max_offsets_per_second=2_000, backfill__max_consecutive_failures=3)
        produce_sample(bootstrap, cfg.source.topic, 16_000, PARTITIONS, bad_every=BAD_EVERY)
        thread, out = in_background(backfill, spark, cfg)
        wait_until(lambda: committed(cfg) >= 2_000, "the first batches to commit")
        relay.down()
        down_at, down_t = committed(cfg), time.time()
        time.sleep(outage)
        relay.up()
        up_t = time.time()
        [result] = finished(thread, out)
        assert committed(cfg) > down_at
        # Felt: the query failed and restarted, or a batch begun before the outage was half over ended
        # only after the broker was back (it waited; batches here take about a second).
        batches = run_reports(StateStore.of(cfg), result.run_id)
        waited = [b for b in batches if b.at - b.seconds < down_t + outage / 2 and b.at >= up_t]
        assert result.restarts >= 1 or waited, (
            "the outage went unnoticed: no restart, and no batch waited through it: "
            f"{[(b.at, b.seconds) for b in batches]}")
        felt = [f"{result.restarts} restart(s)"] if result.restarts else []
        felt += [f"batch {b.batch_id} waited {b.seconds:.0f} s" for b in waited]
        prove(cfg, "broker stopped and restarted mid-run",
              f"the broker's address went away for {outage:.0f} s (connections reset, new ones refused) after "
              f"{down_at:,} of 16,000 offsets were committed, then answered again",
              "reads waited for the broker (librdkafka reconnects; the read's idle timeout bounds the wait) or the "
              f"query restarted with backoff (here: {', '.join(felt)}); the run completed", result.restarts,
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
        planned = backfill_spec(open_pipeline(cfg))  # tables and cutover are recorded before the faults are armed
        proxy.arm(*S3_FAULTS[at])
        [result] = run(planned, spark)
        proxy.disarm()
        injected = proxy.injected
        assert len(injected) == sum(f.times for f in S3_FAULTS[at]), "every armed fault should have struck"
        # Restarts for S3's errors, and maybe for a machine too busy to start Spark's Python workers in time
        s3 = [c for c in result.causes if "OSError" in c or "S3" in c]
        assert s3 and all(c in s3 for c in besides_infrastructure(result.causes)), result.causes
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
        provision(cfg)  # the tables as an earlier plan made them
        proxy.arm(Fault("503", "PUT", r"/metadata/", times=3))  # more than the AWS SDK retries
        assert cli.main(["backfill", cfg.path]) == 2
        err = capsys.readouterr().err
        proxy.disarm()
        assert read_cutover(tables_of(cfg).data) is None  # nothing recorded: the next run tries again
    assert f"cannot record the cutover {{\"{cfg.source.topic}\"" in err and "demo_events" in err, err
    assert "Traceback" not in err


# --- the catalog goes away -----------------------------------------------------------------------


def test_catalog_unavailable_at_commit(spark, make_pipeline, tmp_path, monkeypatch):
    """Postgres (the Iceberg catalog) stops while a batch waits to commit, and comes back 6 s later."""
    with contextlib.ExitStack() as stack:
        catalog = own_postgres(stack)
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


class Moment(NamedTuple):
    """When a crash scenario's kill is due (``ready``), and what to undo right after it (``done``)."""

    ready: Callable[[], bool]
    done: Callable[[], None] = lambda: None


def after_a_commit(cfg) -> Moment:
    """Due once the table's ledger grew (then the scenario waits 0-2 s more, at random)."""
    before = committed(cfg)
    return Moment(lambda: committed(cfg) > before)


def backfill_through_crashes(spark, cfg, planned: JobSpec, server, kinds: list[str], arm: Callable[[str], Moment],
                             rng: random.Random) -> tuple[list, list[BaseException]]:
    """Run the backfill ``planned`` began, in-process, while ``server`` is SIGKILLed once per entry of ``kinds``
    (at the moment ``arm(kind)`` readies; ``random``: 0-2 s after one) and started again on its data after
    0.5-4 s. A run that gives up is run again, as a retry would, until the plan is committed.

    Returns the runs' results and the errors of the runs that gave up."""
    results, failed_runs = [], []

    def ended(job: tuple) -> bool:
        if job[0].is_alive():
            return False
        (results.extend(job[1]["result"]) if "result" in job[1] else failed_runs.append(job[1]["error"]))
        return True

    limit = 2 * len(kinds) + 4
    job = in_background(backfill, spark, cfg)
    while kinds:
        assert len(failed_runs) <= limit, f"the backfill kept failing: {failed_runs[-3:]}"
        assert committed_in(cfg, planned) < total_planned(planned), f"finished with {len(kinds)} kills to go"
        moment = arm(kinds[-1])
        try:
            wait_until(lambda job=job, moment=moment: moment.ready() or not job[0].is_alive(),
                       f"the moment to kill ({kinds[-1]})", timeout=300)
            if kinds[-1] == "random":
                time.sleep(rng.uniform(0.0, 2.0))
            if ended(job):  # it ended before this kill's moment: run it again, then kill
                job = in_background(backfill, spark, cfg)
                continue
            server.kill()
            kinds.pop()
        finally:
            moment.done()
        time.sleep(rng.uniform(0.5, 4.0))
        server.start()
        if ended(job):
            job = in_background(backfill, spark, cfg)
    while True:
        job[0].join(timeout=900)
        assert ended(job), "a backfill run did not end within 15 min after the last kill"
        if committed_in(cfg, planned) == total_planned(planned):
            return results, failed_runs
        assert len(failed_runs) <= limit, f"the backfill kept failing: {failed_runs[-3:]}"
        job = in_background(backfill, spark, cfg)


def test_catalog_postgres_killed_in_the_middle_of_commits(spark, make_pipeline, tmp_path, soak):
    """The catalog's Postgres is SIGKILLed (postmaster and backends) while a backfill commits, and restarted on
    its data: some kills land with a commit's ``UPDATE`` in flight (held there by a row lock the test takes, so
    the moment is exact), the others at a random moment after a batch. The job restarts within its failure
    budget or ends with an error and is run again. Nothing is lost, nothing doubled, whatever the catalog had
    or had not made durable when it died."""
    in_commit, at_random = (8, 8) if soak else (2, 2)
    seed = int(os.environ.get("TAILFILL_FAULT_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    with contextlib.ExitStack() as stack:
        server = own_postgres(stack)
        cfg = make_pipeline(catalog_uri=server.url("iceberg"), backfill__slices=2,
                            backfill__max_offsets_per_batch=1_000, backfill__batch_seconds=None,
                            backfill__max_consecutive_failures=3, backfill__restart_backoff_seconds=1)
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 6_000 * (in_commit + at_random), PARTITIONS,
                       bad_every=BAD_EVERY)
        planned = backfill_spec(open_pipeline(cfg))  # makes the tables and records the cutover
        assert planned is not None
        catalog = CatalogServer(server, cfg)

        def arm(kind: str) -> Moment:
            if kind == "random":
                return after_a_commit(cfg)
            held = catalog.hold_next_commit()
            return Moment(lambda: catalog.commits_waiting() > 0, held.close)

        kinds = ["in-commit"] * in_commit + ["random"] * at_random
        rng.shuffle(kinds)
        results, failed_runs = backfill_through_crashes(spark, cfg, planned, catalog, kinds, arm, rng)
        for error in failed_runs:  # a run that gave up says why, in one line naming the catalog
            assert len(str(error).splitlines()) == 1 and "catalog" in str(error).lower(), repr(error)
        prove(cfg, f"catalog Postgres SIGKILLed mid-commit ({'soak' if soak else 'CI'}, seed {seed})",
              f"{in_commit + at_random} SIGKILLs of Postgres (postmaster and backends), each restarted on its data "
              f"after 0.5-4 s: {in_commit} with a commit's UPDATE in flight, {at_random} 0-2 s after a batch committed",
              f"the backfill restarted within its failure budget or ended with the catalog's error and was run "
              f"again ({len(failed_runs)} runs gave up); each run resumed at the ledger's position",
              sum(r.restarts for r in results), [c for r in results for c in r.causes])


def test_object_store_and_its_rest_catalog_killed_mid_upload(spark, make_pipeline, tmp_path, soak):
    """SeaweedFS — the S3 warehouse and the Iceberg REST catalog in one process — is SIGKILLed and restarted on its
    data while a backfill runs: some kills while executors stream a data file to it (held at the ``while-writing``
    failpoint, so the upload is open), the others at a random moment after a batch. Uploads and commits fail;
    the job restarts or is run again; the proof reads every row of every file the table references."""
    from seaweedfs import SeaweedFS

    mid_upload, at_random = (6, 6) if soak else (2, 1)
    seed = int(os.environ.get("TAILFILL_FAULT_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    faults = Path(os.environ["TAILFILL_FAULT_DIR"])  # the session's: Spark's Python workers see it
    base = Path(tempfile.mkdtemp(prefix="tailfill-seaweedfs-"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        store = stack.enter_context(SeaweedFS(base))
        cfg = make_pipeline(rest=store, backfill__slices=2, backfill__max_offsets_per_batch=1_000,
                            backfill__batch_seconds=None, backfill__max_consecutive_failures=3,
                            backfill__restart_backoff_seconds=1)
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 6_000 * (mid_upload + at_random), PARTITIONS,
                       bad_every=BAD_EVERY)
        planned = backfill_spec(open_pipeline(cfg))
        assert planned is not None

        def clear_flags() -> None:
            for name in ("pause-while-writing", "while-writing", "while-writing.arrivals", "while-writing.release"):
                (faults / name).unlink(missing_ok=True)

        def release() -> None:
            (faults / "pause-while-writing").unlink(missing_ok=True)  # no later write waits
            (faults / "while-writing.release").touch()  # the held ones go on, against a dead or new store
            time.sleep(1.0)
            clear_flags()

        def arm(kind: str) -> Moment:
            if kind == "random":
                return after_a_commit(cfg)
            clear_flags()
            (faults / "pause-while-writing").touch()
            return Moment(lambda: (faults / "while-writing").exists(), release)

        stack.callback(clear_flags)
        kinds = ["mid-upload"] * mid_upload + ["random"] * at_random
        rng.shuffle(kinds)
        results, failed_runs = backfill_through_crashes(spark, cfg, planned, store, kinds, arm, rng)
        prove(cfg, f"object store and REST catalog SIGKILLed ({'soak' if soak else 'CI'}, seed {seed})",
              f"{mid_upload + at_random} SIGKILLs of SeaweedFS (S3 and the REST catalog), each restarted on its "
              f"data after 0.5-4 s: {mid_upload} while executors were writing a data file to it, {at_random} "
              "0-2 s after a batch committed",
              f"uploads and commits failed; the backfill restarted within its failure budget or was run again "
              f"({len(failed_runs)} runs gave up); each run resumed at the ledger's position",
              sum(r.restarts for r in results), [c for r in results for c in r.causes])


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
    assert backfill_spec(open_pipeline(cfg)) is not None  # records the cutover at the end of the history
    produce_sample(bs, topic, live, PARTITIONS, bad_every=BAD_EVERY)
    per = history // PARTITIONS

    def bounds(lo: int, hi: int) -> tuple[PartitionOffsets, PartitionOffsets]:
        """``[lo, hi)`` on every partition."""
        return (PartitionOffsets.from_dict({topic: {str(p): lo for p in range(PARTITIONS)}}),
                PartitionOffsets.from_dict({topic: {str(p): hi for p in range(PARTITIONS)}}))

    first = backfill_spec(open_pipeline(cfg), *bounds(0, 2 * per // 3))
    second = backfill_spec(open_pipeline(cfg), *bounds(per // 3, per))
    specs = [first, second, tail_spec(cfg)]
    results = [r for rs in submit_at_once(specs, tmp_path).values() for r in rs]
    overlap = (2 * per // 3 - per // 3) * PARTITIONS
    reports = {spec.run_id: run_reports(StateStore.of(cfg), spec.run_id) for spec in specs}
    skipped = merge(r for batches in reports.values() for b in batches for r in b.skipped)
    outside = subtract(skipped, [OffsetRange(topic, p, per // 3, 2 * per // 3) for p in range(PARTITIONS)])
    assert not outside, f"a writer skipped offsets outside the overlap: {outside}"
    # Each backfill starts at the ledger's position when it starts, so the second may begin past what the
    # first already committed; what both read, one of them must have committed and the other skipped.
    read = [merge(r for b in reports[spec.run_id] for r in (*b.committed, *b.skipped)) for spec in (first, second)]
    both = intersect_all(*read)
    assert total(both) > 0, f"no report shows an offset both backfills read (committed or skipped): {read}"
    assert not subtract(both, skipped), f"offsets both writers read were committed by both: {subtract(both, skipped)}"
    data = tables_of(cfg).data  # in commit order, some run's commits are split by another's
    order = [s.summary.additional_properties[SUMMARY_RUN]
             for s in sorted(data.snapshots(), key=lambda s: s.sequence_number)
             if s.summary and SUMMARY_RUN in s.summary.additional_properties]
    assert set(order) == {spec.run_id for spec in specs}, order
    switches = sum(a != b for a, b in itertools.pairwise(order))
    assert switches > len(specs) - 1, f"the runs committed one after another, not concurrently: {order}"
    prove(cfg, "two writers: overlapping backfills and the tail at once",
          f"backfills of [0, {2 * per // 3}) and [{per // 3}, {per}) per partition ({overlap:,} offsets in both) "
          "and a tail of the 4,000 after the cutover: three spark-submits on one table, catalog on Postgres",
          f"commits interleaved ({switches} switches between writers); each commit re-read the ledger: the "
          f"{total(both):,} offsets both backfills read were committed by one and skipped by the other",
          sum(r.restarts for r in results), [c for r in results for c in r.causes])


def offsets_by_snapshot(cfg, run_id: str) -> set[tuple[int, int]]:
    """(partition, offset) of the rows ``run_id``'s snapshots added to the data table, and of its quarantined rows."""
    data, quarantine = tables_of(cfg)
    data.refresh()
    quarantine.refresh()

    def at(snapshot_id: int | None) -> set[tuple[int, int]]:
        if snapshot_id is None:
            return set()
        arrow = data.scan(snapshot_id=snapshot_id, selected_fields=("kafka_partition", "kafka_offset")).to_arrow()
        return set(zip(arrow["kafka_partition"].to_pylist(), arrow["kafka_offset"].to_pylist(), strict=True))

    added = set()
    for snap in data.snapshots():
        if snap.summary and snap.summary.additional_properties.get(SUMMARY_RUN) == run_id:
            added |= at(snap.snapshot_id) - at(snap.parent_snapshot_id)
    bad = quarantine.scan(row_filter=f"run_id == '{run_id}'",
                          selected_fields=("kafka_partition", "kafka_offset")).to_arrow()
    return added | set(zip(bad["kafka_partition"].to_pylist(), bad["kafka_offset"].to_pylist(), strict=True))


def test_a_batch_committed_in_part_by_another_writer_commits_only_the_rest(spark, make_pipeline, tmp_path,
                                                                          monkeypatch):
    """A backfill's one batch is held between its prepare and its commit (failpoint ``before-commit``) while
    another writer commits part of its ranges: the middle of partition 0 and all of partition 2. Released,
    the batch commits exactly the rest (its files rewritten to the uncommitted rows) and its report names
    what it skipped."""
    per = 1_000
    cfg = make_pipeline(backfill__slices=1, backfill__max_offsets_per_batch=PARTITIONS * per,
                        backfill__batch_seconds=None, backfill__min_batches_per_lane=1)
    topic = cfg.source.topic
    produce_sample(cfg.source.bootstrap_servers, topic, PARTITIONS * per, PARTITIONS, bad_every=BAD_EVERY)
    held = backfill_spec(open_pipeline(cfg))  # one slice, one batch: [0, 1000) of every partition
    # The other writer: same table, its own checkpoints (as another machine's would be).
    other_yaml = yaml.safe_load(Path(cfg.path).read_text()) | {"checkpoint_location": str(tmp_path / "other")}
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / Path(cfg.path).name).write_text(yaml.safe_dump(other_yaml))
    other_cfg = load_pipeline(tmp_path / "other" / Path(cfg.path).name)

    faults = tmp_path / "faults"
    monkeypatch.setenv("TAILFILL_FAULT_DIR", str(faults))
    monkeypatch.setenv("TAILFILL_FAULT_PAUSE", "before-commit")
    thread, out = in_background(run, held, spark)
    wait_until(lambda: (faults / "before-commit").exists(), "the batch to be prepared and held before its commit")
    monkeypatch.delenv("TAILFILL_FAULT_PAUSE")  # the other writer is not held
    assert committed(cfg) == 0
    [other] = backfill(spark, other_cfg, start={topic: {"0": 250, "2": 0}}, end={topic: {"0": 500, "2": per}})
    assert other.offsets == 250 + per
    (faults / "before-commit.release").touch()
    [result] = finished(thread, out)

    def ranges(*bounds: tuple[int, int, int]) -> list[OffsetRange]:
        return [OffsetRange(topic, p, start, end) for p, start, end in bounds]

    kept = ranges((0, 0, 250), (0, 500, per), (1, 0, per), (3, 0, per))
    skipped = ranges((0, 250, 500), (2, 0, per))
    [report] = run_reports(StateStore.of(cfg), held.run_id)
    assert (report.committed, report.skipped) == (kept, skipped)
    assert report.offsets == PARTITIONS * per and result.skipped_offsets == 0  # a partial commit is not a skip
    summary = BatchSummary.from_properties(
        next(s for s in batch_summaries(tables_of(cfg).data) if s[SUMMARY_RUN] == held.run_id))
    assert summary.ranges == kept
    # What it read in the kept part (every offset is a record here): the proof of absent offsets compares
    # this with what is stored, so the whole batch's count would have reported the skipped part missing.
    assert summary.records_read == total(kept)
    # The rows the held batch added are exactly its uncommitted part: its files were rewritten.
    assert offsets_by_snapshot(cfg, held.run_id) == {(r.partition, o) for r in kept for o in range(r.start, r.end)}
    assert offsets_by_snapshot(cfg, other.run_id) == {(r.partition, o) for r in skipped
                                                      for o in range(r.start, r.end)}
    prove(cfg, "two writers: a batch committed in part by another writer before its commit",
          f"a backfill's batch of {PARTITIONS * per:,} offsets held between prepare and commit while another writer "
          f"committed {total(skipped):,} of them (the middle of one partition, all of another)",
          f"the batch re-read the ledger at its commit, rewrote its files to the {total(kept):,} uncommitted offsets "
          f"and committed those; its report names the {total(skipped):,} it skipped", result.restarts)


# --- the disk fills up -----------------------------------------------------------------------------


def one_line_naming(error: BaseException, disk: Path) -> str:
    text = str(error)
    assert "\n" not in text and "the disk is full: could not write" in text and str(disk) in text, repr(text)
    return text


def test_a_full_disk_is_one_line_and_the_run_completes_once_space_is_back(spark, make_pipeline, tmp_path, capsys):
    """The disk of the warehouse, the catalog and the run state fills up: in the middle of a backfill (data files),
    then under a tail and a validation with the disk already full (state, reports). Each run stops with one line
    naming what it could not write and where; nothing is half-committed; once there is space, the runs
    complete and the proof holds."""
    with small_disk(tmp_path / "disk", "1m") as disk:
        cfg = make_pipeline(target__warehouse=str(disk / "warehouse"), target__catalog__uri=f"sqlite:///{disk}/c.db",
                            backfill__slices=1, backfill__max_offsets_per_batch=2_000, backfill__batch_seconds=None,
                            backfill__max_consecutive_failures=1, backfill__restart_backoff_seconds=1,
                            tail__max_consecutive_failures=1, tail__restart_backoff_seconds=1)
        bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
        produce_sample(bs, topic, 40_000, PARTITIONS, bad_every=BAD_EVERY)
        with pytest.raises(TailfillError) as stopped:
            backfill(spark, cfg)
        said = one_line_naming(stopped.value, disk)
        held = committed(cfg)
        assert 0 < held < 40_000, said
        on_disk, referenced = warehouse_files(cfg)
        assert referenced <= on_disk, "a committed snapshot references a file the full disk did not take"

        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        backfill(spark, cfg)
        assert committed(cfg) == 40_000
        filler = fill(disk)
        produce_sample(bs, topic, 4_000, PARTITIONS, bad_every=BAD_EVERY)
        with pytest.raises(TailfillError) as stopped:
            tail(spark, cfg)
        one_line_naming(stopped.value, disk)
        assert committed(cfg) == 40_000
        capsys.readouterr()
        assert cli.main(["validate", str(cfg.path), "--all"]) != 0
        lines = [ln for ln in capsys.readouterr().err.splitlines() if "the disk is full" in ln]
        assert len(lines) == 1 and str(disk) in lines[0], lines

        filler.unlink()
        tail(spark, cfg)
        prove(cfg, "a full disk",
              "the disk of the warehouse, the SQLite catalog and the run state (1 MB) filled by a backfill's data "
              "files; later filled to the last byte under a tail and a validation",
              f"each run stopped with one line (`{said[said.index('the disk is full'):][:80]}…`); nothing "
              f"half-committed ({held:,} offsets "
              "committed, every referenced file whole); once the disk grew and was freed, the runs completed",
              0)
