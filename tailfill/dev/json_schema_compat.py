"""JSON Schema compatibility, for the development registry's ``BACKWARD`` check (the new schema accepts
what the previous one accepted).

A small, honest subset of Confluent's rules, through ``properties`` of objects (nested ones too) and
``items`` of arrays: a property whose types are not all accepted by its new types (``integer`` is
accepted by ``number``), and a property newly ``required`` without a ``default``. Properties without a
``type`` (or behind ``allOf``, ``not``, ...) are not compared.
"""

from __future__ import annotations

from typing import Any

from tailfill.formats.json_schema import resolve


def _types(node: Any, root: dict) -> set[str] | None:
    """The JSON types ``node`` accepts, or None when it does not say (no ``type``)."""
    node = resolve(node, root)
    if not isinstance(node, dict):
        return None
    for key in ("anyOf", "oneOf"):
        if key in node:
            branches = [_types(b, root) for b in node[key]]
            return None if any(b is None for b in branches) else set().union(*branches)
    kind = node.get("type")
    if kind is None:
        return None
    return {kind} if isinstance(kind, str) else set(kind)


def _accepts(new: set[str], old: set[str]) -> bool:
    return all(t in new or (t == "integer" and "number" in new) for t in old)


def backward_problems(reader: Any, writer: Any) -> list[str]:
    """Why documents valid under ``writer`` (parsed JSON Schema) may not be valid under ``reader``, or []."""
    problems: list[str] = []
    _check(reader, writer, reader, writer, "", problems, 0)
    return problems


def _check(r: Any, w: Any, rroot: dict, wroot: dict, path: str, out: list[str], depth: int) -> None:
    if depth > 32:
        return
    r, w = resolve(r, rroot), resolve(w, wroot)
    if not isinstance(r, dict) or not isinstance(w, dict):
        return
    rt, wt = _types(r, rroot), _types(w, wroot)
    where = path or "the document"
    if rt is not None and wt is not None and not _accepts(rt, wt):
        out.append(f"{where}: type {'|'.join(sorted(wt))} became {'|'.join(sorted(rt))}")
        return
    rprops, wprops = r.get("properties") or {}, w.get("properties") or {}
    for name in sorted(set(r.get("required") or []) - set(w.get("required") or [])):
        if "default" not in (resolve(rprops.get(name), rroot) or {}):
            out.append(f"{path + '.' if path else ''}{name}: newly required without a default")
    for name in sorted(rprops.keys() & wprops.keys()):
        _check(rprops[name], wprops[name], rroot, wroot, f"{path + '.' if path else ''}{name}", out, depth + 1)
    if "items" in r and "items" in w:
        _check(r["items"], w["items"], rroot, wroot, f"{path}[]", out, depth + 1)
