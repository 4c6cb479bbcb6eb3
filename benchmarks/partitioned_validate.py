"""Benchmark: ``validate --all`` on a day-partitioned table of many small files, beside the same rows unpartitioned.

Two tables of the demo pipeline's events, ``--rows`` offsets over 4 Kafka partitions, committed as ``--batches``
micro-batches through the real prepare and commit path (:mod:`tailfill.dev.batches`, no Spark, no broker): one
partitioned by ``day(created_at)`` with the records' days spanning a year (every batch touches every day: one file
per day and batch), one unpartitioned (one file per Kafka partition and batch). Then ``validate --all`` on each, in
this process, as ``tailfill validate`` runs it. Prints the files, the seconds by stage and partitioned/unpartitioned.

    .venv/bin/python benchmarks/partitioned_validate.py [--rows 400000] [--batches 40]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
PARTITIONS = 4


def table(home: Path, name: str, partition_by: list[str], rows: int, batches: int):
    """The pipeline ``name`` with ``rows`` offsets committed in ``batches`` batches; its config."""
    from tailfill.dev.batches import commit_sample_batch
    from tailfill.dev.sample import year_event
    from tailfill.offsets import OffsetRange
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.pipeline.load import load_pipeline

    spec = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
    spec["name"] = name
    spec["source"]["bootstrap_servers"] = "127.0.0.1:9"  # never asked: every offset is stored
    spec["target"].update(table=name, partition_by=partition_by)
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    cfg = load_pipeline(path)
    per = rows // batches // PARTITIONS
    with open_pipeline(cfg) as pipeline:
        for b in range(batches):
            ranges = [OffsetRange(cfg.source.topic, p, b * per, (b + 1) * per) for p in range(PARTITIONS)]
            commit_sample_batch(pipeline, "bench", b, ranges, event=year_event)
    return cfg


def timed_validate(cfg) -> tuple[float, dict, int]:
    """``validate --all`` of ``cfg``: seconds, the result's timings, and the data files it read."""
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.proof.validate import validate

    with open_pipeline(cfg) as pipeline:
        started = time.perf_counter()
        result = validate(pipeline, all_runs=True)
        seconds = time.perf_counter() - started
        if not result.success:
            raise SystemExit(f"validation failed: {result.problems[:5]}")
        data, _ = pipeline.open_tables()
        files = sum(1 for _ in data.scan().plan_files())
    return seconds, result.timings_s, files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=400_000, help="offsets in each table")
    ap.add_argument("--batches", type=int, default=40, help="micro-batches they were committed in")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tailfill-pvalidate-"))
    os.environ["TAILFILL_HOME"] = str(home)
    import great_expectations  # noqa: F401  (imported before the timing: a validate task has it already)

    results = {}
    for name, partition_by in (("unpartitioned", []), ("by_day", ["day(created_at)"])):
        started = time.perf_counter()
        cfg = table(home, name, partition_by, args.rows, args.batches)
        print(f"{name}: {args.rows:,} offsets committed in {args.batches} batches "
              f"({time.perf_counter() - started:.0f}s)", flush=True)
        results[name] = timed_validate(cfg)
    print(f"\nvalidate --all, {args.rows:,} offsets in {args.batches} batches; {os.cpu_count()} cores")
    for name, (seconds, timings, files) in results.items():
        stages = ", ".join(f"{k} {v:.2f}s" for k, v in timings.items() if k != "total")
        print(f"  {name:<14} {files:>6,} data files  {seconds:6.2f}s  ({stages})")
    ratio = results["by_day"][0] / results["unpartitioned"][0]
    print(f"  by_day / unpartitioned: {ratio:.1f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
