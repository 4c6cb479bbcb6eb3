"""Benchmark: one pipeline of many topics beside one pipeline of one topic with as many events, one run.

On the embedded broker, the same sample events (~120 B of JSON, 0.1% deliberately bad):

  (a) one topic of N events in 4 partitions, ``source.topic``;
  (b) T topics of N/T events each (``--partitions`` each, default 1), ``source.topic_pattern`` over them, into
      one table;
  (c) the same T topics, each routed to a table of its own (``target.table: '{topic.2}'``): T tables, their
      jobs run at once by one ``spark-submit``;
  (d) the same as (c), each table's batches run by a streaming query of its own, as a live tail's are
      (``TAILFILL_BOUNDED_RUNS=query``): the baseline;

each pipeline backfilled by ``tailfill backfill --spark submit`` exactly as the CLI runs it (the demo
pipeline's shipped settings), then proven by ``tailfill validate --all`` in a fresh process. Prints each
backfill's seconds and offsets/s, and the ratios b/a and c/a (the target: at most 1.5).

    .venv/bin/python benchmarks/many_topics.py [--events 1000000] [--topics 20] [--partitions 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest_vs_consume import BAD_EVERY, REPO, timed_backfill, validate_all

SINGLE_PARTITIONS = 4


def pipeline(home: Path, name: str, bootstrap: str, table: str | None = None, **source: object) -> Path:
    """The demo pipeline's shipped settings under ``name``, reading ``source`` into ``table`` (default
    ``<name>_events``); the path of its YAML."""
    spec = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
    spec["name"] = name
    spec["target"]["table"] = table or f"{name}_events"
    del spec["source"]["topic"]
    spec["source"].update(bootstrap_servers=bootstrap, partitions=None, **source)
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def backfilled(label: str, path: Path, home: Path, events: int) -> float:
    """Backfill the pipeline at ``path`` and prove it; its seconds."""
    _, seconds = timed_backfill(path, home, "--spark", "submit")
    complete = validate_all(path, home)
    print(f"  {label:<44} {seconds:7.1f} s  {events / seconds:9,.0f} offsets/s  validate --all: "
          f"{'COMPLETE' if complete else 'NOT COMPLETE'}", flush=True)
    if not complete:
        raise SystemExit(f"{path.stem}: validate --all did not find every offset once")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=1, help="partitions of each of the many topics")
    args = parser.parse_args()

    from tailfill.dev.broker import EmbeddedBroker
    from tailfill.dev.sample import produce_sample
    from tailfill.run.spark_ingest import BOUNDED_ENV
    from tailfill.source.topics import ensure_topic

    home = Path(tempfile.mkdtemp(prefix="tailfill-bench-"))
    os.environ["TAILFILL_HOME"] = str(home)
    each = args.events // args.topics
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        print(f"producing {args.events:,} events to one topic and {args.topics} x {each:,} to {args.topics} "
              "topics ...", flush=True)
        produce_sample(bootstrap, "bench.single", args.events, SINGLE_PARTITIONS, bad_every=BAD_EVERY)
        for i in range(args.topics):
            name = f"bench.many.t{i:02d}"
            ensure_topic(bootstrap, name, args.partitions)
            produce_sample(bootstrap, name, each, args.partitions, bad_every=BAD_EVERY)
        started = time.perf_counter()
        single = backfilled(f"(a) 1 topic x {args.events:,} ({SINGLE_PARTITIONS} partitions)",
                            pipeline(home, "single", bootstrap, topic="bench.single"), home, args.events)
        many = backfilled(f"(b) {args.topics} topics x {each:,} ({args.partitions} partition(s) each)",
                          pipeline(home, "many", bootstrap, topic_pattern=r"bench\.many\..*"), home,
                          each * args.topics)
        routed = backfilled(f"(c) the {args.topics} topics, a table each",
                            pipeline(home, "routed", bootstrap, table="{topic.2}", topic_pattern=r"bench\.many\..*"),
                            home, each * args.topics)
        os.environ[BOUNDED_ENV] = "query"
        try:
            queried = backfilled(f"(d) as (c), a streaming query per table ({BOUNDED_ENV}=query)",
                                 pipeline(home, "queried", bootstrap, table="q_{topic.2}",
                                          topic_pattern=r"bench\.many\..*"), home, each * args.topics)
        finally:
            del os.environ[BOUNDED_ENV]
    print(f"  many topics / one topic: into one table {many / single:.2f}x the time, a table each "
          f"{routed / single:.2f}x (target <= 1.5x; with a streaming query per table {queried / single:.2f}x); "
          f"the four runs {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
