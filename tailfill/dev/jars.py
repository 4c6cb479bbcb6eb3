"""JVM jars, pinned and cached: what the embedded Apache Kafka broker runs from.

``jvm-jars.txt`` (beside this module) names each set's root artifacts with exact versions (and, on lines of their
own, what Maven must leave out of a root's dependencies); ``jvm-jars.lock`` pins every jar they resolve to by its
SHA-256. :func:`fetch` (run by the install: ``python -m tailfill.dev.jars fetch``; sets named ``bench-…`` only when
named, as ``make bench-deps`` does) resolves a set with Maven into a cache folder named by the set's pins, checks
every jar against the lock and moves the folder into place whole; :func:`classpath` only ever reads that folder:
nothing is downloaded when a broker or a job starts, and a missing set is one line with the command that fetches it.
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
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
# A benchmark set's every repository is read through Maven Central, where every pin is published (a parent pom's own
# repositories, such as Spark's mirror, may not be reachable from where this runs); the install's sets keep the
# machine's Maven settings (its mirror or proxy, if it has one).
CENTRAL_ONLY = ("<settings><mirrors><mirror><id>central-for-all</id><mirrorOf>*</mirrorOf>"
                f"<url>{MAVEN_CENTRAL}</url></mirror></mirrors></settings>")
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
        text = resources.files("tailfill.dev").joinpath(name).read_text()
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


def pom(roots: tuple[str, ...], exclusions: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> str:
    """The Maven project whose dependencies are ``roots``, each without its ``exclusions``."""
    excluded = dict(exclusions)

    def dependency(root: str) -> str:
        g, a, v = root.split(":")
        leave_out = "".join(f"<exclusion><groupId>{xg}</groupId><artifactId>{xa}</artifactId></exclusion>"
                            for xg, xa in (x.split(":") for x in excluded.get(root, ())))
        return (f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>"
                f"{f'<exclusions>{leave_out}</exclusions>' if leave_out else ''}</dependency>")

    deps = "".join(dependency(r) for r in roots)
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            "<groupId>tailfill</groupId><artifactId>jars</artifactId><version>0</version><packaging>pom</packaging>"
            f"<dependencies>{deps}</dependencies></project>")


def _resolve(jars: JarSet, into: Path) -> None:
    """Resolve ``jars``' roots with Maven and copy every runtime jar into ``into``."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError("cannot fetch the pinned JVM jars: no `mvn` on PATH (fix: install Maven, e.g. "
                        "`apt-get install maven`)")
    project = into.parent / "pom.xml"
    project.write_text(pom(jars.roots, jars.exclusions))
    settings_args: list[str] = []
    if jars.bench_only:  # a peer's parent poms may name repositories unreachable here; the install's sets name none
        central = into.parent / "central-only.xml"
        central.write_text(CENTRAL_ONLY)
        settings_args = ["-gs", str(central)]
    done = subprocess.run([mvn, "-q", "-B", *settings_args, "-f", str(project),
                           f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={into}",
                           "-DincludeScope=runtime"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise JarsError(f"Maven could not resolve the {jars.name!r} jars ({', '.join(jars.roots)}): {tail}")


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.jar"))}


def fetch(names: list[str] | None = None, cache: Path | None = None) -> list[Path]:
    """Fetch the sets ``names`` (default: all but the benchmarks' ``bench-…`` sets) into the cache, each checked
    against the lock; the folders.

    A set already in the cache is left as it is. A jar whose hash differs from the lock, or a jar the lock
    does not name (or one it names missing), fails the fetch and nothing is moved into the cache.
    """
    cache = cache or settings().jars_dir
    out = []
    for name in names or sorted(n for n, s in jar_sets().items() if not s.bench_only):
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
    parser.add_argument("sets", nargs="*", help=f"set names (default: every set; for fetch, all but the "
                                                f"{BENCH_PREFIX}… sets)")
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
