"""Great Expectations: the suites in ``expectations/``, run on the exact summaries Tailfill computes.

Each suite checks one summary frame (pandas): per committed range, per partition's tiling, per
data check. Every result is stored in a file-backed GE context, from which Data Docs are built
(offline: see :mod:`tailfill.proof.data_docs`).
Great Expectations is imported lazily: it takes seconds to import and only validation needs it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from tailfill.errors import ErrorInfo
from tailfill.plumbing.durable import locked

# The repo's expectations/ folder, installed as this package data (see pyproject.toml).
SUITES_PACKAGE = "tailfill.proof.suites"
RUN_SUITE = "run_completeness"
TILING_SUITE = "table_tiling"
DATA_SUITE = "data_checks"
LOCK_FILE = ".tailfill.lock"


def suite_spec(name: str) -> dict:
    """A suite from ``expectations/<name>.json``: name, description, expectations."""
    path = resources.files(SUITES_PACKAGE) / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"expectation suite {path} is missing (expectations/ ships with tailfill)") from None


@dataclass
class SuiteResult:
    suite: str
    success: bool
    failed: list[dict] = field(default_factory=list)  # {expectation, kwargs, observed, unexpected}

    def to_dict(self) -> dict:
        return {"suite": self.suite, "success": self.success, "failed": self.failed}


@contextlib.contextmanager
def exclusive(root: Path) -> Iterator[None]:
    """Hold the GE project at ``root`` alone (an advisory file lock, released if the process dies).

    Parallel validations of a pipeline (one per backfill lane) share one GE project; its stores
    are plain files rewritten in place, and a reader meeting another's half-written suite fails.
    """
    with locked(root / LOCK_FILE):
        yield


def quiet_great_expectations() -> None:
    """Keep Great Expectations' INFO out of the logs (some 200 lines at import alone drown a task's log): call it
    before the first import."""
    logging.getLogger("great_expectations").setLevel(logging.WARNING)


INDEX_LIMIT = 200  # validations the Data Docs index lists, newest first (each run's report keeps the rest)


class GxRunner:
    """A file-backed GE context under ``root`` with one pandas datasource.

    Its Data Docs are built for what this runner validated only (the pages of earlier runs stay as they are),
    and the index lists the newest :data:`INDEX_LIMIT` validations: the cost of a validation does not grow
    with the number of runs validated before it.

    Use it inside :func:`exclusive` on the same ``root`` when other processes may validate too.
    """

    def __init__(self, root: Path):
        quiet_great_expectations()
        import great_expectations as gx

        self.gx = gx
        _cache_compiled_templates()
        root.mkdir(parents=True, exist_ok=True)
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.context = gx.get_context(mode="file", project_root_dir=str(root))
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        self._limit_index()
        self._source: Any = None
        self._validated: list[tuple[str, Any]] = []  # (suite, run id) of each validation of this runner

    def _limit_index(self) -> None:
        """Have every Data Docs site's index list the newest :data:`INDEX_LIMIT` validations only."""
        for name, site in self.context.list_data_docs_sites().items():
            index = dict(site.get("site_index_builder") or {"class_name": "DefaultSiteIndexBuilder"})
            if index.get("validation_results_limit") != INDEX_LIMIT:
                index["validation_results_limit"] = INDEX_LIMIT
                self.context.update_data_docs_site(name, {**site, "site_index_builder": index})

    def _batch_definition(self, asset: str):
        if self._source is None:
            self._source = self.context.data_sources.add_or_update_pandas(name="tailfill_pandas")
        ds = self._source
        try:
            data_asset = ds.get_asset(asset)
        except LookupError:
            data_asset = ds.add_dataframe_asset(name=asset)
        try:
            return data_asset.get_batch_definition("whole")
        except KeyError:
            return data_asset.add_batch_definition_whole_dataframe("whole")

    def _suite(self, spec: dict):
        from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

        suite = self.gx.ExpectationSuite(name=spec["name"], meta={"description": spec.get("description", "")})
        for e in spec["expectations"]:
            suite.add_expectation(
                ExpectationConfiguration(type=e["type"], kwargs=e["kwargs"], meta=e.get("meta", {})).to_domain_obj()
            )
        return self.context.suites.add_or_update(suite)

    def validate(self, spec: dict, asset: str, dataframe, run_name: str) -> SuiteResult:
        """Validate a pandas ``dataframe`` against ``spec``; the result is stored in the context."""
        suite = self._suite(spec)
        vd = self.context.validation_definitions.add_or_update(
            self.gx.ValidationDefinition(name=f"{spec['name']}-{asset}", data=self._batch_definition(asset),
                                         suite=suite)
        )
        run_id = self.gx.RunIdentifier(run_name=run_name)
        result = vd.run(batch_parameters={"dataframe": dataframe}, run_id=run_id, result_format="SUMMARY")
        self._validated.append((spec["name"], run_id))
        failed = []
        for r in result.results:
            if not r.success:
                res = r.result or {}
                failed.append({
                    "expectation": r.expectation_config.type,
                    "kwargs": {k: v for k, v in r.expectation_config.kwargs.items() if k != "batch_id"},
                    "observed": _plain(res.get("observed_value")),
                    "unexpected": _plain(res.get("unexpected_count")),
                    "error": (r.exception_info or {}).get("exception_message") if r.exception_info else None,
                })
        return SuiteResult(spec["name"], bool(result.success), failed)

    def build_docs(self) -> Path | None:
        """Build the Data Docs pages of what this runner validated, its suites' and the index, made to work offline
        (:mod:`tailfill.proof.data_docs`); the path of their index page."""
        from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

        from tailfill.proof.data_docs import make_offline

        started = time.time()
        ours = set(self._validated)
        results = [key for key in self.context.validation_results_store.list_keys()
                   if (key.expectation_suite_identifier.name, key.run_id) in ours]
        suites = [ExpectationSuiteIdentifier(name=name) for name in sorted({name for name, _ in ours})]
        self.context.build_data_docs(resource_identifiers=[*suites, *results])
        for site in self.context.get_docs_sites_urls():
            url = site.get("site_url") or ""
            if url.startswith("file://"):
                index = Path(url.removeprefix("file://"))
                make_offline(index.parent, since=started)
                return index
        return None


def _cache_compiled_templates() -> None:
    """Have Great Expectations' Data Docs views keep their compiled Jinja templates in Jinja's own bytecode cache
    (a folder of this user's, private to it) instead of compiling them in every process: some fifty templates,
    about a second of each validation. Once per process; a GE without the expected module is left as it is."""
    import jinja2
    from great_expectations.render.view import view

    if getattr(view, "Environment", None) is jinja2.Environment:  # not replaced yet (and still what GE uses)
        view.Environment = functools.partial(jinja2.Environment, bytecode_cache=jinja2.FileSystemBytecodeCache())


def run_suites(root: Path, frames: list[tuple[str, str, Any]], run_name: str,
               log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
               ) -> tuple[list[SuiteResult], float, Path | None]:
    """Validate each ``(suite, asset, frame)`` in the GE project at ``root``, then build Data Docs.

    Returns the results, the seconds the suites took, and the Data Docs index. The project is derived
    state (suites are rebuilt from ``expectations/`` on every run; the reports beside the table keep
    the history), and GE rewrites its files in place, so a process killed mid-write leaves files it
    cannot read again. Such a project is moved aside (said in one line, kept for inspection) and
    built anew, once; a second failure is raised. A failure that says nothing of the project (a full disk, a
    refused permission) is raised as it is, and the project is left where it is.
    """
    try:
        return _run_suites(root, frames, run_name)
    except Exception as exc:  # any unreadable file of GE's own stores; a real bug fails again below
        project = root / "gx"
        if not project.exists() or not ErrorInfo.of(exc).retryable:
            raise
        aside = root / f"gx.unreadable-{time.strftime('%Y%m%dT%H%M%S')}"
        project.rename(aside)
        log(f"the Great Expectations project {project} could not be used ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); moved it to {aside.name} and built a new one")
        return _run_suites(root, frames, run_name)


def _run_suites(root: Path, frames: list[tuple[str, str, Any]], run_name: str,
                ) -> tuple[list[SuiteResult], float, Path | None]:
    started = time.perf_counter()
    gx = GxRunner(root)
    suites = [gx.validate(suite_spec(suite), asset, frame, run_name) for suite, asset, frame in frames]
    return suites, time.perf_counter() - started, gx.build_docs()


def _plain(value: Any) -> Any:
    """JSON-safe form of a GE observed value (numpy scalars, tuples)."""
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)
