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

import yaml
from pydantic import ValidationError

from tailfill.config import PipelineConfig
from tailfill.errors import ConfigError
from tailfill.pipeline.checks import format_problems
from tailfill.redact import register_model_secrets
from tailfill.settings import settings

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
    if cfg.routes:
        from tailfill.pipeline.routes import route_problems

        problems = route_problems(cfg)
    else:
        problems = format_problems(cfg)
    if problems:
        raise ConfigError("\n".join(f"{path}: {p}" for p in problems))
    register_model_secrets(cfg)  # what this process prints from now on never shows them
    return cfg


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
