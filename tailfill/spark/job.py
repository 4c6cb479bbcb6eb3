"""The Spark job behind ``spark_jobs/ingest.py``: backfill slices or the tail of one pipeline.

Prints progress to stderr and, last, one ``TAILFILL_RESULT {json}`` line to stdout; exits 2 with
the cause on stderr when the run cannot complete.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from tailfill.config import ConfigError, PipelineConfig, resolve_pipeline
from tailfill.kafka_client import KafkaSourceError
from tailfill.lake import LakeError
from tailfill.offsets import PartitionOffsets
from tailfill.plan import Slice, SourceState, plan_backfill, source_state, tail_start
from tailfill.submit import RESULT_PREFIX


def _offsets(text: str | None) -> PartitionOffsets | None:
    return PartitionOffsets.from_json(text) if text else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="spark_jobs/ingest.py", description=__doc__)
    p.add_argument("--pipeline", required=True, help="pipeline name or path to its YAML")
    p.add_argument("--mode", choices=("backfill", "tail"), required=True)
    p.add_argument("--from", dest="start", help='backfill start offsets JSON {"topic": {"0": 0}} (default earliest)')
    p.add_argument("--to", dest="end", help="backfill end offsets JSON (default: the recorded cutover)")
    p.add_argument("--slices", type=int, help="backfill slices (default: the pipeline's backfill.slices)")
    p.add_argument("--slice-index", help="run only these slices of the plan (0-based, comma-separated)")
    p.add_argument("--once", action="store_true", help="tail: ingest what is there now, then stop")
    p.add_argument("--stop-after", type=float, help="tail with processing time: stop between batches after N s")
    p.add_argument("--run-id", help="run id recorded in every commit (default: generated)")
    p.add_argument("--max-offsets-per-batch", type=int, help="override the pipeline's cap for this run")
    return p.parse_args(argv)


def backfill_requests(cfg: PipelineConfig, state: SourceState, args: argparse.Namespace, run_id: str):
    from tailfill.spark.ingest import IngestRequest

    plan: list[Slice] = plan_backfill(state, _offsets(args.start), _offsets(args.end), args.slices)
    if args.slice_index is not None:
        wanted = {int(i) for i in str(args.slice_index).split(",") if i.strip()}
        plan = [s for s in plan if s.index in wanted]
    for s in plan:
        yield IngestRequest(
            mode="backfill",
            label=f"{cfg.name} backfill {s}",
            start=s.start,
            end=s.end,
            max_offsets_per_batch=args.max_offsets_per_batch or cfg.backfill.max_offsets_per_batch,
            max_consecutive_failures=cfg.backfill.max_consecutive_failures,
            checkpoint=Path(cfg.checkpoint_location) / cfg.name / "backfill" / s.key,
            run_id=run_id,
        )


def tail_request(cfg: PipelineConfig, state: SourceState, args: argparse.Namespace, run_id: str):
    from tailfill.spark.ingest import IngestRequest

    return IngestRequest(
        mode="tail",
        label=f"{cfg.name} tail",
        start=tail_start(state),
        end=None,
        max_offsets_per_batch=args.max_offsets_per_batch or cfg.tail.max_offsets_per_batch,
        max_consecutive_failures=cfg.tail.max_consecutive_failures,
        checkpoint=Path(cfg.checkpoint_location) / cfg.name / "tail",
        run_id=run_id,
        trigger="available_now" if args.once else cfg.tail.trigger,
        trigger_interval_seconds=cfg.tail.trigger_interval_seconds,
        target_end=state.marks.high,
        stop_after_seconds=args.stop_after,
    )


def run(args: argparse.Namespace, spark=None) -> list:
    """Run the requested mode; returns one :class:`IngestResult` per query run."""
    from tailfill.spark.ingest import new_run_id, run_ingest
    from tailfill.spark.session import get_session

    cfg = resolve_pipeline(args.pipeline)
    state = source_state(cfg)
    run_id = args.run_id or new_run_id(args.mode)
    if args.mode == "backfill":
        requests = list(backfill_requests(cfg, state, args, run_id))
    else:
        requests = [tail_request(cfg, state, args, run_id)]
    if not requests:
        return []
    spark = spark or get_session(app_name=f"tailfill-{cfg.name}-{args.mode}")
    return [run_ingest(spark, cfg, req) for req in requests]


def main(argv: list[str] | None = None) -> int:
    from tailfill.spark.ingest import IngestError

    args = parse_args(argv)
    try:
        results = run(args)
    except (IngestError, ConfigError, KafkaSourceError, LakeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    print(RESULT_PREFIX + json.dumps([asdict(r) for r in results]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
