"""JVM jars, pinned and cached: what the embedded Apache Kafka broker runs from, and Iceberg in Spark sessions.

``jvm-jars.txt`` (beside this module) names each set's root artifacts with exact versions (and, on lines of their
own, what Maven must leave out of a root's dependencies); ``jvm-jars.lock`` pins every jar they resolve to by its
SHA-256. :func:`fetch` (run by the install: ``python -m tailfill.dev.jars fetch``; sets named ``bench-…`` only when
named, as ``make bench-deps`` does) resolves a set with Maven into a cache folder named by the set's pins, checks
every jar against the lock and moves the folder into place whole; :func:`classpath`
(:mod:`tailfill.plumbing.jvm_jars`) only ever reads that folder: nothing is downloaded when a broker or a job
starts, and a missing set is one line with the command that fetches it.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tailfill.errors import TailfillError
from tailfill.plumbing.jvm_jars import (
    BENCH_PREFIX,
    FETCH_COMMAND,
    LOCK,
    PINS,
    JarsError,
    JarSet,
    classpath,
    jar_set,
    jar_sets,
)
from tailfill.settings import settings

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
# A benchmark set's every repository is read through Maven Central, where every pin is published (a parent pom's own
# repositories, such as Spark's mirror, may not be reachable from where this runs); the install's sets keep the
# machine's Maven settings (its mirror or proxy, if it has one).
CENTRAL_ONLY = ("<settings><mirrors><mirror><id>central-for-all</id><mirrorOf>*</mirrorOf>"
                f"<url>{MAVEN_CENTRAL}</url></mirror></mirrors></settings>")

__all__ = ["FETCH_COMMAND", "JarSet", "JarsError", "classpath", "fetch", "jar_set", "jar_sets", "write_lock"]


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
