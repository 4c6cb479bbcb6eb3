"""Benchmark: the startup of a next job on this home's local Spark Connect server, old behaviour beside new.

With ``--spark submit``: the same jobs through ``spark-submit`` (a new application each; no server), where
``old`` is Spark's pyspark.zip on the driver's and workers' path and ``new`` the installed, compiled pyspark.

One embedded broker; one home (and local Connect server) per variant, all up at once, so that every measured
job is a *next* job: its server and shared session already warm from a first job of the same variant.

  old        Spark's pyspark.zip on the Python workers' path (``TAILFILL_PYSPARK_ZIP=1``) and the
             foreachBatch function loaded by the first batch (``TAILFILL_CONNECT_PRELOAD=0``); a streaming query
  zip-only   the workers import the installed, compiled pyspark; the function loaded by the first batch; a query
  no-archive the same as ``query`` with the JVM's class archive off (``TAILFILL_CLASS_ARCHIVE_DIR=off``)
  new        compiled pyspark, the function loaded in a thread as soon as the worker has it, and the JVM's
             classes mapped from its class archive (:mod:`tailfill.run.class_archive`; made first if missing);
             the job plans its batches itself, without a streaming query (:mod:`tailfill.run.direct_query`)
  query      the same as ``new`` with the job's batches run by a streaming query, as a live tail's are
             (``TAILFILL_BOUNDED_RUNS=query``)

Each round produces ``--events`` more events, then runs ``tailfill tail P --once --spark connect`` of each
variant in turn (the order rotates each round); each job reads those events into a table of its own. Prints
per job and the median per variant: startup (command start → first batch's read starts, from the batch
report) and end to end. ``--timeline`` also prints, for the last round, each job's output lines and the new
Python processes on the machine, timestamped from the command's start (the figure in docs/performance.md).

    .venv/bin/python benchmarks/connect_startup.py [--rounds 5] [--events 20000] [--timeline] [--spark submit]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
QUERY = {"TAILFILL_BOUNDED_RUNS": "query"}  # the job's batches run by a streaming query
VARIANTS = {
    "old": {"TAILFILL_PYSPARK_ZIP": "1", "TAILFILL_CONNECT_PRELOAD": "0", **QUERY},
    "zip-only": {"TAILFILL_PYSPARK_ZIP": "0", "TAILFILL_CONNECT_PRELOAD": "0", **QUERY},
    "no-archive": {"TAILFILL_PYSPARK_ZIP": "0", "TAILFILL_CONNECT_PRELOAD": "1", "TAILFILL_CLASS_ARCHIVE_DIR": "off",
                   **QUERY},
    "new": {"TAILFILL_PYSPARK_ZIP": "0", "TAILFILL_CONNECT_PRELOAD": "1"},
    "query": {"TAILFILL_PYSPARK_ZIP": "0", "TAILFILL_CONNECT_PRELOAD": "1", **QUERY},
}


def _env(home: Path, variant: str) -> dict[str, str]:
    env = {**os.environ, "TAILFILL_HOME": str(home), **VARIANTS[variant]}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _tailfill(home: Path, variant: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "tailfill"), *args], env=_env(home, variant),
                          capture_output=True, text=True)


def _python_procs() -> dict[str, str]:
    found = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "-m pyspark" in cmd:
                found[pid] = cmd.strip()
    return found


def timed_tail(path: Path, home: Path, variant: str, timeline: bool, spark: str = "connect",
               ) -> tuple[float, float, str, list[str]]:
    """One ``tail --once --spark <spark>``: (when launched, seconds, run id, timestamped lines)."""
    lines: list[str] = []
    seen, done = _python_procs(), threading.Event()
    launched, t0 = time.time(), time.perf_counter()

    def watch() -> None:
        while not done.is_set():
            now = _python_procs()
            for pid, cmd in now.items():
                if pid not in seen:
                    lines.append(f"{time.perf_counter() - t0:6.2f}  NEW python {cmd.split(' -m ', 1)[-1]}")
            seen.update(now)
            time.sleep(0.02)

    if timeline:
        threading.Thread(target=watch, daemon=True).start()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "tailfill"), "tail", str(path), "--once",
                             "--spark", spark], env=_env(home, variant), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    run_id = ""
    for line in proc.stdout:
        lines.append(f"{time.perf_counter() - t0:6.2f}  {line.rstrip()[:150]}")
        if "run id " in line:
            run_id = line.split("run id ", 1)[1].split(";")[0].strip()
    proc.wait()
    seconds = time.perf_counter() - t0
    done.set()
    if proc.returncode != 0:
        raise SystemExit("tail failed:\n" + "\n".join(lines[-30:]))
    lines.append(f"{seconds:6.2f}  exit {proc.returncode}")
    return launched, seconds, run_id, sorted(lines, key=lambda ln: float(ln.split()[0]))


def first_read(path: Path, home: Path, run_id: str) -> float:
    """When the run's first batch started reading (its report's start plus its plan stage), epoch seconds."""
    from tailfill.pipeline.load import load_pipeline
    from tailfill.state.store import StateStore, run_reports

    os.environ["TAILFILL_HOME"] = str(home)  # the variant's home holds the pipeline's state
    reports = run_reports(StateStore.of(load_pipeline(path)), run_id)
    first = min(reports, key=lambda r: r.at - r.seconds)
    return first.at - first.seconds + first.stages.get("plan", 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    ap.add_argument("--timeline", action="store_true", help="print the last round's timelines")
    ap.add_argument("--spark", choices=("connect", "submit"), default="connect")
    args = ap.parse_args()
    variants = args.variants.split(",")

    from tailfill.dev.broker import EmbeddedBroker
    from tailfill.dev.sample import produce_sample
    from tailfill.run.connect_server import connect_server_down, connect_server_up

    root = Path(tempfile.mkdtemp(prefix="tailfill-connect-startup-"))
    homes = {v: root / v for v in variants}
    os.environ["TAILFILL_HOME"] = str(root)
    results: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    with EmbeddedBroker() as broker:
        spec = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
        spec["source"]["bootstrap_servers"] = broker.bootstrap_servers
        spec["source"]["topic"] = topic = "startup-events"
        paths = {}
        for v, home in homes.items():
            home.mkdir(parents=True)
            data = {**spec, "name": f"startup_{v.replace('-', '_')}",
                    "target": {**spec["target"], "table": f"{spec['target']['table']}_{v.replace('-', '_')}"}}
            paths[v] = home / f"{data['name']}.yaml"
            paths[v].write_text(yaml.safe_dump(data))
        produce_sample(broker.bootstrap_servers, topic, args.events, 4)
        try:
            for v, home in homes.items():
                t0 = time.perf_counter()
                if args.spark == "connect":
                    connect_server_up(home, env=_env(home, v))
                print(f"  {v}: server up in {time.perf_counter() - t0:.1f}s; first job (sets the session up) ...",
                      flush=True)
                for _ in range(2):  # the first sets the cutover, the second reads events: both warm the session
                    produce_sample(broker.bootstrap_servers, topic, args.events, 4)
                    timed_tail(paths[v], home, v, False, args.spark)
            for r in range(args.rounds):
                produce_sample(broker.bootstrap_servers, topic, args.events, 4)
                order = variants[r % len(variants):] + variants[:r % len(variants)]
                for v in order:
                    timeline = args.timeline and r == args.rounds - 1
                    launched, seconds, run_id, lines = timed_tail(paths[v], homes[v], v, timeline, args.spark)
                    startup = first_read(paths[v], homes[v], run_id) - launched
                    results[v].append((startup, seconds))
                    print(f"  round {r + 1} {v:9s} startup {startup:5.2f}s  end to end {seconds:5.2f}s", flush=True)
                    if timeline:
                        print("\n".join(f"      {ln}" for ln in lines))
        finally:
            for home in homes.values():
                connect_server_down(home)
    where = "on a warm local Spark Connect server" if args.spark == "connect" else "through spark-submit"
    print(f"\nnext job {where}, tail --once of {args.events:,} events, "
          f"{os.cpu_count()} cores, {args.rounds} rounds (medians):")
    for v in variants:
        startups, totals = zip(*results[v], strict=True)
        print(f"  {v:9s} startup (command → first batch read) {statistics.median(startups):5.2f}s   "
              f"end to end {statistics.median(totals):5.2f}s   (min {min(totals):.2f}, max {max(totals):.2f})")


if __name__ == "__main__":
    main()
