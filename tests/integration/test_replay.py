"""``tailfill replay``: committed offsets re-read with the changed pipeline, their rows replaced in place.

A JSON topic is backfilled by a pipeline that does not declare ``org``; the YAML then declares it and
``tailfill replay`` (the whole range, then ``--run``) fills the column for the rows already committed: the same
offsets, each once, the ledger as it was, the proof complete. A batch stopped before its commit leaves the old
rows; one stopped between its two tables' commits is finished by the next replay.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import assert_exactly_once, backfill, high_watermarks, ingested, tables_of

from tailfill.cli import main
from tailfill.dev.sample import _SampleProducer
from tailfill.lake.ledger import read_ledger
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.plumbing.warehouse import fs_path
from tailfill.proof.validate import validate
from tailfill.run.replay import JOURNAL, JournaledBatch

pytestmark = pytest.mark.integration

FIELDS = [{"name": "event_id", "type": "string", "required": True}, {"name": "amount", "type": "long"}]
RECORDS, BAD = 300, 4  # BAD of them not JSON at all: quarantined by every version of the pipeline
NO_ORG = 10  # events without an org: rows while org is optional, quarantined once it is required


def bad(i: int) -> bool:
    return i % 75 == 20


def send(cfg) -> None:
    out = _SampleProducer(cfg.source.bootstrap_servers, cfg.source.topic, 2)
    for i in range(RECORDS):
        if bad(i):
            value = b"{not json"
        elif i < NO_ORG:
            value = json.dumps({"event_id": f"e{i}", "amount": i}).encode()
        else:
            value = json.dumps({"event_id": f"e{i}", "amount": i, "org": f"org-{i % 3}"}).encode()
        out.send(i, value)
    out.finish()


def with_format(cfg, **changes):
    """The pipeline with its YAML's ``format`` block changed, as a person edits it."""
    path = Path(cfg.path)
    spec = yaml.safe_load(path.read_text())
    spec["format"].update(changes)
    path.write_text(yaml.safe_dump(spec))
    return load_pipeline(path)


def declare_org(cfg, required: bool = False):
    return with_format(cfg, fields=[*FIELDS, {"name": "org", "type": "string", "required": required}])


def orgs(cfg) -> dict[str, str | None]:
    data = tables_of(cfg).data
    data.refresh()
    return {r["event_id"]: r["org"] for r in data.scan(selected_fields=("event_id", "org")).to_arrow().to_pylist()}


def replay(cfg, *args: str) -> int:
    return main(["replay", str(cfg.path), *args])


def assert_proof_complete(cfg) -> None:
    result = validate(open_pipeline(cfg), all_runs=True)
    assert result.success, result.problems
    assert sum(p["missing"] + p["duplicated"] for p in result.partitions) == 0


def assert_orgs_filled_in_place(cfg, rows_before, bad_before, ledger_before) -> dict[str, str | None]:
    """Every row has the org its record holds (none for the first NO_ORG), the same offsets as before, each once,
    the ledger unchanged and the proof complete; the orgs by event id."""
    values = orgs(cfg)
    assert len(values) == RECORDS - BAD
    assert all(values[f"e{i}"] is None for i in range(NO_ORG))
    assert all(v == f"org-{int(k[1:]) % 3}" for k, v in values.items() if int(k[1:]) >= NO_ORG)
    rows, quarantined = assert_exactly_once(cfg, high_watermarks(cfg))
    assert rows == rows_before and quarantined == bad_before
    assert read_ledger(tables_of(cfg).data) == ledger_before
    assert_proof_complete(cfg)
    return values


@pytest.fixture
def backfilled(spark, make_pipeline):
    """A 2-partition JSON topic backfilled by a pipeline without ``org``, in batches of 100 offsets; yields the
    config and the backfill's run id."""
    cfg = make_pipeline(format={"type": "json", "fields": FIELDS}, expectations=[], source__partitions=2,
                        backfill__max_offsets_per_batch=100)
    send(cfg)
    [result] = backfill(spark, cfg)
    assert "org" not in tables_of(cfg).data.schema().column_names
    return cfg, result.run_id


def test_replay_fills_a_new_column_for_committed_rows(backfilled, capsys):
    cfg, run_id = backfilled
    rows_before, bad_before = ingested(cfg)
    ledger_before = read_ledger(tables_of(cfg).data)
    assert len(bad_before) == BAD

    cfg = declare_org(cfg)
    assert replay(cfg) == 0
    out = capsys.readouterr().out
    assert f"replayed {RECORDS:,} offsets" in out and f"{RECORDS - BAD:,} rows, {BAD} quarantined" in out

    values = assert_orgs_filled_in_place(cfg, rows_before, bad_before, ledger_before)

    assert replay(cfg, "--run", run_id) == 0  # the backfill's offsets again, by its run id
    assert f"replayed {RECORDS:,} offsets" in capsys.readouterr().out
    assert orgs(cfg) == values
    assert_exactly_once(cfg, high_watermarks(cfg))
    assert read_ledger(tables_of(cfg).data) == ledger_before
    assert_proof_complete(cfg)


def test_replay_with_unknown_fields_evolve_adds_the_columns_the_records_want(backfilled, capsys):
    cfg, _ = backfilled
    rows_before, bad_before = ingested(cfg)
    ledger_before = read_ledger(tables_of(cfg).data)

    cfg = with_format(cfg, unknown_fields="evolve")
    assert replay(cfg) == 0
    assert f"replayed {RECORDS:,} offsets" in capsys.readouterr().out

    assert "org" in tables_of(cfg).data.schema().column_names
    assert_orgs_filled_in_place(cfg, rows_before, bad_before, ledger_before)


def test_uncommitted_offsets_are_clipped_with_one_line(backfilled, capsys):
    cfg, _ = backfilled
    topic = cfg.source.topic
    end = high_watermarks(cfg)[0]  # the backfill committed partition 0 up to here
    cfg = declare_org(cfg)
    assert replay(cfg, "--from", json.dumps({topic: {"0": end - 5}}), "--to", json.dumps({topic: {"0": end + 50}})) == 0
    out = capsys.readouterr().out
    clipped = [line for line in out.splitlines() if line.startswith("clipped:")]
    assert clipped == [f"clipped: {topic}[0] [{end}, {end + 50}) not committed (50 offsets): replay covers "
                       "committed offsets only (backfill or tail them first)"]
    assert "replayed 5 offsets in 1 batch" in out
    assert 0 < sum(v is not None for v in orgs(cfg).values()) <= 5  # only the committed five were replayed

    assert replay(cfg, "--run", "backfill-20000101T000000-000000") == 2
    assert "run backfill-20000101T000000-000000 committed nothing" in capsys.readouterr().err


def test_a_batch_stopped_before_its_commit_leaves_the_old_rows(backfilled, arm_fault, capsys):
    cfg, _ = backfilled
    rows_before, bad_before = ingested(cfg)
    cfg = declare_org(cfg)
    arm_fault("before-replay-commit", 1)
    assert replay(cfg) == 2
    assert "injected failure at before-replay-commit" in capsys.readouterr().err
    assert all(v is None for v in orgs(cfg).values())  # the old rows, all of them
    assert ingested(cfg) == (rows_before, bad_before)
    assert_proof_complete(cfg)

    assert replay(cfg) == 0
    out = capsys.readouterr().out
    assert "discarded replay batch 0" in out
    assert sum(v is not None for v in orgs(cfg).values()) == RECORDS - BAD - NO_ORG
    assert_proof_complete(cfg)


@pytest.mark.parametrize("files_gone", [False, True], ids=["files-kept", "files-removed-as-orphans"])
def test_a_batch_stopped_between_its_two_commits_is_finished_by_the_next_replay(backfilled, arm_fault, capsys,
                                                                               files_gone):
    cfg, _ = backfilled
    cfg = declare_org(cfg, required=True)  # the events without an org move from the rows to the quarantine
    arm_fault("between-replay-commits", 1)
    assert replay(cfg) == 2
    capsys.readouterr()
    assert not validate(open_pipeline(cfg), all_runs=True).success  # the moved offsets are in both tables
    main(["status", str(cfg.path)])
    assert "replay: 1 batch of a stopped replay not settled" in capsys.readouterr().out
    if files_gone:  # the batch's data files, not yet committed, removed by an orphan cleanup meanwhile
        with open_pipeline(cfg) as pipeline:
            [entry] = pipeline.state.list(JOURNAL)
            for uri in JournaledBatch.from_json(pipeline.state.get(f"{JOURNAL}/{entry.base_name}")).data_files:
                pipeline.fs.delete_file(fs_path(uri))

    assert replay(cfg) == 0
    out = capsys.readouterr().out
    assert ("its files are gone: replaying its offsets again" if files_gone else "finished replay batch 0") in out
    _, quarantined = assert_exactly_once(cfg, high_watermarks(cfg))
    assert len(quarantined) == BAD + NO_ORG
    assert_proof_complete(cfg)


def test_a_keyed_pipeline_is_refused_with_one_line(make_pipeline, capsys):
    cfg = make_pipeline(format={"type": "json", "fields": FIELDS}, expectations=[], target__mode="upsert",
                        target__key=["event_id"])
    assert replay(cfg) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: pipeline {cfg.name} is keyed (target.mode: upsert): replay replaces rows of "
                           "append-mode tables only")
