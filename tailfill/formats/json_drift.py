"""Fields JSON records carry that ``format.fields`` does not declare, found on the executors.

:func:`extra_paths` names what a value holds beyond a column's type (``repo.license`` inside a declared ``repo``
struct); :func:`value_type` infers a column type for a new field's values by the rules of
:mod:`tailfill.values.infer`; :class:`Found` notes, per record of a batch, the paths it holds beyond the declared
fields and its undeclared top-level values (what :class:`~tailfill.formats.json_fields.RowParser` fills).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from tailfill.values.infer import Kind, kind_of, merge, type_text

Position = tuple[int, int]  # (partition, offset)


def extra_paths(value: Any, kind: pa.DataType, path: str) -> list[str]:
    """The dotted paths ``value`` holds beyond the struct fields of ``kind`` (inside lists too), first seen first."""
    if isinstance(value, dict) and pa.types.is_struct(kind):
        out = []
        for key, sub in value.items():
            i = kind.get_field_index(key)
            out += [f"{path}.{key}"] if i < 0 else extra_paths(sub, kind.field(i).type, f"{path}.{key}")
        return out
    if isinstance(value, list) and (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        seen: dict[str, None] = {}
        for item in value:
            seen.update(dict.fromkeys(extra_paths(item, kind.value_type, path)))
        return list(seen)
    return []


def value_type(values: list[Any]) -> str | None:
    """The type ``format.fields`` would write for a field holding ``values`` (None: only nulls, nothing to type)."""
    kind = Kind("null")
    for v in values:
        kind = merge(kind, kind_of(v))
    return type_text(kind, "", []) if kind.name != "null" else None


def holds_struct(kind: pa.DataType) -> bool:
    """Whether values of ``kind`` can hold a struct (so an undeclared key inside them can be found)."""
    if pa.types.is_struct(kind):
        return True
    return pa.types.is_list(kind) and holds_struct(kind.value_type)


class Found:
    """What the records of one batch hold beyond the declared fields, by position: the dotted paths (``paths``) and
    the undeclared top-level fields' values (``extras``)."""

    def __init__(self, declared: list[tuple[str, pa.DataType]]):
        self.names = frozenset(name for name, _ in declared)
        self.nested = [(name, kind) for name, kind in declared if holds_struct(kind)]
        self.paths: dict[int, list[str]] = {}
        self.extras: dict[int, dict[str, Any]] = {}

    def doc(self, i: int, doc: dict) -> None:
        """Record ``i`` is the object ``doc``."""
        extras = {k: v for k, v in doc.items() if k not in self.names}
        if extras:
            self.extras[i] = extras
        self.inside(i, doc.get, list(extras))

    def inside(self, i: int, get: Any, paths: list[str] | None = None) -> None:
        """Record ``i``'s undeclared keys inside declared structs (``get``: its value by declared name)."""
        paths = list(paths or [])
        for name, kind in self.nested:
            paths += extra_paths(get(name), kind, name)
        if paths:
            self.paths[i] = paths
