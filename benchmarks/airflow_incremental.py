"""Benchmark: an incremental run in Airflow, from trigger to validated, on Spark Connect beside spark-submit.

Starts the local Airflow (``tailfill_airflow.local``: Postgres metadata, LocalExecutor, on free
loopback ports) once per mode, with the demo pipeline on a fresh topic of an embedded broker. A
first incremental run records the cutover (nothing to ingest, no Spark); then, ``--runs`` times,
``--count`` new events are produced and the incremental DAG is triggered through the REST API.
Printed per run: seconds from the trigger to the end of ``validate`` (validated), to the end of the
run, and each task's duration. Modes: ``auto`` (the default: the local Airflow starts this home's Spark
Connect server and the ``spark_connect_default`` connection to it; jobs run there) and ``submit`` (a
``spark-submit`` per run). A mode ending in ``/plain`` runs on the local Airflow with Airflow's own
scheduling defaults, the baseline: no task modules imported by the scheduler before it forks the task
processes (``TAILFILL_AIRFLOW_PRELOAD=0``), and the scheduler's 1 s idle sleep.

    .venv/bin/python benchmarks/airflow_incremental.py [--count 10000] [--runs 3] [--modes auto/plain,auto,submit]

Every process it starts is stopped at the end (Airflow, its Postgres, the broker, the Spark Connect server).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from airflow_server import AirflowServer  # noqa: E402

from tailfill.dev.broker import EmbeddedBroker  # noqa: E402
from tailfill.dev.sample import produce_sample  # noqa: E402
from tailfill.pipeline.load import load_pipeline  # noqa: E402
from tailfill.settings import spark_mode_problem  # noqa: E402

NAME = "bench"
INCREMENTAL = f"{NAME}_incremental"


def pipeline(folder: Path, bootstrap: str) -> Path:
    data = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
    data["name"] = NAME
    data["source"]["bootstrap_servers"] = bootstrap
    data["source"]["topic"] = f"t-bench-{uuid.uuid4().hex[:8]}"
    data["tail"]["schedule"] = None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _at(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def one_run(af: AirflowServer, cfg, count: int) -> dict:
    """Produce ``count`` events, trigger the incremental DAG, wait; seconds to validated and to the end."""
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, count, cfg.source.partitions)
    triggered = time.time()
    run_id = af.trigger_dag(INCREMENTAL, {})
    af.wait_for_run(INCREMENTAL, run_id, timeout=600, poll=0.5)
    tis = {t["task_id"]: t for t in af.task_instances(INCREMENTAL, run_id)}
    ended = max(_at(t["end_date"]) for t in tis.values() if t.get("end_date"))
    return {"validated": _at(tis["validate"]["end_date"]) - triggered, "run": ended - triggered,
            "tasks": {k: round(t["duration"] or 0.0, 1) for k, t in tis.items()}}


PLAIN = "/plain"  # a mode on Airflow's own scheduling defaults
PLAIN_ENV = {"TAILFILL_AIRFLOW_PRELOAD": "0", "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "1"}


def bench_mode(mode: str, home: Path, broker: EmbeddedBroker, count: int, runs: int) -> list[dict]:
    folder = home / "pipelines"
    path = pipeline(folder, broker.bootstrap_servers)
    env = dict(os.environ, TAILFILL_HOME=str(home), TAILFILL_PIPELINES=str(folder),
               TAILFILL_SPARK=mode.removesuffix(PLAIN), **(PLAIN_ENV if mode.endswith(PLAIN) else {}))
    os.environ["TAILFILL_HOME"] = str(home)
    cfg = load_pipeline(path)
    out = []
    with AirflowServer(home / "airflow", env=env) as af:
        af.wait_for_dag(INCREMENTAL)
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 100, cfg.source.partitions)  # the topic
        first = af.trigger_dag(INCREMENTAL, {})  # records the cutover: nothing to ingest yet
        af.wait_for_run(INCREMENTAL, first, timeout=300)
        for i in range(runs):
            r = one_run(af, cfg, count)
            print(f"  {mode} run {i + 1}: validated {r['validated']:.1f} s after the trigger, run done "
                  f"{r['run']:.1f} s; tasks (s): " + ", ".join(f"{k} {v}" for k, v in r["tasks"].items()), flush=True)
            out.append(r)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=10_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--modes", default="auto/plain,auto,submit",
                   help="TAILFILL_SPARK of each Airflow, comma-separated: auto (Spark Connect), connect, submit; "
                        f"'{PLAIN}' after one: on Airflow's own scheduling defaults")
    args = p.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    for mode in modes:
        if (problem := spark_mode_problem(mode.removesuffix(PLAIN))) is not None:
            p.error(f"--modes: {mode!r}: {problem}")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    results = {}
    with tempfile.TemporaryDirectory(prefix="tailfill-af-bench-") as tmp, EmbeddedBroker() as broker:
        Path(tmp).chmod(0o755)  # Airflow's Postgres runs as the postgres user when this runs as root
        for mode in modes:
            print(f"{mode}: Airflow up, {args.runs} incremental runs of {args.count:,} new offsets", flush=True)
            results[mode] = bench_mode(mode, Path(tmp) / mode.replace("/", "-"), broker, args.count, args.runs)
    print(f"\nincremental run of {args.count:,} new offsets in Airflow, trigger → validated (median of runs; "
          "the first run on a long-lived server is its first job):")
    def later(mode: str, key: str = "validated") -> float:  # the median of the runs after the first
        return statistics.median(r[key] for r in results[mode][1:] or results[mode])

    for mode, rs in results.items():
        print(f"  {mode:10s}: first {rs[0]['validated']:.1f} s, then median {later(mode):.1f} s "
              f"(run done: median {later(mode, 'run'):.1f} s)")
    for mode in [m for m in results if m + PLAIN in results]:
        print(f"  {mode} / {mode + PLAIN}: {later(mode) / later(mode + PLAIN):.2f}")
    if "submit" in results:
        for mode in [m for m in results if m != "submit"]:
            print(f"  {mode} / submit: {later(mode) / later('submit'):.2f}")


if __name__ == "__main__":
    main()
