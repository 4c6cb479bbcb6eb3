"""Fields JSON records carry that ``format.fields`` does not declare: their names, counts and types.

The pure rules, shared by the executors and the driver. :func:`extra_paths` names what a value holds beyond a
column's type (``repo.license`` inside a declared ``repo`` struct); :func:`value_type` infers a column type for
a new field's value by the rules of :mod:`tailfill.values.infer`; :func:`widen` joins two types when one can hold
the other's values (a struct gains fields, a list's items widen, long joins double), and :func:`columns_to_add`
folds the types a batch's tasks want, earliest offset first, into the columns the table must gain. A
:class:`Drift` is what one task (or batch, or run) saw: per path its records and first ``partition:offset``,
per new column the type it wants, all plain JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tailfill.formats.evolve import canon
from tailfill.values.infer import Kind, kind_of, merge, type_text
from tailfill.values.schema import field_type

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


def widen(old: pa.DataType, new: pa.DataType) -> pa.DataType | None:
    """One type that holds the values of both, keeping ``old``'s fields in their order; None when there is none."""
    old, new = canon(old), canon(new)
    if old == new:
        return old
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        fields = []
        for f in old:
            i = new.get_field_index(f.name)
            kind = f.type if i < 0 else widen(f.type, new.field(i).type)
            if kind is None:
                return None
            fields.append(pa.field(f.name, kind))
        fields += [pa.field(f.name, f.type) for f in new if old.get_field_index(f.name) < 0]
        return pa.struct(fields)
    if pa.types.is_list(old) and pa.types.is_list(new):
        item = widen(old.value_type, new.value_type)
        return pa.list_(item) if item is not None else None
    if {old, new} == {pa.int64(), pa.float64()}:
        return pa.float64()
    return None


_NAMES = {pa.string(): "string", pa.int64(): "long", pa.float64(): "double", pa.bool_(): "boolean",
          pa.date32(): "date", pa.timestamp("us", tz="UTC"): "timestamp"}


def type_name(kind: pa.DataType) -> str:
    """A type :func:`value_type` infers (or :func:`widen` joins), as ``format.fields`` writes it."""
    if pa.types.is_struct(kind):
        return f"struct<{', '.join(f'{f.name}: {type_name(f.type)}' for f in kind)}>"
    if pa.types.is_list(kind):
        return f"list<{type_name(kind.value_type)}>"
    return _NAMES.get(kind, str(kind))


@dataclass
class Drift:
    """What records showed beyond the declared fields: ``unknown`` per dotted path ``[records, partition, offset]``
    (its first record), ``wants`` per new or wider column ``[type, partition, offset]`` (``format.fields``' type
    syntax; ``format.unknown_fields: evolve`` only)."""

    unknown: dict[str, list[int]] = field(default_factory=dict)
    wants: dict[str, list] = field(default_factory=dict)

    def seen(self, path: str, at: Position, records: int = 1) -> None:
        """``records`` more records carried ``path``; ``at``, one of them, is kept if it is the first."""
        old = self.unknown.get(path)
        if old is None:
            self.unknown[path] = [records, *at]
        else:
            old[0] += records
            old[1:] = min(tuple(old[1:]), at)

    def want(self, name: str, kind: str, at: Position) -> None:
        """Column ``name`` must hold values of type ``kind`` (seen at ``at``): joined with what it wanted before, or
        the earlier of the two when they do not join."""
        old = self.wants.get(name)
        if old is None:
            self.wants[name] = [kind, *at]
            return
        first = min(tuple(old[1:]), at)
        joined = widen(field_type(old[0]), field_type(kind)) if at > tuple(old[1:]) else \
            widen(field_type(kind), field_type(old[0]))
        earlier = old[0] if tuple(old[1:]) <= at else kind
        self.wants[name] = [type_name(joined) if joined is not None else earlier, *first]

    def add(self, other: Drift | None) -> Drift:
        """This drift with ``other``'s counted in (in place); returns self."""
        if other is not None:
            for path, (records, *at) in other.unknown.items():
                self.seen(path, tuple(at), records)  # type: ignore[arg-type]
            for name, (kind, *at) in other.wants.items():
                self.want(name, kind, tuple(at))  # type: ignore[arg-type]
        return self

    def add_all(self, others: Iterable[Drift | None]) -> Drift:
        """This drift with each of ``others`` counted in (in place); returns self."""
        for other in others:
            self.add(other)
        return self

    def __bool__(self) -> bool:
        return bool(self.unknown or self.wants)

    def to_json(self) -> str:
        return json.dumps({"unknown": self.unknown, "wants": self.wants})

    @classmethod
    def from_json(cls, text: str | None) -> Drift:
        data = json.loads(text) if text else {}
        return cls(data.get("unknown", {}), data.get("wants", {}))


def columns_to_add(table: pa.Schema, wants: list[dict[str, list]]) -> pa.Schema:
    """The columns (new, or wider than ``table``'s) the tasks' ``wants`` need, each the join of its wanted types taken
    earliest offset first; a type that joins none before it is left out (its records go to the quarantine)."""
    ordered = sorted(((tuple(at), name, kind) for w in wants for name, (kind, *at) in w.items()))
    joined: dict[str, pa.DataType] = {}
    for _, name, kind in ordered:
        i = table.get_field_index(name)
        base = joined.get(name, canon(table.field(i).type) if i >= 0 else None)
        new = field_type(kind) if base is None else widen(base, field_type(kind))
        if new is not None:
            joined[name] = new
    out = [pa.field(name, kind) for name, kind in joined.items()
           if table.get_field_index(name) < 0 or canon(table.field(name).type) != kind]
    return pa.schema(out)


def unknown_in(counts: Iterable[dict[str, list[int]]]) -> dict[str, list[int]]:
    """Several counts of fields not declared (:attr:`Drift.unknown`, e.g. of a run's batches) as one."""
    return Drift().add_all(Drift(dict(c)) for c in counts).unknown


def describe(unknown: dict[str, list[int]]) -> str:
    """``org (40 records, first at 0:12), repo.license (1 record, first at 1:7)``: fields not declared, as
    :attr:`Drift.unknown` counts them."""
    return ", ".join(f"{path} ({records:,} record{'s' if records != 1 else ''}, first at {partition}:{offset})"
                     for path, (records, partition, offset) in unknown.items())


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
