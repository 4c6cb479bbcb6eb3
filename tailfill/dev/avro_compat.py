"""Avro schema resolution: whether data written with one schema can be read with another.

The rules of the Avro specification's "Schema Resolution" section, enough for a registry's
``BACKWARD`` check (the new schema reads what the previous one wrote): fields the reader adds need a
default, types match or promote (int → long → float → double, string ↔ bytes), enums keep symbols.
"""

from __future__ import annotations

from typing import Any

PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
              ("float", "double"), ("string", "bytes"), ("bytes", "string")}
PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _names(schema: Any, out: dict[str, dict], namespace: str = "") -> dict[str, dict]:
    """Every named type (record, enum, fixed) of ``schema`` by full and short name."""
    if isinstance(schema, list):
        for s in schema:
            _names(s, out, namespace)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            ns = schema.get("namespace", namespace)
            name = schema["name"]
            full = name if "." in name or not ns else f"{ns}.{name}"
            out[full] = out[name.rsplit(".", 1)[-1]] = schema
            for f in schema.get("fields", []):
                _names(f["type"], out, ns)
        elif kind == "array":
            _names(schema["items"], out, namespace)
        elif kind == "map":
            _names(schema["values"], out, namespace)
        elif isinstance(kind, dict | list):
            _names(kind, out, namespace)
    return out


def _resolve(schema: Any, names: dict[str, dict]) -> Any:
    if isinstance(schema, str) and schema not in PRIMITIVES:
        return names.get(schema, names.get(schema.rsplit(".", 1)[-1], schema))
    if isinstance(schema, dict) and isinstance(schema.get("type"), str) and schema["type"] in PRIMITIVES:
        return schema["type"]  # {"type": "long", "logicalType": ...} reads as its base type
    if isinstance(schema, dict) and isinstance(schema.get("type"), dict | list):
        return _resolve(schema["type"], names)
    return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return schema["type"]
    return schema


def backward_problems(reader: Any, writer: Any) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (parsed JSON schemas), or []."""
    rn, wn = _names(reader, {}), _names(writer, {})
    problems: list[str] = []
    _check(reader, writer, rn, wn, "", problems, set())
    return problems


def _check(reader: Any, writer: Any, rn: dict, wn: dict, path: str, out: list[str], seen: set) -> None:
    r, w = _resolve(reader, rn), _resolve(writer, wn)
    key = (id(r), id(w))
    if key in seen:  # a recursive type, already being checked
        return
    seen.add(key)
    where = path or "the record"
    rk, wk = _kind(r), _kind(w)
    if wk == "union":
        for branch in w:
            _check(r, branch, rn, wn, path, out, seen)
        return
    if rk == "union":
        for branch in r:
            trial: list[str] = []
            _check(branch, w, rn, wn, path, trial, set(seen))
            if not trial:
                return
        out.append(f"{where}: {wk} is not in the reader's union")
        return
    if rk != wk and (wk, rk) not in PROMOTIONS:
        out.append(f"{where}: type {wk} cannot be read as {rk}")
        return
    if rk in ("record", "error"):
        wfields = {f["name"]: f for f in w["fields"]}
        for f in r["fields"]:
            match = wfields.get(f["name"]) or next((wfields[a] for a in f.get("aliases", []) if a in wfields), None)
            name = f"{path}.{f['name']}" if path else f["name"]
            if match is None:
                if "default" not in f:
                    out.append(f"{name}: new field without a default")
            else:
                _check(f["type"], match["type"], rn, wn, name, out, seen)
    elif rk == "enum":
        missing = sorted(set(w["symbols"]) - set(r["symbols"]))
        if missing and "default" not in r:
            out.append(f"{where}: enum symbols {', '.join(missing)} are gone")
    elif rk == "array":
        _check(r["items"], w["items"], rn, wn, f"{path}[]", out, seen)
    elif rk == "map":
        _check(r["values"], w["values"], rn, wn, f"{path}{{}}", out, seen)
    elif rk == "fixed" and r["size"] != w["size"]:
        out.append(f"{where}: fixed size {w['size']} cannot be read as size {r['size']}")
