"""An inline SVG sparkline: a few values as a line with a dot per value, nothing fetched, no script."""

from __future__ import annotations

import html


def sparkline(values: list[float | None], labels: list[str], css_class: str, width: int = 240,
              height: int = 40) -> str:
    """``values`` left to right as an inline ``<svg>``; each dot's ``<title>`` is its label (``labels``: one per
    value). A value of None (not measured) leaves a gap in the line and has no dot."""
    pad = 4
    known = [v for v in values if v is not None]
    top = max(known, default=0) or 1
    step = (width - 2 * pad) / max(len(values) - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return round(pad + i * step, 1), round(height - pad - (height - 2 * pad) * v / top, 1)

    segments, current, dots = [], [], []
    for i, (v, label) in enumerate(zip(values, labels, strict=True)):
        if v is None:
            segments, current = [*segments, current] if current else segments, []
            continue
        x, y = xy(i, v)
        current.append(f"{x},{y}")
        dots.append(f'<circle cx="{x}" cy="{y}" r="2.5"><title>{html.escape(label)}</title></circle>')
    segments = [*segments, current] if current else segments
    lines = "".join(f'<polyline fill="none" stroke="currentColor" points="{" ".join(s)}"/>' for s in segments)
    return (f'<svg class="{css_class}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" fill="currentColor">{lines}{"".join(dots)}</svg>')
