"""Benchmark: Tailfill beside its peers on one bench: one broker, one topic, the same events, one run.

On one Apache Kafka broker (the embedded one), one topic of N sample JSON events (~120 B, 4 partitions, each with a
unique ``event_id``), each system lands the topic in a table of its own:

  (a) consume only: one tuned confluent-kafka consumer reading every partition to its end, nothing else;
  (b) Spark Structured Streaming with Spark's own Kafka source, ``availableNow``, into an Iceberg table through
      Iceberg's Spark runtime; where Iceberg publishes no runtime for the running Spark version, Spark's Parquet
      file sink with its checkpoint, named so in the results (:mod:`peer_spark_job`);
  (c) the Apache Iceberg Kafka Connect sink in a standalone Connect worker (:mod:`peer_connect`); it never exits,
      so its end is the commit of the snapshot that holds every event;
  (d) ``tailfill backfill`` of the demo pipeline's settings, no flags, from a fresh home (cold), then again
      into a new table of the same home (warm).

Each table is counted by an independent reader (:mod:`peer_tables`), never by the system's own report. Printed per
system: end to end seconds, rows/s, CPU seconds of the system's processes (:class:`GroupCpu`), rows counted,
duplicates and losses, and rows/s over consume-only's. ``--kills K`` then runs each system again into a new table,
SIGKILLs its processes K times at random moments while it ingests, restarting it each time, and counts duplicates
and losses from the table alone. ``--minutes M --rate R`` adds the live tail: R events/s for M minutes into the topic
while each system runs continuously, and each row's produce-to-commit latency read from the tables (p50, p95).

The peers' JVM jars are benchmark-only sets (``make bench-deps``); a missing one fails at the start in one line
naming that command. Nothing here is a test: it prints figures.

    .venv/bin/python benchmarks/peers.py [--events 1000000] [--systems a,b,c,d] [--kills 10] [--seed N]
                                         [--minutes 10 --rate 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_spark_job
from ingest_vs_consume import PARTITIONS, consume_all
from peer_connect import CATALOG as CONNECT_CATALOG
from peer_connect import TABLE as CONNECT_TABLE
from peer_connect import ConnectWorker
from peer_tables import (
    Landed,
    commit_latencies,
    committed_files,
    iceberg_file_commits,
    iceberg_ids,
    iceberg_property,
    iceberg_records,
    landed,
    parquet_sink_ids,
)

REPO = Path(__file__).resolve().parent.parent
SYSTEMS = {"a": "consume only", "b": "Spark Structured Streaming", "c": "Iceberg Kafka Connect sink",
           "d": "tailfill backfill"}
STOP_GRACE_S = 30.0


class PeerFailed(Exception):
    """A system could not run here: the message is its exact error."""


@dataclass
class Row:
    """One system's run: what it took and what its table holds."""

    system: str
    seconds: float = 0.0
    cpu_s: float | None = None  # not measured through kills
    table: Landed | None = None
    error: str = ""
    kills: int = 0  # SIGKILLs that landed while it ran
    missed: int = 0  # kill moments after it had already finished


@dataclass
class Bench:
    """The run's broker, topic and folder, and the settings every system shares."""

    bootstrap: str
    topic: str
    events: int
    folder: Path
    commit_ms: int
    connect_tasks: int
    timeout_s: float
    rng: random.Random
    logs: list[Path] = field(default_factory=list)

    def log(self, name: str) -> Path:
        path = self.folder / f"{name}.log"
        self.logs.append(path)
        return path


class GroupCpu(threading.Thread):
    """CPU seconds (user + system) of the processes given to :meth:`watch`, their descendants and whatever else
    runs in their sessions, sampled every 0.2 s: a lower bound (the last 0.2 s of each process, and processes
    shorter than that, are missed; a detached server that left both the tree and the session is not counted)."""

    def __init__(self) -> None:
        super().__init__(name="group-cpu", daemon=True)
        self.sessions: set[int] = set()
        self.seen: dict[tuple[int, float], float] = {}  # (pid, its start time) → CPU seconds
        self.halt = threading.Event()

    def watch(self, proc: subprocess.Popen) -> subprocess.Popen:
        self.sessions.add(proc.pid)
        return proc

    @property
    def seconds(self) -> float:
        return sum(self.seen.values())

    def run(self) -> None:
        import psutil

        while not self.halt.wait(0.2):
            found: list[psutil.Process] = []
            for root in self.sessions:
                with contextlib.suppress(psutil.Error):
                    top = psutil.Process(root)
                    found += [top, *top.children(recursive=True)]
            for p in psutil.process_iter():
                with contextlib.suppress(psutil.Error, ProcessLookupError):
                    if os.getsid(p.pid) in self.sessions:
                        found.append(p)
            for p in found:
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    self.seen[(p.pid, p.create_time())] = t.user + t.system

    def __enter__(self) -> GroupCpu:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.halt.set()
        self.join()


def spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``argv`` in a process group of its own (so a kill takes all its processes), output to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, start_new_session=True)


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL, grace_s: float = STOP_GRACE_S) -> None:
    """Send ``sig`` to ``proc``'s process group, reap it, and wait until no process of the group is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def log_tail(log: Path, lines: int = 3) -> str:
    text = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return " | ".join(line.strip() for line in text[-lines:]) or "(no output)"


def finish(proc: subprocess.Popen, log: Path, what: str, timeout_s: float) -> None:
    """Wait for ``proc``; a failure or a timeout is :class:`PeerFailed` with the end of its log."""
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise PeerFailed(f"{what} did not finish in {timeout_s:.0f}s (its log {log}: {log_tail(log)})") from None
    if code != 0:
        raise PeerFailed(f"{what} exited with code {code} (its log {log}: {log_tail(log)})")


# A system, as the runs below need it: start it (once more) into its table, wait until it is done, count the table,
# and its table's data files with their commit times.
@dataclass
class System:
    label: str
    start: Callable[[], subprocess.Popen]
    done: Callable[[subprocess.Popen], float]  # waits; returns the end's wall-clock time (epoch s)
    count: Callable[[], Landed]
    files: Callable[[], dict[Path, int]]
    ready: Callable[[], bool]  # started and reading: a live tail's events are produced from then on


def spark_system(bench: Bench, name: str, live_s: int | None = None) -> System:
    """(b) for ``name``, its folder ``<run>/spark-<name>``: Iceberg when the jars hold Iceberg's runtime; with
    ``live_s``, a processing-time trigger of that many seconds."""
    import pyspark

    from tailfill.dev.jars import classpath

    minor = ".".join(pyspark.__version__.split(".")[:2])
    jars = Path(classpath(f"bench-spark-{minor}").removesuffix("/*"))
    folder = bench.folder / f"spark-{name}"
    folder.mkdir()
    log = bench.log(f"spark-{name}")
    iceberg = peer_spark_job.has_iceberg_runtime(list(jars.glob("*.jar")))
    sink = "Iceberg (Iceberg's Spark runtime)" if iceberg else f"Parquet file sink (no Iceberg runtime for {minor})"
    argv = [sys.executable, str(Path(peer_spark_job.__file__)), bench.bootstrap, bench.topic, str(folder), str(jars),
            *([str(live_s)] if live_s else [])]
    catalog = (folder / "catalog.db", peer_spark_job.CATALOG, folder / "warehouse", "bench.events")

    def done(proc: subprocess.Popen) -> float:
        finish(proc, log, f"the Spark job (Spark {pyspark.__version__})", bench.timeout_s)
        return time.time()

    def count() -> Landed:
        return landed(iceberg_ids(*catalog) if iceberg else parquet_sink_ids(folder / "table"), bench.events)

    def files() -> dict[Path, int]:
        return iceberg_file_commits(*catalog) if iceberg else committed_files(folder / "table")

    def ready() -> bool:  # the query has started (it reads from the earliest offset either way)
        return (folder / "checkpoint" / "metadata").exists()

    return System(f"(b) Spark {pyspark.__version__} SS, Kafka source → {sink}", lambda: spawn(argv, log), done,
                  count, files, ready)


def connect_system(bench: Bench, name: str, live_s: int | None = None) -> System:
    """(c) for ``name``: a worker of its own folder and connector name (so its own consumer group); with
    ``live_s``, committing every that many seconds."""
    worker = ConnectWorker(bench.folder / f"connect-{name}")
    commit_ms = live_s * 1000 if live_s else bench.commit_ms
    worker.prepare(bench.bootstrap, bench.topic, f"iceberg-sink-{name}", commit_ms, bench.connect_tasks)
    catalog = (worker.catalog_db, CONNECT_CATALOG, worker.warehouse, CONNECT_TABLE)
    log = bench.log(f"connect-{name}")

    def done(proc: subprocess.Popen) -> float:
        """Wait for the first snapshot that holds as many records as events (its commit time is the end) and for
        the table to settle (no new snapshot for three commit intervals: a restarted sink may still commit what
        it wrote before a kill), then stop the worker."""
        deadline, end, settled = time.monotonic() + bench.timeout_s, None, None
        try:
            while True:
                if proc.poll() is not None:
                    raise PeerFailed(f"the Connect worker exited with code {proc.returncode} "
                                     f"(its log {worker.log}: {log_tail(worker.log)}; output: {log_tail(log)})")
                if failure := worker.task_failure():
                    raise PeerFailed(f"{failure} (the worker's log: {worker.log})")
                now = iceberg_records(worker.catalog_db, CONNECT_CATALOG, worker.warehouse, CONNECT_TABLE)
                if now and now[0] >= bench.events:
                    if end is None or now[1] != settled[1]:
                        end, settled = end or now[1] / 1000, (time.monotonic() + 3 * commit_ms / 1000, now[1])
                    elif time.monotonic() > settled[0]:
                        return end
                if time.monotonic() > deadline:
                    raise PeerFailed(f"the Iceberg sink committed {now[0] if now else 0:,} of {bench.events:,} "
                                     f"records in {bench.timeout_s:.0f}s (its log {worker.log}: "
                                     f"{log_tail(worker.log)})")
                time.sleep(0.5)
        finally:
            kill_group(proc, signal.SIGTERM)

    return System(f"(c) Iceberg Kafka Connect sink, commit every {commit_ms / 1000:g} s, {bench.connect_tasks} "
                  f"task(s)", lambda: spawn(worker.command(), log), done,
                  lambda: landed(iceberg_ids(*catalog), bench.events), lambda: iceberg_file_commits(*catalog),
                  worker.assigned)


def tailfill_pipeline(bench: Bench, home: Path, table: str, live_s: int | None = None) -> Path:
    """The demo pipeline's shipped settings on the bench's topic, into ``table`` of ``home``; with ``live_s``, its
    tail on a processing-time trigger of that many seconds (as benchmarks/tail_soak.py runs it)."""
    spec = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
    spec["name"] = table
    spec["source"].update(bootstrap_servers=bench.bootstrap, topic=bench.topic)
    spec["target"]["table"] = table
    if live_s:
        spec["tail"].update(trigger="processing_time", trigger_interval_seconds=live_s, freshness_seconds=3 * live_s,
                            min_offsets_per_batch=500)
    path = home / f"{table}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def tailfill_system(bench: Bench, home: Path, table: str, label: str, live_s: int | None = None) -> System:
    """(d): ``tailfill backfill <pipeline>`` with no flags, as a user runs it, into ``table`` of ``home``; with
    ``live_s``, ``tailfill tail <pipeline>`` on a processing-time trigger of that many seconds."""
    home.mkdir(exist_ok=True)
    path = tailfill_pipeline(bench, home, table, live_s)
    log = bench.log(f"tailfill-{table}")
    argv = [str(Path(sys.executable).parent / "tailfill"), "tail" if live_s else "backfill", str(path)]
    catalog = (home / "catalog.db", "tailfill", home / "warehouse", f"tailfill.{table}")

    def done(proc: subprocess.Popen) -> float:
        finish(proc, log, "tailfill backfill", bench.timeout_s)
        return time.time()

    def ready() -> bool:  # the tail reads from the cutover its first run records (the history is a backfill's)
        return iceberg_property(*catalog, "tailfill.cutover") is not None

    return System(f"(d) tailfill {argv[1]}, {label}", lambda: spawn(argv, log, {"TAILFILL_HOME": str(home)}), done,
                  lambda: landed(iceberg_ids(*catalog), bench.events), lambda: iceberg_file_commits(*catalog), ready)


def timed(system: System) -> Row:
    """One clean run of ``system``: end to end from its start, its processes' CPU, its table counted."""
    t0 = time.time()
    with GroupCpu() as cpu:
        try:
            end = system.done(cpu.watch(system.start()))
        except PeerFailed as exc:
            return Row(system.label, error=str(exc))
    return Row(system.label, end - t0, cpu.seconds, system.count())


def killed(system: System, kills: int, clean_s: float, rng: random.Random) -> Row:
    """Run ``system`` with ``kills`` SIGKILLs of all its processes, each at a random moment in 25–95% of its clean
    run's time after a (re)start, restarting it each time; then let it finish and count its table."""
    row, t0 = Row(system.label), time.time()
    try:
        for _ in range(kills):
            proc, at = system.start(), time.monotonic() + rng.uniform(0.25, 0.95) * clean_s
            while time.monotonic() < at and proc.poll() is None:
                time.sleep(0.05)
            if proc.poll() is None:
                row.kills += 1
            else:
                row.missed += 1
            kill_group(proc)
        system.done(system.start())
    except PeerFailed as exc:
        row.error = str(exc)
    row.seconds, row.table = time.time() - t0, system.count()
    return row


@dataclass
class LiveRow:
    """One system's live tail: the rows it landed and each steady row's produce-to-commit latency."""

    system: str
    table: Landed | None = None
    latencies: list[float] = field(default_factory=list)
    error: str = ""


def live(system: System, bench: Bench, minutes: float, rate: float) -> LiveRow:
    """Run ``system`` continuously on its own empty topic and, once it is ready, produce ``rate`` events/s for
    ``minutes``; let it catch up (at most ``bench.timeout_s``), stop it; latencies of the rows produced after its
    first commit."""
    from tailfill.dev.sample import produce_live
    from tailfill.source.topics import ensure_topic

    row, stop, produced, failed = LiveRow(system.label), threading.Event(), {}, []
    ensure_topic(bench.bootstrap, bench.topic, PARTITIONS)  # before a consumer's subscription creates it with one
    proc = system.start()
    deadline = time.monotonic() + bench.timeout_s
    while not system.ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(1)
    if not system.ready():
        exited = proc.poll()
        kill_group(proc, signal.SIGTERM)
        row.error = (f"it exited with code {exited} before it read" if exited is not None else
                     f"it was not reading after {bench.timeout_s:.0f}s") + f" (its log: {bench.logs[-1]})"
        return row
    def produce() -> None:
        try:
            produced.update(produce_live(bench.bootstrap, bench.topic, rate, stop, PARTITIONS))
        except Exception as exc:  # the row names it: a tail measured without its events is no figure
            failed.append(exc)

    producer = threading.Thread(target=produce, name="live-producer", daemon=True)
    producer.start()
    try:
        ends = time.monotonic() + minutes * 60
        while time.monotonic() < ends and proc.poll() is None and not failed:
            time.sleep(1)
        stop.set()
        producer.join()
        if failed:
            row.error = f"producing {rate:g} events/s to {bench.topic} failed: {failed[0]}"
            return row
        bench.events = produced.get("good", 0)
        deadline = time.monotonic() + bench.timeout_s
        while proc.poll() is None and system.count().distinct < bench.events and time.monotonic() < deadline:
            time.sleep(5)
        if proc.poll() is not None:
            row.error = f"it exited with code {proc.returncode} while tailing (its log: {bench.logs[-1]})"
    finally:
        stop.set()
        kill_group(proc, signal.SIGTERM)
    files = system.files()
    row.table = system.count()
    row.latencies = commit_latencies(files, min(files.values())) if files else []
    return row


def report_live(rows: list[LiveRow], minutes: float, rate: float) -> None:
    print(f"\nlive tail: {rate:,.0f} events/s for {minutes:g} minutes; produce-to-commit latency of the rows "
          f"produced after each system's first commit")
    print(f"{'system':82s} {'rows':>10s} {'dup':>5s} {'lost':>6s} {'p50 s':>7s} {'p95 s':>7s} {'max s':>7s}")
    for r in rows:
        t = r.table
        if len(r.latencies) > 1:
            q = statistics.quantiles(r.latencies, n=100)
            lat = f"{q[49]:7.1f} {q[94]:7.1f} {max(r.latencies):7.1f}"
        else:
            lat = f"{'-':>7s} {'-':>7s} {'-':>7s}"
        print(f"{r.system:82s} {t.rows if t else 0:10,} {t.duplicates if t else 0:5,} {t.lost if t else 0:6,} {lat}"
              + (f"  FAILED: {r.error}" if r.error else ""), flush=True)


def consume_only(bench: Bench) -> Row:
    """(a): this process reads the topic; its own CPU is the figure."""
    ends = {p: bench.events // PARTITIONS + (1 if p < bench.events % PARTITIONS else 0) for p in range(PARTITIONS)}
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    n = consume_all(bench.bootstrap, bench.topic, ends)
    seconds, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    return Row(SYSTEMS["a"], seconds, cpu, Landed(n, n, bench.events))


def report(title: str, rows: list[Row], events: int, baseline: Row | None) -> None:
    print(f"\n{title}")
    print(f"{'system':82s} {'seconds':>8s} {'rows/s':>9s} {'CPU s':>7s} {'rows':>10s} {'dup':>5s} {'lost':>6s} "
          f"{'× consume':>9s} {'kills':>6s}")
    for r in rows:
        if r.error:
            print(f"{r.system:82s} FAILED: {r.error}")
            if r.table is None:
                continue
        rate = events / r.seconds if r.seconds else 0.0
        ratio = f"{rate / (events / baseline.seconds):9.2f}" if baseline and baseline.seconds else f"{'-':>9s}"
        kills = f"{r.kills}" + (f" (+{r.missed} after it ended)" if r.missed else "") if (r.kills or r.missed) else "-"
        t = r.table
        cpu = f"{r.cpu_s:7.1f}" if r.cpu_s is not None else f"{'-':>7s}"
        print(f"{r.system:82s} {r.seconds:8.1f} {rate:9,.0f} {cpu} {t.rows if t else 0:10,} "
              f"{t.duplicates if t else 0:5,} {t.lost if t else 0:6,} {ratio} {kills:>6s}", flush=True)


def check_jars(letters: str) -> None:
    """Fail at the start, in one line naming the fetch command, if a selected peer's jars are not installed."""
    import pyspark

    from tailfill.dev.jars import classpath

    minor = ".".join(pyspark.__version__.split(".")[:2])
    sets = (["bench-connect", "bench-iceberg-connect"] if "c" in letters else []) + (
        [f"bench-spark-{minor}"] if "b" in letters else [])
    for name in sets:
        classpath(name)


def run(args: argparse.Namespace) -> int:
    from tailfill.dev.broker import EmbeddedBroker
    from tailfill.dev.sample import produce_sample
    from tailfill.run.connect_server import connect_server_down

    folder = Path(tempfile.mkdtemp(prefix="tailfill-peers-"))
    home = folder / "tailfill-home"
    print(f"run folder {folder} (each system's log there)", flush=True)
    rows: list[Row] = []
    kill_rows: list[Row] = []
    live_rows: list[LiveRow] = []
    # Each peer by letter: its System on a bench, into a table called ``name``, live on a trigger of live_s seconds.
    peers: dict[str, Callable[..., System]] = {
        "b": spark_system,
        "c": connect_system,
        "d": lambda b, name, live_s=None: tailfill_system(b, home, f"bench_{name}", f"warm, {name}", live_s),
    }
    with EmbeddedBroker() as broker:
        bench = Bench(broker.bootstrap_servers, "peers-events", args.events, folder, args.commit_ms,
                      args.connect_tasks, args.timeout, random.Random(args.seed))
        print(f"producing {args.events:,} events to {bench.topic} ({PARTITIONS} partitions) ...", flush=True)
        produce_sample(bench.bootstrap, bench.topic, args.events, PARTITIONS)
        baseline = consume_only(bench) if "a" in args.systems else None
        rows += [baseline] if baseline else []
        chosen = [letter for letter in "bcd" if letter in args.systems]
        try:
            for letter in chosen:
                if letter == "d":
                    made = [tailfill_system(bench, home, "bench_cold", "fresh home (cold)"),
                            tailfill_system(bench, home, "bench_warm", "again (warm)")]
                else:
                    made = [peers[letter](bench, "clean")]
                for system in made:
                    rows.append(timed(system))
                    print(f"  {rows[-1].system}: {rows[-1].error or f'{rows[-1].seconds:.1f}s'}", flush=True)
            report(f"{args.events:,} events, {PARTITIONS} partitions; {os.cpu_count()} cores", rows, args.events,
                   baseline)
            if args.kills:
                clean = {r.system[1]: r.seconds for r in rows if r.seconds and not r.error}  # the warm Tailfill's
                for letter in chosen:
                    if letter not in clean:
                        continue
                    kill_rows.append(killed(peers[letter](bench, "kills"), args.kills, clean[letter], bench.rng))
                    print(f"  {kill_rows[-1].system} with kills: {kill_rows[-1].error or 'done'}", flush=True)
                report(f"exactly once through {args.kills} SIGKILLs each (seed {args.seed}); seconds include the "
                       f"restarts", kill_rows, args.events, None)
            if args.minutes:
                for letter in chosen:
                    on_topic = replace(bench, topic=f"peers-live-{letter}", events=0)
                    live_rows.append(live(peers[letter](on_topic, "live", args.interval), on_topic, args.minutes,
                                          args.rate))
                    print(f"  {live_rows[-1].system} live: {live_rows[-1].error or 'done'}", flush=True)
                report_live(live_rows, args.minutes, args.rate)
        finally:
            if home.exists():
                connect_server_down(home)
    failed = any(r.error for r in [*rows, *kill_rows, *live_rows])
    lossy = any(r.table and (r.table.lost or r.table.duplicates) for r in [*rows, *live_rows])
    return 1 if failed or lossy else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--systems", default="a,b,c,d", help="which of a (consume only), b (Spark), c (Kafka "
                                                             "Connect), d (Tailfill); comma-separated")
    parser.add_argument("--kills", type=int, default=0, help="also run each system with K SIGKILLs, restarted each "
                                                             "time, and count duplicates and losses")
    parser.add_argument("--seed", type=int, default=1, help="the random kill moments' seed")
    parser.add_argument("--minutes", type=float, default=0, help="also run each system as a live tail for this long")
    parser.add_argument("--rate", type=float, default=2_000, help="the live tail's events/s")
    parser.add_argument("--interval", type=int, default=10, help="the live tail's trigger (Spark, Tailfill) and "
                                                                 "commit interval (Connect), seconds")
    parser.add_argument("--commit-ms", type=int, default=5_000, help="the Connect sink's commit interval")
    parser.add_argument("--connect-tasks", type=int, default=2, help="the Connect sink's tasks.max")
    parser.add_argument("--timeout", type=float, default=1_800, help="seconds a system may take before it fails")
    args = parser.parse_args()
    args.systems = args.systems.replace(",", "")
    if set(args.systems) - set(SYSTEMS):
        parser.error(f"--systems: unknown {sorted(set(args.systems) - set(SYSTEMS))} (known: a, b, c, d)")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from tailfill.errors import TailfillError

    try:
        check_jars(args.systems)
    except TailfillError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
