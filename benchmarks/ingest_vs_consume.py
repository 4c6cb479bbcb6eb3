"""Benchmark: Tailfill's backfill against raw consumption and a naive one-process script, one run.

On the embedded broker, N sample events (~120 B of JSON, 4 partitions, 0.1% deliberately bad):

  (a) consume only: one tuned confluent-kafka consumer reading all partitions, nothing else;
  (b) a naive script: one process, the same consumer, each record parsed with Tailfill's own rules
      (``tailfill.formats.json_fields.parse_value``: the same rows and the same quarantine), Arrow, Parquet out;
  (c) ``tailfill backfill`` exactly as the CLI runs it: plan, ``spark-submit``, the demo pipeline's
      shipped settings; spark-submit's startup is reported apart from the steady state;
  (d) ``tailfill validate --all`` of that backfill in a fresh process (cold);
  (e) ``tailfill backfill --spark connect`` of the same events into a new table of its own, twice: the
      first job of a freshly started Spark Connect server of this home, then the next job (the server's
      own startup, paid once and not per run, is printed apart); each validated.

Prints offsets/s for each, the ratios c/a, c/b, d/c and e/b, the per-stage time of the backfill's batches,
the peak memory of (c)'s and (e)'s processes (:mod:`process_memory`), and with ``--scale K`` the same at K·N
and the cost per offset at K·N over N. Nothing here is a test: it prints figures.

    .venv/bin/python benchmarks/ingest_vs_consume.py [--events 1000000] [--scale 10]
"""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from process_memory import PeakMemory

REPO = Path(__file__).resolve().parent.parent
BAD_EVERY = 1_000  # 0.1% bad records, one of each kind in turn
PARTITIONS = 4
CONSUMER_TUNING = {"queued.min.messages": 1_000_000}  # as Tailfill's consumers


@dataclass
class ServedRun:
    """One ``tailfill backfill --spark connect`` into a table of its own."""

    label: str
    seconds: float
    startup_s: float
    steady_s: float
    stages: dict[str, float]
    complete: bool
    memory: str  # peak resident memory of the job's processes (PeakMemory.asstr)


@dataclass
class Figures:
    events: int
    consume_s: float
    naive_s: float
    naive_rows: int
    naive_bad: int
    backfill_s: float
    startup_s: float
    steady_s: float
    batches: int
    stages: dict[str, float]
    validate_s: float
    complete: bool
    server_up_s: float = 0.0
    served: list[ServedRun] | None = None
    memory: str = ""  # peak resident memory of (c)'s processes (PeakMemory.asstr)


def consumer(bootstrap: str, topic: str, ends: dict[int, int]):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "auto.offset.reset": "error", "enable.partition.eof": False, **CONSUMER_TUNING})
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    return c


def consume_all(bootstrap: str, topic: str, ends: dict[int, int], on_batch=None) -> int:
    """Read every partition from 0 to its end with one consumer; returns the number of records."""
    c = consumer(bootstrap, topic, ends)
    left, n = dict(ends), 0
    try:
        while left:
            msgs = c.consume(num_messages=100_000, timeout=1.0)
            good = [m for m in msgs if m.error() is None]
            n += len(good)
            if on_batch is not None and good:
                on_batch(good)
            for m in good:
                p = m.partition()
                if p in left and m.offset() + 1 >= left[p]:
                    del left[p]
    finally:
        c.close()
    return n


def naive_script(bootstrap: str, topic: str, ends: dict[int, int], cfg, out: Path) -> tuple[int, int]:
    """What a user would write in 40 lines: consume, parse each record, Arrow, Parquet (rows, bad)."""
    from tailfill.errors import RecordError
    from tailfill.formats.json_fields import parse_value
    from tailfill.values.schema import table_schema

    fmt = cfg.format
    names = [f.name for f in fmt.fields]
    schema = table_schema(fmt.fields)
    rows_out = pq.ParquetWriter(out / "rows.parquet", schema, compression="zstd")
    bad_out = pq.ParquetWriter(out / "bad.parquet", pa.schema([("partition", pa.int32()), ("offset", pa.int64()),
                                                               ("value", pa.binary()), ("error", pa.string())]),
                               compression="zstd")
    counts = [0, 0]

    def on_batch(msgs) -> None:
        cols: dict[str, list] = {n: [] for n in schema.names}
        bad: dict[str, list] = {"partition": [], "offset": [], "value": [], "error": []}
        for m in msgs:
            try:
                values = parse_value(fmt, m.value())
            except RecordError as exc:
                bad["partition"].append(m.partition())
                bad["offset"].append(m.offset())
                bad["value"].append(m.value())
                bad["error"].append(str(exc))
                continue
            ts_type, ts = m.timestamp()
            cols["kafka_topic"].append(m.topic())
            cols["kafka_partition"].append(m.partition())
            cols["kafka_offset"].append(m.offset())
            cols["kafka_timestamp"].append(ts * 1000 if ts_type else None)
            cols["kafka_key"].append(m.key())
            cols["kafka_headers"].append([{"key": k, "value": v} for k, v in m.headers() or []])
            cols["kafka_value"].append(m.value())
            for name, value in zip(names, values, strict=True):
                cols[name].append(value)
        rows_out.write_table(pa.Table.from_pydict(cols, schema=schema))
        bad_out.write_table(pa.Table.from_pydict(bad, schema=bad_out.schema))
        counts[0] += len(cols["kafka_offset"])
        counts[1] += len(bad["offset"])

    consume_all(bootstrap, topic, ends, on_batch)
    rows_out.close()
    bad_out.close()
    return counts[0], counts[1]


def stage_times(cfg) -> tuple[int, dict[str, float], float, float]:
    """(batches, seconds per stage summed over batches, steady state's start, last commit) from the reports.

    The steady state starts when the first batch's executors start: before that are spark-submit,
    the session and the streaming query's own start (the first batch's "plan").
    """
    from tailfill.state.store import StateStore, run_ids, run_reports

    store = StateStore.of(cfg)
    reports = [r for run in run_ids(store) for r in run_reports(store, run)]
    stages: dict[str, float] = {}
    for r in reports:
        for stage, secs in r.stages.items():
            stages[stage] = stages.get(stage, 0.0) + secs
    first = min(reports, key=lambda r: r.at - r.seconds)
    return len(reports), stages, first.at - first.seconds + first.stages.get("plan", 0.0), max(r.at for r in reports)


def timed_consume(bootstrap: str, topic: str, ends: dict[int, int]) -> float:
    """Seconds for one consumer to read every partition to its end (and it must read them all)."""
    t0 = time.perf_counter()
    n = consume_all(bootstrap, topic, ends)
    consume_s = time.perf_counter() - t0
    assert n == sum(ends.values()), (n, ends)
    print(f"  (a) consume only: {consume_s:.1f}s", flush=True)
    return consume_s


def _tailfill(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TAILFILL_HOME": str(home)}
    return subprocess.run([str(Path(sys.executable).parent / "tailfill"), *args], env=env, capture_output=True,
                          text=True)


def timed_backfill(path: Path, home: Path, *flags: str) -> tuple[float, float]:
    """Run ``tailfill backfill`` on the pipeline at ``path`` as the CLI does: (when launched, seconds taken)."""
    launched, t0 = time.time(), time.perf_counter()
    done = _tailfill(home, "backfill", str(path), *flags)
    backfill_s = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"backfill failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return launched, backfill_s


def validate_all(path: Path, home: Path) -> bool:
    """``tailfill validate --all`` in a fresh process: whether the table is COMPLETE."""
    return _tailfill(home, "validate", str(path), "--all").returncode == 0


def run_once(events: int) -> Figures:
    from tailfill.dev.broker import EmbeddedBroker
    from tailfill.dev.sample import produce_sample
    from tailfill.pipeline.load import load_pipeline

    home = Path(tempfile.mkdtemp(prefix="tailfill-bench-"))
    os.environ["TAILFILL_HOME"] = str(home)
    with EmbeddedBroker() as broker:
        spec = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())  # the shipped settings
        spec["name"] = "bench"
        spec["source"]["bootstrap_servers"] = broker.bootstrap_servers
        path = home / "bench.yaml"
        path.write_text(yaml.safe_dump(spec))
        cfg = load_pipeline(path)
        topic = cfg.source.topic
        print(f"  producing {events:,} events ...", flush=True)
        produce_sample(broker.bootstrap_servers, topic, events, PARTITIONS, bad_every=BAD_EVERY)
        ends = {p: events // PARTITIONS + (1 if p < events % PARTITIONS else 0) for p in range(PARTITIONS)}

        consume_s = timed_consume(broker.bootstrap_servers, topic, ends)

        naive_dir = home / "naive"
        naive_dir.mkdir()
        t0 = time.perf_counter()
        naive_rows, naive_bad = naive_script(broker.bootstrap_servers, topic, ends, cfg, naive_dir)
        naive_s = time.perf_counter() - t0
        assert naive_rows + naive_bad == events
        print(f"  (b) naive script: {naive_s:.1f}s", flush=True)

        with PeakMemory(home) as peak:
            launched, backfill_s = timed_backfill(path, home, "--spark", "submit")
        batches, stages, first, last = stage_times(cfg)
        print(f"  (c) tailfill backfill: {backfill_s:.1f}s", flush=True)

        t0 = time.perf_counter()
        check = validate_all(path, home)
        validate_s = time.perf_counter() - t0
        print(f"  (d) tailfill validate: {validate_s:.1f}s", flush=True)
        up_s, served = served_backfills(spec, home)
    return Figures(events, consume_s, naive_s, naive_rows, naive_bad, backfill_s,
                   startup_s=first - launched, steady_s=last - first, batches=batches, stages=stages,
                   validate_s=validate_s, complete=check, server_up_s=up_s, served=served, memory=peak.asstr())


def served_backfills(spec: dict, home: Path) -> tuple[float, list[ServedRun]]:
    """Start this home's Spark Connect server (seconds taken), then backfill ``spec``'s topic with
    ``--spark connect`` twice, each into a table of its own; the server is stopped afterwards."""
    from tailfill.pipeline.load import load_pipeline
    from tailfill.run.connect_server import connect_server_down, connect_server_up

    t0 = time.perf_counter()
    connect_server_up(home)
    up_s = time.perf_counter() - t0
    print(f"  (connect) Spark Connect server up: {up_s:.1f}s", flush=True)
    runs = []
    try:
        for i, label in enumerate(("first job of the server", "next job")):
            data = copy.deepcopy(spec)
            data["name"] = f"{spec['name']}_connect{i}"
            data["target"]["table"] = f"{data['target']['table']}_connect{i}"
            path = home / f"{data['name']}.yaml"
            path.write_text(yaml.safe_dump(data))
            with PeakMemory(home) as peak:
                launched, seconds = timed_backfill(path, home, "--spark", "connect")
            _, stages, first, last = stage_times(load_pipeline(path))
            runs.append(ServedRun(f"connect: {label}", seconds, first - launched, last - first, stages,
                                  validate_all(path, home), peak.asstr()))
            print(f"  (connect) backfill, {label}: {seconds:.1f}s", flush=True)
    finally:
        connect_server_down(home)
    return up_s, runs


def report_served(events: int, naive_s: float, up_s: float, runs: list[ServedRun]) -> None:
    """The Spark Connect backfills' lines: end to end, startup (submit → first batch read), steady state, e/b."""
    b = events / naive_s
    print(f"  (e) Spark Connect server  {up_s:7.1f} s  to start (once, not per run)")
    for r in runs:
        e = events / r.seconds
        print(f"      {r.label:22s}{r.seconds:7.1f} s  {e:>10,.0f} offsets/s end to end; startup {r.startup_s:.1f} s, "
              f"steady {events / r.steady_s:,.0f} offsets/s; e/b {e / b:.2f} (steady {events / r.steady_s / b:.2f}); "
              f"{'COMPLETE' if r.complete else 'INCOMPLETE'}")
        if r.stages:
            print("        batch time by stage " + ", ".join(f"{k} {v:.1f}s" for k, v in r.stages.items()))
        print(f"        peak memory: {r.memory}")


def report(f: Figures) -> None:
    a, b = f.events / f.consume_s, f.events / f.naive_s
    c, c_steady = f.events / f.backfill_s, f.events / f.steady_s
    print(f"\n{f.events:,} events, {PARTITIONS} partitions, 0.1% bad; {os.cpu_count()} cores")
    print(f"  (a) consume only          {f.consume_s:7.1f} s  {a:>10,.0f} offsets/s")
    print(f"  (b) naive script          {f.naive_s:7.1f} s  {b:>10,.0f} offsets/s   ({f.naive_bad:,} quarantined)")
    print(f"  (c) tailfill backfill     {f.backfill_s:7.1f} s  {c:>10,.0f} offsets/s end to end, {f.batches} batches")
    print(f"      of which startup      {f.startup_s:7.1f} s  (plan, spark-submit, session, query start)")
    print(f"      steady state          {f.steady_s:7.1f} s  {c_steady:>10,.0f} offsets/s")
    if f.stages:
        print("      batch time by stage   " + ", ".join(f"{k} {v:.1f}s" for k, v in f.stages.items()))
    print(f"      peak memory           {f.memory}")
    print(f"  (d) validate (cold)       {f.validate_s:7.1f} s  {'COMPLETE' if f.complete else 'INCOMPLETE'}")
    print(f"  ratios: c/a {c / a:.2f} (steady {c_steady / a:.2f})   c/b {c / b:.2f} (steady {c_steady / b:.2f})   "
          f"d/c {f.validate_s / f.backfill_s:.2f}")
    if f.served:
        report_served(f.events, f.naive_s, f.server_up_s, f.served)
        e_steady = f.events / f.served[-1].steady_s
        print(f"  Connect steady state / consume only: {e_steady / a:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--scale", type=int, metavar="K", help="also run K × events and print the cost per offset "
                                                               "at K·N over N")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    runs = [args.events, args.scale * args.events] if args.scale else [args.events]
    figures = []
    for n in runs:
        print(f"run with {n:,} events", flush=True)
        figures.append(run_once(n))
        report(figures[-1])
    if args.scale:
        small, big = figures
        k = args.scale

        def per_offset(big_s: float, small_s: float) -> str:  # cost per offset at K·N over N
            return f"{big_s / k / small_s:.2f}"

        print(f"\ncost per offset, {big.events:,} over {small.events:,} events: backfill (c) "
              f"{per_offset(big.backfill_s, small.backfill_s)} (steady {per_offset(big.steady_s, small.steady_s)}), "
              f"validate {per_offset(big.validate_s, small.validate_s)}, naive {per_offset(big.naive_s, small.naive_s)}"
              + "".join(f", {b.label} {per_offset(b.seconds, s.seconds)} (steady {per_offset(b.steady_s, s.steady_s)})"
                        for s, b in zip(small.served or (), big.served or (), strict=True)))
    return 0 if all(f.complete and all(r.complete for r in f.served or ()) for f in figures) else 1


if __name__ == "__main__":
    sys.exit(main())
