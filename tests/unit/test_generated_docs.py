"""The pipeline reference, its JSON Schema and the errors page follow the code: stale files fail here, and the
shipped pipelines name the schema and pass it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml
from pydantic import Field

import tailfill.dev.docs as docs
from tailfill.config import PipelineConfig
from tailfill.errors import TailfillError
from tailfill.pipeline.load import load_pipeline

REPO = Path(__file__).resolve().parents[2]
MODELINE = re.compile(r"^# yaml-language-server: \$schema=(\S+)$")
SHIPPED = sorted([*REPO.glob("pipelines/*.yaml"), *REPO.glob("deploy/compose/pipelines/*.yaml")])


def _copy_docs(root: Path) -> Path:
    for g in docs.GENERATED:
        (root / g.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / g.path, root / g.path)
    return root


def test_the_generated_docs_match_the_code():
    assert docs.stale() == [], f"out of date with the code: run `{docs.COMMAND}` and commit the result"


def test_a_setting_added_to_the_model_makes_the_reference_and_the_schema_stale(tmp_path, monkeypatch):
    class Grown(PipelineConfig):
        new_setting: int = Field(default=3, ge=1, description="A setting the docs do not know yet.")

    root = _copy_docs(tmp_path)
    assert docs.stale(root) == []
    monkeypatch.setattr(docs, "PipelineConfig", Grown)
    assert docs.stale(root) == ["docs/pipeline.schema.json", "docs/reference/pipeline.md"]
    assert docs.write(root) == ["docs/pipeline.schema.json", "docs/reference/pipeline.md"]
    assert "| `new_setting` | integer ≥ 1 | `3` | A setting the docs do not know yet. |" in \
        (root / "docs/reference/pipeline.md").read_text()
    assert docs.stale(root) == []


def test_an_error_class_added_makes_the_errors_page_stale(tmp_path, monkeypatch):
    class UnlistedError(TailfillError):
        """An error the page does not list yet."""

        retryable = True
        fix = "list it"

    root = _copy_docs(tmp_path)
    listed = docs.error_classes()
    monkeypatch.setattr(docs, "error_classes", lambda: [*listed, UnlistedError])
    assert docs.stale(root) == ["docs/troubleshooting.md"]
    docs.write(root)
    entry = (root / "docs/troubleshooting.md").read_text().split("### UnlistedError\n", 1)[1]
    assert "**What it means:** An error the page does not list yet." in entry
    assert "**Retryable:** yes" in entry and "**Fix:** list it." in entry


def test_hand_written_prose_around_the_generated_part_is_kept(tmp_path):
    root = _copy_docs(tmp_path)
    page = root / "docs/troubleshooting.md"
    page.write_text(page.read_text().replace("## Error classes", "## Error classes\n\nA hand-written line."))
    assert docs.stale(root) == []
    begin = "<!-- generated: error-classes"
    page.write_text(page.read_text().replace("### LakeError", "### LakeErr", 1))
    assert docs.stale(root) == ["docs/troubleshooting.md"]
    docs.write(root)
    assert "A hand-written line." in page.read_text() and "### LakeError" in page.read_text()
    page.write_text(page.read_text().replace(begin, "<!-- gone"))
    with pytest.raises(ValueError, match="markers"):
        docs.write(root)


def test_every_setting_has_a_description_and_a_row_in_the_reference():
    reference = (REPO / "docs/reference/pipeline.md").read_text()
    for section in docs.sections():
        for name, field in section.model.model_fields.items():
            if field.exclude:
                continue
            path = f"{section.path}.{name}".lstrip(".")
            assert field.description, f"{section.model.__name__}.{name} has no description"
            assert f"| `{path}` |" in reference


def test_the_reference_shows_types_defaults_and_allowed_values():
    reference = docs.pipeline_reference()
    assert "| `source.on_expired_offsets` | one of `fail`, `record_gap` | `fail` |" in reference
    assert "| `backfill.slices` | integer ≥ 1 ≤ 1024 | required |" in reference
    assert "| `format.schema_registry` | [mapping](#format-schema-registry), or null | `null` |" in reference
    assert "| `maintenance.schedule` | string, or null | required, may be null |" in reference
    assert "| `expectations[].mostly` | number > 0 ≤ 1 | `1.0` |" in reference
    assert "`path`" not in reference  # set by the loader, never written in a YAML


def test_every_error_class_is_on_the_errors_page_with_its_fix():
    page = (REPO / "docs/troubleshooting.md").read_text()
    for cls in docs.error_classes():
        assert f"### {cls.__name__}\n" in page
        entry = page.split(f"### {cls.__name__}\n", 1)[1].split("\n### ", 1)[0]
        assert f"**Fix:** {docs._prose(cls.fix)}." in entry
        assert ("**Retryable:** yes" in entry) == cls.retryable


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_pipelines_name_the_schema_and_pass_it(path):
    first = path.read_text().splitlines()[0]
    m = MODELINE.match(first)
    assert m, f"{path.name}: the first line should be '# yaml-language-server: $schema=<path to the schema>'"
    schema_path = (path.parent / m.group(1)).resolve()
    assert schema_path == REPO / "docs" / "pipeline.schema.json"
    schema = yaml.safe_load(schema_path.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


@pytest.mark.parametrize("path", sorted(REPO.glob("pipelines/*.yaml")), ids=lambda p: p.name)
def test_the_loader_still_accepts_the_shipped_pipelines(path):
    assert load_pipeline(path).name == path.stem


def _demo() -> dict:
    return yaml.safe_load((REPO / "pipelines/demo.yaml").read_text())


@pytest.mark.parametrize("edit, rejected", [
    (lambda d: d["backfill"].update(slice=4), True),                     # unknown key
    (lambda d: d["source"].update(on_expired_offsets="skip"), True),     # not an allowed value
    (lambda d: d["backfill"].update(slices=0), True),                    # out of range
    (lambda d: d["tail"].pop("freshness_seconds"), True),                # required
    (lambda d: d["backfill"].update(slices="${SLICES:-4}"), False),      # the loader substitutes it
    (lambda d: d["source"].update(on_expired_offsets="${ON_EXPIRED:-fail}"), False),
])
def test_the_schema_refuses_what_the_loader_refuses_and_takes_environment_references(edit, rejected, tmp_path):
    data = _demo()
    edit(data)
    validator = jsonschema.Draft202012Validator(docs.editor_schema())
    assert bool(list(validator.iter_errors(data))) == rejected
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(data))
    if rejected:
        with pytest.raises(ValueError):
            load_pipeline(path)
    else:
        load_pipeline(path)


def test_yaml_examples_in_the_docs_that_name_the_schema_load(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    blocks = [b for page in sorted((REPO / "docs").rglob("*.md"))
              for b in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S) if MODELINE.match(b.splitlines()[0])]
    assert blocks
    for i, block in enumerate(blocks):
        path = tmp_path / f"example{i}.yaml"
        path.write_text(block)
        load_pipeline(path)
