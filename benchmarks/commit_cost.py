"""Benchmark: the cost of one micro-batch commit after thousands of commits, with and without upkeep.

A long tail in fast-forward: ``--batches`` small micro-batches (``--offsets`` per partition each, 4
partitions, sample events) are prepared as an executor writes them and committed through the
driver's real commit path (:func:`tailfill.lake.commit.commit_prepared`: quarantine table, then the
data table with the offset ledger), no Spark and no broker. Two runs on fresh tables:

  (a) with upkeep: ``tailfill maintain``'s code every ``--every`` batches (compaction to
      ``--target-bytes``, expiry of snapshots beyond the last ``--keep-last``, orphan cleanup; the
      safety age is 0 here because nothing else writes to these tables);
  (b) baseline: the same commits, no upkeep.

Prints, for each, the median commit ms of batches 6–15 and of the last 10 batches and their ratio
(target with upkeep: ≤ 1.5), the snapshot and data file counts at the end (with upkeep: files ≤
⌈bytes / target⌉ + partitions after the last compaction), and a ``validate --all`` of run (a),
which must still check every offset. Nothing here is a test: it prints figures.

    .venv/bin/python benchmarks/commit_cost.py [--batches 2000] [--baseline-batches 2000] [--every 10] [--keep-last 5]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
PARTITIONS = 4


def pipeline(home: Path, target_bytes: int, keep_last: int):
    os.environ["TAILFILL_HOME"] = str(home)
    from tailfill.pipeline.load import load_pipeline

    data = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
    data["source"]["bootstrap_servers"] = "127.0.0.1:9"  # never contacted
    data["source"]["topic"] = "bench"
    data["target"]["catalog"]["uri"] = f"sqlite:///{home}/catalog.db"
    data["target"]["warehouse"] = str(home / "warehouse")
    data["maintenance"] = {"target_file_bytes": target_bytes, "expire_older_than": "0s", "keep_last": keep_last,
                           "orphan_min_age": "0s", "schedule": None}
    home.mkdir(parents=True, exist_ok=True)
    (home / "bench.yaml").write_text(yaml.safe_dump(data))
    return load_pipeline(home / "bench.yaml")


def run(label: str, batches: int, offsets: int, every: int | None, target_bytes: int, keep_last: int,
        bad_every: int) -> dict:
    from tailfill.dev.batches import commit_sample_batch
    from tailfill.offsets import OffsetRange
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.run.maintain import maintain

    cfg = pipeline(Path(tempfile.mkdtemp(prefix=f"commit-cost-{label}-")), target_bytes, keep_last)
    handle = open_pipeline(cfg)
    commit_ms, upkeep_s = [], []
    started = time.perf_counter()
    for b in range(1, batches + 1):
        ranges = [OffsetRange("bench", p, (b - 1) * offsets, b * offsets) for p in range(PARTITIONS)]
        _, secs = commit_sample_batch(handle, "long-tail", b, ranges, bad_every)
        commit_ms.append(secs * 1000)
        if every and b % every == 0:
            t = time.perf_counter()
            report = maintain(handle, cfg.maintenance)
            upkeep_s.append(time.perf_counter() - t)
            last_upkeep = report
        if b % 250 == 0:
            print(f"  [{label}] batch {b:,}: commit {commit_ms[-1]:.0f} ms "
                  f"({time.perf_counter() - started:.0f}s so far)", flush=True)
    data = handle.open_tables().data
    files = list(data.scan().plan_files())
    out = {"label": label, "cfg": cfg, "batches": batches, "first": statistics.median(commit_ms[5:15]),
           "last": statistics.median(commit_ms[-10:]), "snapshots": len(data.snapshots()),
           "data_files": len(files), "data_bytes": sum(t.file.file_size_in_bytes for t in files),
           "upkeep_s": upkeep_s, "seconds": time.perf_counter() - started}
    if every:
        c = last_upkeep.tables[0].compaction
        out["after_compaction"] = (c.data_files, c.data_bytes)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--baseline-batches", type=int, default=2000)
    ap.add_argument("--offsets", type=int, default=25, help="offsets per partition per batch")
    ap.add_argument("--every", type=int, default=10, help="batches between two upkeep runs")
    ap.add_argument("--keep-last", type=int, default=5)
    ap.add_argument("--target-bytes", type=int, default=4 * 1024 * 1024)
    ap.add_argument("--bad-every", type=int, default=997, help="every K-th record malformed (quarantined)")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))

    print(f"{args.batches:,} micro-batches of {args.offsets} offsets x {PARTITIONS} partitions, committed one "
          f"by one (SQLite catalog, local warehouse); upkeep every {args.every} batches keeping the last "
          f"{args.keep_last} snapshots, target file {args.target_bytes:,} B", flush=True)
    header = (f"{'':<10} {'batch 10':>9} {'last':>14} {'ratio':>6} {'snapshots':>10} {'data files':>10} "
              f"{'total':>8}   (commit ms: median of batches 6-15 and of the last 10; quarantine + data table)")
    results = []
    for label, batches, every in (("upkeep", args.batches, args.every), ("baseline", args.baseline_batches, None)):
        r = run(label, batches, args.offsets, every, args.target_bytes, args.keep_last, args.bad_every)
        results.append(r)
        print(header)
        for r in results:
            print(f"{r['label']:<10} {r['first']:>7.0f}ms {r['last']:>7.0f}ms @{r['batches']:<5,} "
                  f"{r['last'] / r['first']:>5.2f}x {r['snapshots']:>10,} {r['data_files']:>10,} "
                  f"{r['seconds']:>7.0f}s", flush=True)
    upkeep = results[0]
    if upkeep["upkeep_s"]:
        s = upkeep["upkeep_s"]
        print(f"upkeep runs: {len(s)}, median {statistics.median(s):.2f}s, max {max(s):.2f}s")
        files, size = upkeep["after_compaction"]
        bound = math.ceil(size / args.target_bytes) + PARTITIONS
        print(f"after the last compaction: {files} data files for {size:,} B; bound ceil(bytes/target) + "
              f"partitions = {bound}: {'ok' if files <= bound else 'EXCEEDED'}")

    from tailfill.pipeline.handle import open_pipeline
    from tailfill.proof.validate import validate

    os.environ["TAILFILL_HOME"] = str(Path(upkeep["cfg"].target.warehouse).parent)
    report = validate(open_pipeline(upkeep["cfg"]), all_runs=True)
    expected = args.batches * args.offsets * PARTITIONS
    print(f"validate --all after upkeep: {'COMPLETE' if report.success else 'INCOMPLETE'}, "
          f"{report.offsets_checked:,} of {expected:,} offsets checked"
          + "".join(f"\n  problem: {p}" for p in report.problems[:10]))
    return 0 if report.success and report.offsets_checked == expected else 1


if __name__ == "__main__":
    sys.exit(main())
