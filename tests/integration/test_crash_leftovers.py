"""What a SIGKILL at the wrong moment leaves behind never wedges the next run.

A kill while Spark writes the tail's offset log leaves a 0-byte ``offsets/.0.<uuid>.tmp`` (and its
``.crc``); the checkpoint is named by the request's bounds, so every later tail would reuse it, and
Spark refuses such a checkpoint (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``). These tests lay down
exactly those leftovers (and the other files a kill can tear) and run the job again: it must succeed
and stay exactly once.

Only a live tail runs a streaming query with a Spark checkpoint; a backfill or a ``--once`` tail plans its
batches itself. These tests run theirs as a streaming query (:data:`~tailfill.run.spark_ingest.BOUNDED_ENV`),
whose checkpoint is handled by the same code as a live tail's, so that the kill's leftovers sit at known bounds.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml
from helpers import assert_exactly_once, backfill, high_watermarks, needs_admission_control, tables_of, tail

from tailfill import cli
from tailfill.dev.sample import produce_sample
from tailfill.errors import IngestError
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.run.plan import checkpoint_root, source_state, tail_request
from tailfill.run.spark_ingest import BOUNDED_ENV
from tailfill.state.store import StateStore, report_file

pytestmark = [pytest.mark.integration, needs_admission_control]


@pytest.fixture(autouse=True)
def bounded_runs_as_queries(monkeypatch):
    """Every run of these tests as a streaming query, with its Spark checkpoint (see the module's description)."""
    monkeypatch.setenv(BOUNDED_ENV, "query")


def spark_kill_leftovers(checkpoint, log: str = "offsets") -> list:
    """The files a kill inside Spark's atomic write of ``<log>/0`` leaves: its hidden temp file and checksum."""
    folder = checkpoint / log
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".0.{uuid.uuid4()}.tmp"
    crc = folder / f".{tmp.name}.crc"
    tmp.write_bytes(b"")
    crc.write_bytes(b"")
    (checkpoint / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    return [tmp, crc]


def test_a_tail_killed_while_spark_wrote_its_offset_log_runs_again(spark, make_pipeline, capsys):
    cfg = make_pipeline(backfill__slices=1)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, 4_000, 4, bad_every=499)
    backfill(spark, cfg)
    produce_sample(bs, topic, 2_000, 4, bad_every=499)
    # The checkpoint the next tail will use (named by its bounds), as the kill left it.
    state = source_state(open_pipeline(cfg), tables_of(cfg))
    checkpoint = tail_request(state, state.cutover, "any").checkpoint
    leftovers = spark_kill_leftovers(checkpoint)

    results = tail(spark, cfg)

    assert sum(r.offsets for r in results) == 2_000
    assert_exactly_once(cfg, high_watermarks(cfg))
    assert not any(p.exists() for p in leftovers)
    err = capsys.readouterr().err
    assert f"discarded the Spark checkpoint {checkpoint.name}" in err
    assert "2 partial file(s) a kill left" in err
    assert cli.main(["validate", str(cfg.path), "--all"]) == 0


def test_a_planned_batch_is_still_replayed_after_a_kill_tore_its_commit_log(spark, make_pipeline, arm_fault,
                                                                             capsys):
    """Batch 0 was planned (``offsets/0`` whole) and its commit failed; then a kill tore Spark's write of
    ``commits/0``. The rerun removes the torn files only and replays batch 0 with its recorded offsets,
    although the pipeline's cap changed in between (a new plan would make a smaller batch)."""
    cfg = make_pipeline(backfill__slices=1, backfill__max_consecutive_failures=0,
                        backfill__max_offsets_per_batch=1_000, backfill__batch_seconds=None)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 3_000, 4, bad_every=499)
    arm_fault("before-commit", 1)
    with pytest.raises(IngestError, match="injected failure at before-commit"):
        backfill(spark, cfg)
    checkpoint = next(checkpoint_root(cfg, "backfill").iterdir())
    assert (checkpoint / "offsets" / "0").exists() and not (checkpoint / "commits" / "0").exists()
    leftovers = spark_kill_leftovers(checkpoint, "commits")
    data = yaml.safe_load(Path(cfg.path).read_text())
    data["backfill"]["max_offsets_per_batch"] = 400
    Path(cfg.path).write_text(yaml.safe_dump(data))
    cfg = load_pipeline(cfg.path)  # the planner gives the new request the new cap
    capsys.readouterr()

    results = backfill(spark, cfg)

    assert not any(p.exists() for p in leftovers)
    err = capsys.readouterr().err
    assert f"removed 2 partial file(s) a kill left in the Spark checkpoint {checkpoint.name}" in err
    assert "batch 0 is replayed with its recorded offsets" in err
    reports = report_file(StateStore.of(cfg), results[0].run_id, checkpoint.name).read()
    assert [r.batch_id for r in reports][:1] == [0]
    assert reports[0].offsets == 1_000, "batch 0 was planned anew instead of replayed with its recorded offsets"
    assert all(r.offsets <= 400 for r in reports[1:])
    assert_exactly_once(cfg, high_watermarks(cfg))
