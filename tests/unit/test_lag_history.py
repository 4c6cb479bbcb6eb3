"""The lag over time: each incremental report's lag point, its sparkline and the tab's refresh rule."""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
from tailfill_airflow.lag_history import LagPoint  # noqa: E402
from tailfill_airflow.sparkline import sparkline  # noqa: E402
from tailfill_airflow.views import _page, lag_section, verdict_pending  # noqa: E402


def report(behind: int | None, offsets: int, worst_p95: float | None, at: float = 100.0) -> dict:
    return {"verdict": "COMPLETE", "offsets": offsets, "objective": {"worst_p95": worst_p95},
            "lag": {"at": at, "behind": behind}}


def test_a_report_gives_its_runs_lag_point_and_one_without_a_measurement_none():
    assert LagPoint.from_report("r1", report(40, 300, 2.5)) == LagPoint("r1", 100.0, 40, 300, 2.5)
    assert LagPoint.from_report("r0", {"verdict": "COMPLETE", "offsets": 3}) is None  # reported before lag was kept
    assert LagPoint.from_report("r2", None) is None


def test_the_sparkline_puts_one_dot_per_measured_value_and_leaves_a_gap_for_an_unknown_one():
    svg = sparkline([40, None, 0, 20], ["a", "b", "c", "d"], "lag-behind", width=100, height=20)
    assert svg.count("<circle") == 3 and "<title>b</title>" not in svg
    assert svg.count("<polyline") == 2  # the unknown value breaks the line
    ys = [float(y) for y in re.findall(r'cy="([\d.]+)"', svg)]
    assert ys[0] == 4.0 and ys[1] == 16.0 and 4.0 < ys[2] < 16.0  # the largest at the top, zero at the bottom
    assert "http" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched


def test_the_lag_section_lists_each_run_with_its_numbers():
    points = [LagPoint("run-a", 0.0, 40, 300, 2.5), LagPoint("run-b", 60.0, 0, 40, None)]
    html = lag_section(points)
    rows = re.findall(r"<tr class=lag-point><td class=l>([^<]+)</td><td class=l>[^<]+</td><td>([^<]+)</td>"
                      r"<td class=behind>([^<]+)</td><td class=p95>([^<]+)</td>", html)
    assert rows == [("run-a", "300", "40", "2.5s"), ("run-b", "40", "0", "-")]
    assert "no incremental run has reported its lag yet" in lag_section([])


def test_a_run_tab_refreshes_until_its_verdict_and_then_sets_no_timer():
    running, finished = [{"state": "running"}], [{"state": "finished"}]
    assert verdict_pending(running, "muted", lambda: "running")
    assert verdict_pending(finished, "muted", lambda: "running")  # validation still to come
    assert not verdict_pending(finished, "good", lambda: "running")  # validated: the verdict is final
    assert not verdict_pending(finished, "muted", lambda: "failed")  # the run ended without a verdict
    going, final = _page("t", "b", refresh=True).body.decode(), _page("t", "b").body.decode()
    assert '<body data-refresh="every 5s">' in going and 'http-equiv="refresh"' in going
    assert '<body data-refresh="final">' in final and "refresh" not in final.replace('data-refresh="final"', "")


def test_a_catalog_that_fails_with_its_drivers_error_makes_the_lag_unknown_not_the_report_fail():
    from sqlalchemy.exc import OperationalError
    from tailfill_airflow.lag_history import measure_lag

    class CatalogDown:
        def open_tables(self):
            raise OperationalError("SELECT ...", {}, Exception("connection refused"))

    point = measure_lag(CatalogDown())
    assert point["behind"] is None and point["unknown"].startswith("OperationalError: ")
