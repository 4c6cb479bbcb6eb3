"""The plugin's task tab resolves for every task, mapped or not (issue 23, item 2)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
from tailfill_airflow.naming import BACKFILL, INCREMENTAL, tailfill_run_id  # noqa: E402
from tailfill_airflow.views import lane_run_id, map_index_of  # noqa: E402


def test_a_not_mapped_task_gets_the_placeholder_and_reads_as_not_mapped():
    assert map_index_of("{MAP_INDEX}") == -1  # what Airflow sends for tail, preflight, maintain
    assert map_index_of("-1") == -1
    assert map_index_of("3") == 3


def test_the_tail_tab_finds_the_tail_run_and_a_lane_tab_its_lane():
    run = "scheduled__2026-11-24T00:00:00+00:00"
    assert lane_run_id("demo", INCREMENTAL, run, "{MAP_INDEX}") == tailfill_run_id("demo", INCREMENTAL, run)
    assert lane_run_id("demo", BACKFILL, run, "2") == tailfill_run_id("demo", BACKFILL, run, 2)


def result(success: bool, offsets: int, problems: list[str] | None = None):
    from tailfill.proof.result import ValidationResult

    return ValidationResult(pipeline="demo", key="r", scope="run r", runs=["r"], validated_at="now", success=success,
                            problems=problems or [], offsets_checked=offsets)


def test_the_run_tab_leads_with_the_verdict_of_all_its_lanes():
    """Issue 23: COMPLETE appeared only inside each lane's report; the run tab now says it first."""
    from tailfill_airflow.views import verdict

    assert verdict([result(True, 40_000), result(True, 80_000)]) == (
        "good", "COMPLETE: every one of 120,000 offsets landed exactly once (2 lane(s) validated)")
    cls, text = verdict([result(True, 40_000), None])
    assert cls == "muted" and text.startswith("not validated yet: 1 of 2 lane(s)")
    cls, text = verdict([result(True, 40_000), result(False, 80_000, ["t[0] [10, 20): 10 offsets missing"])])
    assert cls == "bad" and text == "INCOMPLETE (1 of 2 lane(s)): t[0] [10, 20): 10 offsets missing"
