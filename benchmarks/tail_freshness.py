"""Benchmark: the live tail's freshness alone, then with a backfill beside it.

On the embedded broker: N events of history, a producer writing live events at R/s, and a
processing-time tail (trigger T s) started with ``tailfill tail``. The tail first runs alone, then
``tailfill backfill`` runs beside it, then the tail is stopped with ``tailfill stop-tail``. Prints,
for the tail's batches in each phase: produce-to-commit latency (p50, p95, max of the batches'
p95) and the longest batch against the trigger interval, and the backfill's rate.

    .venv/bin/python benchmarks/tail_freshness.py [--events 1000000] [--rate 1000] [--interval 10] [--alone 10]
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
PARTITIONS = 4


def phase(batches: list, start: float, end: float) -> str:
    inside = [b for b in batches if start <= b.at <= end]
    if not inside:
        return "no batches"
    p95s = [b.freshness["p95"] for b in inside if b.freshness]
    return (f"{len(inside):>3} batches  freshness p50 {statistics.median(b.freshness['p50'] for b in inside):5.1f}s  "
            f"p95 {statistics.median(p95s):5.1f}s (worst {max(p95s):5.1f}s)  "
            f"longest batch {max(b.seconds for b in inside):5.1f}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="history (offsets) for the backfill")
    ap.add_argument("--rate", type=float, default=1_000, help="live events per second")
    ap.add_argument("--interval", type=float, default=10, help="the tail's trigger interval (s)")
    ap.add_argument("--alone", type=float, default=10, help="seconds of the tail alone before the backfill")
    args = ap.parse_args()


    from tailfill.dev.broker import EmbeddedBroker
    from tailfill.dev.sample import produce_live, produce_sample
    from tailfill.pipeline.load import load_pipeline
    from tailfill.state.store import StateStore, read_health, run_ids, run_reports

    home = Path(tempfile.mkdtemp(prefix="tailfill-fresh-"))
    os.environ["TAILFILL_HOME"] = str(home)
    tailfill = str(Path(sys.executable).parent / "tailfill")
    env = {**os.environ}
    with EmbeddedBroker() as broker:
        spec = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())  # the shipped settings, but:
        spec["name"] = "fresh"
        spec["source"]["bootstrap_servers"] = broker.bootstrap_servers
        # As in tests/integration/test_tail_first.py: 2 slices, tail batches of 500-50,000 offsets (the
        # test's --demo-settings runs the demo pipeline's own).
        spec["backfill"]["slices"] = 2
        spec["tail"].update(min_offsets_per_batch=500, max_offsets_per_batch=50_000, trigger="processing_time",
                            trigger_interval_seconds=args.interval, freshness_seconds=2 * args.interval)
        path = home / "fresh.yaml"
        path.write_text(yaml.safe_dump(spec))
        cfg = load_pipeline(path)
        print(f"history: producing {args.events:,} events ...", flush=True)
        produce_sample(broker.bootstrap_servers, cfg.source.topic, args.events, PARTITIONS, bad_every=1000)
        tail_log = (home / "tail.log").open("w")
        tail = subprocess.Popen([tailfill, "tail", str(path)], env=env, stdout=tail_log, stderr=subprocess.STDOUT)
        while read_health(StateStore.of(cfg)) is None:
            assert tail.poll() is None, (home / "tail.log").read_text()[-3000:]
            time.sleep(0.5)
        stop = threading.Event()
        producer = threading.Thread(target=produce_live, args=(broker.bootstrap_servers, cfg.source.topic,
                                                               args.rate, stop))
        producer.start()
        alone_from = time.time() + 2 * args.interval  # the tail's first batches settle
        print(f"tail alone for {args.alone + 2 * args.interval:.0f}s at {args.rate:,.0f} events/s ...", flush=True)
        time.sleep(args.alone + 2 * args.interval)
        backfill_from = time.time()
        print("backfill beside the tail ...", flush=True)
        done = subprocess.run([tailfill, "backfill", str(path)], env=env, capture_output=True, text=True)
        backfill_to = time.time()
        if done.returncode != 0:
            raise SystemExit(f"backfill failed:\n{done.stdout[-3000:]}")
        time.sleep(2 * args.interval)
        stop.set()
        producer.join()
        subprocess.run([tailfill, "stop-tail", str(path)], env=env, check=True, capture_output=True)
        tail.wait(timeout=300)
        tail_log.close()
        store = StateStore.of(cfg)
        batches = [b for run in run_ids(store) if run.startswith("tail-") for b in run_reports(store, run)]

    seconds = backfill_to - backfill_from
    print(f"\n{args.events:,} offsets of history, live {args.rate:,.0f} events/s, tail trigger {args.interval:g}s, "
          f"objective p95 ≤ {2 * args.interval:g}s; {os.cpu_count()} cores")
    print(f"  tail alone            {phase(batches, alone_from, backfill_from)}")
    print(f"  tail beside backfill  {phase(batches, backfill_from, backfill_to)}")
    print(f"  backfill              {seconds:5.1f}s end to end, {args.events / seconds:,.0f} offsets/s")
    job_lines = (done.stdout + done.stderr).splitlines()  # the job's progress lines are on stderr
    print("\n".join(line for line in job_lines if "beside" in line or "yield" in line)[-600:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
