"""The fault suite's outcome table: one row per scenario, each proven on the whole table.

A scenario ends with :func:`prove`: ``tailfill validate --all`` (Great Expectations over the exact
offset accounting) and the tests' own count of every offset in data + quarantine. Its row says
what was injected, what the job did, its restarts, the offsets, and the verdict. The table is
printed at the end of the pytest session and written to ``build/fault-outcomes.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from helpers import assert_exactly_once, high_watermarks

from tailfill.config import PipelineConfig
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate

REPORT = Path(__file__).resolve().parent.parent / "build" / "fault-outcomes.md"
COLUMNS = ("scenario", "injected", "what the job did", "restarts", "offsets", "verdict")


@dataclass(frozen=True)
class Outcome:
    scenario: str
    injected: str
    behaviour: str
    restarts: int
    offsets: int
    verdict: str

    def cells(self) -> tuple[str, ...]:
        return (self.scenario, self.injected, self.behaviour, str(self.restarts), f"{self.offsets:,}", self.verdict)


_PENDING: list[dict] = []  # proven by the test running in this process, not yet on its report
_COLLECTED: list[dict] = []  # from the reports of this session (every xdist worker's, in the main process)


def prove(cfg: PipelineConfig, scenario: str, injected: str, behaviour: str, restarts: int,
          causes: list[str] = ()) -> Outcome:
    """Validate the whole table and count every offset; record the row (a failure fails the test first).

    ``causes``: the causes of the job's restarts, shown (shortened, distinct) with what it did.
    """
    if causes:
        shown = list(dict.fromkeys(c if len(c) <= 110 else c[:107] + "…" for c in causes))
        behaviour += "; restarted after: " + " / ".join(f"`{c}`" for c in shown[:3])
    report = validate(open_pipeline(cfg), all_runs=True)
    high = high_watermarks(cfg)
    rows, bad = assert_exactly_once(cfg, high)
    assert report.success, f"{scenario}: validation failed: {report.problems}"
    assert report.offsets_checked == sum(high.values()) == len(rows) + len(bad)
    outcome = Outcome(scenario, injected, behaviour, restarts, report.offsets_checked,
                      "COMPLETE: 0 lost, 0 duplicated")
    _PENDING.append(asdict(outcome))
    return outcome


def take_outcomes() -> list[dict]:
    """The outcomes proven since the last call (for the test's report)."""
    taken = list(_PENDING)
    _PENDING.clear()
    return taken


def collect(outcomes: Iterable[dict]) -> None:
    """Keep outcomes read from a test report."""
    _COLLECTED.extend(outcomes)


def markdown() -> str | None:
    """The session's outcomes as a Markdown table (None when no scenario ran)."""
    if not _COLLECTED:
        return None
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for o in sorted(_COLLECTED, key=lambda o: o["scenario"]):
        cells = Outcome(**o).cells()
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
