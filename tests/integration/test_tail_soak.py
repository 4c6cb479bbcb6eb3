"""A live tail keeps committing: every trigger interval, for minutes, alone and beside a backfill.

The tail runs as a user runs it (``tailfill tail``, its own ``spark-submit``) under a producer writing live
events in small batches (as a service does), on the embedded broker. It must commit every interval with no
gap over three intervals, end with exit 0 when stopped, restart nothing, and leave every offset exactly
once. ``make test`` runs the five-minute one (``solo``: it asserts timings); ``pytest -m soak`` runs the
thirty-minute ones at 600 and 2,000 records/s, alone and beside a rate-limited backfill
(``--soak-minutes`` changes their length). ``benchmarks/tail_soak.py`` prints the same figures beside the
old consumer settings.
"""

from __future__ import annotations

import os

import pytest
from helpers import assert_exactly_once, backfill, high_watermarks, tail, tail_spec

from tailfill.dev.sample import produce_sample
from tailfill.dev.soak import SoakResult, beside_rate, soak

pytestmark = pytest.mark.integration

INTERVAL = 10
HISTORY = 400_000


def _soak(spark, make_pipeline, home, tmp_path, minutes: float, rate: float, beside: bool) -> SoakResult:
    cfg = make_pipeline(tail__trigger="processing_time", tail__trigger_interval_seconds=INTERVAL,
                        tail__freshness_seconds=3 * INTERVAL, tail__min_offsets_per_batch=500,
                        tail__max_offsets_per_batch=100_000)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, HISTORY if beside else 1_000, 4, bad_every=1_001)
    tail_spec(cfg, once=False)  # records the cutover: the history is the backfill's
    env = {**os.environ, "TAILFILL_HOME": str(home)}  # the CLI as a user runs it
    # Beside: a backfill limited so that it runs through most of the soak.
    backfill_rate = beside_rate(HISTORY, minutes * 60) if beside else None
    result = soak(cfg, minutes * 60, rate, tmp_path, env, backfill_rate=backfill_rate)
    print(f"\n{result.asstr()}")
    log = (tmp_path / "tail.log").read_text(errors="replace")
    assert result.exit_code == 0, log[-3000:]
    assert "StackOverflowError" not in log
    assert result.restarts == 0, log[-3000:]
    assert result.backfill_exit_code in (None, 0), (tmp_path / "backfill.log").read_text()[-3000:]
    assert result.batches >= 0.8 * minutes * 60 / INTERVAL, result.asstr()
    assert result.max_gap <= 3 * INTERVAL, f"a gap of {result.max_gap:.0f}s between commits: {result.asstr()}"
    backfill(spark, cfg)
    tail(spark, cfg, once=True)
    assert_exactly_once(cfg, high_watermarks(cfg))
    return result


@pytest.mark.solo
def test_a_live_tail_commits_every_interval_for_five_minutes(spark, make_pipeline, home, tmp_path):
    _soak(spark, make_pipeline, home, tmp_path, minutes=5, rate=600, beside=False)


@pytest.mark.soak
@pytest.mark.parametrize("beside", [False, True], ids=["alone", "beside-backfill"])
@pytest.mark.parametrize("rate", [600, 2_000])
def test_a_live_tail_commits_every_interval_for_thirty_minutes(spark, make_pipeline, home, tmp_path, request,
                                                               rate, beside):
    _soak(spark, make_pipeline, home, tmp_path, request.config.getoption("--soak-minutes"), rate, beside)
