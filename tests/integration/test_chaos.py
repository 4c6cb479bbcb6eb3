"""The chaos soak: every part around the job dies, again and again, while a backfill, the tail, ``maintain`` and
``validate`` run, and the table still ends with every offset exactly once.

``pytest -m faults --chaos`` (outside ``make test``): ``--chaos-minutes`` (default 30) of faults, one every
``minutes * 60 / --chaos-faults`` seconds (default 120 faults), drawn with a seed (``TAILFILL_FAULT_SEED``
repeats a run). The catalog is on Postgres, the warehouse on SeaweedFS behind the S3 fault proxy, the broker
behind a TCP relay that can go away. The backfill is a ``spark-submit`` run, as Airflow's lanes run it; the
tails take turns between ``spark-submit`` and ``tailfill tail --spark connect`` on the home's long-lived Spark
Connect server.

Fault classes: a job SIGKILLed with all its processes; a job's driver JVM SIGKILLed alone; the catalog's Postgres
SIGKILLed (postmaster and backends) and restarted on its data; SeaweedFS SIGKILLed and restarted on its data;
the broker's address gone for 3-10 s; a burst of S3 errors (500, 503, resets) on data-file and metadata PUTs;
the Spark Connect server SIGKILLed with its Python workers (the next tail on Connect starts a new one).

A run that fails is started again, as a scheduler would; ``validate --all`` runs throughout and must never find
a lost or doubled offset (it may fail to run while a server is down: that is counted, not hidden). At the end
the faults stop and the backfill and the tail run to completion without anyone deleting anything; the table is
proven as every fault scenario is.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from crashes import CatalogServer, own_postgres
from fault_outcomes import prove
from helpers import committed, tables_of, tail_spec
from processes import kill_marked, processes_with
from s3_fault_proxy import Fault, S3FaultProxy
from seaweedfs import SeaweedFS
from tcp_outage import broker_behind_outage

from tailfill.dev.sample import produce_sample
from tailfill.lake.ledger import read_ledger
from tailfill.offsets import intersect_all, total
from tailfill.pipeline.handle import open_pipeline
from tailfill.run import connect_server
from tailfill.run.contract import JobSpec
from tailfill.run.planner import backfill_spec
from tailfill.run.spark_job import run
from tailfill.run.submit import spark_submit_command, submit_env

pytestmark = [pytest.mark.integration, pytest.mark.faults]

PARTITIONS, BAD_EVERY = 4, 499
CLI = str(Path(sys.executable).parent / "tailfill")
KINDS = ("job", "driver", "catalog", "store", "broker", "s3", "server")


class Process:
    """One run (``spark-submit`` or a CLI command) with a marker of its own, so a kill takes only its processes."""

    def __init__(self, name: str, args: list[str], env: dict, log_path: Path, marked: bool = True):
        """``marked``: its processes carry a marker of their own; not for a client of a long-lived server, which
        would hand the marker to the server it starts (and a kill of the run would take the server too)."""
        self.name, self.log_path = name, log_path
        tag = uuid.uuid4().hex
        self.marker = f"TAILFILL_TEST_MARKER={tag}".encode() if marked else None
        with log_path.open("w") as log:
            self.proc = subprocess.Popen(args, env=env | ({"TAILFILL_TEST_MARKER": tag} if marked else {}),
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the run and every process it started."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 9)
        self.proc.wait(timeout=30)
        if self.marker is not None:
            kill_marked(self.marker)

    def kill_driver(self) -> bool:
        """SIGKILL only the driver's JVM (``SparkSubmit``); True if there was one."""
        for pid in processes_with(self.marker) if self.marker is not None else ():
            with contextlib.suppress(OSError):
                if b"org.apache.spark.deploy.SparkSubmit" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, 9)
                    return True
        return False

    def tail_of_log(self, chars: int = 1500) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


# What a mid-chaos ``validate --all`` reports of a real fault. The rest is what runs in flight leave: a running
# backfill's ranges leave gaps, and a batch's quarantine rows are committed just before its data rows and ledger
# (stored outside every committed range, for a moment).
FAULTS = ("missing ", "duplicated ", "overlapping committed ranges")


def verdict_of(code: int, output: str) -> str:
    """A mid-chaos validation's outcome: ``COMPLETE``, ``in progress`` (only what runs in flight leave),
    ``lost or doubled`` (a real fault: missing, duplicated or overlapping), or ``could not run``."""
    if code == 0:
        return "COMPLETE"
    if code != 1:
        return "could not run"
    problems = [line.strip().removeprefix("problem: ") for line in output.splitlines() if "problem: " in line]
    return "lost or doubled" if not problems or any(p.startswith(FAULTS) for p in problems) else "in progress"


@pytest.fixture(scope="session")
def chaos(request) -> tuple[float, int]:
    """(minutes, faults) of the chaos soak; skipped without ``--chaos``."""
    if not request.config.getoption("--chaos"):
        pytest.skip("the chaos soak runs with --chaos (outside make test)")
    return request.config.getoption("--chaos-minutes"), request.config.getoption("--chaos-faults")


def test_chaos_soak(spark, make_pipeline, home, tmp_path, chaos):
    minutes, planned_faults = chaos
    seed = int(os.environ.get("TAILFILL_FAULT_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    began = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="tailfill-chaos-"))
    base.chmod(0o755)
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        postgres = own_postgres(stack)
        store = stack.enter_context(SeaweedFS(base / "weed"))
        proxy = stack.enter_context(S3FaultProxy(store.s3_endpoint, hold_seconds=2))
        bootstrap, relay = stack.enter_context(broker_behind_outage())
        cfg = make_pipeline(catalog_uri=postgres.url("iceberg"), s3_endpoint=proxy.endpoint,
                            source__bootstrap_servers=bootstrap, backfill__slices=2,
                            backfill__max_offsets_per_batch=2_000, backfill__batch_seconds=None,
                            backfill__max_consecutive_failures=3, backfill__restart_backoff_seconds=1,
                            tail__max_offsets_per_batch=2_000, tail__min_offsets_per_batch=2_000,
                            tail__max_consecutive_failures=3, tail__restart_backoff_seconds=1,
                            tail__freshness_seconds=3_600)
        catalog = CatalogServer(postgres, cfg)
        produce_sample(bootstrap, cfg.source.topic, 200_000, PARTITIONS, bad_every=BAD_EVERY)
        planned = backfill_spec(open_pipeline(cfg))  # the tables and the cutover, before any fault
        assert planned is not None
        env = submit_env() | {"TAILFILL_HOME": str(home)}  # spark-submit's: the shipped code on its PYTHONPATH
        cli_env = dict(os.environ, TAILFILL_HOME=str(home))  # the CLI's, as a user runs it
        runs: dict[str, Process] = {}

        def stop_runs() -> None:  # whatever the outcome, no run outlives the soak
            for proc in runs.values():
                if proc.running():
                    proc.kill()

        stack.callback(stop_runs)
        stack.callback(connect_server.connect_server_down, home)  # the server the tails on Connect started
        started, ended = Counter(), Counter()
        validations: list[tuple[int, str]] = []
        faults: list[str] = []
        launched = 0

        def backfill_left() -> bool:
            with contextlib.suppress(Exception):
                data = tables_of(cfg).data
                ranges = [r for s in planned.slices for r in s.ranges]
                return total(intersect_all(read_ledger(data).committed, ranges)) < total(ranges)
            return True

        def launch(name: str) -> None:
            """Start what is not running: the backfill (its plan again), a tail, maintain, validate."""
            nonlocal launched
            if name in runs:
                if runs[name].running():
                    return
                finished = runs.pop(name)
                ended[f"{name} exit {finished.proc.returncode}"] += 1
                if name == "validate":
                    validations.append((finished.proc.returncode, finished.tail_of_log(20_000)))
            launched += 1
            log = tmp_path / f"{launched:04d}-{name}.log"
            if name == "backfill":
                if not backfill_left():
                    return
                args = spark_submit_command(planned)
            elif name == "tail":
                try:
                    produce_sample(bootstrap, cfg.source.topic, 2_000, PARTITIONS, bad_every=BAD_EVERY)
                    spec: JobSpec = tail_spec(cfg)  # plans against the catalog and the broker: may fail now
                except Exception as exc:
                    ended[f"tail not planned ({type(exc).__name__})"] += 1
                    return
                if started["tail"] % 2:  # every other tail: on Spark Connect, as `auto` runs it beside a server
                    runs[name] = Process("tail on Connect", [CLI, "tail", str(cfg.path), "--once", "--spark",
                                                             "connect"], cli_env, log, marked=False)
                    started["tail"] += 1
                    return
                args = spark_submit_command(spec)
            else:
                args = [CLI, name, str(cfg.path), *(["--all"] if name == "validate" else [])]
            runs[name] = Process(name, args, env if name in ("backfill", "tail") else cli_env, log)
            started[name] += 1

        def strike(kind: str) -> str:
            """One fault of ``kind``; what it did."""
            if kind in ("job", "driver"):
                jobs = [p for n, p in runs.items() if n in ("backfill", "tail") and p.running()]
                if not jobs:
                    return ""
                victim = rng.choice(jobs)
                if kind == "driver":
                    return f"driver JVM of the {victim.name}" if victim.kill_driver() else ""
                victim.kill()
                return f"SIGKILL of the {victim.name} and its processes"
            if kind == "catalog":
                catalog.kill()
                time.sleep(rng.uniform(0.5, 4.0))
                catalog.start()
                return "catalog Postgres SIGKILLed and restarted"
            if kind == "store":
                store.kill()
                time.sleep(rng.uniform(0.5, 4.0))
                store.start()
                return "SeaweedFS SIGKILLed and restarted"
            if kind == "server":
                state = connect_server.server_state(home)
                if state is None:
                    return ""
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(state["pid"], 9)  # its JVM and its Python workers, as a lost machine would
                return "Spark Connect server SIGKILLed"
            if kind == "broker":
                relay.down()
                time.sleep(rng.uniform(3.0, 10.0))
                relay.up()
                return "broker away"
            error = rng.choice(["500", "503", "reset"])
            proxy.arm(Fault(error, "PUT", rng.choice([r"\.parquet", r"/metadata/"]), times=rng.randint(1, 4)))
            return f"S3 {error} burst"

        every = minutes * 60 / planned_faults
        deadline = time.monotonic() + minutes * 60
        next_fault = time.monotonic() + every
        while time.monotonic() < deadline:
            for name in ("backfill", "tail", "maintain", "validate"):
                launch(name)
            if time.monotonic() >= next_fault:
                kind = rng.choice(KINDS)
                what = strike(kind)
                if what:
                    faults.append(kind)
                    next_fault = time.monotonic() + every * rng.uniform(0.5, 1.5)
            time.sleep(0.5)

        proxy.disarm()  # the faults stop; whatever still runs ends by itself (a stuck run would wedge the soak)
        if not relay.is_up:
            relay.up()
        for name, proc in list(runs.items()):
            try:
                proc.proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{name} did not end within 10 min after the faults stopped:\n{proc.tail_of_log()}")
            ended[f"{name} exit {proc.proc.returncode}"] += 1
            if name == "validate":
                validations.append((proc.proc.returncode, proc.tail_of_log(20_000)))
        results = run(planned, spark) if backfill_left() else []  # no person deleted anything
        results += run(tail_spec(cfg), spark)
        mix = ", ".join(f"{k} ×{n}" for k, n in Counter(faults).most_common())
        verdicts = Counter(verdict_of(code, log) for code, log in validations)
        print(f"\nchaos soak, seed {seed}: {len(faults)} faults ({mix}) in {(time.monotonic() - began) / 60:.0f} min;"
              f" runs started {dict(started)}; ended {dict(ended)}; S3 faults injected {len(proxy.injected)}; "
              f"validations mid-chaos {dict(verdicts)}; {committed(cfg):,} offsets committed")
        found = [log for code, log in validations if verdict_of(code, log) == "lost or doubled"]
        assert not found, f"a validation during the chaos found offsets lost or doubled:\n{found[0]}"
        assert len(faults) >= planned_faults * 0.8, f"only {len(faults)} faults struck: {Counter(faults)}"
        prove(cfg, f"chaos soak (seed {seed}, {(time.monotonic() - began) / 60:.0f} min)",
              f"{len(faults)} faults: {mix}; a backfill, tails, maintain and validate --all running throughout "
              "(Postgres catalog, SeaweedFS warehouse behind the S3 fault proxy, broker behind a relay)",
              f"every failed run started again; validations mid-chaos: {dict(verdicts)}, none found an offset "
              "lost, doubled or committed twice; after the faults the runs completed with nothing deleted by hand",
              sum(r.restarts for r in results))
