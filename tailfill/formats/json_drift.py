"""Fields JSON records carry that ``format.fields`` does not declare, found on the executors.

:func:`extra_paths` names what a value holds beyond a column's type (``repo.license`` inside a declared ``repo``
struct); :func:`value_type` infers a column type for a new field's values by the rules of
:mod:`tailfill.values.infer`; :class:`Found` notes, per record of a batch, the paths it holds beyond the declared
fields and its undeclared top-level values (what :class:`~tailfill.formats.json_fields.RowParser` fills).
"""

from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa

from tailfill.values.infer import Kind, kind_of, merge, type_text

Position = tuple[int, int]  # (partition, offset)


def extra_paths(value: Any, kind: pa.DataType, path: str) -> list[str]:
    """The dotted paths ``value`` holds beyond the struct fields of ``kind`` (inside lists too), first seen first."""
    return _extra(value, shape_of(kind), path)


class Shape:
    """The keys a column's structs have, nested (inside structs and lists): what values are checked against."""

    __slots__ = ("inner", "item", "keys")

    def __init__(self, kind: pa.DataType):
        struct = pa.types.is_struct(kind)
        self.keys = frozenset(f.name for f in kind) if struct else None
        self.inner = {f.name: shape_of(f.type) for f in kind if holds_struct(f.type)} if struct else {}
        self.item = shape_of(kind.value_type) if pa.types.is_list(kind) and holds_struct(kind.value_type) else None


@functools.lru_cache(maxsize=256)
def shape_of(kind: pa.DataType) -> Shape:
    return Shape(kind)


def _extra(value: Any, shape: Shape, path: str) -> list[str]:
    if shape.keys is not None and isinstance(value, dict):
        if not shape.inner and value.keys() <= shape.keys:  # the common case: one set comparison
            return []
        out = [f"{path}.{k}" for k in value if k not in shape.keys]
        for key, inner in shape.inner.items():
            sub = value.get(key)
            if sub is not None:
                out += _extra(sub, inner, f"{path}.{key}")
        return out
    if shape.item is not None and isinstance(value, list):
        seen: dict[str, None] = {}
        for item in value:
            seen.update(dict.fromkeys(_extra(item, shape.item, path)))
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
    """What the records of one batch hold beyond the declared fields: per dotted path ``[records, position of the
    first]`` (``paths``), and with ``keep_values`` the undeclared top-level fields' values by position (``extras``;
    a value may still be JSON text, ``msgspec.Raw``). Each record is noted once, records in the order of the batch."""

    def __init__(self, declared: list[tuple[str, pa.DataType]], keep_values: bool = False):
        self.names = frozenset(name for name, _ in declared)
        self.nested = [(name, shape_of(kind)) for name, kind in declared if holds_struct(kind)]
        self.keep_values = keep_values
        self.paths: dict[str, list[int]] = {}
        self.extras: dict[int, dict[str, Any]] = {}

    def top(self, i: int, doc: dict) -> bool:
        """Record ``i`` is the object ``doc`` (its values parsed or not): note its undeclared keys. True if any."""
        extras = [k for k in doc if k not in self.names]
        for key in extras:
            self._count(key, i)
        if extras and self.keep_values:
            self.extras[i] = {k: doc[k] for k in extras}
        return bool(extras)

    def inside(self, i: int, get: Any) -> None:
        """Note record ``i``'s undeclared keys inside declared structs (``get``: its value by declared name)."""
        for name, shape in self.nested:
            value = get(name)
            if value is not None:
                for path in _extra(value, shape, name):
                    self._count(path, i)

    def _count(self, path: str, i: int) -> None:
        seen = self.paths.get(path)
        if seen is None:
            self.paths[path] = [1, i]
        else:
            seen[0] += 1
