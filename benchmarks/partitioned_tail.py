"""Benchmark: a live tail into a day-partitioned table whose records span a year, beside the same unpartitioned.

On the embedded broker, for each rate of ``--rates``: a topic of sample events whose ``created_at`` falls on every
day of a year (:func:`tailfill.dev.sample.year_event`, so that every batch of a few hundred records touches
hundreds of day partitions), the pipeline ``tailfill init`` writes for it (``partition_by: day(created_at)``, its
live tail's settings), and ``tailfill tail`` (its own ``spark-submit``)
kept running for ``--minutes`` after its first commit under a producer at that rate; then the same with
``partition_by: []``, the baseline. Each row is measured from the tail run's batch reports
(:mod:`tailfill.dev.soak`): the batches' produce-to-commit latency (p50, p95 against the trigger interval), the
offsets behind at the last batch before the stop, and the data files per day partition the run wrote.

    .venv/bin/python benchmarks/partitioned_tail.py [--minutes 10] [--rates 500,2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

import yaml

PARTITIONS = 4
SAMPLE = 1_000  # records init samples (the history before the tail's cutover)


def pipeline(home: Path, bootstrap: str, name: str, partitioned: bool) -> Path:
    """What ``tailfill init`` writes for a fresh topic of year-spread events (a processing-time tail)."""
    from tailfill.dev.sample import produce_sample, year_event
    from tailfill.run.scaffold import Request, propose

    topic = f"year-{uuid.uuid4().hex[:8]}"
    produce_sample(bootstrap, topic, SAMPLE, PARTITIONS, event=year_event)
    spec = yaml.safe_load(propose(Request(name, topic, bootstrap_servers=bootstrap)))
    assert spec["target"]["partition_by"] == ["day(created_at)"], spec["target"]
    assert spec["tail"]["trigger"] == "processing_time", spec["tail"]
    if not partitioned:
        spec["target"]["partition_by"] = []
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def files_per_partition(cfg, run_id_prefix: str = "tail-") -> Counter:
    """The data files the tail's runs wrote, counted by table partition (one key when unpartitioned)."""
    from tailfill.lake.files import written_by
    from tailfill.pipeline.handle import open_pipeline

    with open_pipeline(cfg) as p:
        data, _ = p.open_tables()
        return Counter(tuple(t.file.partition[i] for i in range(len(t.file.partition)))
                       for t in data.scan().plan_files() if written_by(t.file.file_path).startswith(run_id_prefix))


def one(home: Path, bootstrap: str, name: str, partitioned: bool, minutes: float, rate: float):
    """One tail at ``rate`` for ``minutes``: its soak result and its files per partition."""
    from tailfill.dev.sample import year_event
    from tailfill.dev.soak import soak
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.pipeline.load import load_pipeline
    from tailfill.run.contract import new_run_id
    from tailfill.run.planner import TailRequest, plan_tail

    cfg = load_pipeline(pipeline(home, bootstrap, name, partitioned))
    with open_pipeline(cfg) as p:
        plan_tail(p, TailRequest(False, None), new_run_id("tail"))  # records the cutover: the sample is history
    logs = home / name
    logs.mkdir()
    result = soak(cfg, minutes * 60, rate, logs, {**os.environ, "TAILFILL_HOME": str(home)}, event=year_event)
    return result, files_per_partition(cfg)


def row(label: str, result, files: Counter) -> str:
    p50, p95, interval = result.freshness_p50, result.freshness_p95, result.interval
    fresh = (f"p50 {p50:6.1f}s  p95 {p95:6.1f}s ({p95 / interval:4.1f} × interval)" if p95 is not None
             else "no freshness")
    per = f"{statistics.mean(files.values()):5.1f} mean, {max(files.values()):4} max" if files else "none"
    return (f"  {label:<13} {result.rate:>6,.0f}/s  {result.batches:>4} batches  {fresh}  behind "
            f"{result.behind if result.behind is not None else '?':>7}  files per partition {per} "
            f"({len(files):,} partitions)  restarts {result.restarts}  exit {result.exit_code}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10, help="each tail's length after its first commit")
    ap.add_argument("--rates", default="500,2000", help="live events per second, comma-separated")
    args = ap.parse_args()

    from tailfill.dev.broker import EmbeddedBroker

    home = Path(tempfile.mkdtemp(prefix="tailfill-ptail-"))
    os.environ["TAILFILL_HOME"] = str(home)
    rows = []
    with EmbeddedBroker() as broker:
        for i, rate in enumerate(float(r) for r in args.rates.split(",")):
            pair = {}
            for partitioned in (True, False):
                label = "by day" if partitioned else "unpartitioned"
                print(f"{label}: {rate:,.0f}/s for {args.minutes:g} min ...", flush=True)
                pair[label] = one(home, broker.bootstrap_servers, f"{'days' if partitioned else 'flat'}{i}",
                                  partitioned, args.minutes, rate)
                print(row(label, *pair[label]), flush=True)
            rows.append(pair)
    interval = rows[0]["by day"][0].interval if rows else 0
    print(f"\n{args.minutes:g} min per tail, trigger {interval:g}s (init's tail settings), records spanning a year "
          f"of days; {os.cpu_count()} cores; logs in {home}")
    for pair in rows:
        for label, (result, files) in pair.items():
            print(row(label, result, files))
        days, flat = pair["by day"][0], pair["unpartitioned"][0]
        if days.freshness_p95 and flat.freshness_p95:
            print(f"  by day / unpartitioned: p95 {days.freshness_p95 / flat.freshness_p95:.1f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
