"""A local Postgres server on loopback, from the machine's PostgreSQL binaries (Debian's ``postgresql``).

For the Iceberg SQL catalog and Airflow's metadata where SQLite behaves unlike production
(concurrent commits, parallel tasks): ``make airflow`` and the tests start one with
:class:`LocalPostgres`, which initialises its data directory once, listens on ``127.0.0.1`` only
(no Unix socket), trusts loopback connections (a development server, never exposed) and stops
when the ``with`` block ends. As root, the server runs as the ``postgres`` system user
(Postgres refuses to run as root).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tailfill.errors import TailfillError
from tailfill.settings import settings

SUPERUSER = "tailfill"
SYSTEM_USER = "postgres"  # Debian's postgresql package creates it


class PostgresError(TailfillError):
    """The local Postgres server could not be found, initialised, started or stopped."""


def postgres_bin() -> Path:
    """The folder of ``initdb``/``pg_ctl``: ``$TAILFILL_POSTGRES_BIN``, PATH, else Debian's newest."""
    if configured := settings().postgres_bin:
        if not (Path(configured) / "pg_ctl").is_file():
            raise PostgresError(f"TAILFILL_POSTGRES_BIN={configured}: no pg_ctl there (fix: the folder of "
                                "PostgreSQL's server binaries, e.g. /usr/lib/postgresql/15/bin)")
        return Path(configured)
    if found := shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if debian:
        return Path(debian[-1]).parent
    raise PostgresError("PostgreSQL server binaries not found (pg_ctl): apt-get install postgresql "
                        "(as root), or set TAILFILL_POSTGRES_BIN to the folder holding pg_ctl")


def _as_server_user() -> list[str]:
    """Command prefix that runs a server binary as a user Postgres accepts."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError as exc:
        raise PostgresError(f"running as root, and there is no '{SYSTEM_USER}' user to run Postgres as "
                            "(apt-get install postgresql creates it)") from exc
    return ["runuser", "-u", SYSTEM_USER, "--"]


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise PostgresError(f"{what} failed (exit {done.returncode}): {detail[-1] if detail else 'no output'}")


@dataclass
class LocalPostgres:
    """A Postgres server with its data in ``data_dir`` on ``127.0.0.1:port`` for a ``with`` block."""

    data_dir: Path
    port: int
    databases: tuple[str, ...] = ()
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir).absolute()
        self.log_path = self.data_dir.with_name(self.data_dir.name + ".log")

    def url(self, database: str, driver: str = "postgresql+psycopg2") -> str:
        """SQLAlchemy URL of ``database`` on this server."""
        return f"{driver}://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Initialise the data directory if new, start the server, create the missing databases."""
        bin_dir, prefix = postgres_bin(), _as_server_user()
        if not (self.data_dir / "PG_VERSION").exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            if prefix:
                shutil.chown(self.data_dir, SYSTEM_USER, SYSTEM_USER)
            self.data_dir.chmod(0o700)
            _run([*prefix, str(bin_dir / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust",
                  "--encoding=UTF8", "--no-sync"], f"initdb of {self.data_dir}")
        self.log_path.touch()
        if prefix:
            shutil.chown(self.log_path, SYSTEM_USER, SYSTEM_USER)
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
                   "-c max_connections=200 -c fsync=off")
        _run([*prefix, str(bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_path), "-o", options,
              "-w", "-t", "60", "start"], f"starting Postgres on 127.0.0.1:{self.port} (log {self.log_path})")
        try:
            self.create_databases(*self.databases)
        except BaseException:
            self.stop()
            raise

    def create_databases(self, *names: str) -> None:
        """Create the databases among ``names`` that do not exist yet."""
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                for name in names:
                    cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                    if cur.fetchone() is None:
                        cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are ended); no-op if it is not running."""
        if not (self.data_dir / "postmaster.pid").exists():
            return
        _run([*_as_server_user(), str(postgres_bin() / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast",
              "-w", "-t", "60", "stop"], f"stopping Postgres in {self.data_dir}")
