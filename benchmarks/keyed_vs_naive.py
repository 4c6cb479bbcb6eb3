"""Benchmark: a keyed table from a Debezium change stream — Tailfill beside consume-only and a naive pyiceberg script.

On the embedded broker, N Debezium JSON change events of orders (``tailfill.dev.change_stream``: over
N/10 ids, 20% inserts, 70% updates, 10% deletes each followed by its tombstone; 4 partitions, a key's
changes in one partition), in one run:

  (a) consume only: one tuned confluent-kafka consumer reading all partitions, nothing else;
  (b) a naive one-process script: the same consumer, batches of ``--batch`` records, each decoded, folded
      per key (pyiceberg's ``upsert`` refuses duplicate keys) and applied with pyiceberg's own
      ``tx.upsert()`` + ``tx.delete()`` in one transaction (copy-on-write);
  (c) Tailfill as the CLI runs it (``pipelines/orders_cdc.yaml``'s settings): ``tailfill backfill`` of the
      first 80% of each partition, then ``tailfill tail --once`` of the rest, produced after the backfill,
      each through ``spark-submit``;
  (e) the same on this home's Spark Connect server (``--spark connect``), from a topic and table of their
      own: the server's start and a first job (a small keyed backfill of a third topic) are paid before,
      as on a long-lived server, and printed apart;
  (d) the merge alone, batch by batch: the same stream in ``--batches`` batches prepared as executors
      prepare them (no Spark) and committed by the keyed commit, the merge's seconds per batch; ``--repeat``
      times into tables of their own, each batch's figure the median over the repeats (one batch's time
      on a shared machine varies by a quarter from run to run).

Every state is checked against an independent fold of the stream (each key's last change by offset).
Prints seconds and ratios; nothing here is a test.

    .venv/bin/python benchmarks/keyed_vs_naive.py [--events 1000000] [--batch 50000] [--batches 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import yaml
from ingest_vs_consume import PARTITIONS, _tailfill, consume_all, timed_backfill, timed_consume, validate_all

REPO = Path(__file__).resolve().parent.parent
NAIVE_SCHEMA = pa.schema([pa.field("order_id", pa.int64(), nullable=False), ("status", pa.string()),
                          ("amount", pa.float64()), ("updated_at", pa.timestamp("us", tz="UTC")),
                          ("kafka_partition", pa.int32()), ("kafka_offset", pa.int64())])


def naive_script(bootstrap: str, topic: str, ends: dict[int, int], home: Path, batch: int) -> tuple[dict, list]:
    """What a user would write with pyiceberg: consume, decode, fold each batch, ``upsert`` + ``delete``.
    Returns the state ({order_id: (partition, offset)}) and the seconds of each batch's apply."""
    from datetime import datetime

    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import In

    catalog = SqlCatalog("naive", uri=f"sqlite:///{home}/naive.db", warehouse=f"file://{home}/naive")
    catalog.create_namespace("db")
    table = catalog.create_table("db.orders", schema=NAIVE_SCHEMA)
    pending: list = []
    applied: list[float] = []

    def apply(msgs: list) -> None:
        last: dict[int, tuple] = {}
        for m in msgs:
            key = json.loads(m.key())
            key = key.get("payload", key)["order_id"]
            value = m.value()
            if value is None:
                last[key] = None
                continue
            doc = json.loads(value)
            doc = doc.get("payload", doc)
            if doc["op"] == "d":
                last[key] = None
            else:
                a = doc["after"]
                last[key] = (a["order_id"], a["status"], a["amount"], datetime.fromisoformat(a["updated_at"]),
                             m.partition(), m.offset())
        ups = [r for r in last.values() if r is not None]
        gone = [k for k, r in last.items() if r is None]
        started = time.perf_counter()
        with table.transaction() as tx:
            if ups:
                tx.upsert(pa.Table.from_pylist([dict(zip(NAIVE_SCHEMA.names, r, strict=True)) for r in ups],
                                               schema=NAIVE_SCHEMA), join_cols=["order_id"])
            if gone:
                tx.delete(In("order_id", gone))
        applied.append(time.perf_counter() - started)

    def on_batch(msgs: list) -> None:
        pending.extend(msgs)
        while len(pending) >= batch:
            apply(pending[:batch])
            del pending[:batch]

    consume_all(bootstrap, topic, ends, on_batch)
    if pending:
        apply(pending)
    rows = table.scan(selected_fields=("order_id", "kafka_partition", "kafka_offset")).to_arrow().to_pylist()
    return {r["order_id"]: (r["kafka_partition"], r["kafka_offset"]) for r in rows}, applied


def merge_runs(changes: list, home: Path, batches: int, repeat: int) -> list[list[dict]]:
    """:func:`merge_only` ``repeat`` times, each into tables of its own."""
    return [merge_only(changes, home, batches, f"merge_only_{r}") for r in range(repeat)]


def merge_only(changes: list, home: Path, batches: int, name: str) -> list[dict]:
    """The keyed commit's merge per batch, the stream cut in ``batches`` (no Spark, no broker)."""
    from tailfill.dev.change_stream import ends, records
    from tailfill.lake.prepare import Destination, prepare_ranges
    from tailfill.lake.schema_change import table_columns
    from tailfill.offsets import OffsetRange
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.pipeline.load import load_pipeline

    spec = yaml.safe_load((REPO / "pipelines" / "orders_cdc.yaml").read_text())
    spec["name"], spec["source"]["topic"], spec["target"]["namespace"] = name, "merge-only", name
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    pipeline = open_pipeline(load_pipeline(path))
    tables = pipeline.provision_tables()
    committer = pipeline.committer(tables)
    where = Destination(pipeline.fs, tables.data.location(), tables.quarantine.location())
    decoder = pipeline.format.decoder()
    end = ends(changes)
    out = []
    gc.freeze()  # this harness's own million change objects are not the merge's to walk
    for b in range(batches):
        ranges = [OffsetRange("merge-only", p, e * b // batches, e * (b + 1) // batches) for p, e in end.items()]
        prepared = prepare_ranges(lambda todo: records("merge-only", changes, todo), decoder, where, "merge", ranges,
                                  table_columns(tables.data))
        committer.commit("merge", b, prepared)
        out.append(dict(committer.last_merge))
    return out


def state_of(path: Path, home: Path) -> dict:
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.pipeline.load import load_pipeline

    os.environ["TAILFILL_HOME"] = str(home)
    with open_pipeline(load_pipeline(path)) as pipeline:
        rows = pipeline.open_state_table().scan(selected_fields=("order_id", "kafka_partition", "kafka_offset"))
        return {r["order_id"]: (r["kafka_partition"], r["kafka_offset"]) for r in rows.to_arrow().to_pylist()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=50_000, help="(b): records per upsert batch")
    parser.add_argument("--batches", type=int, default=20, help="(d): batches the stream is cut in")
    parser.add_argument("--repeat", type=int, default=3, help="(d): runs of the merge, each batch's median reported")
    parser.add_argument("--merge-only", action="store_true", help="only (d), no broker")
    args = parser.parse_args()

    from tailfill.dev.broker import EmbeddedBroker
    from tailfill.dev.change_stream import change_stream, ends, fold, produce_changes

    home = Path(tempfile.mkdtemp(prefix="tailfill-keyed-bench-"))
    os.environ["TAILFILL_HOME"] = str(home)
    changes = change_stream(args.events, args.events // 10, partitions=PARTITIONS)
    expected = fold(changes)
    ops = {op: sum(1 for c in changes if c.op == op) for op in ("c", "u", "d", "tombstone")}
    print(f"{len(changes):,} change records over {args.events // 10:,} ids ({ops}); {len(expected):,} live at the "
          "end", flush=True)
    if args.merge_only:
        report_merges(merge_runs(changes, home, args.batches, args.repeat), len(changes))
        return 0
    end = ends(changes)
    cut = {p: e * 4 // 5 for p, e in end.items()}
    history = [c for c in changes if c.offset < cut[c.partition]]
    live = [c for c in changes if c.offset >= cut[c.partition]]
    with EmbeddedBroker() as broker:
        path = keyed_pipeline(home, "keyed_bench", broker.bootstrap_servers)
        served_path = keyed_pipeline(home, "keyed_served", broker.bootstrap_servers)
        for p in (path, served_path):
            produce_changes(broker.bootstrap_servers, topic_of(p), history, PARTITIONS)
        submit = backfill_then_tail(path, home, live, "submit")
        up_s, first_s = warm_server(home, broker.bootstrap_servers)
        try:
            served = backfill_then_tail(served_path, home, live, "connect")
        finally:
            from tailfill.run.connect_server import connect_server_down

            connect_server_down(home)
        backfill_s, tail_s = submit
        tailfill_ok, complete = checked(path, home, expected)
        served_ok, served_complete = checked(served_path, home, expected)
        topic = topic_of(path)

        consume_s = timed_consume(broker.bootstrap_servers, topic, end)
        started = time.perf_counter()
        naive_state, naive_batches = naive_script(broker.bootstrap_servers, topic, end, home, args.batch)
        naive_s = time.perf_counter() - started
        print(f"  (b) naive pyiceberg upsert/delete: {naive_s:.1f}s", flush=True)
    merges = merge_runs(changes, home, args.batches, args.repeat)

    tailfill_s, served_s = backfill_s + tail_s, sum(served)
    print(f"\nkeyed table, {len(changes):,} change records, 4 partitions (this machine: 2 shared cores)")
    print(f"  (a) consume only                          {consume_s:8.1f} s")
    print(f"  (b) naive pyiceberg upsert()+delete()     {naive_s:8.1f} s   state == fold: {naive_state == expected}"
          f"   ({len(naive_batches)} batches of {args.batch:,}: apply {sum(naive_batches):.1f} s, batch 2 "
          f"{naive_batches[1]:.2f} s, last {naive_batches[-1]:.2f} s)")
    print(f"  (c) tailfill backfill 80% + tail 20%      {tailfill_s:8.1f} s   state == fold: {tailfill_ok}   "
          f"validate --all: {'COMPLETE' if complete else 'INCOMPLETE'}   (backfill {backfill_s:.1f} s, tail "
          f"{tail_s:.1f} s, each with its spark-submit)")
    print(f"  (e) the same on Spark Connect             {served_s:8.1f} s   state == fold: {served_ok}   "
          f"validate --all: {'COMPLETE' if served_complete else 'INCOMPLETE'}   (backfill {served[0]:.1f} s, tail "
          f"{served[1]:.1f} s; before them, once: the server up {up_s:.1f} s, its first job {first_s:.1f} s)")
    print(f"  end to end (b)/(c): {naive_s / tailfill_s:.2f}x   (b)/(e): {naive_s / served_s:.2f}x   "
          f"(c)/(a): {tailfill_s / consume_s:.1f}x")
    report_merges(merges, len(changes))
    print(f"      naive apply per batch (s): {' '.join(f'{x:.2f}' for x in naive_batches)}")
    return 0


def keyed_pipeline(home: Path, name: str, bootstrap: str) -> Path:
    """``pipelines/orders_cdc.yaml``'s settings as pipeline ``name`` reading topic ``<name>`` of ``bootstrap``."""
    spec = yaml.safe_load((REPO / "pipelines" / "orders_cdc.yaml").read_text())
    spec["name"] = name
    spec["target"]["table"], spec["target"]["state_table"] = name, f"{name}_state"
    spec["source"]["bootstrap_servers"] = bootstrap
    spec["source"]["topic"] = name.replace("_", "-")
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def topic_of(path: Path) -> str:
    return yaml.safe_load(path.read_text())["source"]["topic"]


def backfill_then_tail(path: Path, home: Path, live: list, spark: str) -> tuple[float, float]:
    """Backfill what the topic holds, produce ``live``, then ``tail --once`` it, each ``--spark spark``; the seconds
    of each."""
    from tailfill.dev.change_stream import produce_changes
    from tailfill.pipeline.load import load_pipeline

    _, backfill_s = timed_backfill(path, home, "--spark", spark)
    print(f"  ({spark}) tailfill backfill of 80%: {backfill_s:.1f}s", flush=True)
    produce_changes(load_pipeline(path).source.bootstrap_servers, topic_of(path), live, PARTITIONS)
    started = time.perf_counter()
    done = _tailfill(home, "tail", str(path), "--once", "--spark", spark)
    tail_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"tail failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    print(f"  ({spark}) tailfill tail --once of 20%: {tail_s:.1f}s", flush=True)
    print("\n".join(f"      {line}" for line in done.stdout.splitlines()[-4:]), flush=True)
    return backfill_s, tail_s


def warm_server(home: Path, bootstrap: str) -> tuple[float, float]:
    """Start this home's Spark Connect server and run its first job, a keyed backfill of 2,000 changes of a topic of
    its own: (seconds to start, seconds of that job)."""
    from tailfill.dev.change_stream import change_stream, produce_changes
    from tailfill.run.connect_server import connect_server_up

    started = time.perf_counter()
    connect_server_up(home)
    up_s = time.perf_counter() - started
    path = keyed_pipeline(home, "keyed_warmup", bootstrap)
    produce_changes(bootstrap, topic_of(path), change_stream(2_000, 200, partitions=PARTITIONS), PARTITIONS)
    _, first_s = timed_backfill(path, home, "--spark", "connect")
    print(f"  (connect) server up {up_s:.1f}s, its first job {first_s:.1f}s", flush=True)
    return up_s, first_s


def checked(path: Path, home: Path, expected: dict) -> tuple[bool, bool]:
    """Whether the pipeline's state equals the fold ``expected``, and whether ``validate --all`` finds it COMPLETE."""
    return state_of(path, home) == expected, validate_all(path, home)


def report_merges(runs: list[list[dict]], records: int) -> None:
    """Print the merge's seconds per batch (each batch's median over the runs) and per key it changed."""
    batches = len(runs[0])
    print(f"  (d) the merge alone, {batches} batches of ~{records // batches:,}, median of {len(runs)} runs:")
    medians = {name: [statistics.median(run[b][name] for run in runs) for b in range(batches)]
               for name in ("merge_seconds", "merge_cpu_seconds")}
    for what, name in (("wall", "merge_seconds"), ("CPU", "merge_cpu_seconds")):
        m = medians[name]
        print(f"      {what:>4}: total {sum(m):.2f} s, median {statistics.median(m):.3f} s, batch 2 {m[1]:.3f} s, "
              f"batch {batches} {m[-1]:.3f} s, ratio {m[-1] / m[1]:.2f}; per batch: {' '.join(f'{x:.2f}' for x in m)}")
    cpu = medians["merge_cpu_seconds"]
    won = [x["inserted"] + x["updated"] + x["deleted"] for x in runs[0]]  # keys whose state changed (same each run)
    per_key = [c / max(w, 1) * 1e6 for c, w in zip(cpu, won, strict=True)]
    print(f"      keys changed: batch 2 {won[1]:,}, batch {batches} {won[-1]:,}; CPU per key changed: batch 2 "
          f"{per_key[1]:.1f} us, batch {batches} {per_key[-1]:.1f} us, ratio {per_key[-1] / per_key[1]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
