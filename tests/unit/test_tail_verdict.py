"""The tail's one verdict against its freshness objective, and what status, the governor and the tab say of it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tailfill.pipeline.load import load_pipeline
from tailfill.run.governor import Governor
from tailfill.run.tail_health import describe
from tailfill.state.records import TailHealth
from tailfill.state.tail_verdict import tail_verdict
from tailfill.values.freshness import Freshness

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
from tailfill_airflow.views import tail_health_html  # noqa: E402

NOW = 1_000.0


def health(**kw) -> TailHealth:
    """A running tail: 15 s trigger, 60 s objective, batches of at most 10,000 offsets."""
    base = dict(alive_at=NOW, trigger_interval_seconds=15.0, freshness_objective_seconds=60.0,
                max_offsets_per_batch=10_000, batch_at=NOW)
    return TailHealth(**{**base, **kw})


FRESH = Freshness(3.0, 8.0, 9.0, 1_000)
STALE = Freshness(396.5, 397.4, 399.0, 1_000)
# The field's case: p95 far above the objective, 33,898 offsets waiting, 30 offsets/s achieved; Spark's
# heartbeat said it had nothing to read.
FIELD = dict(freshness=STALE, backlog=33_898, processing_per_s=30.0, incoming_per_s=500.0, caught_up=True)

STATES = {
    "no batch yet": health(batch_at=None),
    "meets": health(freshness=FRESH, backlog=2_000, processing_per_s=1_000.0),
    "behind on p95": health(freshness=STALE, backlog=2_000, processing_per_s=1_000.0),
    # p95 fine so far, but 60,000 waiting at 200 offsets/s takes 300 s: its records will be late.
    "behind on backlog": health(freshness=FRESH, backlog=60_000, processing_per_s=200.0),
    "caught up": health(freshness=STALE, backlog=0, processing_per_s=1_000.0),
}


@pytest.mark.parametrize("name, state", [("no batch yet", "no batch yet"), ("meets", "meets"),
                                         ("behind on p95", "behind"), ("behind on backlog", "behind"),
                                         ("caught up", "caught up")])
def test_each_state_of_the_tail(name, state):
    assert tail_verdict(STATES[name]).state == state


def test_the_field_case_is_behind_on_both_counts_whatever_the_heartbeat_said():
    v = tail_verdict(health(**FIELD))
    assert v.behind
    assert v.reasons == ("tail freshness p95 397s > objective 60s",
                         "backlog 33,898 offsets takes ~1,130s to commit at 30 offsets/s > objective 60s")


def test_a_backlog_is_judged_by_the_cap_before_a_rate_is_measured():
    # 10,000 per 15 s trigger: 50,000 waiting take 75 s, above 60 s; 20,000 take 30 s.
    assert tail_verdict(health(freshness=FRESH, backlog=50_000)).behind
    assert tail_verdict(health(freshness=FRESH, backlog=20_000)).state == "meets"


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    return load_pipeline("pipelines/demo.yaml")


def test_status_prints_behind_with_the_figures_and_never_meets_for_the_field_case(cfg):
    line = describe(cfg, health(**FIELD), now=NOW + 12)[0]
    assert line == ("tail freshness (running, last batch 12s ago, at 1970-01-01 00:16:40 UTC): p50 396.5s, p95 "
                    "397.4s, max 399.0s; BEHIND the objective p95 ≤ 60s: tail freshness p95 397s > objective 60s; "
                    "backlog 33,898 offsets takes ~1,130s to commit at 30 offsets/s > objective 60s")


@pytest.mark.parametrize("name, words", [
    ("no batch yet", "no batch measured yet against the objective p95 ≤ 60s"),
    ("meets", "meets the objective p95 ≤ 60s; backlog 2,000 offsets"),
    ("behind on p95", "BEHIND the objective p95 ≤ 60s: tail freshness p95 397s > objective 60s; backlog 2,000 offsets"),
    ("behind on backlog", "BEHIND the objective p95 ≤ 60s: backlog 60,000 offsets takes ~300s to commit"),
    ("caught up", "caught up (nothing left to read), but its last batch missed the objective p95 ≤ 60s"),
])
def test_status_says_each_state(cfg, name, words):
    assert words in describe(cfg, STATES[name], now=NOW)[0]


class Clock:
    def __init__(self):
        self.now = NOW

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def pause_of(tail: TailHealth) -> tuple[float, list[str]]:
    """Seconds a backfill waits after a batch beside ``tail`` (kept alive and as it is), and what it logs."""
    clock, logs = Clock(), []
    g = Governor(max_offsets_per_batch=2_000_000, batch_seconds=30.0, max_offsets_per_second=None, cores=2,
                 read_tail=lambda: (TailHealth(**{**tail.__dict__, "alive_at": clock.now}), None),
                 when_tail_unknown="proceed", tail_interval_seconds=15.0, log=logs.append, clock=clock,
                 sleep=clock.sleep)
    _, waited = g.after_batch(100_000, 2.0)
    return waited, logs


@pytest.mark.parametrize("name, yields", [("no batch yet", False), ("meets", False), ("behind on p95", True),
                                          ("behind on backlog", True), ("caught up", False)])
def test_the_governor_yields_exactly_to_a_tail_that_is_behind(name, yields):
    waited, logs = pause_of(STATES[name])
    assert (waited > 0) == yields
    assert any(line.startswith("yielding to the tail:") for line in logs) == yields


def test_the_governor_yields_to_the_field_case_and_says_why():
    _, logs = pause_of(health(**FIELD))
    assert logs[0] == ("yielding to the tail: tail freshness p95 397s > objective 60s; backlog 33,898 offsets takes "
                       "~1,130s to commit at 30 offsets/s > objective 60s; backfill paused between batches")


def test_the_airflow_tab_shows_the_same_words_in_red_when_behind(cfg):
    page = tail_health_html(cfg, health(**FIELD), now=NOW)
    assert '<p class="bad tail-health">' in page and "BEHIND the objective p95 ≤ 60s" in page
    assert "meets" not in page
    calm = tail_health_html(cfg, STATES["meets"], now=NOW)
    assert '<p class="muted tail-health">' in calm and "meets the objective p95 ≤ 60s" in calm
    assert "no tail batch measured yet" in tail_health_html(cfg, None)


def test_a_tail_with_nothing_to_read_keeps_the_last_measured_figures_and_says_when(cfg):
    from tailfill.run.tail_health import TailPace

    earlier = health(**FIELD)
    fresh = TailPace(cfg, 10_000, last=earlier).health  # a new run, before (or without) a batch of its own
    assert (fresh.freshness, fresh.batch_at) == (earlier.freshness, earlier.batch_at)
    line = describe(cfg, fresh, now=NOW + 7_500)[0]
    assert ", last batch 2h05m ago, at 1970-01-01 00:16:40 UTC): p50 396.5s, p95 397.4s" in line, line
    assert TailPace(cfg, 10_000).health.freshness is None  # no earlier tail: nothing measured yet
