"""Opening the Iceberg catalog: processes that open a new catalog at the same moment all succeed.

Backfill lanes, a tail and upkeep start side by side; on a new SQLite catalog each may find
pyiceberg's tables absent and create them, and the loser's CREATE TABLE fails ("table iceberg_tables
already exists" — seen in the suite). No broker or Spark here: only the catalog file.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from tailfill.config import TargetConfig

pytestmark = pytest.mark.integration

OPENERS = 6


def _open(target_json: str, start: multiprocessing.synchronize.Barrier, results) -> None:
    from tailfill.lake.tables import load_catalog

    target = TargetConfig.model_validate_json(target_json)
    start.wait()
    try:
        load_catalog(target).list_namespaces()
        results.put("ok")
    except Exception as exc:  # reported to the test
        results.put(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")


@pytest.mark.parametrize("round_", range(3))
def test_processes_opening_a_new_catalog_at_once_all_succeed(tmp_path: Path, round_: int):
    target = TargetConfig.model_validate({"catalog": {"uri": f"sqlite:///{tmp_path}/catalog.db"}, "namespace": "ns",
                                          "table": "t", "warehouse": str(tmp_path / "warehouse")})
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(OPENERS), ctx.Queue()
    procs = [ctx.Process(target=_open, args=(target.model_dump_json(), start, results)) for _ in range(OPENERS)]
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=120)
    finally:
        for proc in procs:  # none outlives the test, even one stuck on the catalog
            if proc.is_alive():
                proc.kill()
                proc.join()
    outcomes = [results.get(timeout=5) for _ in procs]
    assert outcomes == ["ok"] * OPENERS, outcomes
