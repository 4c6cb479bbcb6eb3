"""What a validation found, as one type: ``asdict()`` for machines (the persisted JSON, XComs), ``asstr()``
for people (the command line's table), and the figures every reader wants as properties."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from tailfill.offsets import OffsetRange, merge, ranges_to_dict


@dataclass
class ValidationResult:
    """The verdict on one run (or the whole table): exact offset accounting and the GE suites' results.

    ``partitions``, ``ranges``, ``tiling``, ``data_checks``, ``suites`` and ``damaged_files`` are the
    summary rows the reports render; ``paths`` says where the JSON, HTML and Data Docs were written.
    """

    pipeline: str
    key: str  # the report's file name: the run id, ``all-<time>`` or ``none``
    scope: str  # "run <id>", "all runs", "no runs yet"
    runs: list[str]
    validated_at: str
    success: bool
    problems: list[str]
    offsets_checked: int
    partitions: list[dict] = field(default_factory=list)
    damaged_files: list[dict] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)  # accepted absent offsets (the broker did not deliver them)
    # The same offsets by why: {"reason", "offsets" (how many), "ranges"} each.
    absent_by_reason: list[dict] = field(default_factory=list)
    ranges: list[dict] = field(default_factory=list)
    tiling: list[dict] = field(default_factory=list)
    data_checks: list[dict] = field(default_factory=list)
    suites: list[dict] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)
    paths: dict[str, str | None] = field(default_factory=dict)
    state: dict = field(default_factory=dict)  # a keyed table's state check: keys checked, differing, counts

    @property
    def rows(self) -> int:
        return sum(p["rows"] for p in self.partitions)

    @property
    def quarantined(self) -> int:
        return sum(p["quarantined"] for p in self.partitions)

    def covered(self) -> dict[str, dict[str, list[list[int]]]]:
        """The offset ranges the validated runs committed, merged per partition (``{"topic": {"0": [[s, e]]}}``)."""
        return ranges_to_dict(merge(OffsetRange(r["topic"], r["partition"], r["start"], r["end"])
                                    for r in self.ranges))

    @property
    def html(self) -> str | None:
        """The completeness report's URI (once persisted)."""
        return self.paths.get("html")

    def asdict(self) -> dict:
        """Plain JSON-serialisable data: what is persisted beside the table and pushed as an XCom."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ValidationResult:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def asstr(self) -> str:
        """The verdict, per partition, per suite, the problems and where the reports are, for people."""
        verdict = "COMPLETE" if self.success else "INCOMPLETE"
        lines = [f"validation of {self.pipeline}, {self.scope}: {verdict} ({self.offsets_checked:,} offsets checked "
                 f"in {self.timings_s.get('total', 0.0):.1f}s)",
                 f"  {'partition':<24} {'expected':>10} {'found':>10} {'rows':>10} {'quarantined':>11} "
                 f"{'missing':>8} {'duplicated':>10}"]
        for p in self.partitions:
            lines.append(f"  {p['topic'] + '[' + str(p['partition']) + ']':<24} {p['expected']:>10,} "
                         f"{p['found']:>10,} {p['rows']:>10,} {p['quarantined']:>11,} {p['missing']:>8,} "
                         f"{p['duplicated']:>10,}")
        if self.state:
            c = self.state["counts"]
            lines.append(f"  state: {self.state['keys_checked']:,} keys checked against the fold of the changes, "
                         f"{self.state['differing']:,} differ; changes {c.get('changes', 0):,} = inserted "
                         f"{c.get('inserted', 0):,} + updated {c.get('updated', 0):,} + deleted "
                         f"{c.get('deleted', 0):,} + "
                         + (f"truncated {c['truncated']:,} + " if c.get("truncated") else "")
                         + f"superseded {c.get('superseded', 0):,}")
        lines += [f"  absent: {a['offsets']:,} offsets, {a['reason']}: {shown(a['ranges'])}"
                  for a in self.absent_by_reason]
        lines += [f"  suite {s['suite']}: {'passed' if s['success'] else 'FAILED'}" for s in self.suites]
        lines += [f"  problem: {problem}" for problem in self.problems]
        lines.append(f"  report: {self.paths.get('html')}\n  json:   {self.paths.get('json')}")
        if self.paths.get("data_docs"):
            lines.append(f"  Great Expectations Data Docs: {self.paths['data_docs']}")
        return "\n".join(lines)


SHOWN = 3  # absent ranges named per reason on the command line (the JSON lists them all)


def shown(ranges: list[str], most: int = SHOWN) -> str:
    """The first ``most`` of ``ranges``, and how many more."""
    more = len(ranges) - most
    return ", ".join(ranges[:most]) + (f" and {more:,} more ranges" if more > 0 else "")
