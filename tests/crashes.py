"""Servers around the job, killed as a crash kills them (for the fault suite and the chaos soak)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from pathlib import Path

import psycopg2
from helpers import wait_until
from ports import restartable_port
from processes import descendants

from tailfill.dev.postgres import LocalPostgres


class CatalogServer:
    """The catalog's Postgres, killed as a crash kills it: SIGKILL to the postmaster and every backend at once
    (no shutdown, no checkpoint), then started again on its data directory (crash recovery from the WAL)."""

    def __init__(self, server: LocalPostgres, cfg) -> None:
        self.server, self.cfg = server, cfg

    def kill(self) -> None:
        pid = int((self.server.data_dir / "postmaster.pid").read_text().split()[0])
        doomed = [pid, *descendants(pid)]
        for each in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(each, signal.SIGKILL)
        wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in doomed), "Postgres to die", timeout=30)

    def start(self) -> None:
        self.server.start()

    def connect(self) -> psycopg2.extensions.connection:
        return psycopg2.connect(host="127.0.0.1", port=self.server.port, user="tailfill", dbname="iceberg")

    def hold_next_commit(self) -> psycopg2.extensions.connection:
        """Lock the data table's catalog row, so that the job's next commit of it blocks in its ``UPDATE``."""
        conn = self.connect()
        cur = conn.cursor()
        cur.execute("SELECT 1 FROM iceberg_tables WHERE table_name = %s FOR UPDATE", (self.cfg.target.table,))
        assert cur.fetchone(), "the data table has no catalog row yet"
        return conn

    def commits_waiting(self) -> int:
        """Backends blocked in an ``UPDATE`` of the catalog's table rows (a commit in flight, held by our lock)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND query ILIKE 'UPDATE iceberg_tables%%'")
                return cur.fetchone()[0]
        finally:
            conn.close()


def own_postgres(stack: contextlib.ExitStack) -> LocalPostgres:
    """A Postgres of the test's own (database ``iceberg``), on a free port, stopped and removed with ``stack``.

    Its folder is outside pytest's private tmp: the server runs as the ``postgres`` user when tests run as root."""
    base = Path(tempfile.mkdtemp(prefix="tailfill-pg-"))
    base.chmod(0o755)
    stack.callback(shutil.rmtree, base, ignore_errors=True)
    return stack.enter_context(LocalPostgres(base / "data", restartable_port(), databases=("iceberg",)))
