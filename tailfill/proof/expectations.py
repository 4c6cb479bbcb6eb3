"""Great Expectations: the suites in ``expectations/`` plus each pipeline's data expectations.

Summaries (pandas) are checked with GE's pandas datasource; a run's new rows with GE's Spark
datasource. Every result is stored in a file-backed GE context, from which Data Docs are built.
Great Expectations is imported lazily: it takes seconds to import and only validation needs it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from tailfill.config import DataExpectation, PipelineConfig

# The repo's expectations/ folder, installed as this package data (see pyproject.toml).
SUITES_PACKAGE = "tailfill.proof.suites"
RUN_SUITE = "run_completeness"
TILING_SUITE = "table_tiling"
SPARK_TYPES = {"string": "StringType", "long": "LongType", "double": "DoubleType",
               "boolean": "BooleanType", "timestamp": "TimestampType"}


def suite_spec(name: str) -> dict:
    """A suite from ``expectations/<name>.json``: name, description, expectations."""
    path = resources.files(SUITES_PACKAGE) / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"expectation suite {path} is missing (expectations/ ships with tailfill)") from None


def data_suite_spec(cfg: PipelineConfig, expected_rows: int) -> dict:
    """The pipeline's data expectations (from its YAML) plus the row count, as a suite spec."""
    exps: list[dict[str, Any]] = [{"type": "expect_table_row_count_to_equal", "kwargs": {"value": expected_rows},
                                   "meta": {"why": "the run's new rows as committed"}}]
    for e in cfg.expectations:
        exps += _expectations_for(e)
    return {"name": f"{cfg.name}_data", "description": f"Data expectations of pipeline {cfg.name}",
            "expectations": exps}


def _expectations_for(e: DataExpectation) -> list[dict[str, Any]]:
    base = {"column": e.column}
    mostly = {"mostly": e.mostly} if e.mostly < 1 else {}
    out = []
    if e.not_null:
        out.append({"type": "expect_column_values_to_not_be_null", "kwargs": {**base, **mostly}})
    if e.accepted_values is not None:
        out.append({"type": "expect_column_values_to_be_in_set",
                    "kwargs": {**base, "value_set": e.accepted_values, **mostly}})
    if e.min is not None or e.max is not None:
        out.append({"type": "expect_column_values_to_be_between",
                    "kwargs": {**base, "min_value": e.min, "max_value": e.max, **mostly}})
    if e.type is not None:
        out.append({"type": "expect_column_values_to_be_of_type", "kwargs": {**base, "type_": SPARK_TYPES[e.type]}})
    return out


def columns_of(spec: dict) -> list[str]:
    """The columns a suite's expectations read."""
    return sorted({e["kwargs"]["column"] for e in spec["expectations"] if "column" in e["kwargs"]})


@dataclass
class SuiteResult:
    suite: str
    success: bool
    failed: list[dict] = field(default_factory=list)  # {expectation, kwargs, observed, unexpected}

    def to_dict(self) -> dict:
        return {"suite": self.suite, "success": self.success, "failed": self.failed}


class GxRunner:
    """A file-backed GE context under ``root`` with one pandas and one Spark datasource."""

    def __init__(self, root: Path):
        import great_expectations as gx

        self.gx = gx
        root.mkdir(parents=True, exist_ok=True)
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.context = gx.get_context(mode="file", project_root_dir=str(root))
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        self._sources: dict[str, Any] = {}

    def _batch_definition(self, kind: str, asset: str):
        ds = self._sources.get(kind)
        if ds is None:
            sources = self.context.data_sources
            # GE persists Spark batches by default: a whole-table cache for a one-pass check.
            ds = self._sources[kind] = (sources.add_or_update_spark(name="tailfill_spark", persist=False)
                                        if kind == "spark" else sources.add_or_update_pandas(name="tailfill_pandas"))
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

    def validate(self, spec: dict, kind: str, asset: str, dataframe, run_name: str) -> SuiteResult:
        """Validate ``dataframe`` (pandas or Spark, per ``kind``) against ``spec``; results are stored.

        On Spark, every extra metric is a job: a passing suite is checked with ``BOOLEAN_ONLY`` and
        only a failing one is re-run for the details (counts and examples of unexpected values).
        """
        suite = self._suite(spec)
        vd = self.context.validation_definitions.add_or_update(
            self.gx.ValidationDefinition(name=f"{spec['name']}-{asset}", data=self._batch_definition(kind, asset),
                                         suite=suite)
        )
        run_id = self.gx.RunIdentifier(run_name=run_name)
        result = vd.run(batch_parameters={"dataframe": dataframe}, run_id=run_id,
                        result_format="BOOLEAN_ONLY" if kind == "spark" else "SUMMARY")
        if kind == "spark" and not result.success:
            result = vd.run(batch_parameters={"dataframe": dataframe}, run_id=run_id, result_format="SUMMARY")
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
        """Build Data Docs; the path of their index page."""
        self.context.build_data_docs()
        for site in self.context.get_docs_sites_urls():
            url = site.get("site_url") or ""
            if url.startswith("file://"):
                return Path(url.removeprefix("file://"))
        return None


def _plain(value: Any) -> Any:
    """JSON-safe form of a GE observed value (numpy scalars, tuples)."""
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)
