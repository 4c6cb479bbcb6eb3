"""What a pipeline looks like right now, for the people deciding what to run: offsets per partition.

Read from the broker and the table when asked (a task, a plugin page), never when DAGs are parsed.
"""

from __future__ import annotations

from tailfill.offsets import total
from tailfill.pipeline.handle import Pipeline


def live_context(pipeline: Pipeline) -> dict:
    """Earliest, cutover, committed and pending offsets, and the status table as text.

    ``backfill_pending``: uncommitted offsets of ``[earliest, cutover)`` (all of history while no
    cutover is recorded); ``tail_pending``: uncommitted offsets from the cutover to the broker's end
    (None before a cutover is recorded: nothing here records one).
    """
    from tailfill.run.plan import source_state
    from tailfill.run.planner import pending_offsets
    from tailfill.run.status import format_status, pipeline_status, quarantined_rows

    cfg = pipeline.cfg
    state = source_state(pipeline, pipeline.open_tables())  # the tables as they are: a page makes nothing
    backfill, tail = pending_offsets(state)
    text = format_status(cfg.name, pipeline_status(state), quarantined_rows(state))
    text += (f"\nbackfill would cover: {backfill:,} offsets"
             f"{'' if state.cutover else ' (no cutover yet: the first backfill records it at the current end)'}"
             f"\ntail would cover: {'-' if tail is None else f'{tail:,}'} offsets")
    return {"earliest": state.marks.low.to_dict(), "high": state.marks.high.to_dict(),
            "cutover": state.cutover.to_dict() if state.cutover else None, "committed": total(state.ledger.committed),
            "backfill_pending": backfill, "tail_pending": tail, "text": text}
