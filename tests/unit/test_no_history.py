"""The product describes itself as it is now: the README, the docs, docstrings, comments and test names carry
no development history (tracker numbers, earlier states of the work, commit hashes, dated results).
What changed, in user terms, is CHANGELOG.md's; the history itself is git's."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("README.md", "CHANGELOG.md", "docs", "mkdocs.yml", "tests", "tailfill", "plugins", "dags", "spark_jobs",
           "benchmarks", "expectations", "deploy", "pipelines", "docker-compose.yml", "Makefile", "pyproject.toml",
           ".ci")
TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".json", ".sh", ".properties", ".txt", ".cfg", ".ini", ""}
SKIPPED = ("tailfill/proof/data_docs_assets/",  # third-party files, vendored as they are
           "tests/unit/test_no_history.py")     # the patterns themselves

PATTERNS = {
    "a tracker issue": r"\bissues?[ -]?#?\d+",
    "a tracker item": r"\bitems? \d+\b",
    "a seed article or a seed run": r"\bseed (?:articles?|\d+)\b",
    "an earlier state of the work": r"\b(?:the|two|three) stops? before\b|\bthis stop\b"
                                    r"|\bbefore this (?:work|change|fix)\b|\bsince fixed\b|\bused to be\b",
    "a commit hash": r"\b(?:commit|clone of)\s+[0-9a-f]{7,40}\b",
}
DATED = {"a dated result": r"\b20\d\d-\d\d-\d\d\b"}  # in the prose a reader reads; tests use dates as data
CHANGELOG_MAY = {"an earlier state of the work"}  # saying what changed is a changelog's job


def files(root: Path) -> list[Path]:
    out = []
    for name in SCANNED:
        base = root / name
        for path in sorted(base.rglob("*")) if base.is_dir() else [base]:
            rel = path.relative_to(root).as_posix()
            if path.is_file() and path.suffix in TEXT and "__pycache__" not in rel and not rel.startswith(SKIPPED):
                out.append(path)
    return out


def _prose(rel: str) -> bool:
    return rel == "README.md" or rel.startswith("docs/")


@cache
def commits(root: Path) -> tuple[str, ...]:
    """Every commit id of the repository at ``root`` (none outside a git checkout)."""
    if shutil.which("git") is None:
        return ()
    done = subprocess.run(["git", "-C", str(root), "rev-list", "--all"], capture_output=True, text=True)
    return tuple(done.stdout.split()) if done.returncode == 0 else ()


def findings(root: Path) -> list[str]:
    """``file:line: what: text`` for every piece of development history under ``root``."""
    known = commits(root)
    out = []
    for path in files(root):
        rel = path.relative_to(root).as_posix()
        patterns = {**PATTERNS, **(DATED if _prose(rel) else {})}
        if rel == "CHANGELOG.md":
            patterns = {k: v for k, v in patterns.items() if k not in CHANGELOG_MAY}
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            hits = [what for what, pattern in patterns.items() if re.search(pattern, line, re.I)]
            hits += ["a commit hash" for token in re.findall(r"\b[0-9a-f]{7,40}\b", line)
                     if any(c.startswith(token) for c in known)]
            out += [f"{rel}:{number}: {what}: {line.strip()[:120]}" for what in dict.fromkeys(hits)]
    return out


def test_no_development_history_in_the_product():
    found = findings(REPO)
    assert found == [], "development history (say what the product does now; history lives in git):\n" + \
        "\n".join(found)


def test_the_scan_finds_each_kind(tmp_path):
    (tmp_path / "tailfill").mkdir()
    (tmp_path / "docs").mkdir()
    samples = ["fixed in " + "issue 23", "see " + "Issue #7, item 10", "the tail comes first (" + "seed 001)",
               "as the stop" + " before showed", "measured on a fresh " + "clone of 6ab3231", "since" + " fixed"]
    (tmp_path / "tailfill" / "mod.py").write_text("\n".join(f"# {s}" for s in samples) + "\n# what it does now\n")
    (tmp_path / "docs" / "page.md").write_text("| 1M (2026" + "-11-24) | 59k/s |\n")
    (tmp_path / "tailfill" / "data.py").write_text('WHEN = "2026' + '-01-01T00:00:00"  # a date as data\n')
    (tmp_path / "CHANGELOG.md").write_text("- Reads used to" + " be slow; now they are not.\n")
    found = findings(tmp_path)
    locations = sorted({f.split(": ")[0] for f in found})
    assert locations == ["docs/page.md:1"] + [f"tailfill/mod.py:{i}" for i in range(1, 7)]
    kinds = {f.split(": ")[1] for f in found}
    assert kinds == {"a tracker issue", "a tracker item", "a seed article or a seed run",
                     "an earlier state of the work", "a commit hash", "a dated result"}
