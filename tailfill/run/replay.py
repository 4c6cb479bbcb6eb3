"""Replay, run: each batch of committed offsets re-read from Kafka with the pipeline as it is now, its rows replaced.

A batch is prepared as any batch is (:func:`~tailfill.lake.prepare.prepare_ranges`, in this process: read,
decode, write Parquet, nothing dropped), then committed by :func:`~tailfill.lake.replace.replace_rows`: one
snapshot in the quarantine table, then one in the data table, each dropping the old rows of exactly the batch's
offsets and adding the new ones. The ledger is not touched: every offset stays committed once.

The two tables are two commits. A record can move between them (a record the old pipeline quarantined that the
new one reads, or the other way), so a crash between the two commits would leave such an offset in both tables
or in neither. Each batch is therefore written to a journal in the pipeline's state before its first commit
and removed after its last; the next replay of the pipeline (:func:`finish_pending`) rolls a journaled batch
forward when one table has it, and discards it (its files were never referenced) when neither has.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from tailfill import failpoints
from tailfill.errors import LakeError
from tailfill.lake.evolving import prepare_evolving
from tailfill.lake.prepare import PreparedRange
from tailfill.lake.replace import Replacement, replace_rows, replaced
from tailfill.lake.schema_change import follow_files
from tailfill.lake.tables import Tables
from tailfill.offsets import OffsetRange, ranges_from_json, ranges_to_json
from tailfill.pipeline.executor import ExecutorContext
from tailfill.pipeline.handle import Pipeline
from tailfill.plumbing.warehouse import fs_path
from tailfill.run.contract import IngestResult, new_run_id
from tailfill.run.replay_plan import ReplayPlan, ReplayRequest, plan_replay
from tailfill.run.write_test import ensure_writable

if TYPE_CHECKING:
    from tailfill.run.planner import BackfillPlan

JOURNAL = "replay"  # the state folder of batches between their prepare and their last commit
Say = Callable[[str], None]


@dataclass(frozen=True)
class JournaledBatch:
    """A replay batch prepared and about to be committed: its offsets and its new files, per table."""

    run_id: str
    batch_id: int
    ranges: list[OffsetRange]
    data_files: list[str]
    quarantine_files: list[str]

    @property
    def key(self) -> str:
        return f"{JOURNAL}/{self.run_id}-{self.batch_id:06d}.json"

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "ranges": ranges_to_json(self.ranges)})

    @classmethod
    def from_json(cls, text: str) -> JournaledBatch:
        data = json.loads(text)
        return cls(data["run_id"], data["batch_id"], ranges_from_json(data["ranges"]), data["data_files"],
                   data["quarantine_files"])


def replay_line(result: IngestResult) -> str:
    """``replayed N offsets in B batches: R rows, Q quarantined, in Ss (run id …)``."""
    batches = f"{result.batches} batch{'es' if result.batches != 1 else ''}"
    return (f"replayed {result.offsets:,} offsets in {batches}: {result.rows:,} rows, {result.quarantined:,} "
            f"quarantined, in {result.seconds:.1f}s (run id {result.run_id})")


def _tables(pipeline: Pipeline) -> Tables:
    tables = pipeline.open_tables()
    if tables is None:
        raise LakeError(f"nothing to replay: the tables of pipeline {pipeline.name} were never made")
    return tables


def _commit(pipeline: Pipeline, tables: Tables, batch: JournaledBatch) -> None:
    """Replace the batch's rows: the quarantine table's, then the data table's (each skipped if it has them)."""
    def change(files: list[str]) -> Replacement:
        return Replacement(pipeline.name, batch.run_id, batch.batch_id, batch.ranges, files)

    replace_rows(tables.quarantine, pipeline.fs, change(batch.quarantine_files))
    failpoints.maybe_fail("between-replay-commits")
    replace_rows(tables.data, pipeline.fs, change(batch.data_files))


def pending_line(pipeline: Pipeline) -> str | None:
    """For ``tailfill status``: the replay batches a stopped replay left unsettled (None: none)."""
    names = [i.base_name.removesuffix(".json") for i in pipeline.state.list(JOURNAL)]
    if not names:
        return None
    return (f"replay: {len(names)} batch{'es' if len(names) != 1 else ''} of a stopped replay not settled "
            f"({', '.join(names[:3])}{' …' if len(names) > 3 else ''}): `tailfill replay {pipeline.name}` settles "
            "them first (the proof may name their offsets until then)")


def finish_pending(pipeline: Pipeline, say: Say) -> int:
    """Settle the batches a stopped replay left in its journal: forward when a table has one (from Kafka again if
    its files are gone, e.g. removed as orphans), else discarded. Returns how many were found."""
    infos = pipeline.state.list(JOURNAL)
    if not infos:
        return 0
    tables = _tables(pipeline)
    for info in infos:
        key = f"{JOURNAL}/{info.base_name}"
        batch = JournaledBatch.from_json(pipeline.state.get(key) or "{}")
        for table in tables:
            table.refresh()
        files = [*batch.data_files, *batch.quarantine_files]
        if not any(replaced(table, batch.run_id, batch.batch_id) for table in tables):
            for uri in files:  # never referenced by any snapshot
                with contextlib.suppress(FileNotFoundError):
                    pipeline.fs.delete_file(fs_path(uri))
            say(f"discarded replay batch {batch.batch_id} of run {batch.run_id} (stopped before its commit: the "
                "old rows stay)")
        elif all(pipeline.fs.get_file_info(fs_path(uri)).is_file for uri in files):
            _commit(pipeline, tables, batch)
            say(f"finished replay batch {batch.batch_id} of run {batch.run_id} (stopped between its two commits)")
        else:  # both tables replaced again, from a new read
            say(f"replay batch {batch.batch_id} of run {batch.run_id} was stopped between its two commits and its "
                "files are gone: replaying its offsets again")
            run_replay(pipeline, ReplayPlan(new_run_id("replay"), [batch.ranges]), say)
        pipeline.state.delete(key)
    return len(infos)


def run_replay(pipeline: Pipeline, plan: ReplayPlan, say: Say) -> IngestResult:
    """Re-read and replace every batch of ``plan``, one batch at a time; returns what it did."""
    started = time.monotonic()
    result = IngestResult(plan.run_id, f"replay of {pipeline.name}")
    tables = _tables(pipeline)
    cfg = pipeline.resolved
    strict = cfg.model_copy(update={"source": cfg.source.model_copy(update={"on_expired_offsets": "fail"})})
    context = ExecutorContext(strict)  # an offset gone meanwhile fails the batch: nothing of it is committed
    try:
        for batch_id, ranges in enumerate(plan.batches):
            prepared = prepare_evolving(
                lambda columns, ranges=ranges: context.prepare(plan.run_id, ranges, tables.data.location(),
                                                               tables.quarantine.location(), columns),
                tables.data, pipeline.fs)
            _commit_batch(pipeline, tables, plan.run_id, batch_id, ranges, prepared)
            rows, quarantined = sum(p.rows for p in prepared), sum(p.quarantined for p in prepared)
            result.batches += 1
            result.offsets += sum(r.size for r in ranges)
            result.rows += rows
            result.quarantined += quarantined
            say(f"  batch {batch_id}: {', '.join(map(str, ranges))}: {rows:,} rows, {quarantined:,} quarantined")
    finally:
        context.close()
    result.seconds = time.monotonic() - started
    return result


def _commit_batch(pipeline: Pipeline, tables: Tables, run_id: str, batch_id: int, ranges: list[OffsetRange],
                  prepared: list[PreparedRange]) -> None:
    """Journal a prepared batch, replace its rows in both tables, and drop it from the journal."""
    batch = JournaledBatch(run_id, batch_id, ranges, [f for p in prepared for f in p.data_files],
                           [f for p in prepared for f in p.quarantine_files])
    if pipeline.format.follows_writer_schema:  # new columns first: nothing committed if it cannot
        follow_files(tables.data, pipeline.fs, batch.data_files)
    pipeline.state.put(batch.key, batch.to_json())
    failpoints.maybe_fail("before-replay-commit")
    _commit(pipeline, tables, batch)
    pipeline.state.delete(batch.key)


def replay_committed_first(pipeline: Pipeline, on_committed: str, plan: BackfillPlan, say: Say) -> IngestResult | None:
    """A backfill's committed part, when it asks to replay it (``on_committed`` ``replay``): the committed offsets
    of ``plan``'s bounds re-read with the pipeline as it is now and their rows replaced, before its lanes run the
    rest (for ``backfill --on-committed replay`` and the backfill DAG's ``plan`` task). Returns what the replay did
    (None: nothing replayed), for the backfill's verdict (:func:`tailfill.run.verdict.backfill_verdict`)."""
    if on_committed == "replay":
        return replay(pipeline, ReplayRequest(plan.start, plan.end), say)
    return None


def replay(pipeline: Pipeline, request: ReplayRequest, say: Say) -> IngestResult | None:
    """Settle what a stopped replay left, plan ``request`` and run it, saying what it decided and did (for
    ``tailfill replay``, ``backfill --on-committed replay`` and the backfill DAG's form); None: nothing to do.
    Every place the replay writes its own files takes a write first (:func:`ensure_writable`)."""
    ensure_writable(pipeline)
    finish_pending(pipeline, say)
    plan = plan_replay(pipeline, request)
    for line in plan.lines:
        say(line)
    if not plan.batches:
        say(f"replay of {pipeline.name}: nothing to do (no committed offsets in the range)")
        return None
    say(f"replay of {pipeline.name}: {plan.offsets:,} committed offsets in {len(plan.batches)} "
        f"batch{'es' if len(plan.batches) != 1 else ''} (run id {plan.run_id})")
    result = run_replay(pipeline, plan, say)
    say(f"replay of {pipeline.name}: {replay_line(result)}")
    return result
