"""Benchmark: a live processing-time tail kept running for many minutes, its commit gaps and freshness.

On the embedded broker, a producer writes live events in small batches at each rate, and ``tailfill tail``
(trigger 10 s, its own ``spark-submit``) runs for ``--minutes`` after its first commit, alone or (``--beside``)
beside a ``tailfill backfill --max-rate`` of 400,000 offsets of history that lasts most of the run. Each row
is measured from the tail run's batch reports: commits, gaps between them (p50, p99, max, and max as a
multiple of the interval), the batches' produce-to-commit latency, restarts and exit code.

The baseline row runs the same tail with ``fetch.wait.max.ms: 10`` (set through the pipeline's
``source.consumer``; Tailfill's consumers keep librdkafka's 500 ms) for ``--baseline-minutes``.

    .venv/bin/python benchmarks/tail_soak.py [--minutes 30] [--rates 600,2000] [--beside] [--baseline-minutes 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
HISTORY = 400_000
INTERVAL = 10


def pipeline(home: Path, bootstrap: str, name: str, consumer: dict) -> Path:
    """The demo pipeline on a topic of its own, as a processing-time tail (trigger 10 s)."""
    spec = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
    spec["name"] = name
    spec["source"].update(bootstrap_servers=bootstrap, topic=f"soak-{uuid.uuid4().hex[:8]}", consumer=consumer)
    spec["tail"].update(trigger="processing_time", trigger_interval_seconds=INTERVAL, freshness_seconds=3 * INTERVAL,
                        min_offsets_per_batch=500, max_offsets_per_batch=100_000)
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def one(home: Path, bootstrap: str, name: str, consumer: dict, minutes: float, rate: float, beside: bool):
    from tailfill.dev.sample import produce_sample
    from tailfill.dev.soak import beside_rate, soak
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.pipeline.load import load_pipeline
    from tailfill.run.contract import new_run_id
    from tailfill.run.planner import TailRequest, plan_tail

    cfg = load_pipeline(pipeline(home, bootstrap, name, consumer))
    produce_sample(bootstrap, cfg.source.topic, HISTORY if beside else 1_000, 4, bad_every=1_001)
    with open_pipeline(cfg) as p:
        plan_tail(p, TailRequest(False, None), new_run_id("tail"))  # records the cutover: history is the backfill's
    logs = home / name
    logs.mkdir()
    rate_limit = beside_rate(HISTORY, minutes * 60) if beside else None
    return soak(cfg, minutes * 60, rate, logs, {**os.environ, "TAILFILL_HOME": str(home)}, backfill_rate=rate_limit)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30, help="each tail's length after its first commit")
    ap.add_argument("--rates", default="600,2000", help="live events per second, comma-separated")
    ap.add_argument("--beside", action="store_true", help="run a rate-limited backfill beside each tail")
    ap.add_argument("--baseline-minutes", type=float, default=5, help="the baseline's length (0: none)")
    args = ap.parse_args()

    from tailfill.dev.broker import EmbeddedBroker

    home = Path(tempfile.mkdtemp(prefix="tailfill-soak-"))
    os.environ["TAILFILL_HOME"] = str(home)
    rates = [float(r) for r in args.rates.split(",")]
    rows = []
    with EmbeddedBroker() as broker:
        if args.baseline_minutes:
            print(f"baseline: fetch.wait.max.ms 10, {rates[0]:,.0f}/s for {args.baseline_minutes:g} min ...",
                  flush=True)
            rows.append(("baseline (fetch.wait.max.ms 10)",
                         one(home, broker.bootstrap_servers, "baseline", {"fetch.wait.max.ms": 10},
                             args.baseline_minutes, rates[0], args.beside)))
            print(rows[-1][1].asstr(), flush=True)
        for i, rate in enumerate(rates):
            print(f"tailfill: {rate:,.0f}/s for {args.minutes:g} min ...", flush=True)
            rows.append(("tailfill", one(home, broker.bootstrap_servers, f"today{i}", {}, args.minutes, rate,
                                         args.beside)))
            print(rows[-1][1].asstr(), flush=True)
    print(f"\ntrigger {INTERVAL}s, objective: no gap over {3 * INTERVAL}s; {os.cpu_count()} cores; logs in {home}")
    for label, result in rows:
        print(f"  {label:<33} {result.asstr()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
