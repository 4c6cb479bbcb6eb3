"""Benchmark: the peak memory and time of ``validate``'s table-wide fold of a keyed table, whole vs in buckets.

A synthetic change log (``tailfill.dev.change_stream``: ``--changes`` Debezium JSON changes over ``--keys`` order
ids, 4 partitions) is prepared as executors prepare it and committed by the keyed commit in ``--batches`` batches
(no Spark, no broker) to a local SQLite-catalog table. Then each way of checking the state runs in a fresh process,
its peak resident memory read from Linux's ``/proc/self/status`` (``VmHWM``, reset once the tables are open):

  whole      the fold held whole: the applied changes' columns read as one Arrow table, every key folded into one
             dict and compared with the whole state read the same way (the baseline);
  buckets    ``check_state`` as ``validate --all`` runs it: buckets of at most ``BUCKET_ROWS`` rows (one bucket if
             the tables fit in one);
  buckets/N  ``check_state`` with buckets of at most N rows (``--bucket-rows``).

Each is run on the state as its merges left it (reading it applies its position deletes), then on the state
compacted as ``maintain`` compacts it. Prints each one's peak memory above what the process held once the tables
were open, that peak, the bucket files' size on disk, and its seconds.

    .venv/bin/python benchmarks/keyed_validate_memory.py [--changes 1000000] [--keys 200000] [--bucket-rows 100000]
                                                         [--home DIR: the tables made there, or reused]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
TOPIC = "validate-memory"


def build(home: Path, changes: int, keys: int, batches: int) -> Path:
    """The pipeline's YAML in ``home``, its tables made and filled (kept if ``home`` has them already)."""
    from tailfill.dev.change_stream import change_stream, ends, records
    from tailfill.lake.prepare import Destination, prepare_ranges
    from tailfill.lake.schema_change import table_columns
    from tailfill.offsets import OffsetRange
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.pipeline.load import load_pipeline

    path, built = home / "validate_memory.yaml", home / "built"
    if built.exists():
        print(f"the tables in {home}: {built.read_text()}", flush=True)
        return path
    if path.exists():
        raise SystemExit(f"{home} holds tables not fully made: remove it, or give another --home")
    spec = yaml.safe_load((REPO / "pipelines" / "orders_cdc.yaml").read_text())
    spec["name"], spec["source"]["topic"], spec["target"]["namespace"] = "validate_memory", TOPIC, "validate_memory"
    started = time.perf_counter()
    stream = change_stream(changes, keys, partitions=4)
    path.write_text(yaml.safe_dump(spec))
    pipeline = open_pipeline(load_pipeline(path))
    tables = pipeline.provision_tables()
    committer = pipeline.committer(tables)
    where = Destination(pipeline.fs, tables.data.location(), tables.quarantine.location())
    end = ends(stream)
    gc.freeze()  # this harness's own million change objects are not the merge's to walk
    for b in range(batches):
        ranges = [OffsetRange(TOPIC, p, e * b // batches, e * (b + 1) // batches) for p, e in end.items()]
        prepared = prepare_ranges(lambda todo: records(TOPIC, stream, todo), pipeline.format.decoder(), where,
                                  "bench", ranges, table_columns(tables.data))
        committer.commit("bench", b, prepared)
    built.write_text(f"{len(stream):,} changes over {keys:,} ids, committed in {batches} batches")
    print(f"{built.read_text()} in {time.perf_counter() - started:.0f} s ({home})", flush=True)
    return path


def whole_table(changes, state, key: tuple[str, ...], version_by: str | None) -> tuple[int, int]:
    """The fold held whole: every applied change's columns in one Arrow table, every key in one dict, the state
    read whole; returns the keys checked and those that differ."""
    from tailfill.lake.files import range_filter
    from tailfill.lake.key_index import encode_keys, key_array
    from tailfill.lake.keyed import applied_ranges
    from tailfill.proof.keyed import KEY, PLACE, _fold
    from tailfill.values.schema import CDC_OP, COORDINATES

    columns = (*key, CDC_OP, *COORDINATES, *([version_by] if version_by else []))
    rows = changes.scan(row_filter=range_filter(applied_ranges(state)), selected_fields=columns).to_arrow()
    expected = _fold(rows.append_column(KEY, key_array(rows, key)), version_by)
    held = state.scan(selected_fields=(*key, *PLACE)).to_arrow()
    seen = dict(zip(encode_keys(held, key), zip(held.column("kafka_partition").to_pylist(),
                                                held.column("kafka_offset").to_pylist(), strict=True), strict=True))
    checked = sorted(set(expected) | set(seen))
    return len(checked), sum(1 for k in checked if expected.get(k) != seen.get(k))


def measure(path: Path, variant: str, bucket_rows: int) -> dict:
    """One way of checking the state, in this process: its seconds, peak RSS and what it found."""
    from tailfill.proof import keyed

    pipeline = _pipeline(path)
    changes, state = pipeline.open_tables().data, pipeline.open_state_table()
    key, version_by = pipeline.cfg.target.key, pipeline.cfg.target.version_by
    buckets: list[int] = []
    spilled: list[int] = []
    spill = keyed.partition

    def watched(rows, n: int, folder: Path) -> tuple[list[Path], int]:
        files, count = spill(rows, n, folder)
        buckets.append(n)
        spilled.append(sum(f.stat().st_size for f in files))
        return files, count

    keyed.partition = watched
    if bucket_rows:
        keyed.BUCKET_ROWS = bucket_rows
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # the peak so far (imports, opening the tables) forgotten
    base = _status_kb("VmRSS")
    started = time.perf_counter()
    if variant == "whole":
        checked, differing = whole_table(changes, state, key, version_by)
    else:
        found = keyed.check_state(changes, state, key, version_by)
        checked, differing = found.keys_checked, found.differing
        assert not found.problems, found.problems
    seconds = time.perf_counter() - started
    peak = _status_kb("VmHWM")
    return {"seconds": seconds, "peak_mb": peak / 1024, "above_mb": (peak - base) / 1024, "checked": checked,
            "differing": differing, "buckets": buckets[0] if buckets else None, "spilled_mb": sum(spilled) / 2**20}


def _status_kb(name: str) -> int:
    """A memory figure of this process from ``/proc/self/status`` (kB)."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(f"{name}:"))
    return int(line.split()[1])


def run_variant(path: Path, variant: str, bucket_rows: int = 0) -> dict:
    """:func:`measure` in a fresh process."""
    done = subprocess.run([sys.executable, __file__, "--measure", variant, "--yaml", str(path),
                           "--bucket-rows", str(bucket_rows)], capture_output=True, text=True,
                          env={**os.environ, "TAILFILL_HOME": str(path.parent)})
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def state_files(path: Path) -> str:
    """``data files: N, delete files: M`` of the pipeline's state table."""
    tasks = list(_pipeline(path).open_state_table().scan().plan_files())
    deletes = len({d.file_path for t in tasks for d in t.delete_files})
    return f"data files: {len(tasks)}, delete files: {deletes}"


def compact(path: Path) -> str:
    """Compact the pipeline's state table (its deletes applied, as ``maintain`` does); its files after."""
    from tailfill.upkeep.state_compact import compact_state

    pipeline = _pipeline(path)
    compact_state(pipeline.open_state_table(), pipeline.fs, pipeline.cfg.target.key, 128 << 20)
    return state_files(path)


def _pipeline(path: Path):
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.pipeline.load import load_pipeline

    return open_pipeline(load_pipeline(path))


def report(label: str, r: dict) -> None:
    where = f"{r['buckets']:>3} bucket(s), {r['spilled_mb']:.0f} MB on disk" if r["buckets"] else "in memory"
    print(f"  {label:<26} {where:<30} peak +{r['above_mb']:4.0f} MB (RSS {r['peak_mb']:4.0f} MB)  "
          f"{r['seconds']:5.1f} s   {r['checked']:,} keys checked, {r['differing']} differ", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--batches", type=int, default=10, help="commits the change log is made in")
    parser.add_argument("--bucket-rows", type=int, default=100_000, help="the small buckets' size")
    parser.add_argument("--home", type=Path, help="where the tables are made (kept; reused if there already)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--yaml", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.yaml, args.measure, args.bucket_rows)))
        return 0

    if args.home:
        args.home.mkdir(parents=True, exist_ok=True)
        return run(args, args.home)
    with tempfile.TemporaryDirectory(prefix="tailfill-validate-memory-") as home:
        return run(args, Path(home))


def run(args: argparse.Namespace, home: Path) -> int:
    """Make (or reuse) the tables in ``home`` and print every way's figures."""
    os.environ["TAILFILL_HOME"] = str(home)
    path = build(home, args.changes, args.keys, args.batches)
    print(f"\nvalidate's fold of a keyed table, {args.changes:,} changes over {args.keys:,} keys (this machine: "
          f"{os.cpu_count()} shared cores), each in a fresh process:")
    small = (f"buckets of {args.bucket_rows:,} rows", "buckets", args.bucket_rows)
    print(f"the state as it is ({state_files(path)}):")
    for label, variant, rows in (("whole table (baseline)", "whole", 0), ("buckets, default size", "buckets", 0),
                                 small):
        report(label, run_variant(path, variant, rows))
    print(f"the state compacted as `maintain` compacts it ({compact(path)}):")
    for label, variant, rows in (("whole table (baseline)", "whole", 0), small):
        report(label, run_variant(path, variant, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
