"""The Iceberg SQL catalog on Postgres, with backfill lanes and the tail committing to one table at once.

SQLite serialises writers on a file lock; Postgres lets the commits race, and pyiceberg's
optimistic commit (``UPDATE … WHERE metadata_location = <the one read>``) is what keeps them
apart. Two backfill lanes and a tail run as three concurrent ``spark-submit`` jobs; every offset
must land exactly once and their commits must have interleaved.
"""

from __future__ import annotations

import itertools
import uuid

import pytest
from helpers import assert_exactly_once, high_watermarks, submit_at_once

from tailfill.dev.sample import produce_sample
from tailfill.lake import ledger
from tailfill.lake.ledger import SUMMARY_RUN, BatchCommit, commit_batch, read_ledger
from tailfill.lake.tables import ensure_tables
from tailfill.offsets import OffsetRange
from tailfill.proof.validate import validate
from tailfill.run.submit import JobSpec, backfill_spec, new_run_id

pytestmark = pytest.mark.integration

HISTORY, LIVE, BATCH = 12_000, 4_000, 1_000


def test_lanes_and_tail_commit_concurrently_to_a_postgres_catalog(postgres, make_pipeline, tmp_path):
    database = f"iceberg_{uuid.uuid4().hex[:8]}"
    postgres.create_databases(database)
    cfg = make_pipeline(name="pg", catalog_uri=postgres.url(database), backfill__slices=2,
                        backfill__max_offsets_per_batch=BATCH, tail__max_offsets_per_batch=BATCH)
    assert cfg.target.catalog.uri.startswith("postgresql+psycopg2://")
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, HISTORY, 4, bad_every=501)
    planned = backfill_spec(cfg)  # records the cutover at HISTORY
    assert planned is not None and len(planned.slices) == 2
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, LIVE, 4, bad_every=501)

    specs = [JobSpec(planned.pipeline, "backfill", new_run_id("backfill"), (s,)) for s in planned.slices]
    specs.append(JobSpec(str(cfg.path), "tail", new_run_id("tail"), once=True))
    submit_at_once(specs, tmp_path)

    high = high_watermarks(cfg)
    assert sum(high.values()) == HISTORY + LIVE
    assert_exactly_once(cfg, high)
    report = validate(cfg, all_runs=True)
    assert report["success"], report["problems"]
    assert report["offsets_checked"] == HISTORY + LIVE

    # The three runs committed side by side: in commit order, some run's commits are split by another's.
    data, _ = ensure_tables(cfg)
    order = [s.summary.additional_properties[SUMMARY_RUN] for s in sorted(data.snapshots(),
                                                                           key=lambda s: s.sequence_number)
             if s.summary and SUMMARY_RUN in s.summary.additional_properties]
    assert set(order) == {spec.run_id for spec in specs}, order
    switches = sum(a != b for a, b in itertools.pairwise(order))
    assert switches > len(specs) - 1, f"the runs committed one after another, not concurrently: {order}"


def test_a_commit_that_loses_a_race_keeps_the_winners_ranges_in_the_ledger(postgres, make_pipeline, monkeypatch):
    """Deterministic form of the race above: another writer commits between our read and our commit.

    pyiceberg's own commit retry would re-apply our ledger property as computed before the race
    and so drop the winner's range from it; the conflict must instead come back to
    ``commit_batch``, which re-reads the ledger.
    """
    database = f"iceberg_{uuid.uuid4().hex[:8]}"
    postgres.create_databases(database)
    cfg = make_pipeline(name="pgrace", catalog_uri=postgres.url(database))
    ours, theirs = ensure_tables(cfg).data, ensure_tables(cfg).data  # two writers' views of one table
    mine, winner = OffsetRange(cfg.source.topic, 0, 0, 100), OffsetRange(cfg.source.topic, 0, 100, 250)
    real_read, raced = ledger.read_ledger, []

    def read_then_lose_the_race(table):
        seen = real_read(table)
        if table is ours and not raced:
            raced.append(commit_batch(theirs, BatchCommit("pgrace", "run-b", 0, [winner], []), rewrite=None))
        return seen

    monkeypatch.setattr(ledger, "read_ledger", read_then_lose_the_race)
    result = commit_batch(ours, BatchCommit("pgrace", "run-a", 0, [mine], []), rewrite=None)
    monkeypatch.undo()

    assert raced and raced[0].committed == [winner]
    assert result.committed == [mine]
    ours.refresh()
    assert read_ledger(ours).committed == [OffsetRange(cfg.source.topic, 0, 0, 250)]
    runs = [s.summary.additional_properties[SUMMARY_RUN] for s in ours.snapshots()]
    assert sorted(runs) == ["run-a", "run-b"]
