"""A backfill's verdict: a replay of committed offsets is its own verdict, never "nothing to do"."""

from __future__ import annotations

from tailfill.run.verdict import COMPLETE, NOTHING_TO_DO, REPLAYED, backfill_verdict


def test_a_backfill_that_only_replayed_says_how_many_offsets_it_replayed():
    verdict = backfill_verdict(lanes=0, offsets=0, replayed=10_000)
    assert verdict.code == REPLAYED
    assert verdict.headline.startswith("REPLAYED 10,000 offsets: their rows were re-read and replaced")


def test_a_backfill_with_neither_lanes_nor_a_replay_has_nothing_to_do():
    verdict = backfill_verdict(lanes=0, offsets=0)
    assert verdict.code == NOTHING_TO_DO and verdict.headline.startswith("Nothing to do: every offset")


def test_validated_lanes_are_complete_and_name_a_replay_beside_them():
    assert backfill_verdict(lanes=2, offsets=5_000) == backfill_verdict(2, 5_000, 0)
    assert backfill_verdict(2, 5_000).headline == "COMPLETE: every one of 5,000 offsets landed exactly once"
    both = backfill_verdict(lanes=2, offsets=5_000, replayed=300)
    assert both.code == COMPLETE and both.headline.endswith("; REPLAYED 300 offsets (their rows replaced)")
