"""Files a process killed at any instruction leaves behind, and how each is made safe."""

from __future__ import annotations

import uuid
from pathlib import Path

import pandas as pd

from tailfill.pipeline.load import load_pipeline
from tailfill.plumbing.durable import write_whole
from tailfill.proof.expectations import run_suites
from tailfill.run import checkpoint
from tailfill.state.records import BatchReport
from tailfill.state.store import StateStore, report_file

# What Spark 4 said when it refused the wedged checkpoint (from the soak's log).
REFUSAL = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
           "[STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY] The checkpoint location file:{path}/offsets should be "
           "empty on batch 0")


def spark_log(folder, batch: int, body: str = '{"t": {"0": 10}}') -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(batch)).write_text(f"v1\n{{}}\n{body}")


def torn_write(folder, batch: int) -> list:
    """What a kill inside Spark's atomic write of ``folder/batch`` leaves."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{batch}.{uuid.uuid4()}.tmp"
    crc = folder / f".{tmp.name}.crc"
    tmp.write_bytes(b"")
    crc.write_bytes(b"")
    return [tmp, crc]


def test_a_batch_report_killed_mid_write_is_not_read_and_a_retry_adds_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    cfg = load_pipeline(Path(__file__).resolve().parents[2] / "pipelines" / "demo.yaml")
    log = report_file(StateStore.of(cfg), "run1", "q0")
    first, second = (BatchReport(batch_id=b, at=1.0 + b, seconds=1.0, offsets=10, records=10, rows=10, quarantined=0)
                     for b in (0, 1))
    log.append(first)
    folder = Path(str(log))
    (folder / ".00000001-0000000002000.json.0a1b.tmp").write_text(second.to_json()[:25])  # the try died mid-write
    assert [r.batch_id for r in log.read()] == [0]

    log.append(second)  # the retry writes the batch's report whole
    log.append(BatchReport(**{**second.__dict__, "at": 9.0, "committed": [], "skipped": []}))  # a replay of it

    assert [(r.batch_id, r.at) for r in log.read()] == [(0, 1.0), (1, 2.0), (1, 9.0)]


def test_write_whole_replaces_a_local_file_whole_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "state.json"
    write_whole(path, "old")
    write_whole(path, "new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_leftovers_are_removed_and_a_planned_batch_is_kept(tmp_path):
    cp = tmp_path / "backfill-abc"
    spark_log(cp / "offsets", 0)
    spark_log(cp / "offsets", 1)
    spark_log(cp / "commits", 0)
    (cp / "metadata").write_text('{"id": "x"}')
    leftovers = torn_write(cp / "commits", 1)
    lines: list[str] = []

    state = checkpoint.make_startable(cp, "lane", lines.append)

    assert not any(p.exists() for p in leftovers)
    assert (cp / "offsets" / "1").exists() and (cp / "commits" / "0").exists()
    assert state.replayable == 1
    assert len(lines) == 1 and "removed 2 partial file(s)" in lines[0] and "batch 1 is replayed" in lines[0]


def test_a_checkpoint_without_a_planned_batch_is_emptied_but_tailfills_own_notes_stay(tmp_path):
    cp = tmp_path / "tail-abc"
    (cp / "metadata").parent.mkdir(parents=True)
    (cp / "metadata").write_text('{"id": "x"}')
    torn_write(cp / "offsets", 0)
    (cp / "tailfill-budget.json").write_text('{"max_offsets": 5}')
    lines: list[str] = []

    checkpoint.make_startable(cp, "tail", lines.append, keep=lambda p: p.name == "tailfill-budget.json")

    assert sorted(p.name for p in cp.iterdir()) == ["tailfill-budget.json"]
    assert len(lines) == 1 and "discarded the Spark checkpoint tail-abc (it holds no planned batch" in lines[0]


def test_an_unreadable_log_file_empties_the_checkpoint(tmp_path):
    cp = tmp_path / "backfill-abc"
    spark_log(cp / "offsets", 0)
    (cp / "offsets" / "1").write_bytes(b"")
    lines: list[str] = []

    checkpoint.make_startable(cp, "lane", lines.append)

    assert list(cp.iterdir()) == []
    assert "unreadable: offsets/1: empty" in lines[0]


def test_a_fresh_or_clean_checkpoint_is_left_alone_in_silence(tmp_path):
    lines: list[str] = []
    cp = tmp_path / "new"
    cp.mkdir()
    checkpoint.make_startable(cp, "lane", lines.append)
    spark_log(cp / "offsets", 0)
    spark_log(cp / "commits", 0)
    checkpoint.make_startable(cp, "lane", lines.append)
    assert lines == [] and (cp / "offsets" / "0").exists()


def test_spark_refusing_the_checkpoint_is_recognised(tmp_path):
    cp = tmp_path / "tail-abc"
    assert checkpoint.refused("StreamingQueryException", REFUSAL.format(path=cp), cp)
    assert not checkpoint.refused("StreamingQueryException", "[STREAM_FAILED] InjectedFault: boom", cp)


def test_a_failure_whose_query_description_names_the_checkpoint_is_no_refusal(tmp_path):
    """Spark appends the query's description to every failure; its plan names the checkpoint location."""
    cp = tmp_path / "tail-abc"
    description = ("\n=== Streaming Query ===\nIdentifier: tailfill-itest-tail [id = 1, runId = 2]\n\nLogical Plan:\n"
                   f"~WriteToMicroBatchDataSourceV1 ForeachBatchSink, [queryName=q, checkpointLocation={cp}], Append")
    assert not checkpoint.refused("StreamingQueryException", "[STREAM_FAILED] InjectedFault: boom" + description, cp)
    assert checkpoint.refused("StreamingQueryException", REFUSAL.format(path=cp) + description, cp)


def test_a_ge_project_a_kill_left_half_written_is_set_aside_and_rebuilt(tmp_path):
    spec_frames = [("run_completeness", "run_ranges", pd.DataFrame({
        "partition": ["t[0]"], "range": ["[0, 10)"], "expected": [10], "rows": [10], "quarantined": [0],
        "lost": [0], "absent": [0], "found": [10], "distinct": [10], "duplicates": [0], "missing": [0],
        "outside": [0], "first_ok": [True], "last_ok": [True], "complete": [True]}))]
    run_suites(tmp_path, spec_frames, "r1")
    for suite in (tmp_path / "gx" / "expectations").glob("*.json"):
        suite.write_text(suite.read_text()[:9])  # a kill mid-rewrite
    lines: list[str] = []

    suites, _, docs = run_suites(tmp_path, spec_frames, "r2", lines.append)

    assert len(suites) == 1 and docs is not None and docs.exists()
    assert len(lines) == 1 and "could not be used" in lines[0]
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("gx.unreadable-")]
    assert len(aside) == 1 and (aside[0] / "expectations").is_dir()  # kept for inspection


def test_a_lanes_batches_are_told_apart_by_the_try_that_committed_them():
    """Batch numbers restart at 0 on a retry; the try that committed a batch says which."""
    from tailfill.state.records import LaneRecord

    lane = LaneRecord.from_json(LaneRecord(tries={"1": 100.0, "3": 200.0}).to_json())
    assert [lane.try_at(at) for at in (50.0, 150.0, 200.0, 250.0)] == [None, 1, 3, 3]
    assert LaneRecord.from_json('{"label": "written before tries were recorded"}').try_at(1.0) is None
