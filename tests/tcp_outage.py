"""A loopback TCP relay that can take a server off the network and bring it back on the same address.

``down()`` resets every relayed connection and closes the listening socket, so clients see what a
stopped server looks like (connections reset, new ones refused); ``up()`` listens again on the same
port. The server behind it keeps its state, as a broker restarted on persistent storage would.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator

from ports import restartable_port

from tailfill.dev.broker import EmbeddedBroker


class TcpOutage:
    """Relay ``127.0.0.1:port`` to ``127.0.0.1:upstream_port``, with outages on demand."""

    def __init__(self, upstream_port: int, port: int):
        self.upstream_port, self.port = upstream_port, port
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.outages = 0

    @property
    def is_up(self) -> bool:
        return self._listener is not None

    def up(self) -> None:
        """Listen (again) on the relay's port."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="tcp-outage-accept", daemon=True).start()

    def down(self) -> None:
        """Refuse new connections and reset every open one."""
        self.outages += 1
        if self._listener is not None:
            # shutdown first: a close alone leaves the socket listening while a thread is blocked in accept()
            # on it, and the port could not be bound again by up() ("Address already in use").
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, set()
        for sock in conns:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
                sock.shutdown(socket.SHUT_RDWR)  # wakes the relay threads blocked on it
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> TcpOutage:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            if listener is not self._listener:  # accepted as the outage began: refused like the rest
                client.close()
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns.update((client, server))
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()
            with self._lock:
                self._conns.difference_update((src, dst))


@contextlib.contextmanager
def broker_behind_outage() -> Iterator[tuple[str, TcpOutage]]:
    """A Kafka broker reachable only through a :class:`TcpOutage` relay (it advertises the relay's address), so
    an outage is the broker's address going away and coming back with the same data: every connection reset,
    new ones refused, then the same address answering again."""
    relay_port = restartable_port()  # the relay's address goes away and comes back
    with EmbeddedBroker(settings={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{relay_port}"}) as broker:
        assert broker.node is not None
        with TcpOutage(broker.node.port, relay_port) as relay:
            yield f"127.0.0.1:{relay_port}", relay
