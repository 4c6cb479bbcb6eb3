"""The plugin's task tab resolves for every task, mapped or not."""

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


def test_a_table_per_topic_has_a_tail_per_table_each_labelled_with_its_table():
    from tailfill_airflow.naming import label_of_args

    run = "scheduled__2026-11-24T00:00:00+00:00"
    tails = {lane_run_id("shop", INCREMENTAL, run, str(i), routed=True) for i in range(3)}
    assert len(tails) == 3 and tailfill_run_id("shop", INCREMENTAL, run) not in tails
    assert label_of_args(["--pipeline", "/p/shop.yaml#orders:shop.public.orders", "--mode", "tail"]) == "orders · tail"
    assert label_of_args(["--pipeline", "/p/demo.yaml", "--mode", "tail"]) == "tail"


def test_the_run_tab_of_a_table_per_topic_gives_each_table_its_verdict():
    from tailfill_airflow.views import tables_html

    page = tables_html([{"table": "orders"}, {"table": "orders"}, {"table": "refunds"}],
                       [result(True, 10), result(True, 5), result(False, 3, ["refunds[0] [0, 3) missing"])])
    assert "COMPLETE: every one of 15 offsets landed exactly once (2 lane(s) validated)" in page
    assert "INCOMPLETE (1 of 1 lane(s)): refunds[0] [0, 3) missing" in page


def result(success: bool, offsets: int, problems: list[str] | None = None):
    from tailfill.proof.result import ValidationResult

    return ValidationResult(pipeline="demo", key="r", scope="run r", runs=["r"], validated_at="now", success=success,
                            problems=problems or [], offsets_checked=offsets)


def test_the_run_tab_leads_with_the_verdict_of_all_its_lanes():
    """The run tab says COMPLETE first, not only inside each lane's report."""
    from tailfill_airflow.views import verdict

    assert verdict([result(True, 40_000), result(True, 80_000)]) == (
        "good", "COMPLETE: every one of 120,000 offsets landed exactly once (2 lane(s) validated)")
    cls, text = verdict([result(True, 40_000), None])
    assert cls == "muted" and text.startswith("not validated yet: 1 of 2 lane(s)")
    cls, text = verdict([result(True, 40_000), None], run_state="failed")  # its validation will never come
    assert cls == "bad" and text.startswith("FAILED: 1 of 2 lane(s) never validated")
    cls, text = verdict([result(True, 40_000), result(False, 80_000, ["t[0] [10, 20): 10 offsets missing"])])
    assert cls == "bad" and text == "INCOMPLETE (1 of 2 lane(s)): t[0] [10, 20): 10 offsets missing"


def test_the_run_tab_links_each_lane_and_the_pipeline_pages_under_the_plugin():
    """The run tab links every page; the links resolve under /tailfill whatever the base URL's path."""
    from urllib.parse import urljoin

    from tailfill_airflow.views import run_links

    page = "http://af.example:8080/sub/tailfill/run/demo_backfill/manual__2026-11-24T00:00:00+00:00"
    body = run_links("demo_backfill", "manual__2026-11-24T00:00:00+00:00",
                     [(0, "slice 1 of 2 (10 offsets)"), (1, "slice 2")])
    hrefs = [urljoin(page, h.split('"')[0]) for h in body.split('href="')[1:]]
    run = "manual__2026-11-24T00%3A00%3A00%2B00%3A00"
    assert hrefs[:3] == [f"http://af.example:8080/sub/tailfill/{p}/demo_backfill/{run}/0"
                         for p in ("report", "batches", "output")]
    assert hrefs[3] == f"http://af.example:8080/sub/tailfill/report/demo_backfill/{run}/1"
    assert hrefs[-4:] == ["http://af.example:8080/sub/tailfill/docs/demo_backfill/index.html",
                          "http://af.example:8080/sub/tailfill/quarantine/demo_backfill",
                          "http://af.example:8080/sub/tailfill/table/demo_backfill",
                          "http://af.example:8080/sub/tailfill/pipeline/demo_backfill"]
    assert "slice 1 of 2 (10 offsets): " in body and "file://" not in body
    tail = run_links("demo_incremental", "r", [(-1, "tail")])  # one Spark task, not mapped
    assert 'href="../../report/demo_incremental/r/-1"' in tail


def test_the_served_report_links_the_served_data_docs_not_a_file():
    from tailfill_airflow.views import served_docs_links

    report = '<p>Data Docs: <a href="file:///w/_validation/demo/gx/uncommitted/data_docs/local_site/index.html">x</a>'
    served = served_docs_links(report, "demo_backfill")
    assert 'href="../../../docs/demo_backfill/index.html"' in served and 'href="file://' not in served


def test_the_run_page_names_the_fields_not_declared_of_its_lanes(tmp_path):
    from types import SimpleNamespace

    import pyarrow.fs as pafs
    from tailfill_airflow.views import unknown_fields_html

    from tailfill.state.records import BatchReport
    from tailfill.state.store import StateStore, report_file

    store = StateStore(str(tmp_path), pafs.LocalFileSystem())
    for run_id, batch_id, seen in (("lane-0", 0, {"org": [3, 0, 9]}), ("lane-1", 0, {"org": [2, 1, 4]}),
                                   ("lane-1", 1, {})):
        report_file(store, run_id, "q").append(BatchReport(batch_id=batch_id, at=float(batch_id), seconds=1.0,
                                                           offsets=5, records=5, rows=5, quarantined=0,
                                                           unknown_fields=seen))
    pipeline = SimpleNamespace(state=store, cfg=SimpleNamespace(format=SimpleNamespace(unknown_fields="ignore")))
    assert unknown_fields_html(pipeline, ["lane-0", "lane-1"]) == (
        '<p class="bad unknown-fields">fields not declared (format.unknown_fields: ignore): '
        "org (5 records, first at 0:9)</p>")
    assert unknown_fields_html(pipeline, ["lane-1-none"]) == ""
