"""Benchmark: the in-job ``plan`` stage of a backfill's first batch, and a tail's, as the batch report has it.

``plan`` is the time from the job being ready to run its query (the batch writer built) to the
first batch's prepare: the streaming query starting, the source planning the batch (offsets,
watermarks, ranges) in Spark's Python processes, and Spark calling ``foreachBatch``. Each run is a
fresh ``tailfill backfill`` (table, catalog and checkpoints removed; broker and topic kept) of
``--count`` sample events on the embedded broker, then a ``tailfill tail --once`` of ``--count /
10`` more; the figures are the plan stage of each run's first batch, then the median.

To compare two versions, run it on each checkout in turn, one round at a time (``--runs 1``,
alternating), so both meet the same machine load: Spark's Python processes import ``tailfill``
from the installed (editable) package, so a ``PYTHONPATH`` override does not reach them.

    .venv/bin/python benchmarks/plan_stage.py [--runs 3] [--count 200000]

Uses its own ``TAILFILL_HOME`` (a temporary folder) and stops the broker it started at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TAILFILL = str(Path(sys.executable).parent / "tailfill")
FRESH = ("catalog.db", "warehouse", "checkpoints", "logs")  # everything but the broker and the code archive


def tailfill(env: dict, *args: str) -> None:
    proc = subprocess.run([TAILFILL, *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"tailfill {' '.join(args)} failed:\n{proc.stderr[-3000:]}")


def first_plan(home: Path, mode: str) -> float:
    """The plan stage of the first batch of the (only) run of ``mode`` under ``home`` (from the run state)."""
    from tailfill.pipeline.load import resolve_pipeline
    from tailfill.state.store import StateStore, run_ids, run_reports

    os.environ["TAILFILL_HOME"] = str(home)  # the demo's warehouse, where its run state lives
    cfg = resolve_pipeline("demo")
    [run] = [r for r in run_ids(StateStore.of(cfg)) if r.startswith(f"{mode}-")]
    return min(run_reports(StateStore.of(cfg), run), key=lambda r: r.at).stages["plan"]


def one_round(home: Path, env: dict, count: int) -> dict[str, float]:
    """A fresh backfill of ``count`` new events, then a tail of a tenth as many: each first batch's plan."""
    for name in FRESH:
        path = home / name
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    tailfill(env, "produce-sample", "--count", str(count))
    tailfill(env, "backfill", "demo")
    tailfill(env, "produce-sample", "--count", str(count // 10))
    tailfill(env, "tail", "demo", "--once")
    return {mode: first_plan(home, mode) for mode in ("backfill", "tail")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=200_000)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tailfill-plan-"))
    env = {**os.environ, "TAILFILL_HOME": str(home)}
    figures: dict[str, list[float]] = {"backfill": [], "tail": []}
    try:
        tailfill(env, "broker", "up")
        for i in range(args.runs):
            for mode, plan in one_round(home, env, args.count).items():
                figures[mode].append(plan)
            print(f"round {i + 1}: plan of the first batch: backfill {figures['backfill'][-1]:.2f}s, "
                  f"tail {figures['tail'][-1]:.2f}s", flush=True)
    finally:
        subprocess.run([TAILFILL, "broker", "down"], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    print(f"median over {args.runs} rounds: backfill {statistics.median(figures['backfill']):.2f}s, "
          f"tail {statistics.median(figures['tail']):.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
