"""Benchmark: what a run's validation costs as the runs validated before it accumulate, beside the old way.

A Great Expectations project (``tailfill.proof.expectations``) is given H stored validations of Tailfill's
two run suites; then one more run is validated and its Data Docs built, each in a fresh process, as a
``tailfill validate`` or an Airflow ``validate`` task does, at each H of ``--history``:

  new  Tailfill now: this run's pages and the index (the newest 200 validations), GE's templates compiled
       once per user (Jinja's bytecode cache, warm after the first build);
  old  the whole site rebuilt (every earlier run's pages, an index of every stored result), the templates
       compiled in the process, every page made offline again.

Prints the seconds of each (the suites' validation and the Data Docs build) and old/new.

    .venv/bin/python benchmarks/validate_history.py [--history 1,100,400]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve()


def frames() -> list[tuple[str, str, pd.DataFrame]]:
    """One run's frames for the run-completeness and tiling suites (four partitions, all complete)."""
    n = 4
    ranges = pd.DataFrame({
        "partition": [f"t[{p}]" for p in range(n)], "range": ["[0, 2500)"] * n, "expected": [2500] * n,
        "rows": [2500] * n, "quarantined": [0] * n, "lost": [0] * n, "absent": [0] * n, "found": [2500] * n,
        "distinct": [2500] * n, "duplicates": [0] * n, "missing": [0] * n, "outside": [0] * n,
        "first_ok": [True] * n, "last_ok": [True] * n, "complete": [True] * n})
    tiling = pd.DataFrame({"partition": [f"t[{p}]" for p in range(n)], "gaps": [0] * n, "overlaps": [0] * n})
    return [("run_completeness", "run_ranges", ranges), ("table_tiling", "tiling", tiling)]


def one_validation(root: Path, run: str, way: str) -> float:
    """Validate one run in the project at ``root`` and build its Data Docs, ``way`` (new or old); seconds (the
    imports not counted: an Airflow task has them already)."""
    import great_expectations  # noqa: F401

    from tailfill.proof import expectations
    from tailfill.proof.data_docs import make_offline

    if way == "old":
        expectations._cache_compiled_templates = lambda: None  # type: ignore[attr-defined]

        def unlimited_index(self) -> None:  # the previous index: every stored result
            for name, site in self.context.list_data_docs_sites().items():
                index = {k: v for k, v in (site.get("site_index_builder") or {}).items()
                         if k != "validation_results_limit"}
                self.context.update_data_docs_site(name, {**site, "site_index_builder": index})

        expectations.GxRunner._limit_index = unlimited_index  # type: ignore[method-assign]

        def whole_site(self) -> Path | None:  # the previous build: every page, the whole index
            self.context.build_data_docs()
            site = Path(self.context.get_docs_sites_urls()[0]["site_url"].removeprefix("file://"))
            make_offline(site.parent)
            return site

        expectations.GxRunner.build_docs = whole_site  # type: ignore[method-assign]
    started = time.perf_counter()
    expectations.run_suites(root, frames(), run)
    return time.perf_counter() - started


def history(root: Path, runs: int) -> None:
    """Validate ``runs`` runs into the project at ``root`` (their results stored, Data Docs built once at the end)."""
    from tailfill.proof.expectations import GxRunner, suite_spec

    gx = GxRunner(root)
    for i in range(runs):
        for suite, asset, frame in frames():
            gx.validate(suite_spec(suite), asset, frame, f"past-{i:05d}")
    gx.build_docs()


def timed(root: Path, run: str, way: str) -> float:
    """:func:`one_validation` in a fresh process: its seconds."""
    out = subprocess.run([sys.executable, str(HERE), "--one", str(root), run, way], capture_output=True,
                         text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", default="1,100,400", help="validations stored before, comma-separated")
    parser.add_argument("--one", nargs=3, metavar=("ROOT", "RUN", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(one_validation(Path(args.one[0]), args.one[1], args.one[2]))
        return 0
    sizes = [int(h) for h in args.history.split(",") if h]
    tmp = Path(tempfile.mkdtemp(prefix="tailfill-validate-history-"))
    try:
        base, done = tmp / "base", 0
        print("runs validated before | new (s) | old (s) | old/new", flush=True)
        timed(tmp / "warm", "warm", "new")  # Jinja's cache as a user's after their first validation
        for size in sizes:
            history(base, size - done)
            done = size
            results = {}
            for way in ("new", "old"):
                root = tmp / way
                shutil.rmtree(root, ignore_errors=True)
                shutil.copytree(base, root)
                results[way] = timed(root, f"run-{size}", way)
            new, old = results["new"], results["old"]
            print(f"{size:>21,} | {new:7.2f} | {old:7.2f} | {old / new:6.2f}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
