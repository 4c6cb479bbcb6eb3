"""Backfill lanes validate at once: they share the pipeline's Great Expectations project.

Without the project lock, concurrent GE contexts read each other's half-written suite files and
fail (``ExpectationSuite() argument after ** must be a mapping, not NoneType``), as seen in
Airflow, where only a task retry saved the run. Each lane here is its own process, as in Airflow.
"""

from __future__ import annotations

import multiprocessing
import traceback

import pytest
from helpers import provision

from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.proof.reports import gx_root

pytestmark = pytest.mark.integration
LANES = 4


def _validate_lane(path: str, run_id: str) -> dict | str:
    from tailfill.proof.validate import validate

    try:
        report = validate(open_pipeline(load_pipeline(path)), run_id=run_id)
        return {"run": report.runs, "success": report.success, "problems": report.problems}
    except Exception:  # the parent reports every lane's failure, not just the first
        return traceback.format_exc()


def test_lanes_validating_at_once_all_succeed(make_pipeline):
    cfg = make_pipeline()  # an empty table: each lane's run committed nothing, every suite still runs
    provision(cfg)  # as the lanes' plan made it
    runs = [f"lane-{i}" for i in range(LANES)]
    with multiprocessing.get_context("spawn").Pool(LANES) as pool:
        results = pool.starmap(_validate_lane, [(str(cfg.path), r) for r in runs])
    failed = [r for r in results if isinstance(r, str)]
    assert not failed, "\n".join(failed)
    assert results == [{"run": [r], "success": True, "problems": []} for r in runs]
    # One GE project for all lanes, its suites intact after the concurrent runs.
    suites = sorted(p.name for p in (gx_root(cfg) / "gx" / "expectations").glob("*.json"))
    assert suites == ["tailfill_data_checks.json", "tailfill_run_completeness.json", "tailfill_table_tiling.json"]
