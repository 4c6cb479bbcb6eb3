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
