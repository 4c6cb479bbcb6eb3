"""The generated parts of the docs: the pipeline YAML's JSON Schema, its reference, the errors page.

    python -m tailfill.dev.docs           # write them
    python -m tailfill.dev.docs --check   # exit 1 naming every file that is out of date

All three come from the code: the schema and the reference from :class:`tailfill.config.PipelineConfig`
(its fields' types, defaults, constraints and descriptions), the errors page from the classes in
:mod:`tailfill.errors`. In a page, the generated part sits between two markers; the prose around it
is written by hand and kept as it is.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tailfill.config import PipelineConfig
from tailfill.errors import TailfillError

REPO = Path(__file__).resolve().parents[2]
COMMAND = "python -m tailfill.dev.docs"
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# ${VAR} or ${VAR:-default}: the loader substitutes them in any value before validating (tailfill.config).
ENV_REFERENCE = {
    "type": "string",
    "pattern": r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}",
    "description": "An environment variable, ${VAR} or ${VAR:-default}, substituted when the file is loaded.",
}


# --- the JSON Schema ---------------------------------------------------------------------------------

def _models(model: type[BaseModel]) -> Iterator[type[BaseModel]]:
    """``model`` and every model its fields hold, each once."""
    seen: set[type[BaseModel]] = set()

    def visit(m: type[BaseModel]) -> Iterator[type[BaseModel]]:
        if m in seen:
            return
        seen.add(m)
        yield m
        for field in m.model_fields.values():
            for inner in _nested_models(field.annotation):
                yield from visit(inner)

    yield from visit(model)


def _nested_models(annotation: Any) -> list[type[BaseModel]]:
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _nested_models(arg)]


def _without_excluded(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop fields the loader sets itself (``exclude=True``, e.g. ``path``): a YAML never writes them."""
    defs = schema.get("$defs", {})
    for model in _models(PipelineConfig):
        node = schema if model is PipelineConfig else defs[model.__name__]
        for name, field in model.model_fields.items():
            if field.exclude:
                node["properties"].pop(name, None)
    return schema


def _scalar_needs_reference(node: dict[str, Any]) -> bool:
    """Whether a ``${VAR}`` string would fail this subschema: anything but a free string."""
    if "$ref" in node or node.get("type") in ("object", "array", "null"):
        return False
    return node.get("type") != "string" or "enum" in node or "pattern" in node


def _allow_env_references(schema: dict[str, Any]) -> dict[str, Any]:
    """Let every scalar setting also be a ``${VAR}`` reference, as the loader accepts (strings already are)."""
    ref = {"$ref": "#/$defs/EnvReference"}

    def widen(node: dict[str, Any]) -> dict[str, Any]:
        if "anyOf" in node:
            if any(_scalar_needs_reference(n) for n in node["anyOf"]):
                node["anyOf"] = [*node["anyOf"], ref]
            return node
        if _scalar_needs_reference(node):
            keep = {k: node.pop(k) for k in ("title", "description", "default") if k in node}
            return {**keep, "anyOf": [node, ref]}
        return node

    for node in [schema, *schema["$defs"].values()]:
        for name, prop in node.get("properties", {}).items():
            node["properties"][name] = widen(prop)
    schema["$defs"]["EnvReference"] = ENV_REFERENCE
    return schema


def model_schema() -> dict[str, Any]:
    """The pipeline model's JSON Schema, less the fields the loader sets itself."""
    return _without_excluded(PipelineConfig.model_json_schema())


def editor_schema() -> dict[str, Any]:
    """The schema shipped for editors: the model's, where every scalar may also be a ``${VAR}`` reference."""
    schema = _allow_env_references(model_schema())
    return {"$schema": SCHEMA_DIALECT, "title": "Tailfill pipeline",
            **{k: v for k, v in schema.items() if k != "title"}}


def schema_text() -> str:
    return json.dumps(editor_schema(), indent=2, ensure_ascii=False) + "\n"


# --- the pipeline reference ------------------------------------------------------------------------

def _prose(text: str | None) -> str:
    """A docstring or description as one Markdown line (reST roles and literals become code)."""
    text = inspect.cleandoc(text or "")
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    return " ".join(text.split()).replace("|", "\\|")


def _anchor(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "top-level"


def _type_text(node: dict[str, Any], defs: dict[str, Any], section_of: dict[str, str]) -> str:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return f"[mapping](#{_anchor(section_of[name])})"
    if "anyOf" in node:
        parts = [n for n in node["anyOf"] if n.get("type") != "null"]
        text = " or ".join(_type_text(n, defs, section_of) for n in parts)
        return f"{text}, or null" if len(parts) < len(node["anyOf"]) else text
    if "enum" in node:
        return "one of " + ", ".join(f"`{v}`" for v in node["enum"])
    kind = node.get("type")
    if kind == "array":
        return f"list of {_type_text(node['items'], defs, section_of)}"
    if kind == "object":
        values = node.get("additionalProperties", {})
        return f"mapping of string to {_type_text(values, defs, section_of)}" if values else "mapping"
    bounds = [f"{sign} {node[key]}" for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"),
                                                      ("maximum", "≤"), ("exclusiveMaximum", "<")) if key in node]
    if "pattern" in node:
        bounds.append(f"matching `{node['pattern']}`")
    return " ".join([str(kind), *bounds]) if bounds else str(kind)


def _yaml_value(value: Any) -> str:
    if isinstance(value, BaseModel):
        return "its fields' defaults"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list | tuple):
        return "`[]`" if not value else f"`{json.dumps(list(value))}`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{json.dumps(value)}`"
    return f"`{value}`"


def _default_text(field: Any) -> str:
    if field.is_required():
        return "required, may be null" if _nullable(field.annotation) else "required"
    if field.default_factory is not None:
        return _yaml_value(field.default_factory())
    return _yaml_value(field.default)


def _nullable(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in typing.get_args(
        annotation)


@dataclass(frozen=True)
class Section:
    """One mapping of the YAML: where it sits and the model that validates it."""

    path: str
    model: type[BaseModel]


def sections() -> list[Section]:
    """Every mapping of a pipeline YAML, depth first in the model's field order; a mapping that appears in two places
    (a route's ``fields``, as ``format.fields``) under the first."""
    out: list[Section] = []

    def visit(model: type[BaseModel], path: str) -> None:
        if any(s.model is model for s in out):
            return
        out.append(Section(path, model))
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            for inner in _nested_models(field.annotation):
                origin = typing.get_origin(field.annotation)
                visit(inner, f"{path}.{name}".lstrip(".") + {list: "[]", dict: ".TABLE"}.get(origin, ""))

    visit(PipelineConfig, "")
    return out


def pipeline_reference() -> str:
    """The reference of every setting, one table per mapping of the YAML."""
    schema = model_schema()
    defs = schema["$defs"]
    found = sections()
    section_of = {s.model.__name__: s.path for s in found}
    lines: list[str] = []
    for section in found:
        node = schema if section.model is PipelineConfig else defs[section.model.__name__]
        title = section.path or "Top level"
        lines += [f"## {title} {{#{_anchor(section.path)}}}", ""]
        if section.model is not PipelineConfig and section.model.__doc__:
            lines += [_prose(section.model.__doc__), ""]
        lines += ["| Setting | Type | Default | Description |", "|---|---|---|---|"]
        for name, field in section.model.model_fields.items():
            if field.exclude:
                continue
            path = f"{section.path}.{name}".lstrip(".")
            kind = _type_text(node["properties"][name], defs, section_of)
            lines.append(f"| `{path}` | {kind} | {_default_text(field)} | {_prose(field.description)} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


# --- the errors page -------------------------------------------------------------------------------

def error_classes() -> list[type[TailfillError]]:
    """:class:`TailfillError` and its subclasses in :mod:`tailfill.errors`, depth first in the order they are
    defined (classes elsewhere, imported or not, do not change the page)."""
    def visit(cls: type[TailfillError]) -> list[type[TailfillError]]:
        subs = [s for s in cls.__subclasses__() if s.__module__ == TailfillError.__module__]
        return [cls, *(c for sub in subs for c in visit(sub))]

    return visit(TailfillError)


def error_reference() -> str:
    """One entry per error class: what it means, whether running again can help, its fix."""
    lines: list[str] = []
    for cls in error_classes():
        lines += [f"### {cls.__name__}", ""]
        if cls is TailfillError:
            meaning = ("The base of every error below: Tailfill raises only its kinds. A failure from elsewhere "
                       "(Spark, the JVM, the network) counts as retryable within the failure budget.")
        else:
            parent = next(b for b in cls.__mro__[1:] if issubclass(b, TailfillError))
            lines += [f"A kind of [`{parent.__name__}`](#{parent.__name__.lower()}).", ""]
            meaning = _prose(cls.__doc__)
        retryable = ("yes: running the same work again can succeed, so the job restarts it within its failure "
                     "budget, with backoff" if cls.retryable
                     else "no: running the same work again fails the same way, so the run stops at once")
        after = ("running again resumes at the first uncommitted offset" if cls.then_resume
                 else "running again cannot bring the lost data back")
        lines += [
            f"- **What it means:** {meaning}",
            f"- **Retryable:** {retryable}.",
            f"- **Fix:** {_prose(cls.fix)}.",
            f"- **After the fix:** {after}.",
            "",
        ]
    return "\n".join(lines).rstrip("\n") + "\n"


# --- where each generated part goes ---------------------------------------------------------------

def _begin(name: str) -> str:
    return f"<!-- generated: {name} ({COMMAND}); edit the code, not this part -->"


def _end(name: str) -> str:
    return f"<!-- end generated: {name} -->"


def splice(page: str, name: str, content: str) -> str:
    """``page`` with the part between the markers named ``name`` replaced by ``content``."""
    begin, end = _begin(name), _end(name)
    if page.count(begin) != 1 or page.count(end) != 1:
        raise ValueError(f"the page needs exactly one pair of markers:\n{begin}\n{end}")
    head, rest = page.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n\n{content}\n{end}{tail}"


@dataclass(frozen=True)
class Generated:
    """One file of the docs and how its generated part is made."""

    path: str
    render: Callable[[], str]
    marker: str | None = None  # None: the whole file is generated

    def expected(self, root: Path) -> str:
        if self.marker is None:
            return self.render()
        return splice((root / self.path).read_text(), self.marker, self.render())


GENERATED = (
    Generated("docs/pipeline.schema.json", schema_text),
    Generated("docs/reference/pipeline.md", pipeline_reference, "pipeline-reference"),
    Generated("docs/troubleshooting.md", error_reference, "error-classes"),
)


def stale(root: Path = REPO) -> list[str]:
    """The generated files that differ from what the code gives now."""
    return [g.path for g in GENERATED
            if not (root / g.path).exists() or (root / g.path).read_text() != g.expected(root)]


def write(root: Path = REPO) -> list[str]:
    """Write every generated part; return the files that changed."""
    changed = stale(root)
    for g in GENERATED:
        if g.path in changed:
            (root / g.path).write_text(g.expected(root))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file is out of date")
    parser.add_argument("--root", type=Path, default=REPO, help="the repository (default: this checkout)")
    args = parser.parse_args(argv)
    if args.check:
        out_of_date = stale(args.root)
        for path in out_of_date:
            print(f"{path} is out of date with the code (fix: {COMMAND})")
        return 1 if out_of_date else 0
    for path in write(args.root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
