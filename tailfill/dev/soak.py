"""A tail soak: a processing-time tail kept running for minutes under a live producer, measured from its commits.

``tailfill tail`` runs as a user runs it (its own ``spark-submit``), a producer writes live events at a steady
rate in small batches, and optionally ``tailfill backfill --max-rate`` runs beside it through most of the soak.
Then ``tailfill stop-tail`` stops it. The result is read from the run's batch reports, attributed by run id:
the gaps between commits (the first commit to the stop), the records' produce-to-commit latency, and how the
tail ended. Used by the soak tests and by ``benchmarks/tail_soak.py``.
"""

from __future__ import annotations

import itertools
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tailfill.config import PipelineConfig
from tailfill.dev.sample import produce_live, sample_event
from tailfill.run.contract import Restarted, read_event
from tailfill.state.records import BatchReport
from tailfill.state.store import StateStore, read_health, run_ids, run_reports

START_TIMEOUT_S = 300.0  # a cold spark-submit on a busy machine, until the tail publishes its health


@dataclass
class SoakResult:
    """What one soak measured: commits, gaps between them, freshness, and how the tail ended."""

    rate: float  # live events per second
    seconds: float  # from the tail's first commit to its stop
    interval: float  # the tail's trigger interval
    beside_backfill: bool
    batches: int
    offsets: int
    gaps: list[float] = field(repr=False)  # seconds between commits, and from the last commit to the stop
    freshness_p50: float | None = None  # median of the batches' p50 produce-to-commit latency (s)
    freshness_p95: float | None = None  # median of the batches' p95 (s)
    freshness_worst: float | None = None  # the worst batch's p95 (s)
    exit_code: int | None = None
    restarts: int = 0
    backfill_exit_code: int | None = None
    behind: int | None = None  # offsets on the broker the tail had not committed at its last batch before the stop

    @property
    def max_gap(self) -> float:
        return max(self.gaps, default=float("inf"))

    def gap_percentile(self, q: float) -> float:
        ordered = sorted(self.gaps)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("inf")

    def asdict(self) -> dict:
        return asdict(self) | {"max_gap": self.max_gap}

    def asstr(self) -> str:
        fresh = (f"freshness p50 {self.freshness_p50:.1f}s p95 {self.freshness_p95:.1f}s (worst batch "
                 f"{self.freshness_worst:.1f}s)" if self.freshness_p95 is not None else "no freshness")
        beside = " beside a backfill" if self.beside_backfill else " alone"
        return (f"{self.rate:>6,.0f}/s{beside:<18} {self.seconds / 60:5.1f} min  {self.batches:>4} batches "
                f"{self.offsets:>10,} offsets  gap p50 {self.gap_percentile(0.5):5.1f}s p99 "
                f"{self.gap_percentile(0.99):5.1f}s max {self.max_gap:5.1f}s ({self.max_gap / self.interval:.1f} × "
                f"interval)  {fresh}  restarts {self.restarts}  exit {self.exit_code}")


def measure(reports: list[BatchReport], stopped_at: float, rate: float, interval: float, beside: bool) -> SoakResult:
    """The soak's figures from the tail run's batch reports (pure: the reports and the stop time)."""
    commits = sorted(r.at for r in reports if r.offsets)
    gaps = [b - a for a, b in itertools.pairwise(commits)]
    if commits:
        gaps.append(max(stopped_at - commits[-1], 0.0))
    fresh = [r.freshness for r in reports if r.freshness]
    return SoakResult(
        rate=rate, seconds=(stopped_at - commits[0]) if commits else 0.0, interval=interval, beside_backfill=beside,
        batches=len(commits), offsets=sum(r.offsets for r in reports), gaps=gaps,
        freshness_p50=statistics.median(f["p50"] for f in fresh) if fresh else None,
        freshness_p95=statistics.median(f["p95"] for f in fresh) if fresh else None,
        freshness_worst=max(f["p95"] for f in fresh) if fresh else None)


def beside_rate(history: int, seconds: float) -> int:
    """The ``--max-rate`` (offsets/s, at least 100) at which a backfill of ``history`` offsets lasts most (80%) of
    a soak of ``seconds``."""
    return max(int(history / (0.8 * seconds)), 100)


def soak(cfg: PipelineConfig, seconds: float, rate: float, log_dir: Path, env: dict[str, str],
         backfill_rate: int | None = None, event: Callable[[str, int], dict] = sample_event) -> SoakResult:
    """Run the tail of ``cfg`` (processing-time trigger) for ``seconds`` after its first commit under a producer
    at ``rate`` (of ``event(run, i)``); with ``backfill_rate``, a backfill of ``[earliest, cutover)`` limited to
    that many offsets/s runs beside it. ``env``: the commands' environment, as a user's shell has it. Raises if the
    tail does not start."""
    assert cfg.path is not None and cfg.tail.trigger == "processing_time"
    tailfill = str(Path(sys.executable).parent / "tailfill")
    store = StateStore.of(cfg)
    before = set(run_ids(store))
    stop = threading.Event()
    producer = threading.Thread(target=produce_live, args=(cfg.source.bootstrap_servers, cfg.source.topic, rate,
                                                           stop), kwargs={"event": event}, name="soak-producer",
                                daemon=True)
    tail_log = (log_dir / "tail.log").open("w")
    tail = subprocess.Popen([tailfill, "tail", cfg.path], env=env, stdout=tail_log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    backfill: subprocess.Popen | None = None
    try:
        _wait(lambda: read_health(store) is not None, tail, log_dir / "tail.log", "the tail to start")
        producer.start()
        run_id = _wait(lambda: next(iter(set(run_ids(store)) - before), None), tail, log_dir / "tail.log",
                       "the tail's run")
        _wait(lambda: any(r.offsets for r in run_reports(store, run_id)), tail, log_dir / "tail.log",
              "the tail's first commit")
        if backfill_rate is not None:
            backfill = subprocess.Popen([tailfill, "backfill", cfg.path, "--max-rate", str(backfill_rate)], env=env,
                                        stdout=(log_dir / "backfill.log").open("w"), stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if tail.poll() is not None:
                break  # the tail ended by itself: measured as it is, its exit code says how
            time.sleep(1.0)
        stopped_at = time.time()
        last = read_health(store)
        subprocess.run([tailfill, "stop-tail", cfg.path], env=env, check=True, capture_output=True)
        exit_code = tail.wait(timeout=600)
        backfill_code = backfill.wait(timeout=3600) if backfill is not None else None
    finally:
        stop.set()
        for proc in (tail, backfill):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        tail_log.close()
        if producer.is_alive():
            producer.join(timeout=60)
    result = measure(run_reports(store, run_id), stopped_at, rate, cfg.tail.trigger_interval_seconds,
                     backfill_rate is not None)
    result.exit_code, result.backfill_exit_code = exit_code, backfill_code
    result.behind = last.backlog if last is not None else None
    result.restarts = _restarts(log_dir / "tail.log")
    return result


def _restarts(log: Path) -> int:
    """Restart events the tail job printed (the job contract's lines)."""
    lines = log.read_text(errors="replace").splitlines()
    return sum(isinstance(read_event(line), Restarted) for line in lines)


def _wait(condition, proc: subprocess.Popen, log: Path, what: str, timeout: float = START_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if proc.poll() is not None:
            raise RuntimeError(f"waiting for {what}: the tail ended (exit {proc.returncode}):\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"waiting for {what}: nothing after {timeout:.0f}s:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)
    return found
