"""A pipeline's YAML file into its validated model (:class:`~tailfill.config.PipelineConfig`).

Values may reference the environment as ``${VAR}`` or ``${VAR:-default}`` (``${TAILFILL_HOME}`` is
the settings' home, ``./.tailfill`` when unset). The model checks each setting; the pipeline's format
(:mod:`tailfill.formats.registry`) checks its own block and the columns the rest names. Every problem
is reported as ``file: field: problem (fix: ...)``; a loaded pipeline's secrets are registered for
redaction.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from pydantic import ValidationError

from tailfill.config import FormatConfig, PipelineConfig
from tailfill.errors import ConfigError
from tailfill.formats.changes import with_change_columns
from tailfill.formats.connect_types import declared_problem
from tailfill.formats.registry import format_class
from tailfill.redact import register_model_secrets
from tailfill.settings import settings
from tailfill.values.partition_terms import parse_term
from tailfill.values.paths import type_at
from tailfill.values.schema import CHANGE_COLUMNS, field_type, table_schema

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_FIXES = {
    "missing": "add it",
    "extra_forbidden": "remove it or check its spelling",
    "literal_error": "use one of the allowed values",
}


def _interpolate(value: Any, where: str) -> Any:
    if isinstance(value, dict):
        return {k: _interpolate(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        var, default = m.group(1), m.group(2)
        if var == "TAILFILL_HOME":
            return str(settings().home)
        if var in os.environ:
            return os.environ[var]
        if default is not None:
            return default
        raise ConfigError(
            f"{where}: environment variable {var} is not set (fix: export it or write ${{{var}:-default}})"
        )

    return _ENV_REF.sub(sub, value)


def load_pipeline(path: str | Path) -> PipelineConfig:
    """Load and validate one pipeline YAML; raise :class:`ConfigError` naming file, field and fix."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such pipeline file") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a pipeline file must be a YAML mapping")
    try:
        data = _interpolate(raw, "")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    try:
        cfg = PipelineConfig.model_validate({**data, "path": str(path)})
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = err["msg"].removeprefix("Value error, ")
            fix = _FIXES.get(err["type"], "")
            problems.append(f"{path}: {field}: {msg}" + (f" (fix: {fix})" if fix else ""))
        raise ConfigError("\n".join(problems)) from None
    problems = format_problems(cfg)
    if problems:
        raise ConfigError("\n".join(f"{path}: {p}" for p in problems))
    register_model_secrets(cfg)  # what this process prints from now on never shows them
    return cfg


def format_problems(cfg: PipelineConfig) -> list[str]:
    """What the pipeline's format finds wrong with it (``field: problem`` lines): its ``format`` block by the
    format's own rules, then the columns that expectations and ``target.partition_by`` name."""
    try:
        kind = format_class(cfg.format.type)
    except ConfigError as exc:
        return [f"format.type: {str(exc).removeprefix('format.type ')}"]
    problems = [f"format: {p}" for p in kind.problems(cfg.format)]
    if problems:
        return problems
    declared = kind.declared_columns(cfg.format)
    if cfg.target.keyed:
        declared = with_change_columns(declared)
        problems = keyed_problems(cfg, declared)
    elif cfg.format.envelope != "none":
        problems = [f"format.envelope: {cfg.format.envelope} needs a keyed target (target.mode: upsert)"]
    problems += logical_problems(cfg.format)
    return problems or _column_problems(cfg, declared)


DEBEZIUM_FORMATS = ("json", "avro", "protobuf", "json_schema")  # what Debezium's converters write


def keyed_problems(cfg: PipelineConfig, declared: pa.Schema | None) -> list[str]:
    """What is wrong with a keyed pipeline's key, version and envelope (``field: problem`` lines)."""
    out = []
    target = cfg.target
    if cfg.format.envelope == "debezium" and cfg.format.type not in DEBEZIUM_FORMATS:
        out.append(f"format.envelope: debezium reads change events in {', '.join(DEBEZIUM_FORMATS)}, not "
                   f"{cfg.format.type}")
    if cfg.format.unknown_fields == "evolve":
        out.append("format.unknown_fields: evolve is for append tables; a keyed table takes the fields it declares "
                   "(declare the new ones, or use ignore)")
    if declared is None:  # a registry's schema: the key columns are checked when the table is made
        if cfg.format.envelope != "debezium" and any(k != "kafka_key" for k in target.key):
            out.append(f"target.key: with format.type {cfg.format.type} the key must be [kafka_key] (tombstones "
                       "carry only the Kafka key)")
        return out
    names = set(declared.names)
    for column in target.key:
        if column not in names:
            out.append(f"target.key: {column!r} names no column (columns: {', '.join(declared.names)})")
        elif column in CHANGE_COLUMNS.names or column in ("kafka_value", "kafka_headers", "kafka_offset"):
            out.append(f"target.key: {column!r} cannot identify a row")
    if target.version_by is not None:
        if target.version_by not in names:
            out.append(f"target.version_by: {target.version_by!r} names no column "
                       f"(columns: {', '.join(declared.names)})")
        elif not pa.types.is_integer(declared.field(target.version_by).type):
            out.append(f"target.version_by: {target.version_by!r} must be a long column, it holds "
                       f"{declared.field(target.version_by).type}")
    if target.state_name in (target.table, target.quarantine_name):
        out.append(f"target.state_table: {target.state_name!r} is already the data or quarantine table")
    return out


def logical_problems(fmt: FormatConfig) -> list[str]:
    """Fields whose declared logical type is unknown, or does not go into their declared type."""
    out = []
    for i, spec in enumerate(fmt.fields):
        if spec.logical is None:
            continue
        if fmt.envelope != "debezium":
            out.append(f"format.fields[{i}].logical: it reads Debezium change events (format.envelope: debezium)")
        elif problem := declared_problem(spec.logical, spec.type, field_type(spec.type)):
            out.append(f"format.fields[{i}].logical: {problem}")
    return out


def _column_problems(cfg: PipelineConfig, declared: pa.Schema | None) -> list[str]:
    """Expectations and partition terms that name no column, or one of the wrong type. ``declared`` None: the
    columns come from a registry's schema, known (and checked) when the table is made."""
    out = []
    if declared is not None:
        for e in cfg.expectations:
            try:
                kind = type_at(declared, e.column)
            except ValueError as exc:
                out.append(f"expectations: on '{e.column}': {exc} (columns: {', '.join(declared.names)})")
                continue
            numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind)
            if (e.min is not None or e.max is not None) and not numeric:
                out.append(f"expectations: on '{e.column}': min/max need a number column, it holds {kind}")
    registry_key = cfg.format.key == "registry"
    known = declared if declared is not None else table_schema([], "raw" if registry_key else cfg.format.key)
    for entry in cfg.target.partition_by:
        term = parse_term(entry)
        if term.column == "kafka_key" and registry_key:
            continue  # the key's type comes from its registry schema: checked when the table is made
        try:
            kind = type_at(known, term.column)
        except ValueError as exc:
            if declared is not None:
                out.append(f"target.partition_by: {entry!r}: {exc} (columns: {', '.join(known.names)})")
            continue
        if why := term.check_type(kind):
            out.append(f"target.partition_by: {entry!r}: {why}")
    return out


def env_names(cfg: PipelineConfig) -> tuple[str, ...]:
    """Every environment variable a run of ``cfg`` reads: those its YAML references, and its secrets'."""
    referenced = _ENV_REF.findall(Path(cfg.path).read_text()) if cfg.path and Path(cfg.path).exists() else []
    return tuple(dict.fromkeys([*(name for name, _ in referenced), *cfg.secret_env_names]))


def pipeline_file(name: str) -> Path:
    """Where the pipeline called ``name`` is defined: ``<settings.pipelines>/<name>.yaml``."""
    return settings().pipelines / f"{name}.yaml"


def pipeline_files(folder: Path | None = None) -> list[Path]:
    """The pipelines' YAML files in ``folder`` (default: ``settings.pipelines``), by name."""
    return sorted((folder or settings().pipelines).glob("*.yaml"))


def resolve_pipeline(name_or_path: str) -> PipelineConfig:
    """A pipeline by name (``pipelines/NAME.yaml``) or by path to its YAML file; a ref with ``#<table>:<topics>``
    after it (:attr:`PipelineConfig.ref`) gives that table's route of a routed pipeline."""
    base, sep, route = name_or_path.partition("#")
    cfg = _resolve_file(base)
    if not sep:
        return cfg
    from tailfill.pipeline.routes import parse_route, route_config

    return route_config(cfg, *parse_route(route))


def _resolve_file(name_or_path: str) -> PipelineConfig:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        return load_pipeline(candidate)
    path = pipeline_file(name_or_path)
    if not path.exists():
        folder = settings().pipelines
        known = [p.stem for p in pipeline_files(folder)]
        raise ConfigError(f"no pipeline named {name_or_path!r} in {folder} (known: {', '.join(known) or 'none'})")
    return load_pipeline(path)
