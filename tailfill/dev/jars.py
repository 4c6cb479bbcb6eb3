"""JVM jars, pinned and cached: what the embedded Apache Kafka broker runs from.

``jvm-jars.txt`` (beside this module) names each set's root artifacts with exact versions; ``jvm-jars.lock`` pins
every jar they resolve to by its SHA-256. :func:`fetch` (run by the install: ``python -m tailfill.dev.jars fetch``)
resolves a set with Maven into a cache folder named by the set's pins, checks every jar against the lock and moves
the folder into place whole; :func:`classpath` only ever reads that folder: nothing is downloaded when a broker or
a job starts, and a missing set is one line with the command that fetches it.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tailfill.errors import TailfillError
from tailfill.settings import settings

PINS = "jvm-jars.txt"
LOCK = "jvm-jars.lock"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
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
        text = resources.files("tailfill.dev").joinpath(name).read_text()
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


def _pom(roots: tuple[str, ...]) -> str:
    deps = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in (r.split(":") for r in roots))
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            "<groupId>tailfill</groupId><artifactId>jars</artifactId><version>0</version><packaging>pom</packaging>"
            f"<dependencies>{deps}</dependencies></project>")


def _resolve(jars: JarSet, into: Path) -> None:
    """Resolve ``jars``' roots with Maven and copy every runtime jar into ``into``."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError("cannot fetch the pinned JVM jars: no `mvn` on PATH (fix: install Maven, e.g. "
                        "`apt-get install maven`)")
    pom = into.parent / "pom.xml"
    pom.write_text(_pom(jars.roots))
    done = subprocess.run([mvn, "-q", "-B", "-f", str(pom), f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                           f"-DoutputDirectory={into}", "-DincludeScope=runtime"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise JarsError(f"Maven could not resolve the {jars.name!r} jars ({', '.join(jars.roots)}): {tail}")


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.jar"))}


def fetch(names: list[str] | None = None, cache: Path | None = None) -> list[Path]:
    """Fetch the sets ``names`` (default: all) into the cache, each checked against the lock; the folders.

    A set already in the cache is left as it is. A jar whose hash differs from the lock, or a jar the lock
    does not name (or one it names missing), fails the fetch and nothing is moved into the cache.
    """
    cache = cache or settings().jars_dir
    out = []
    for name in names or sorted(jar_sets()):
        jars = jar_set(name)
        folder = jars.folder(cache)
        if not folder.is_dir():
            cache.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=cache, prefix=f".{name}-") as tmp:
                staging = Path(tmp) / "jars"
                _resolve(jars, staging)
                got, want = _hashes(staging), dict(jars.locked)
                wrong = sorted(f for f in set(got) | set(want) if got.get(f) != want.get(f))
                if wrong:
                    raise JarsError(f"the {name!r} jars Maven resolved differ from {LOCK}: {', '.join(wrong[:5])}"
                                    f"{' …' if len(wrong) > 5 else ''} (fix: if the pins changed on purpose, "
                                    f"`{Path(sys.executable).name} -m tailfill.dev.jars lock`)")
                staging.rename(folder)
        out.append(folder)
    return out


def write_lock(lock: Path | None = None) -> Path:
    """Resolve every set afresh and write the lock file (for a change of ``jvm-jars.txt``)."""
    lock = lock or Path(__file__).with_name(LOCK)
    lines = [f"# Written by `python -m tailfill.dev.jars lock` from {PINS}: every jar each set resolves to, "
             "and its SHA-256."]
    for name, jars in sorted(jar_sets().items()):
        with tempfile.TemporaryDirectory() as tmp:
            staging = Path(tmp) / "jars"
            _resolve(jars, staging)
            lines += [f"{name} {f} {h}" for f, h in _hashes(staging).items()]
    lock.write_text("\n".join(lines) + "\n")
    return lock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tailfill.dev.jars", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["fetch", "lock", "classpath"])
    parser.add_argument("sets", nargs="*", help="set names (default: every set)")
    args = parser.parse_args(argv)
    try:
        if args.action == "lock":
            print(f"wrote {write_lock()}")
        elif args.action == "classpath":
            for name in args.sets or sorted(jar_sets()):
                print(classpath(name))
        else:
            for folder in fetch(args.sets or None):
                print(f"{folder.name}: {len(list(folder.glob('*.jar')))} jars in {folder}")
    except TailfillError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
