"""Produce-to-commit latency: how old the records are when their commit lands.

An executor task summarises the Kafka timestamps of what it read as a :class:`TimestampSketch`
(a few hundred quantiles and a count: small enough to travel back with the prepared files, however
many records the task read). The driver turns the sketches of a batch, with the commit's time,
into :class:`Freshness` (p50, p95, max seconds). Records without a broker timestamp are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

POINTS = 201  # quantiles per sketch: 0, 0.5, …, 100 %


@dataclass(frozen=True)
class TimestampSketch:
    """Quantiles (unix microseconds, ascending) of ``count`` record timestamps."""

    quantiles: tuple[int, ...]
    count: int

    @classmethod
    def of(cls, stamps: Sequence[pa.Array | pa.ChunkedArray]) -> TimestampSketch | None:
        """The sketch of every non-null timestamp in ``stamps`` (None if there are none)."""
        arrays = [pc.drop_null(a).cast(pa.int64()).to_numpy() for a in stamps if len(a)]
        values = np.concatenate(arrays) if arrays else np.empty(0, np.int64)
        if values.size == 0:
            return None
        points = np.quantile(values, np.linspace(0.0, 1.0, POINTS), method="inverted_cdf")
        return cls(tuple(int(v) for v in points), int(values.size))

    def to_json(self) -> list[int]:
        return [self.count, *self.quantiles]

    @classmethod
    def from_json(cls, data: list[int] | None) -> TimestampSketch | None:
        return cls(tuple(data[1:]), data[0]) if data else None


@dataclass(frozen=True)
class Freshness:
    """Produce-to-commit latency of a batch's (or a run's) records, in seconds."""

    p50: float
    p95: float
    max: float
    records: int

    def to_dict(self) -> dict:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict | None) -> Freshness | None:
        return cls(**data) if data else None

    def __str__(self) -> str:
        return f"p50 {self.p50:.1f}s, p95 {self.p95:.1f}s, max {self.max:.1f}s"


@dataclass(frozen=True)
class LatencySample:
    """Latencies (seconds) with a weight each: a batch's sketches seen from its commit time."""

    seconds: tuple[float, ...]
    weights: tuple[float, ...]

    @classmethod
    def at(cls, committed_at: float, sketches: Sequence[TimestampSketch]) -> LatencySample:
        seconds, weights = [], []
        for s in sketches:
            w = s.count / len(s.quantiles)
            seconds += [committed_at - q / 1e6 for q in s.quantiles]
            weights += [w] * len(s.quantiles)
        return cls(tuple(seconds), tuple(weights))


    @classmethod
    def merged(cls, samples: Sequence[LatencySample]) -> LatencySample:
        """One sample of :data:`POINTS` quantiles standing for all of ``samples`` (their total weight,
        the exact min and max): a long-running tail keeps its run's latencies in constant space."""
        seconds, cumulative, total = _sorted(samples)
        if seconds.size == 0:
            return cls((), ())
        points = [_quantile(seconds, cumulative, q) for q in np.linspace(0.0, 1.0, POINTS)]
        points[-1] = float(seconds[-1])
        return cls(tuple(points), (total / POINTS,) * POINTS)


def _sorted(samples: Sequence[LatencySample]) -> tuple[np.ndarray, np.ndarray, float]:
    """The samples' latencies in ascending order, their cumulative weight share, and the total weight."""
    seconds = np.array([v for s in samples for v in s.seconds])
    weights = np.array([w for s in samples for w in s.weights])
    order = np.argsort(seconds)
    total = float(weights.sum())
    return seconds[order], np.cumsum(weights[order]) / (total or 1.0), total


def _quantile(seconds: np.ndarray, cumulative: np.ndarray, q: float) -> float:
    return float(seconds[min(np.searchsorted(cumulative, q), seconds.size - 1)])


def freshness(samples: Sequence[LatencySample]) -> Freshness | None:
    """p50, p95 and max latency over ``samples`` (weighted quantiles; the max is exact)."""
    seconds, cumulative, total = _sorted(samples)
    if seconds.size == 0:
        return None
    return Freshness(_quantile(seconds, cumulative, 0.5), _quantile(seconds, cumulative, 0.95),
                     float(seconds[-1]), round(total))
