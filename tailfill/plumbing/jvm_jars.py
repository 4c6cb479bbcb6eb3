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
BENCH_PREFIX = "bench-"  # benchmark-only sets (the peers of benchmarks/peers.py): fetched only when named


class JarsError(TailfillError):
    """A pinned JVM jar set is not in the cache, or could not be fetched or checked."""

    fix = f"fetch the pinned jars once: `make install` or `{FETCH_COMMAND}` (needs Maven and Maven Central)"


@dataclass(frozen=True)
class JarSet:
    """One set of pinned jars: its roots (``group:artifact:version``) and the jars they resolve to, locked."""

    name: str
    roots: tuple[str, ...]
    locked: tuple[tuple[str, str], ...]  # (file name, sha256), sorted
    exclusions: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (root, its excluded "group:artifact"s)

    @property
    def digest(self) -> str:
        """A short hash of the pins: a change of any of them is a new cache folder."""
        text = "\n".join([*self.roots, *(f"{r} -{x}" for r, xs in self.exclusions for x in xs),
                          *(f"{f} {h}" for f, h in self.locked)])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def bench_only(self) -> bool:
        return self.name.startswith(BENCH_PREFIX)

    @property
    def fetch_command(self) -> str:
        """What fetches this set: the install for Tailfill's own sets, ``make bench-deps`` for a benchmark's."""
        if self.bench_only:
            return f"`make bench-deps`, or `{FETCH_COMMAND} {self.name}`"
        return f"`make install`, or `{FETCH_COMMAND}`"

    def folder(self, cache: Path) -> Path:
        return cache / f"{self.name}-{self.digest}"


def _lines(name: str) -> list[list[str]]:
    try:
        text = resources.files(PINS_PACKAGE).joinpath(name).read_text()
    except FileNotFoundError:
        return []
    return [line.split() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def parse_pins(lines: list[list[str]]) -> dict[str, dict[str, list[str]]]:
    """Each set's roots, in order, with their exclusions: ``{set: {"g:a:v": ["g:a", ...]}}``.

    A line is ``<set> <groupId:artifactId:version>``, a root; a line ``<set> -<groupId>:<artifactId>`` (``*`` for
    any artifact of the group) leaves that out of the dependencies of the set's root above it.
    """
    sets: dict[str, dict[str, list[str]]] = {}
    for number, fields in enumerate(lines, 1):
        if len(fields) != 2:
            raise JarsError(f"{PINS}, pin {number}: want '<set> <groupId:artifactId:version>' or "
                            f"'<set> -<groupId>:<artifactId>', got {' '.join(fields)!r}")
        set_name, item = fields
        roots = sets.setdefault(set_name, {})
        if item.startswith("-"):
            if not roots or item[1:].count(":") != 1:
                raise JarsError(f"{PINS}, pin {number}: an exclusion {item!r} must be '-<groupId>:<artifactId>' "
                                f"below a root of set {set_name!r}")
            roots[list(roots)[-1]].append(item[1:])
        elif item.count(":") != 2:
            raise JarsError(f"{PINS}, pin {number}: {item!r} is not '<groupId:artifactId:version>'")
        else:
            roots[item] = []
    return sets


def jar_sets() -> dict[str, JarSet]:
    """Every pinned set, by name."""
    locked: dict[str, list[tuple[str, str]]] = {}
    for set_name, file_name, sha in _lines(LOCK):
        locked.setdefault(set_name, []).append((file_name, sha))
    return {n: JarSet(n, tuple(roots), tuple(sorted(locked.get(n, []))),
                      tuple((r, tuple(xs)) for r, xs in roots.items() if xs))
            for n, roots in parse_pins(_lines(PINS)).items()}


def jar_set(name: str) -> JarSet:
    sets = jar_sets()
    if name not in sets:
        raise JarsError(f"no pinned JVM jar set {name!r} (the sets: {', '.join(sorted(sets))})")
    return sets[name]


def classpath(name: str, cache: Path | None = None) -> str:
    """The Java class path of set ``name`` from the cache; :class:`JarsError` with the fetch command if absent."""
    jars = jar_set(name)
    folder = jars.folder(cache or settings().jars_dir)
    if not folder.is_dir():
        raise JarsError(f"the JVM jars of {name!r} are not installed in {folder.parent} (fix: {jars.fetch_command})")
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
