"""The pinned JVM jars as a Spark session or a broker reads them: the sets, their lock, and the cache folder.

The pins live in ``tailfill/dev/jvm-jars.txt`` and ``jvm-jars.lock``, beside :mod:`tailfill.dev.jars`, which fetches
them (``python -m tailfill.dev.jars fetch``, run by the install). This module only reads: a set's jars come from its
cache folder or not at all, and nothing is downloaded when a job or a broker starts.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tailfill.errors import TailfillError
from tailfill.settings import settings

PINS_PACKAGE = "tailfill.dev"  # where the pin files are (package data)
PINS = "jvm-jars.txt"
LOCK = "jvm-jars.lock"
FETCH_COMMAND = f"{Path(sys.executable).name} -m tailfill.dev.jars fetch"


class JarsError(TailfillError):
    """A pinned JVM jar set is not in the cache, or could not be fetched or checked."""

    fix = f"fetch the pinned jars once: `make install` or `{FETCH_COMMAND}` (needs Maven and Maven Central)"


@dataclass(frozen=True)
class JarSet:
    """One set of pinned jars: its roots (``group:artifact:version``) and the jars they resolve to, locked."""

    name: str
    roots: tuple[str, ...]
    locked: tuple[tuple[str, str], ...]  # (file name, sha256), sorted

    @property
    def digest(self) -> str:
        """A short hash of the pins: a change of any of them is a new cache folder."""
        text = "\n".join([*self.roots, *(f"{f} {h}" for f, h in self.locked)])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def folder(self, cache: Path) -> Path:
        return cache / f"{self.name}-{self.digest}"


def _lines(name: str) -> list[list[str]]:
    try:
        text = resources.files(PINS_PACKAGE).joinpath(name).read_text()
    except FileNotFoundError:
        return []
    return [line.split() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def jar_sets() -> dict[str, JarSet]:
    """Every pinned set, by name."""
    roots: dict[str, list[str]] = {}
    for set_name, coordinate in _lines(PINS):
        roots.setdefault(set_name, []).append(coordinate)
    locked: dict[str, list[tuple[str, str]]] = {}
    for set_name, file_name, sha in _lines(LOCK):
        locked.setdefault(set_name, []).append((file_name, sha))
    return {n: JarSet(n, tuple(r), tuple(sorted(locked.get(n, [])))) for n, r in roots.items()}


def jar_set(name: str) -> JarSet:
    sets = jar_sets()
    if name not in sets:
        raise JarsError(f"no pinned JVM jar set {name!r} (the sets: {', '.join(sorted(sets))})")
    return sets[name]


def classpath(name: str, cache: Path | None = None) -> str:
    """The Java class path of set ``name`` from the cache; :class:`JarsError` with the fetch command if absent."""
    folder = jar_set(name).folder(cache or settings().jars_dir)
    if not folder.is_dir():
        raise JarsError(f"the JVM jars of {name!r} are not installed in {folder.parent} "
                        f"(fix: `make install`, or `{FETCH_COMMAND}`)")
    return f"{folder}/*"


def jar_files(name: str, cache: Path | None = None) -> list[Path]:
    """Every jar of set ``name`` in the cache, sorted; :class:`JarsError` with the fetch command if absent."""
    folder = Path(classpath(name, cache).removesuffix("/*"))
    return sorted(folder.glob("*.jar"))


def installed(name: str, cache: Path | None = None) -> bool:
    """Whether set ``name`` is pinned here and in the cache (code run from an archive, as a ``spark-submit``
    driver's is, has no pins: False)."""
    sets = jar_sets()
    return name in sets and sets[name].folder(cache or settings().jars_dir).is_dir()
