"""Benchmark: Tailfill's backfill of Avro records beside a naive one-process script and consume-only, one run.

On the embedded broker and the development registry, N sample orders in Avro (confluent-kafka's
``AvroSerializer``: nested device, tags, scores, an enum, a decimal, a date, a timestamp; ~90 B each,
4 partitions, 0.1% not in the wire format):

  (a) consume only: one tuned confluent-kafka consumer reading all partitions, nothing else;
  (b) a naive script: one process, the same consumer, each record's schema id looked up once,
      ``fastavro.schemaless_reader`` on the payload, Arrow, Parquet out (records not in the wire format
      to a second file);
  (c) ``tailfill backfill`` exactly as the CLI runs it (``pipelines/orders_avro.yaml``'s settings);
      spark-submit's startup is reported apart from the steady state;
  (e) ``tailfill backfill --spark connect`` twice, as in ``ingest_vs_consume.py``: the first job of a freshly
      started Spark Connect server, then the next job.

Prints offsets/s for each and the ratios c/a, c/b, e/b. Nothing here is a test: it prints figures.

    .venv/bin/python benchmarks/avro_vs_naive.py [--events 1000000]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from ingest_vs_consume import (
    PARTITIONS,
    consume_all,
    report_served,
    served_backfills,
    stage_times,
    timed_backfill,
    timed_consume,
    validate_all,
)

REPO = Path(__file__).resolve().parent.parent
NOT_WIRE_EVERY = 1_000


def naive_script(bootstrap: str, topic: str, ends: dict[int, int], registry: str, out: Path) -> tuple[int, int]:
    """What a user would write: consume, fastavro schemaless decode with the writer schema, Arrow, Parquet."""
    import fastavro

    from tailfill.formats.avro import avro_columns

    schemas: dict[int, tuple] = {}
    writers: dict[tuple, pq.ParquetWriter] = {}
    bad_out = pq.ParquetWriter(out / "bad.parquet", pa.schema([("partition", pa.int32()), ("offset", pa.int64()),
                                                               ("value", pa.binary())]), compression="zstd")
    counts = [0, 0]

    def writer_schema(sid: int) -> tuple:
        if sid not in schemas:
            with urllib.request.urlopen(f"{registry}/schemas/ids/{sid}") as response:
                text = json.loads(response.read())["schema"]
            schemas[sid] = (fastavro.parse_schema(json.loads(text)), avro_columns(text))
        return schemas[sid]

    def on_batch(msgs) -> None:
        rows: dict[int, list[dict]] = {}
        bad: dict[str, list] = {"partition": [], "offset": [], "value": []}
        for m in msgs:
            value = m.value()
            if not value or value[0] != 0 or len(value) < 5:
                bad["partition"].append(m.partition())
                bad["offset"].append(m.offset())
                bad["value"].append(value)
                continue
            sid = int.from_bytes(value[1:5], "big")
            parsed, _ = writer_schema(sid)
            row = fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed, None)
            row["kafka_partition"], row["kafka_offset"] = m.partition(), m.offset()
            rows.setdefault(sid, []).append(row)
        for sid, group in rows.items():
            columns = writer_schema(sid)[1]
            schema = pa.schema([("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()), *columns])
            key = tuple(schema.names)
            if key not in writers:
                writers[key] = pq.ParquetWriter(out / f"rows-{sid}.parquet", schema, compression="zstd")
            writers[key].write_table(pa.Table.from_pylist(group, schema=schema))
            counts[0] += len(group)
        bad_out.write_table(pa.Table.from_pydict(bad, schema=bad_out.schema))
        counts[1] += len(bad["offset"])

    consume_all(bootstrap, topic, ends, on_batch)
    for w in writers.values():
        w.close()
    bad_out.close()
    return counts[0], counts[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from tailfill.dev.broker import EmbeddedBroker
    from tailfill.dev.format_samples import produce_format_sample
    from tailfill.dev.registry import DevRegistry
    from tailfill.pipeline.load import load_pipeline

    events = args.events
    home = Path(tempfile.mkdtemp(prefix="tailfill-avro-bench-"))
    os.environ["TAILFILL_HOME"] = str(home)
    with EmbeddedBroker() as broker, DevRegistry() as registry:
        spec = yaml.safe_load((REPO / "pipelines" / "orders_avro.yaml").read_text())  # the shipped settings
        spec["name"] = "avro_bench"
        spec["source"]["bootstrap_servers"] = broker.bootstrap_servers
        spec["format"]["schema_registry"]["url"] = registry.url
        path = home / "avro_bench.yaml"
        path.write_text(yaml.safe_dump(spec))
        cfg = load_pipeline(path)
        topic = cfg.source.topic
        print(f"  producing {events:,} Avro orders ...", flush=True)
        produced = produce_format_sample(broker.bootstrap_servers, topic, registry.url, "avro", events, PARTITIONS,
                                         not_wire_every=NOT_WIRE_EVERY)
        ends = {p: events // PARTITIONS + (1 if p < events % PARTITIONS else 0) for p in range(PARTITIONS)}

        consume_s = timed_consume(broker.bootstrap_servers, topic, ends)

        naive_dir = home / "naive"
        naive_dir.mkdir()
        t0 = time.perf_counter()
        naive_rows, naive_bad = naive_script(broker.bootstrap_servers, topic, ends, registry.url, naive_dir)
        naive_s = time.perf_counter() - t0
        assert (naive_rows, naive_bad) == (produced["good"], produced["bad"]), (naive_rows, naive_bad, produced)
        print(f"  (b) naive script: {naive_s:.1f}s", flush=True)

        launched, backfill_s = timed_backfill(path, home, "--spark", "submit")
        batches, stages, first, last = stage_times(cfg)
        complete = validate_all(path, home)
        up_s, served = served_backfills(spec, home)

    a, b, c = events / consume_s, events / naive_s, events / backfill_s
    steady = last - first
    print(f"\n{events:,} Avro events, {PARTITIONS} partitions, 0.1% not in the wire format; {os.cpu_count()} cores")
    print(f"  (a) consume only          {consume_s:7.1f} s  {a:>10,.0f} offsets/s")
    print(f"  (b) naive fastavro script {naive_s:7.1f} s  {b:>10,.0f} offsets/s   ({naive_bad:,} not in wire format)")
    print(f"  (c) tailfill backfill     {backfill_s:7.1f} s  {c:>10,.0f} offsets/s end to end, {batches} batches")
    print(f"      of which startup      {first - launched:7.1f} s  (plan, spark-submit, session, query start)")
    print(f"      steady state          {steady:7.1f} s  {events / steady:>10,.0f} offsets/s")
    if stages:
        print("      batch time by stage   " + ", ".join(f"{k} {v:.1f}s" for k, v in stages.items()))
    print(f"      validate --all: {'COMPLETE' if complete else 'INCOMPLETE'}")
    print(f"  ratios: c/a {c / a:.2f}   c/b {c / b:.2f} (steady {events / steady / b:.2f})")
    report_served(events, naive_s, up_s, served)
    return 0 if complete and all(r.complete for r in served) else 1


if __name__ == "__main__":
    sys.exit(main())
