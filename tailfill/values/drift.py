"""What records showed beyond a pipeline's declared fields, counted: :class:`Drift`, plain JSON all through.

``unknown``: per dotted path (``org``, ``repo.license``) the records that carried it and the first
``partition:offset`` (the lowest) where it was seen. ``wants``: per column the types its values would need, each
with the first ``partition:offset`` that needed it (``format.unknown_fields: evolve``; which of them the table
takes is :func:`tailfill.formats.evolve.columns_to_add`'s to say). A task counts its records into one, the driver
adds a batch's tasks' together, a run its batches'.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

Position = tuple[int, int]  # (partition, offset)


@dataclass
class Drift:
    """Fields not declared: ``unknown`` per path ``[records, partition, offset]``, ``wants`` per column and type
    ``[partition, offset]``."""

    unknown: dict[str, list[int]] = field(default_factory=dict)
    wants: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    def seen(self, path: str, at: Position, records: int = 1) -> None:
        """``records`` more records carried ``path``; ``at``, one of them, is kept if it is the first."""
        old = self.unknown.get(path)
        if old is None:
            self.unknown[path] = [records, *at]
        else:
            old[0] += records
            old[1:] = min(tuple(old[1:]), at)

    def want(self, name: str, kind: str, at: Position) -> None:
        """Column ``name`` would need type ``kind`` (``format.fields``' syntax) for a value at ``at``."""
        types = self.wants.setdefault(name, {})
        old = types.get(kind)
        types[kind] = list(min(tuple(old), at)) if old else list(at)

    def add(self, other: Drift | None) -> Drift:
        """This drift with ``other``'s counted in (in place); returns self."""
        if other is not None:
            for path, (records, partition, offset) in other.unknown.items():
                self.seen(path, (partition, offset), records)
            for name, types in other.wants.items():
                for kind, (partition, offset) in types.items():
                    self.want(name, kind, (partition, offset))
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


def unknown_in(counts: Iterable[dict[str, list[int]]]) -> dict[str, list[int]]:
    """Several counts of fields not declared (:attr:`Drift.unknown`, e.g. of a run's batches) as one."""
    return Drift().add_all(Drift({path: list(v) for path, v in c.items()}) for c in counts).unknown


def describe(unknown: dict[str, list[int]]) -> str:
    """``org (40 records, first at 0:12), repo.license (1 record, first at 1:7)``: fields not declared, as
    :attr:`Drift.unknown` counts them."""
    return ", ".join(f"{path} ({records:,} record{'s' if records != 1 else ''}, first at {partition}:{offset})"
                     for path, (records, partition, offset) in unknown.items())
