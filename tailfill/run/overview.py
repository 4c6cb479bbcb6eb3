"""Looking at pipelines without Python: the list of pipelines, one pipeline's settings and table, its rows.

:func:`pipeline_line` is one line of ``tailfill pipelines``; :func:`show_lines` is ``tailfill show``
(resolved settings with secrets masked, the table's schema and partition spec); :func:`preview_rows`
reads rows of the data or quarantine table through pyiceberg for ``tailfill preview``. Each reads the
tables as they are (nothing is made or changed).
"""

from __future__ import annotations

import json

import pyarrow as pa
import yaml
from pyiceberg.expressions import AlwaysTrue

from tailfill.errors import ConfigError, TailfillError
from tailfill.offsets import total
from tailfill.pipeline.handle import Pipeline
from tailfill.proof.reports import read_latest
from tailfill.redact import redact_text
from tailfill.run.plan import source_state
from tailfill.run.status import pipeline_status
from tailfill.state.store import run_ids

PIPELINES_HEADER = f"{'pipeline':<20} {'topic':<24} {'table':<32} {'committed':>11} {'lag':>9}  last run, validation"


def _last_run(pipeline: Pipeline) -> str:
    runs = sorted(run_ids(pipeline.state), key=lambda r: r.split("-", 1)[-1])  # <kind>-<UTC time>-<id>
    latest = read_latest(pipeline)
    verdict = ("not validated yet" if latest is None else
               f"{'complete' if latest.success else 'INCOMPLETE'} ({latest.scope}, {latest.validated_at})")
    return f"{runs[-1] if runs else 'no run yet'}, {verdict}"


def pipeline_line(pipeline: Pipeline) -> str:
    """``name topic table committed lag last-run, validation`` for ``tailfill pipelines``; a broker that
    cannot be read leaves committed and lag as ``?`` and says why on a second line."""
    cfg = pipeline.cfg
    table = f"{cfg.target.namespace}.{cfg.target.table}"
    tables = pipeline.open_tables()
    why = ""
    try:
        rows = pipeline_status(source_state(pipeline, tables))
        committed, lag = f"{sum(total(r.committed) for r in rows):,}", f"{sum(r.lag for r in rows):,}"
    except TailfillError as exc:
        committed, lag, why = "?", "?", f"\n  {' ' * 19}({exc})"
    if tables is None:
        table += " (not made)"
    return (f"{cfg.name:<20} {cfg.source.subscription:<24} {table:<32} {committed:>11} {lag:>9}  "
            f"{_last_run(pipeline)}{why}")


def show_lines(pipeline: Pipeline) -> list[str]:
    """The pipeline's settings (defaults filled in, ``embedded`` addresses as written, secrets masked), then its
    table's schema and partition spec (or that it is not made yet)."""
    cfg = pipeline.cfg
    # as JSON text, so that a secret-named key's value is masked too ("password": "…"), not only known secrets
    settings = json.loads(redact_text(json.dumps(cfg.model_dump(mode="json", exclude={"path"}))))
    lines = [f"pipeline {cfg.name} ({cfg.path})", "settings:"]
    lines += ["  " + line for line in yaml.safe_dump(settings, sort_keys=False).splitlines()]
    tables = pipeline.open_tables()
    if tables is None:
        return [*lines, f"table {cfg.target.namespace}.{cfg.target.table}: not made yet (the first run makes it)"]
    for label, table in (("table", tables.data), ("quarantine table", tables.quarantine)):
        snapshot = table.current_snapshot()
        rows = snapshot.summary.additional_properties.get("total-records", "0") if snapshot and snapshot.summary else 0
        lines.append(f"{label} {'.'.join(table.name())}: {int(rows):,} rows, location {table.location()}")
        lines += ["  " + line for line in str(table.schema()).splitlines()]
        lines.append(f"  partition spec: {table.spec()}")
    return lines


def preview_rows(pipeline: Pipeline, quarantine: bool = False, limit: int = 20, where: str | None = None) -> pa.Table:
    """Up to ``limit`` rows of the data (or quarantine) table matching ``where`` (pyiceberg's filter syntax,
    e.g. ``kind = 'view' and amount > 10``)."""
    tables = pipeline.open_tables()
    if tables is None:
        raise ConfigError(f"{pipeline.name}: the table is not made yet (fix: run `tailfill backfill {pipeline.name}`)")
    table = tables.quarantine if quarantine else tables.data
    try:
        scan = table.scan(row_filter=where or AlwaysTrue(), limit=limit)
        return scan.to_arrow()
    except (ValueError, TypeError) as exc:  # pyiceberg's parse and bind errors
        raise ConfigError(f"--where {where!r} on {'.'.join(table.name())}: {exc}") from exc


def format_rows(rows: pa.Table, width: int = 40) -> str:
    """``rows`` as a text table, each value cut to ``width`` characters."""
    names = rows.column_names
    cells = [[_cell(v, width) for v in row.values()] for row in rows.to_pylist()]
    widths = [max([len(n), *(len(r[i]) for r in cells)]) for i, n in enumerate(names)]
    line = "  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True))
    out = [line, "-" * len(line)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    out.append(f"({rows.num_rows} row{'s' if rows.num_rows != 1 else ''})")
    return "\n".join(out)


def _cell(value: object, width: int) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "backslashreplace")
    text = "null" if value is None else str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"
