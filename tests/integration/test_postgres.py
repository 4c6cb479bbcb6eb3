"""The Iceberg SQL catalog on Postgres: a commit that loses a race keeps the winner's ledger ranges.

SQLite serialises writers on a file lock; Postgres lets the commits race, and pyiceberg's
optimistic commit (``UPDATE … WHERE metadata_location = <the one read>``) is what keeps them
apart. Real concurrent writers on a Postgres catalog (two overlapping backfills and a tail, as
three ``spark-submit`` jobs) are a scenario of the fault suite: ``test_faults.py``.
"""

from __future__ import annotations

import uuid

import pytest
from helpers import provision, tables_of

from tailfill.lake import ledger
from tailfill.lake.batch_summary import SUMMARY_RUN, BatchSummary
from tailfill.lake.ledger import commit_batch, read_ledger
from tailfill.offsets import OffsetRange

pytestmark = pytest.mark.integration

def test_a_commit_that_loses_a_race_keeps_the_winners_ranges_in_the_ledger(postgres, make_pipeline, monkeypatch):
    """The race, made deterministic: another writer commits between our read and our commit.

    pyiceberg's own commit retry would re-apply our ledger property as computed before the race
    and so drop the winner's range from it; the conflict must instead come back to
    ``commit_batch``, which re-reads the ledger.
    """
    database = f"iceberg_{uuid.uuid4().hex[:8]}"
    postgres.create_databases(database)
    cfg = make_pipeline(name="pgrace", catalog_uri=postgres.url(database))
    provision(cfg)
    ours, theirs = tables_of(cfg).data, tables_of(cfg).data  # two writers' views of one table
    mine, winner = OffsetRange(cfg.source.topic, 0, 0, 100), OffsetRange(cfg.source.topic, 0, 100, 250)
    real_read, raced = ledger.read_ledger, []

    def read_then_lose_the_race(table):
        seen = real_read(table)
        if table is ours and not raced:
            raced.append(commit_batch(theirs, BatchSummary("pgrace", "run-b", 0, [winner]), [], rewrite=None))
        return seen

    monkeypatch.setattr(ledger, "read_ledger", read_then_lose_the_race)
    result = commit_batch(ours, BatchSummary("pgrace", "run-a", 0, [mine]), [], rewrite=None)
    monkeypatch.undo()

    assert raced and raced[0].committed == [winner]
    assert result.committed == [mine]
    ours.refresh()
    assert read_ledger(ours).committed == [OffsetRange(cfg.source.topic, 0, 0, 250)]
    runs = [s.summary.additional_properties[SUMMARY_RUN] for s in ours.snapshots()]
    assert sorted(runs) == ["run-a", "run-b"]
