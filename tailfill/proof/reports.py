"""Validation results beside the table: a JSON per run, an HTML completeness report, ``latest.json``.

Written through the warehouse filesystem (local or S3). Great Expectations' Data Docs need a
local directory: beside the table for a local warehouse, under ``$TAILFILL_HOME`` for S3.
"""

from __future__ import annotations

import html
import json
from dataclasses import replace
from pathlib import Path

from tailfill.config import PipelineConfig
from tailfill.pipeline.handle import Pipeline
from tailfill.plumbing.durable import write_whole
from tailfill.plumbing.warehouse import fs_path, location_uri, make_dirs, warehouse_uri
from tailfill.proof.result import ValidationResult, shown
from tailfill.redact import redact_data
from tailfill.settings import settings


def results_uri(cfg: PipelineConfig) -> str:
    """Where a pipeline's validation results live: ``<warehouse>/_validation/<pipeline>``, or
    ``<target.state_root>/_validation/<pipeline>`` when the state has a root of its own (a warehouse that is a
    table bucket takes table paths only)."""
    if cfg.target.state_root is not None:
        return f"{location_uri(cfg.target.state_root.rstrip('/'))}/_validation/{cfg.name}"
    return f"{warehouse_uri(cfg.target)}/_validation/{cfg.name}"


def gx_root(cfg: PipelineConfig) -> Path:
    """The Great Expectations project directory (local) for a pipeline."""
    if cfg.target.s3 is None:
        return Path(fs_path(results_uri(cfg)))
    return settings().home / "validation" / cfg.name


def _write(pipeline: Pipeline, name: str, text: str) -> str:
    base = results_uri(pipeline.cfg)
    make_dirs(pipeline.fs, base)
    uri = f"{base}/{name}"
    write_whole(uri, text, pipeline.fs)  # latest.json is read while lanes validate: never half a file
    return uri


def read_latest(pipeline: Pipeline) -> ValidationResult | None:
    """The most recent validation of a pipeline, or None."""
    return read_result(pipeline, "latest")


def read_result(pipeline: Pipeline, key: str) -> ValidationResult | None:
    """The validation written as ``<key>.json`` (a run id, ``all-<time>``, ``latest``), or None if there is none."""
    try:
        with pipeline.fs.open_input_stream(fs_path(f"{results_uri(pipeline.cfg)}/{key}.json")) as f:
            return ValidationResult.from_dict(json.loads(f.read()))
    except (FileNotFoundError, OSError):
        return None


def persist(pipeline: Pipeline, result: ValidationResult) -> dict:
    """Write ``<key>.json``, ``<key>.html`` and ``latest.json`` of a validation; returns its ``paths``."""
    cfg = pipeline.cfg
    key = result.key
    paths = {**result.paths, "json": f"{results_uri(cfg)}/{key}.json", "html": f"{results_uri(cfg)}/{key}.html"}
    # Errors may quote a setting: what is written is redacted.
    result = ValidationResult.from_dict(redact_data(replace(result, paths=paths).asdict()))
    _write(pipeline, f"{key}.html", render_html(result))
    text = json.dumps(result.asdict(), indent=2, default=str)
    _write(pipeline, f"{key}.json", text)
    _write(pipeline, "latest.json", text)
    return paths


def _chart(partitions: list[dict]) -> str:
    """Grouped bars per partition: expected offsets vs offsets found (rows + quarantined)."""
    if not partitions:
        return "<p>No committed ranges in scope.</p>"
    width, bar, gap, height = 640, 18, 22, 200
    top = max(max(p["expected"], p["found"]) for p in partitions) or 1
    parts = []
    for i, p in enumerate(partitions):
        x = 50 + i * (2 * bar + gap)
        for j, (key, colour) in enumerate((("expected", "#8da0cb"), ("found", "#66c2a5" if p["ok"] else "#fc8d62"))):
            h = round(height * p[key] / top)
            parts.append(f'<rect x="{x + j * bar}" y="{20 + height - h}" width="{bar - 2}" height="{h}" '
                         f'fill="{colour}"><title>{key}: {p[key]:,}</title></rect>')
        parts.append(f'<text x="{x + bar}" y="{height + 36}" text-anchor="middle" font-size="11">'
                     f'p{p["partition"]}</text>')
    w = max(width, 80 + len(partitions) * (2 * bar + gap))
    return (f'<svg width="{w}" height="{height + 70}" role="img" aria-label="expected vs found offsets">'
            f'<text x="0" y="14" font-size="12">offsets per partition: '
            f'<tspan fill="#8da0cb">■ expected</tspan> <tspan fill="#66c2a5">■ found</tspan></text>'
            + "".join(parts) + "</svg>")


HTML_RANGES = 200  # absent ranges named per reason (the JSON lists them all)


def render_html(report: ValidationResult) -> str:
    """A one-page completeness report."""
    esc = html.escape
    verdict = "COMPLETE" if report.success else "INCOMPLETE"
    colour = "#1a7f37" if report.success else "#cf222e"
    rows = "".join(
        f"<tr><td>{esc(p['topic'])}</td><td>{p['partition']}</td><td>{p['expected']:,}</td><td>{p['found']:,}</td>"
        f"<td>{p['rows']:,}</td><td>{p['quarantined']:,}</td><td>{p['missing']:,}</td><td>{p['duplicated']:,}</td>"
        f"<td>{'ok' if p['ok'] else 'FAIL'}</td></tr>"
        for p in report.partitions
    )
    problems = "".join(f"<li>{esc(p)}</li>" for p in report.problems) or "<li>none</li>"
    damaged = "".join(
        f"<tr><td>{esc(d['table'])}</td><td style='text-align:left'><code>{esc(d['path'])}</code></td>"
        f"<td>{esc(', '.join(d['ranges']) or 'unknown')}</td><td style='text-align:left'>{esc(d['error'])}</td></tr>"
        for d in report.damaged_files
    )
    damaged_section = (
        "<h2>Damaged files</h2><p>Referenced by the table but missing or unreadable; their offsets are missing."
        f"</p><table><tr><th>table</th><th>file</th><th>offsets it held</th><th>error</th></tr>{damaged}</table>"
        if damaged else "")
    absent = "".join(
        f"<tr><td style='text-align:left'>{esc(a['reason'])}</td><td>{a['offsets']:,}</td>"
        f"<td style='text-align:left'>{esc(shown(a['ranges'], HTML_RANGES))}</td></tr>"
        for a in report.absent_by_reason
    )
    absent_section = (
        "<h2>Absent offsets</h2><p>Offsets of the committed ranges that the broker does not deliver, by reason; "
        "no row is expected for them.</p><table><tr><th>reason</th><th>offsets</th><th>ranges</th></tr>"
        f"{absent}</table>" if absent else "")
    checks = "".join(
        f"<tr><td>{esc(c['check'])}</td><td>{esc(c['column'])}</td><td>{c['evaluated']:,}</td>"
        f"<td>{c['unexpected']:,}</td><td>{c['allowed_fraction']:.1%}</td>"
        f"<td>{'FAIL' if c['unexpected_fraction'] > c['allowed_fraction'] else 'ok'}</td></tr>"
        for c in report.data_checks
    )
    suites = "".join(
        f"<li>{esc(s['suite'])}: {'passed' if s['success'] else 'FAILED'}"
        + "".join(f"<br><code>{esc(json.dumps(f, default=str))}</code>" for f in s["failed"]) + "</li>"
        for s in report.suites
    )
    docs = report.paths.get("data_docs")
    docs_link = f'<p>Great Expectations Data Docs: <a href="file://{esc(docs)}">{esc(docs)}</a></p>' if docs else ""
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>tailfill completeness: {esc(report.pipeline)} {esc(report.key)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:60em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:.2em .6em;text-align:right}}</style></head><body>
<h1>{esc(report.pipeline)}: <span style="color:{colour}">{verdict}</span></h1>
<p>Scope: {esc(report.scope)} &middot; runs: {esc(', '.join(report.runs) or 'none')} &middot;
validated {esc(report.validated_at)} &middot; {report.offsets_checked:,} offsets checked</p>
{_chart(report.partitions)}
<h2>Per partition</h2><table><tr><th>topic</th><th>partition</th><th>expected</th><th>found</th><th>rows</th>
<th>quarantined</th><th>missing</th><th>duplicated</th><th></th></tr>{rows}</table>
<h2>Data checks</h2><table><tr><th>check</th><th>column</th><th>values</th><th>unexpected</th>
<th>allowed</th><th></th></tr>{checks}</table>
<h2>Problems</h2><ul>{problems}</ul>
{absent_section}
{damaged_section}
<h2>Expectation suites</h2><ul>{suites}</ul>
{docs_link}</body></html>"""
