"""Benchmark: completeness validation time ÷ ingest time for one run of N records (default 1M).

Starts the embedded broker, produces N sample events over 4 partitions, backfills them into a
local Iceberg table with the Spark job (in-process, local[2]), then validates that run twice in
the same session: cold (first call: imports Great Expectations, first Spark jobs) and warm.
Prints the figures and the ratios; the target is validation ≤ 0.15 × ingest.

    .venv/bin/python benchmarks/validation_vs_ingest.py [--records 1000000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--max-offsets-per-batch", type=int, default=250_000)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tailfill-bench-"))
    os.environ["TAILFILL_HOME"] = str(home)

    from tailfill.config import load_pipeline
    from tailfill.dev.broker import EmbeddedBroker
    from tailfill.dev.sample import produce_sample
    from tailfill.proof.validate import validate
    from tailfill.run.spark_job import run
    from tailfill.run.spark_session import get_session
    from tailfill.run.submit import backfill_spec

    with EmbeddedBroker() as broker:
        spec = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
        spec["name"] = "bench"
        spec["source"]["bootstrap_servers"] = broker.bootstrap_servers
        spec["backfill"]["max_offsets_per_batch"] = args.max_offsets_per_batch
        path = home / "bench.yaml"
        path.write_text(yaml.safe_dump(spec))
        cfg = load_pipeline(path)

        t0 = time.perf_counter()
        produce_sample(broker.bootstrap_servers, cfg.source.topic, args.records, 4, bad_every=10_000)
        produce_s = time.perf_counter() - t0
        spark = get_session()
        spark.range(10).count()  # JVM warm-up is not ingest work

        t0 = time.perf_counter()
        results = run(backfill_spec(cfg), spark=spark)
        ingest_s = time.perf_counter() - t0
        offsets = sum(r.offsets for r in results)

        timings = []
        for label in ("cold", "warm"):
            t0 = time.perf_counter()
            report = validate(cfg, spark, run_id=results[0].run_id)
            timings.append((label, time.perf_counter() - t0, report))
        spark.stop()

    print(f"records produced:        {args.records:,} in {produce_s:.1f}s")
    print(f"ingest (backfill):       {offsets:,} offsets in {ingest_s:.1f}s ({offsets / ingest_s:,.0f} offsets/s, "
          f"{sum(r.batches for r in results)} batches)")
    for label, secs, report in timings:
        t = report["timings_s"]
        print(f"validation ({label}):       {secs:.2f}s  verdict={'complete' if report['success'] else 'INCOMPLETE'}  "
              f"[offset accounting {t['offset_accounting']:.2f}s, great expectations {t['great_expectations']:.2f}s, "
              f"docs+reports {t['data_docs_and_reports']:.2f}s]  ratio validation/ingest = {secs / ingest_s:.3f}")
    ok = all(r["success"] for _, _, r in timings)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
