"""The warehouse: where data files live, local or ``s3://``, and a pyarrow filesystem to reach it.

Every S3 client gets the pipeline's explicit endpoint and credentials, never a cloud default. No
catalog here: executors write files with this alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from tailfill.config import TargetConfig
from tailfill.errors import LakeError


def s3_credentials(target: TargetConfig) -> tuple[str, str]:
    assert target.s3 is not None
    missing = [v for v in (target.s3.access_key_env, target.s3.secret_key_env) if not os.environ.get(v)]
    if missing:
        raise LakeError(f"target.s3 needs credentials in the environment: {', '.join(missing)} not set")
    return os.environ[target.s3.access_key_env], os.environ[target.s3.secret_key_env]


def warehouse_uri(target: TargetConfig) -> str:
    """The warehouse as a URI pyiceberg understands (``file:///…`` or ``s3://…``)."""
    return location_uri(target.warehouse)


def location_uri(location: str) -> str:
    """A local path or ``s3://`` location as a URI: ``s3://…`` as it is (no trailing slash), else ``file:///…``
    (the path made absolute)."""
    if location.startswith("s3://"):
        return location.rstrip("/")
    return Path(location).absolute().as_uri()


def filesystem(target: TargetConfig) -> pafs.FileSystem:
    """A pyarrow filesystem for the warehouse; made by the owner of a handle (a pipeline, an executor context)."""
    if target.s3 is None:
        return pafs.LocalFileSystem()
    key, secret = s3_credentials(target)
    endpoint = urlparse(target.s3.endpoint)
    return pafs.S3FileSystem(
        access_key=key,
        secret_key=secret,
        region=target.s3.region,
        endpoint_override=endpoint.netloc,
        scheme=endpoint.scheme or "http",
        allow_bucket_creation=False,
    )


def s3_client(target: TargetConfig) -> Any:
    """A boto3 S3 client of the warehouse's endpoint and credentials, for what pyarrow's filesystem cannot ask (a
    conditional PUT); None for a local warehouse."""
    if target.s3 is None:
        return None
    import boto3
    from botocore.config import Config

    key, secret = s3_credentials(target)
    return boto3.client("s3", endpoint_url=target.s3.endpoint, region_name=target.s3.region, aws_access_key_id=key,
                        aws_secret_access_key=secret, config=Config(s3={"addressing_style": "path"},
                                                                    retries={"max_attempts": 3, "mode": "standard"}))


def fs_path(uri: str) -> str:
    """A warehouse URI as a path for :func:`filesystem` (``file:///a/b`` → ``/a/b``, ``s3://b/k`` → ``b/k``)."""
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        return f"{parsed.netloc}{parsed.path}"
    if parsed.scheme == "file":
        return parsed.path
    return uri


def make_dirs(fs: pafs.FileSystem, uri: str) -> None:
    """Create directory ``uri`` on a local filesystem; nothing on S3, which has no directories (an S3 Tables
    bucket even refuses the marker objects pyarrow would write for them)."""
    if isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(fs_path(uri), recursive=True)

